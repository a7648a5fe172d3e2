"""The OpenCL runtime (pyopencl): one device (first GPU, else first CPU, e.g. PoCL), one context and one
in-order profiling queue; buffers are READ_WRITE cl.Buffers; programs are built from source and cached in memory.
`target` is what kernels for the device are lowered for (a CPU device: without workgroup-memory tiles).

Launch convention: `global_size` is the total number of work-items per dimension (already multiplied by the
work-group size) and `local_size` is the work-group size, both passed to OpenCL exactly as given.
"""
from __future__ import annotations
import hashlib
import warnings
from typing import Any

import numpy as np

from tgc.codegen.target import Target
from tgc.runtimes.base import Buffer, CompileError, LaunchError, Program, Runtime, RuntimeUnavailable

try:
  import pyopencl as cl
except ImportError:  # the runtime reports it as unavailable when constructed
  cl = None


SIMULATORS = ("oclgrind",)   # checking tools that register as platforms: never chosen by default


def _pick_device() -> "cl.Device":
  """The first GPU of any platform, else the first CPU, else any device; RuntimeUnavailable if none.
  Simulator platforms (Oclgrind, which calls itself a GPU) are used only when nothing else exists."""
  try:
    platforms = cl.get_platforms()
  except cl.Error:
    platforms = []
  if not platforms:
    raise RuntimeUnavailable("opencl: no OpenCL platform found (install pocl-opencl-icd)")
  real = [p for p in platforms if not any(sim in p.name.lower() for sim in SIMULATORS)]
  for group in (real, [p for p in platforms if p not in real]):
    for device_type in (cl.device_type.GPU, cl.device_type.CPU, cl.device_type.ALL):
      for platform in group:
        try:
          devices = platform.get_devices(device_type=device_type)
        except cl.Error:
          continue
        if devices:
          return devices[0]
  raise RuntimeUnavailable("opencl: OpenCL platforms found but no device (install pocl-opencl-icd)")


class OpenCLBuffer(Buffer):
  """A READ_WRITE cl.Buffer of max(nbytes, 1) bytes."""

  def __init__(self, runtime: "OpenCLRuntime", nbytes: int):
    super().__init__(runtime, nbytes)
    self.cl_buffer = cl.Buffer(runtime.context, cl.mem_flags.READ_WRITE, size=max(self.nbytes, 1))


class OpenCLProgram(Program):
  """One kernel of a built cl.Program."""

  def __init__(self, runtime: "OpenCLRuntime", name: str, cl_program: "cl.Program"):
    super().__init__(runtime, name)
    self.cl_program = cl_program
    try:
      self.kernel = cl.Kernel(cl_program, name)
    except cl.Error:
      raise CompileError(runtime.name, name, f"the source does not define a kernel named '{name}'") from None
    self.num_args = self.kernel.get_info(cl.kernel_info.NUM_ARGS)

  def __call__(self, *bufs: Buffer, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] = (1, 1, 1),
               wait: bool = False) -> float | None:
    self.check_buffers(bufs)
    if len(bufs) != self.num_args:
      raise LaunchError(f"opencl: kernel '{self.name}' takes {self.num_args} arguments, got {len(bufs)} buffers")
    runtime: OpenCLRuntime = self.runtime  # type: ignore[assignment]
    global_dims = tuple(int(size) for size in global_size)
    local_dims = None if local_size is None else tuple(int(size) for size in local_size)
    try:
      self.kernel.set_args(*(buf.cl_buffer for buf in bufs))  # type: ignore[attr-defined]
      event = cl.enqueue_nd_range_kernel(runtime.queue, self.kernel, global_dims, local_dims)
      if not wait:
        return None
      event.wait()
    except cl.Error as error:
      raise LaunchError(f"opencl: launching kernel '{self.name}' with global {global_dims} local {local_dims} "
                        f"failed: {error}") from error
    return (event.profile.end - event.profile.start) * 1e-9


class OpenCLRuntime(Runtime):
  """Runs OpenCL C kernels on the first OpenCL device. `cache_dir` is handed to pyopencl's binary cache
  (None: pyopencl's default; pyopencl skips it for ICDs that cache builds themselves, such as PoCL)."""
  name = "opencl"

  def __init__(self, cache_dir: str | None = None):
    if cl is None:
      raise RuntimeUnavailable("opencl: pyopencl is not installed (pip install pyopencl)")
    self.device = _pick_device()
    self.device_name = self.device.name.strip()
    self.context = cl.Context([self.device])
    self.queue = cl.CommandQueue(self.context, self.device, properties=cl.command_queue_properties.PROFILING_ENABLE)
    self.cache_dir = cache_dir
    self.programs: dict[tuple[str, str], OpenCLProgram] = {}
    self.built: dict[str, cl.Program] = {}
    # what kernels for this device are lowered for: a CPU device (PoCL) gets no workgroup-memory tiles
    cpu = bool(self.device.type & cl.device_type.CPU)
    self.target = Target.make("opencl", artifact=False, workgroup_tiles=not cpu)

  def device_info(self) -> dict[str, Any]:
    """Device limits and features for launch heuristics."""
    device, extensions = self.device, self.device.extensions.split()
    return {
      "name": self.device_name,
      "max_work_group_size": int(device.max_work_group_size),
      "max_work_item_sizes": [int(size) for size in device.max_work_item_sizes],
      "local_mem_size": int(device.local_mem_size),
      "global_mem_size": int(device.global_mem_size),
      "max_compute_units": int(device.max_compute_units),
      "has_fp16": "cl_khr_fp16" in extensions,
      "has_fp64": "cl_khr_fp64" in extensions or bool(device.double_fp_config),
      "opencl_c_version": device.opencl_c_version.strip(),
    }

  def alloc(self, nbytes: int) -> OpenCLBuffer:
    return OpenCLBuffer(self, nbytes)

  def copyin(self, buf: Buffer, src: Any) -> None:
    data = self.check_copyin(buf, src)
    if buf.nbytes:
      cl.enqueue_copy(self.queue, buf.cl_buffer, data, is_blocking=True)  # type: ignore[attr-defined]

  def copyout(self, buf: Buffer) -> np.ndarray:
    self.check_buffer(buf)
    out = np.empty(buf.nbytes, dtype=np.uint8)
    if buf.nbytes:
      cl.enqueue_copy(self.queue, out, buf.cl_buffer, is_blocking=True)  # type: ignore[attr-defined]
    return out

  def synchronize(self) -> None:
    self.queue.finish()

  def compile(self, src: str, name: str) -> OpenCLProgram:
    key = hashlib.sha256(src.encode()).hexdigest()
    if (key, name) not in self.programs:
      if key not in self.built:
        self.built[key] = self._build(src, name)
      self.programs[(key, name)] = OpenCLProgram(self, name, self.built[key])
    return self.programs[(key, name)]

  def _build(self, src: str, name: str) -> "cl.Program":
    """Build `src` for the device; on failure raise CompileError carrying the device's build log."""
    cl_program = cl.Program(self.context, src)
    try:
      with warnings.catch_warnings():
        warnings.simplefilter("ignore", cl.CompilerWarning)
        return cl_program.build(cache_dir=self.cache_dir)
    except cl.Error as error:
      try:
        log = cl_program.get_build_info(self.device, cl.program_build_info.LOG)
      except cl.Error:
        log = ""
      raise CompileError(self.name, name, log.strip() or str(error)) from None
