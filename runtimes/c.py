"""The C runtime: compiles one-kernel C translation units with the system compiler into shared objects (cached
on disk by content), loads them with ctypes and runs them on 64-byte aligned numpy host buffers.

Kernel convention: `void name(T* restrict data0, const T* restrict data1, ..., int tg_lo, int tg_hi)`: a pointer per
buffer, in the order the buffers are passed, then the range of its task loop (its outermost output loop) to run; a
launch runs all of it, [0, global_size[0]).
"""
from __future__ import annotations
import ctypes
import hashlib
import os
import platform
import re
import subprocess
import tempfile
import time
from typing import Any

import numpy as np

from tgc.ir.config import config
from tgc.runtimes.base import Buffer, CompileError, Program, Runtime, RuntimeUnavailable

# Every flag that affects the produced code; part of the cache key. -ffp-contract=off keeps float results
# reproducible (no fused multiply-add unless the source asks for it). The source is read from stdin before these.
C_FLAGS: tuple[str, ...] = ("-O3", "-march=native", "-ffp-contract=off", "-shared", "-fPIC", "-lm")
BUFFER_ALIGNMENT = 64
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _cpu_model() -> str:
  """The CPU model name from /proc/cpuinfo where there is one, else the machine architecture."""
  try:
    with open("/proc/cpuinfo") as cpuinfo:
      for line in cpuinfo:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.machine() or "cpu"


class CBuffer(Buffer):
  """Host memory: a 64-byte aligned numpy uint8 array of max(nbytes, 1) bytes."""

  def __init__(self, runtime: "CRuntime", nbytes: int):
    super().__init__(runtime, nbytes)
    size = max(self.nbytes, 1)
    raw = np.zeros(size + BUFFER_ALIGNMENT, dtype=np.uint8)
    offset = -raw.ctypes.data % BUFFER_ALIGNMENT
    self.array = raw[offset:offset + size]  # keeps `raw` alive through its base
    self.pointer = ctypes.c_void_p(self.array.ctypes.data)


class CProgram(Program):
  """A kernel loaded from a shared object; calls it with one void* per buffer."""

  def __init__(self, runtime: "CRuntime", name: str, library: ctypes.CDLL, path: str):
    super().__init__(runtime, name)
    self.library, self.path = library, path
    try:
      self.function = getattr(library, name)
    except AttributeError:
      raise CompileError(runtime.name, name, f"the source does not define a function named '{name}'") from None
    self.function.restype = None

  def __call__(self, *bufs: Buffer, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] = (1, 1, 1),
               wait: bool = False) -> float | None:
    self.check_buffers(bufs)
    pointers = [buf.pointer for buf in bufs]  # type: ignore[attr-defined]
    tasks = (ctypes.c_int(0), ctypes.c_int(int(global_size[0])))
    start = time.perf_counter()
    self.function(*pointers, *tasks)
    elapsed = time.perf_counter() - start
    return elapsed if wait else None


class CRuntime(Runtime):
  """Runs C kernels on the host CPU. `cache_dir` holds compiled shared objects (default ~/.cache/tgc/c)."""
  name = "c"

  def __init__(self, cache_dir: str | None = None, compiler: str | None = None):
    self.cache_dir = os.path.expanduser(cache_dir or os.path.join("~", ".cache", "tgc", "c"))
    compiler = compiler or config.cc
    self.compiler = compiler
    try:
      version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as error:
      raise RuntimeUnavailable(f"c: C compiler '{compiler}' not usable ({error}); install gcc") from None
    self.compiler_version = version.stdout.strip()
    compiler_id = self.compiler_version.splitlines()[0] if self.compiler_version else compiler
    self.device_name = f"{_cpu_model()} ({compiler_id})"
    self.programs: dict[tuple[str, str], CProgram] = {}

  def alloc(self, nbytes: int) -> CBuffer:
    return CBuffer(self, nbytes)

  def copyin(self, buf: Buffer, src: Any) -> None:
    data = self.check_copyin(buf, src)
    buf.array[:buf.nbytes] = data  # type: ignore[attr-defined]

  def copyout(self, buf: Buffer) -> np.ndarray:
    self.check_buffer(buf)
    return buf.array[:buf.nbytes].copy()  # type: ignore[attr-defined]

  def synchronize(self) -> None:
    """Kernels run synchronously on the calling thread: nothing to wait for."""

  def cache_key(self, src: str, flags: tuple[str, ...] = ()) -> str:
    """sha256 of everything that determines the shared object: source, flags, compiler identity."""
    material = "\0".join([src, " ".join(C_FLAGS + flags), self.compiler, self.compiler_version])
    return hashlib.sha256(material.encode()).hexdigest()

  def compile(self, src: str, name: str, flags: tuple[str, ...] = ()) -> CProgram:
    """`src` built as a shared object (cached by content); `flags`: compiler flags after the usual ones (a CPU
    level's, such as -mprefer-vector-width=512)."""
    if not IDENTIFIER.fullmatch(name):
      raise ValueError(f"c: kernel name '{name}' is not a C identifier")
    key = self.cache_key(src, flags)
    if (key, name) not in self.programs:
      path = os.path.join(self.cache_dir, f"{key}.so")
      if not os.path.exists(path):
        self._build(src, name, path, flags)
      self.programs[(key, name)] = CProgram(self, name, ctypes.CDLL(path), path)
    return self.programs[(key, name)]

  def compile_many(self, programs) -> list[CProgram]:
    """Several KernelPrograms (distinct names) built as one translation unit: one compiler call."""
    prefix: list[str] = []
    for p in programs: prefix += [line for line in p.prefix if line not in prefix]
    src = "\n".join(prefix + [p.function for p in programs])
    first = self.compile(src, programs[0].name)
    return [first] + [CProgram(self, p.name, first.library, first.path) for p in programs[1:]]

  def _build(self, src: str, name: str, path: str, flags: tuple[str, ...] = ()) -> None:
    """Compile `src` to a temporary file next to `path`, then atomically move it into place, so concurrent
    compilers of the same source never expose a half-written shared object."""
    os.makedirs(self.cache_dir, exist_ok=True)
    fd, tmp_path = tempfile.mkstemp(dir=self.cache_dir, prefix=f".{name}.", suffix=".so.tmp")
    os.close(fd)
    try:
      command = [self.compiler, "-x", "c", "-", "-x", "none", *C_FLAGS, *flags, "-o", tmp_path]
      result = subprocess.run(command, input=src, capture_output=True, text=True)
      if result.returncode != 0:
        raise CompileError(self.name, name, result.stderr or result.stdout or f"exit status {result.returncode}")
      os.chmod(tmp_path, 0o755)
      os.replace(tmp_path, path)
    finally:
      if os.path.exists(tmp_path):
        os.unlink(tmp_path)
