"""Realizing lazy graphs on a device: "numpy" interprets the graph; compiled devices schedule it into kernels,
lower them for the device's language and run them on its runtime. Also the hook the JIT captures through."""
from __future__ import annotations
import time
import numpy as np
from tgc.ir import Ops, UOp, DType, dtypes, lowp
from tgc.ir.config import config
from tgc.ir.sint import is_static
from tgc.frontend import buffers
from tgc.frontend.interpreter import evaluate
from tgc.codegen.registry import target_names, target_spec
from tgc.codegen.target import as_target

_kernel_cache: dict[tuple[str, str], tuple] = {}
capture_hooks: list = []        # callables(items, bufs_after) registered by jit capture
stats = {"kernels": 0, "realizes": 0}


def _runtime(device: str):
  from tgc.runtimes import get_runtime
  return get_runtime(device)


def unsupported_dtypes(device: str) -> set[DType]:
  """Compute dtypes a device cannot run (WebGPU has no float64, nor OpenCL devices without cl_khr_fp64)."""
  if device == "numpy": return set()
  if target_spec(device).lacks_float64 or _runtime(device).lacks_float64(): return {dtypes.float64}
  return set()


def check_dtypes(roots: list[UOp], device: str) -> None:
  missing = unsupported_dtypes(device)
  if not missing: return
  for r in roots:
    for n in r.toposort():
      if n.dtype in missing:
        raise TypeError(f"dtype {n.dtype.name} is not supported on device {device} (used by {n.op.name})")


def from_numpy(arr: np.ndarray, device: str, dtype: DType) -> UOp:
  arr = buffers.host_array(arr.astype(dtype.numpy, copy=False))
  if device == "numpy": return buffers.new_buffer(device, arr.shape, dtype, arr)
  rt = _runtime(device)
  buf = rt.alloc(max(arr.nbytes, 1))
  if arr.nbytes: rt.copyin(buf, arr.reshape(-1).view(np.uint8))
  return buffers.new_buffer(device, arr.shape, dtype, buf)


def from_storage(packed: np.ndarray, shape, device: str, dtype: DType) -> UOp:
  """A BUFFER of a storage-only dtype from its packed storage words."""
  if device == "numpy": return buffers.new_buffer(device, shape, dtype, packed)
  rt = _runtime(device)
  buf = rt.alloc(max(packed.nbytes, 1))
  if packed.nbytes: rt.copyin(buf, packed.view(np.uint8))
  return buffers.new_buffer(device, shape, dtype, buf)


def raw_storage(u: UOp) -> np.ndarray:
  """The storage words of a BUFFER (packed for sub-byte types), as its storage numpy type."""
  dev, shape, dt = buffers.device_of(u), u.arg[1], u.dtype
  n = lowp.storage_nbytes(dt, int(np.prod(shape))) if dt.storage_only else int(np.prod(shape)) * dt.itemsize
  if dev == "numpy": return buffers.host_array(buffers.storage(u)).reshape(-1).view(np.uint8)[:n].view(dt.np).copy()
  return np.frombuffer(_runtime(dev).copyout(buffers.storage(u))[:n].tobytes(), dtype=dt.np).copy()


def to_numpy(u: UOp) -> np.ndarray:
  """The values of a BUFFER; storage-only types come back decoded (float32 or int32)."""
  shape, dt = u.arg[1], u.dtype
  raw = raw_storage(u)
  if dt.storage_only: return lowp.decode_array(lowp.unpack(raw, dt, shape), dt)
  return raw.reshape(shape)


def max_buffers(device: str) -> int | None:
  """The most buffers one kernel may bind on `device` (None: no limit)."""
  return as_target(device).max_buffers if device in target_names() else None


def _alloc(device: str):
  def new_buffer(shape, dtype: DType) -> UOp:
    nbytes = int(np.prod(shape)) * dtype.itemsize
    if dtype.storage_only: nbytes = lowp.storage_nbytes(dtype, int(np.prod(shape)))
    store = np.empty(nbytes, np.uint8) if device == "numpy" else _runtime(device).alloc(max(nbytes, 1))
    return buffers.new_buffer(device, shape, dtype, store)
  return new_buffer


def _target(device: str):
  """The target kernels are lowered for on `device`: its runtime's (which knows the device it runs on), else the
  language's."""
  return getattr(_runtime(device), "target", None) or as_target(device)


def get_kernel(ast: UOp, device: str, bufs: tuple[UOp, ...] = ()):
  """Lower and compile (cached by AST content and device; a program of a runtime made afresh since, by
  `runtimes.base.forget_runtime`, is loaded again). With BEAM=n the opts come from a beam search timed on scratch
  buffers of the kernel's buffer sizes."""
  from tgc.codegen.lower import lower
  key = (ast.key, device)
  if key in _kernel_cache and _kernel_cache[key][1].runtime is not _runtime(device):
    _kernel_cache[key] = (_kernel_cache[key][0], _runtime(device).load(_kernel_cache[key][0]))
  if key not in _kernel_cache:
    opts = None
    if config.beam and bufs:
      from tgc.codegen.search import beam_search
      from tgc.runtimes.timing import kernel_timer
      rt = _runtime(device)
      timer = kernel_timer(rt, [buffers.nbytes(b) for b in bufs])
      opts = beam_search(ast, _target(device), timer, config.beam, getattr(rt, "device_name", device))
    prg = lower(ast, _target(device), opts)
    if config.debug >= 3: print(f"--- {prg.name} opts={list(prg.opts)}\n{ast!r}")
    if config.debug >= 4: print(prg.src)
    _kernel_cache[key] = (prg, _runtime(device).load(prg))
  return _kernel_cache[key]


def run_items(items, device: str, timing: bool = False) -> float:
  total = 0.0
  rt = _runtime(device) if device != "numpy" else None
  for it in items:
    prg, fn = get_kernel(it.ast, device, it.bufs)
    t = fn(*[buffers.storage(b) for b in it.bufs], global_size=prg.global_size, local_size=prg.local_size,
           wait=timing)
    if config.debug >= 2: print(f"  {prg.name:<40} global={prg.global_size} local={prg.local_size}" +
                                (f" {t * 1e6:9.1f} us" if t else ""))
    total += t or 0.0
    stats["kernels"] += 1
  if rt is not None: rt.synchronize()
  return total


def realize(roots: list[UOp], device: str) -> list[UOp]:
  """Compute `roots` on `device`; returns a BUFFER node per root."""
  if not all(is_static(r.shape) for r in roots):
    raise ValueError(f"a tensor of shape {next(r.shape for r in roots if not is_static(r.shape))} has sizes known "
                     f"only at run time: it can be traced (trace, tgc compile), not computed")
  stats["realizes"] += 1
  if device == "numpy":
    vals = evaluate(roots, buffers.storage)
    return [r if r.op is Ops.BUFFER else
            buffers.new_buffer("numpy", v.shape, r.dtype, lowp.pack(v, r.dtype) if r.dtype.storage_only else
                               buffers.host_array(v)) for r, v in zip(roots, vals)]
  from tgc.codegen.schedule import schedule
  check_dtypes(roots, device)
  st = time.perf_counter()
  items, outs = schedule(roots, _alloc(device), max_buffers=max_buffers(device))
  for hook in capture_hooks: hook(items, roots, outs)
  run_items(items, device, timing=config.debug >= 2)
  if config.debug >= 1:
    print(f"realize on {device}: {len(items)} kernels in {(time.perf_counter() - st) * 1e3:.2f} ms")
  return outs
