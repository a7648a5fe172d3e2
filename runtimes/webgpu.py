"""The WebGPU runtime (the `wgpu` package: wgpu-native, naga): one adapter requested once (on CPU-only machines
Mesa's lavapipe, a software Vulkan: `apt-get install mesa-vulkan-drivers libvulkan1`), one device with the WebGPU
default compute limits that browsers grant (8 storage buffers per stage, 256 invocations per work-group, 65535
work-groups per dimension, 16 KiB of work-group memory) but the adapter's buffer sizes; "shader-f16" and
"timestamp-query" are enabled when the adapter has them.

Buffers are STORAGE | COPY_SRC | COPY_DST GPUBuffers of `nbytes` rounded up to 16 bytes (at least 16).

Programs are WGSL modules rendered by `codegen.render.wgsl`: the kernel's argument i is `@binding(i)` of group 0;
only the bindings the module declares are bound (a kernel may not use all its arguments). What the module declares
comes as data, never from parsing its source: `load(program)` takes a lowered `KernelProgram` (its `params` are the
bindings, its `local_size` the @workgroup_size), `compile(src, name, bindings, workgroup_size)` takes them given
(`Binding`s; an artifact's plan holds them). Bad WGSL, or bindings the module does not declare as given, raise
CompileError with naga's message.

Launch convention (as OpenCL): `global_size` is the total number of invocations per dimension (work-groups times
the work-group size) and `local_size` the work-group size, which must equal the module's @workgroup_size.

Packed sub-32-bit outputs (`array<atomic<u32>>` bindings, listed in `Program.zero_outputs`) are written by
atomicOr of each element's bits, so they are cleared (`clearBuffer`) in the same command buffer right before every
dispatch: callers never zero them themselves. Timing (`wait=True`) uses timestamp queries around the compute
pass when the device has them, else the wall clock from submit to the queue's completion (after draining earlier
work)."""
from __future__ import annotations
import hashlib
import os
import tempfile
import time
from typing import Any

import numpy as np

from tgc.codegen.render.wgsl import Binding
from tgc.codegen.target import Target
from tgc.runtimes.base import Buffer, CompileError, LaunchError, Program, Runtime, RuntimeUnavailable

try:
  import wgpu
except ImportError:  # the runtime reports it as unavailable when constructed
  wgpu = None

NO_ADAPTER = "webgpu: no WebGPU adapter found (for a software Vulkan adapter: apt-get install mesa-vulkan-drivers " \
             "libvulkan1)"


# WebGPU's default limits (what browsers grant without asking) for compute; wgpu would otherwise hand out the
# adapter's larger limits and kernels that no browser runs would pass here
BROWSER_LIMITS = {"max-storage-buffers-per-shader-stage": 8, "max-compute-invocations-per-workgroup": 256,
                  "max-compute-workgroup-size-x": 256, "max-compute-workgroup-size-y": 256,
                  "max-compute-workgroup-size-z": 64, "max-compute-workgroup-storage-size": 16384,
                  "max-compute-workgroups-per-dimension": 65535}


def _buffer_size(n: int) -> int: return max(16, (n + 15) // 16 * 16)


def bindings_of(params) -> list[Binding]:
  """The storage bindings of a rendered WGSL kernel, from its `KernelProgram.params`."""
  return [Binding(p.index, f"data{p.index}", not p.mutable, p.atomic, p.spelled) for p in params]


def _private_runtime_dir() -> None:
  """Vulkan loaders warn without XDG_RUNTIME_DIR; give them a private (mode 700) one when it is unset."""
  if not os.environ.get("XDG_RUNTIME_DIR"):
    os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="tgc-xdg-")


class WebGPUBuffer(Buffer):
  """A GPUBuffer of `nbytes` rounded up to a multiple of 16 (at least 16) bytes: kernels may bind it as
  array<vec4<...>>."""

  def __init__(self, runtime: "WebGPURuntime", nbytes: int):
    super().__init__(runtime, nbytes)
    self.size = _buffer_size(self.nbytes)
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
    self.gpu_buffer = runtime.device.create_buffer(size=self.size, usage=usage)


class WebGPUProgram(Program):
  """One compute entry point of a WGSL module, with an explicit bind-group layout built from its bindings."""

  def __init__(self, runtime: "WebGPURuntime", name: str, src: str, bindings: list[Binding],
               workgroup_size: tuple[int, ...], sizes: int = 0):
    super().__init__(runtime, name)
    self.workgroup_size: tuple[int, int, int] = tuple(int(s) for s in workgroup_size) + (1,) * (3 - len(workgroup_size))
    self.bindings: list[Binding] = sorted(bindings, key=lambda b: b.index)
    self.zero_outputs: tuple[int, ...] = tuple(b.index for b in self.bindings if b.atomic)
    device = runtime.device
    try:
      module = device.create_shader_module(code=src)
      kinds = wgpu.BufferBindingType
      layout = device.create_bind_group_layout(entries=[
        {"binding": b.index, "visibility": wgpu.ShaderStage.COMPUTE,
         "buffer": {"type": kinds.read_only_storage if b.read_only else kinds.storage}} for b in self.bindings])
      self.layout = layout
      # sizes known only at run time: uniforms @group(1) @binding(0 .. sizes-1) (codegen.render.wgsl.size_binding)
      self.sizes_layout = device.create_bind_group_layout(entries=[
        {"binding": j, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": kinds.uniform}}
        for j in range(sizes)]) if sizes else None
      layouts = [layout] + ([self.sizes_layout] if sizes else [])
      self.pipeline = device.create_compute_pipeline(layout=device.create_pipeline_layout(bind_group_layouts=layouts),
                                                     compute={"module": module, "entry_point": name})
    except Exception as error:  # GPUValidationError (naga's diagnostic), GPUPipelineError, ...
      raise CompileError(runtime.name, name, str(error)) from None

  def __call__(self, *bufs: Buffer, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] = (1, 1, 1),
               wait: bool = False) -> float | None:
    self.check_buffers(bufs)
    runtime: WebGPURuntime = self.runtime  # type: ignore[assignment]
    needed = 1 + max((b.index for b in self.bindings), default=-1)
    if len(bufs) < needed:
      raise LaunchError(f"webgpu: kernel '{self.name}' binds argument {needed - 1}, got {len(bufs)} buffers")
    gsz = tuple(int(s) for s in global_size) + (1,) * (3 - len(global_size))
    lsz = tuple(int(s) for s in local_size) + (1,) * (3 - len(local_size))
    if lsz != self.workgroup_size:
      raise LaunchError(f"webgpu: kernel '{self.name}' has @workgroup_size{self.workgroup_size}, launched with local "
                        f"size {lsz}")
    if any(g % l for g, l in zip(gsz, lsz)):
      raise LaunchError(f"webgpu: kernel '{self.name}': global size {gsz} is not a multiple of local size {lsz}")
    groups = tuple(g // l for g, l in zip(gsz, lsz))
    if any(n > runtime.max_workgroups_per_dim for n in groups):
      raise LaunchError(f"webgpu: kernel '{self.name}' needs {groups} work-groups; the limit is "
                        f"{runtime.max_workgroups_per_dim} per dimension")
    bound = [(b, bufs[b.index]) for b in self.bindings]
    for i, (b, buf) in enumerate(bound):
      for b2, buf2 in bound[i + 1:]:
        if buf is buf2 and not (b.read_only and b2.read_only):
          raise LaunchError(f"webgpu: kernel '{self.name}' binds one buffer as both {b.name} and {b2.name}, and "
                            f"WebGPU forbids aliasing a writable storage binding")
    device = runtime.device
    try:
      bind_group = device.create_bind_group(layout=self.layout, entries=[
        {"binding": b.index, "resource": {"buffer": buf.gpu_buffer, "offset": 0, "size": buf.size}}  # type: ignore
        for b, buf in bound])
      encoder = device.create_command_encoder()
      for i in self.zero_outputs: encoder.clear_buffer(bufs[i].gpu_buffer)  # type: ignore[attr-defined]
      stamps = wait and runtime.query_set is not None
      cpass = encoder.begin_compute_pass(timestamp_writes={
        "query_set": runtime.query_set, "beginning_of_pass_write_index": 0, "end_of_pass_write_index": 1}
        if stamps else None)
      cpass.set_pipeline(self.pipeline)
      cpass.set_bind_group(0, bind_group)
      cpass.dispatch_workgroups(*groups)
      cpass.end()
      if stamps: encoder.resolve_query_set(runtime.query_set, 0, 2, runtime.query_buffer, 0)
      if wait: runtime.synchronize()
      start = time.perf_counter()
      device.queue.submit([encoder.finish()])
      if not wait: return None
      runtime.synchronize()
      elapsed = time.perf_counter() - start
    except Exception as error:
      raise LaunchError(f"webgpu: launching kernel '{self.name}' with {groups} work-groups of {lsz} failed: "
                        f"{error}") from error
    if stamps:
      t0, t1 = np.frombuffer(device.queue.read_buffer(runtime.query_buffer), dtype=np.uint64)[:2]
      if t1 > t0: return float(t1 - t0) * 1e-9
    return elapsed


class WebGPURuntime(Runtime):
  """Runs WGSL kernels through wgpu on the first adapter (high-performance preference). `cache_dir` is unused:
  pipelines are cached in memory by source hash and entry point."""
  name = "webgpu"

  def __init__(self, cache_dir: str | None = None):
    if wgpu is None:
      raise RuntimeUnavailable("webgpu: the wgpu package is not installed (pip install wgpu)")
    _private_runtime_dir()
    try:
      adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    except Exception:  # wgpu-native raises when no backend finds an adapter
      adapter = None
    if adapter is None: raise RuntimeUnavailable(NO_ADAPTER)
    self.adapter, self.cache_dir = adapter, cache_dir
    info = adapter.info
    self.backend = str(info.get("backend_type", "unknown"))
    self.device_name = f"{info.get('device') or info.get('description') or 'unknown'} ({self.backend})"
    features = [f for f in ("shader-f16", "timestamp-query") if f in adapter.features]
    sizes = ("max-buffer-size", "max-storage-buffer-binding-size")
    limits = {**BROWSER_LIMITS, **{k: adapter.limits[k] for k in sizes}}
    try:
      self.device = adapter.request_device_sync(required_features=features, required_limits=limits)
    except Exception as error:
      raise RuntimeUnavailable(f"webgpu: requesting a device from {self.device_name} failed: {error}") from None
    self.features = set(features)
    # a software adapter (lavapipe, SwiftShader, WARP): artifacts pick their kernel variant for it (no tiles)
    self.software = str(info.get("adapter_type", "")).upper() == "CPU" or bool(info.get("is_fallback_adapter"))
    # what eager kernels are lowered for: a software adapter gets no workgroup-memory tiles
    self.target = Target.make("webgpu", artifact=False, workgroup_tiles=not self.software)
    self.max_workgroups_per_dim = int(self.device.limits["max-compute-workgroups-per-dimension"])
    self.query_set = self.query_buffer = None
    if "timestamp-query" in self.features:
      self.query_set = self.device.create_query_set(type=wgpu.QueryType.timestamp, count=2)
      self.query_buffer = self.device.create_buffer(size=16, usage=wgpu.BufferUsage.QUERY_RESOLVE |
                                                    wgpu.BufferUsage.COPY_SRC)
    self.programs: dict[tuple[str, str], WebGPUProgram] = {}
    self._work_done_works = True
    self._sync_buffer = self.device.create_buffer(size=4, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)

  def device_info(self) -> dict[str, Any]:
    """Adapter, backend, features and the device's limits."""
    return {"name": self.device_name, "backend": self.backend, "has_f16": "shader-f16" in self.features,
            "software": self.software,
            "has_fp64": False, "timestamps": "timestamp-query" in self.features,
            "limits": {k: int(v) for k, v in self.device.limits.items() if isinstance(v, int)}}

  def alloc(self, nbytes: int) -> WebGPUBuffer:
    return WebGPUBuffer(self, nbytes)

  def copyin(self, buf: Buffer, src: Any) -> None:
    data = self.check_copyin(buf, src)
    if not buf.nbytes: return
    if data.size % 4: data = np.concatenate([data, np.zeros(4 - data.size % 4, np.uint8)])
    self.device.queue.write_buffer(buf.gpu_buffer, 0, data)  # type: ignore[attr-defined]

  def copyout(self, buf: Buffer) -> np.ndarray:
    self.check_buffer(buf)
    if not buf.nbytes: return np.empty(0, dtype=np.uint8)
    raw = self.device.queue.read_buffer(buf.gpu_buffer, 0, buf.size)  # type: ignore[attr-defined]
    return np.frombuffer(raw, dtype=np.uint8)[:buf.nbytes].copy()

  def synchronize(self) -> None:
    """Wait for all submitted work. Some wgpu releases ship a broken onSubmittedWorkDone binding; then a 4-byte
    read-back (ordered after all earlier submissions) does the waiting."""
    if self._work_done_works:
      try:
        self.device.queue.on_submitted_work_done_sync()
        return
      except TypeError:
        self._work_done_works = False
    self.device.queue.read_buffer(self._sync_buffer, 0, 4)

  def compile(self, src: str, name: str, bindings: list[Binding] | None = None,
              workgroup_size: tuple[int, ...] | None = None, sizes: int = 0) -> WebGPUProgram:
    """The entry point `name` of the WGSL module `src`, whose storage bindings and @workgroup_size are given
    (`sizes`: how many sizes known only at run time it reads from bind group 1)."""
    if bindings is None or workgroup_size is None:
      raise CompileError(self.name, name, "a WGSL program needs its bindings and work-group size as data: use "
                                          "load(KernelProgram) or pass bindings= and workgroup_size=")
    key = (hashlib.sha256(src.encode()).hexdigest(), name, tuple(bindings), tuple(workgroup_size), sizes)
    if key not in self.programs: self.programs[key] = WebGPUProgram(self, name, src, bindings, workgroup_size, sizes)
    return self.programs[key]

  def load(self, prg) -> WebGPUProgram:
    """The program of a lowered kernel: bindings from its params, work-group size from its local size."""
    return self.compile(prg.src, prg.name, bindings_of(prg.params), prg.local_size)
