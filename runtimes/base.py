"""The runtime interface every Python runtime implements (Buffer, Program, Runtime), its errors and those of the
artifact runners (`ArtifactError` and its kinds), and
`get_runtime`, which builds one cached instance per runtime name and is the one place that reads the environment.

Conventions shared by all runtimes:
- a Buffer is opaque device memory of `nbytes` bytes owned by one Runtime; 0-byte buffers are allowed;
- `copyin` takes exactly `nbytes` bytes (any contiguous-or-not numpy array or buffer-protocol object);
- `copyout` returns a fresh 1-D uint8 numpy array of `nbytes` bytes that the caller reinterprets;
- a Program runs one kernel with buffers as its arguments, in order; with `wait=True` it returns seconds taken.
"""
from __future__ import annotations
import os
import threading
from typing import Any, Callable

import numpy as np

from tgc.codegen.registry import load, target_names, target_spec

class RuntimeUnavailable(RuntimeError):
  """The runtime cannot run on this machine; the message is one line naming the missing piece."""


class CompileError(RuntimeError):
  """A kernel failed to compile. `kernel_name` names it; `log` holds the compiler's full output."""

  def __init__(self, runtime_name: str, kernel_name: str, log: str, max_lines: int = 20):
    self.runtime_name, self.kernel_name, self.log = runtime_name, kernel_name, log
    lines = log.strip().splitlines()
    shown = "\n".join(lines[:max_lines])
    if len(lines) > max_lines:
      shown += f"\n... ({len(lines) - max_lines} more lines)"
    super().__init__(f"{runtime_name}: kernel '{kernel_name}' failed to compile:\n{shown}")


class LaunchError(RuntimeError):
  """A compiled kernel could not be launched (bad arguments or launch dimensions)."""


class ArtifactError(ValueError):
  """A problem with an artifact folder or with the data given to it; one line naming the culprit (file, input,
  status)."""


class UnknownInput(ArtifactError):
  """Inputs name one the model does not have (`name`; the model's inputs: `known`)."""

  def __init__(self, name: str, known: list[str]):
    self.name, self.known = name, list(known)
    super().__init__(f"unknown input {name!r}; the model's inputs are: {', '.join(map(repr, known)) or 'none'}")


class MissingInput(ArtifactError):
  """Inputs leave out one the model takes (`name`)."""

  def __init__(self, name: str):
    self.name = name
    super().__init__(f"missing input {name!r}")


class ToolchainMissing(ArtifactError):
  """A tool this machine lacks (the C compiler) is needed to load the artifact; the message names it."""


def as_bytes(src: Any) -> np.ndarray:
  """A 1-D uint8 view (or contiguous copy) of the bytes of a numpy array or buffer-protocol object."""
  arr = src if isinstance(src, np.ndarray) else np.asarray(memoryview(src))
  if arr.dtype == object:
    raise TypeError("copyin: object arrays have no byte representation")
  return np.ascontiguousarray(arr).reshape(-1).view(np.uint8)


class Buffer:
  """Device memory of `nbytes` bytes owned by `runtime`."""

  def __init__(self, runtime: "Runtime", nbytes: int):
    if not isinstance(nbytes, (int, np.integer)) or nbytes < 0:
      raise ValueError(f"{runtime.name}: buffer size must be a non-negative int, got {nbytes!r}")
    self.runtime, self.nbytes = runtime, int(nbytes)

  def __repr__(self) -> str:
    return f"<{type(self).__name__} {self.runtime.name} nbytes={self.nbytes}>"


class Program:
  """One compiled kernel `name`; calling it runs the kernel with the given buffers as its arguments."""

  def __init__(self, runtime: "Runtime", name: str):
    self.runtime, self.name = runtime, name

  def __call__(self, *bufs: Buffer, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] = (1, 1, 1),
               wait: bool = False) -> float | None:
    raise NotImplementedError

  def check_buffers(self, bufs: tuple[Buffer, ...]) -> None:
    """Raise LaunchError unless every argument is a Buffer of this program's runtime."""
    for i, buf in enumerate(bufs):
      if not isinstance(buf, Buffer) or buf.runtime is not self.runtime:
        raise LaunchError(f"{self.runtime.name}: kernel '{self.name}' argument {i} is not a buffer of this runtime: "
                          f"{buf!r}")

  def __repr__(self) -> str:
    return f"<{type(self).__name__} {self.runtime.name}:{self.name}>"


class Runtime:
  """Allocates buffers, moves bytes, compiles kernels. One instance per name via `get_runtime`."""
  name: str = "base"
  device_name: str = "unknown"

  def alloc(self, nbytes: int) -> Buffer:
    raise NotImplementedError

  def copyin(self, buf: Buffer, src: Any) -> None:
    raise NotImplementedError

  def copyout(self, buf: Buffer) -> np.ndarray:
    raise NotImplementedError

  def compile(self, src: str, name: str) -> Program:
    raise NotImplementedError

  def load(self, prg) -> Program:
    """The program of a lowered kernel (a `codegen.lower.KernelProgram`); runtimes that need the facts the renderer
    reports as data (WebGPU: bindings and work-group size) take them from it."""
    return self.compile(prg.src, prg.name)

  def synchronize(self) -> None:
    raise NotImplementedError

  def device_info(self) -> dict[str, Any]:
    """Facts about the device the runtime runs on (`has_fp64`, limits, ...); empty when it has none to tell."""
    return {}

  def lacks_float64(self) -> bool:
    """The device cannot compute in float64 (an OpenCL device without cl_khr_fp64)."""
    return not self.device_info().get("has_fp64", True)

  def check_buffer(self, buf: Buffer) -> None:
    """Raise ValueError unless `buf` was allocated by this runtime."""
    if not isinstance(buf, Buffer) or buf.runtime is not self:
      raise ValueError(f"{self.name}: not a buffer of this runtime: {buf!r}")

  def check_copyin(self, buf: Buffer, src: Any) -> np.ndarray:
    """Validate a host -> device copy; returns the source as exactly `buf.nbytes` uint8 bytes."""
    self.check_buffer(buf)
    data = as_bytes(src)
    if data.size != buf.nbytes:
      raise ValueError(f"{self.name}: copyin of {data.size} bytes into a buffer of {buf.nbytes} bytes")
    return data

  def __repr__(self) -> str:
    return f"<{type(self).__name__} {self.name} on {self.device_name}>"


_runtimes: dict[str, Runtime] = {}
_runtimes_lock = threading.Lock()


def cache_root() -> str:
  """The root folder of tgc's on-disk caches: $TGC_CACHE_DIR, else ~/.cache/tgc."""
  from tgc.ir.config import config
  return config.cache_dir


def _runtime_class(name: str) -> Callable[..., Runtime]:
  """The Runtime class of a target (its registry entry's `runtime`, imported only when asked for, so a missing
  optional dependency such as pyopencl only affects the runtime that needs it)."""
  return load(target_spec(name).runtime)


def forget_runtime(name: str) -> None:
  """Drop the cached Runtime `name`: the next `get_runtime(name)` makes a new one (with the cache root of then)."""
  with _runtimes_lock: _runtimes.pop(name, None)


def get_runtime(name: str) -> Runtime:
  """The cached Runtime called `name` ("c", "opencl"); raises RuntimeUnavailable when it cannot run here.
  Each runtime keeps its disk cache in <cache root>/<name> (cache root: $TGC_CACHE_DIR, else ~/.cache/tgc)."""
  known = [n for n in target_names() if target_spec(n).runtime is not None]
  if name not in known: raise ValueError(f"unknown runtime '{name}' (known: {', '.join(sorted(known))})")
  with _runtimes_lock:
    if name not in _runtimes:
      _runtimes[name] = _runtime_class(name)(cache_dir=os.path.join(cache_root(), name))
    return _runtimes[name]
