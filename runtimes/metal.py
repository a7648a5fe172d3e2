"""The Metal runtime, on macOS only, through PyObjC's bindings of the Metal framework (`pip install
pyobjc-framework-Metal`): one device (the system default), one command queue, shared-storage MTLBuffers; Metal
Shading Language source is compiled with fast math off (kernels rely on IEEE NaN and infinity semantics).
Elsewhere constructing it raises RuntimeUnavailable; on Linux the tests check Metal source with clang and a
`metal_stdlib` shim instead (tests/metal_check.py).

Launch convention (as OpenCL): `global_size` is the total number of threads per dimension and `local_size` the
threadgroup size; kernels are dispatched as global/local threadgroups of `local_size` threads.
"""
from __future__ import annotations
import hashlib
import math
import sys
from typing import Any

import numpy as np

from tgc.runtimes.base import Buffer, CompileError, LaunchError, Program, Runtime, RuntimeUnavailable

Metal: Any = None


def _load_metal() -> Any:
  if sys.platform != "darwin": raise RuntimeUnavailable("metal: needs macOS (Metal framework)")
  try:
    import Metal as metal_module  # PyObjC
  except ImportError:
    raise RuntimeUnavailable("metal: PyObjC's Metal bindings are not installed (pip install pyobjc-framework-Metal)") \
      from None
  return metal_module


def _describe(error: Any) -> str:
  if error is None: return "unknown error"
  try:
    return str(error.localizedDescription())
  except Exception:  # noqa: BLE001 - any description will do
    return str(error)


class MetalBuffer(Buffer):
  """A shared-storage MTLBuffer of max(nbytes, 1) bytes (host-visible, no explicit transfers)."""

  def __init__(self, runtime: "MetalRuntime", nbytes: int):
    super().__init__(runtime, nbytes)
    self.mtl = runtime.device.newBufferWithLength_options_(max(self.nbytes, 1), Metal.MTLResourceStorageModeShared)
    if self.mtl is None: raise MemoryError(f"metal: cannot allocate {self.nbytes} bytes")

  def view(self) -> memoryview:
    return self.mtl.contents().as_buffer(self.nbytes)


class MetalProgram(Program):
  """One kernel function made into a compute pipeline state."""

  def __init__(self, runtime: "MetalRuntime", name: str, library: Any):
    super().__init__(runtime, name)
    function = library.newFunctionWithName_(name)
    if function is None:
      raise CompileError(runtime.name, name, f"the source does not define a kernel named '{name}'")
    self.pipeline, error = runtime.device.newComputePipelineStateWithFunction_error_(function, None)
    if self.pipeline is None: raise CompileError(runtime.name, name, _describe(error))
    self.max_threads = int(self.pipeline.maxTotalThreadsPerThreadgroup())

  def __call__(self, *bufs: Buffer, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] = (1, 1, 1),
               wait: bool = False) -> float | None:
    self.check_buffers(bufs)
    gsz = tuple(int(s) for s in global_size) + (1,) * (3 - len(global_size))
    lsz = tuple(int(s) for s in (local_size or (1, 1, 1))) + (1,) * (3 - len(local_size or (1, 1, 1)))
    if any(l < 1 or g % l for g, l in zip(gsz, lsz)):
      raise LaunchError(f"metal: kernel '{self.name}': global size {gsz} is not a multiple of threadgroup size {lsz}")
    if math.prod(lsz) > self.max_threads:
      raise LaunchError(f"metal: kernel '{self.name}': threadgroup {lsz} exceeds {self.max_threads} threads")
    runtime: MetalRuntime = self.runtime  # type: ignore[assignment]
    command_buffer = runtime.queue.commandBuffer()
    encoder = command_buffer.computeCommandEncoder()
    encoder.setComputePipelineState_(self.pipeline)
    for i, buf in enumerate(bufs): encoder.setBuffer_offset_atIndex_(buf.mtl, 0, i)  # type: ignore[attr-defined]
    encoder.dispatchThreadgroups_threadsPerThreadgroup_(Metal.MTLSizeMake(*(g // l for g, l in zip(gsz, lsz))),
                                                        Metal.MTLSizeMake(*lsz))
    encoder.endEncoding()
    command_buffer.commit()
    if not wait:
      runtime.pending.append((self.name, command_buffer))
      return None
    runtime.wait_for(self.name, command_buffer)
    return float(command_buffer.GPUEndTime() - command_buffer.GPUStartTime())


class MetalRuntime(Runtime):
  """Runs Metal kernels on the system default device (macOS only)."""
  name = "metal"

  def __init__(self, cache_dir: str | None = None):
    global Metal
    Metal = _load_metal()
    self.device = Metal.MTLCreateSystemDefaultDevice()
    if self.device is None: raise RuntimeUnavailable("metal: no Metal device on this Mac")
    self.device_name = str(self.device.name())
    self.queue = self.device.newCommandQueue()
    self.cache_dir = cache_dir
    self.pending: list[tuple[str, Any]] = []
    self.programs: dict[tuple[str, str], MetalProgram] = {}
    self.libraries: dict[str, Any] = {}

  def device_info(self) -> dict[str, Any]:
    size = self.device.maxThreadsPerThreadgroup()
    return {"name": self.device_name, "max_threads_per_threadgroup": [int(size.width), int(size.height),
                                                                      int(size.depth)],
            "max_threadgroup_memory": int(self.device.maxThreadgroupMemoryLength()), "has_fp16": True,
            "has_fp64": False}

  def wait_for(self, name: str, command_buffer: Any) -> None:
    command_buffer.waitUntilCompleted()
    if command_buffer.error() is not None:
      raise LaunchError(f"metal: kernel '{name}' failed: {_describe(command_buffer.error())}")

  def alloc(self, nbytes: int) -> MetalBuffer:
    return MetalBuffer(self, nbytes)

  def copyin(self, buf: Buffer, src: Any) -> None:
    data = self.check_copyin(buf, src)
    self.synchronize()   # kernels in flight may still read the old contents
    if buf.nbytes: buf.view()[:] = data.tobytes()  # type: ignore[attr-defined]

  def copyout(self, buf: Buffer) -> np.ndarray:
    self.check_buffer(buf)
    self.synchronize()
    if not buf.nbytes: return np.empty(0, dtype=np.uint8)
    return np.frombuffer(buf.view(), dtype=np.uint8).copy()  # type: ignore[attr-defined]

  def synchronize(self) -> None:
    pending, self.pending = self.pending, []
    for name, command_buffer in pending: self.wait_for(name, command_buffer)

  def compile(self, src: str, name: str) -> MetalProgram:
    key = hashlib.sha256(src.encode()).hexdigest()
    if (key, name) not in self.programs:
      if key not in self.libraries:
        options = Metal.MTLCompileOptions.new()
        options.setFastMathEnabled_(False)
        library, error = self.device.newLibraryWithSource_options_error_(src, options, None)
        if library is None: raise CompileError(self.name, name, _describe(error))
        self.libraries[key] = library
      self.programs[(key, name)] = MetalProgram(self, name, self.libraries[key])
    return self.programs[(key, name)]
