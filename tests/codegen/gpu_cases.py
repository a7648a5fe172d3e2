"""Kernels from the Tensor API shared by the CUDA and Metal renderer tests. Each case builds a Tensor on the numpy
device; `programs` schedules it and lowers every kernel for a target, `run_case` executes the kernels in order on
host byte arrays through a target-specific `execute(program, arrays)`, and `expected` is the numpy interpreter's
value of a fresh copy of the graph (it shares nothing with the scheduler or the renderers). `elementwise_ast`
builds a kernel AST directly, for launch-geometry tests of any size."""
from __future__ import annotations
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from tgc.frontend import Tensor, buffers
from tgc.frontend import functional as F
from tgc.frontend.realize import _alloc
from tgc.ir import Ops, UOp, AxisType, RangeArg, dtypes
from tgc.codegen.schedule import schedule
from tgc.codegen.lower import lower, KernelProgram
from tgc.codegen.target import as_target
from tgc.codegen.render import CStyleRenderer
from tgc.codegen.opts import Opt


def elementwise_ast(*sizes: int) -> UOp:
  """data0[flat] = data1[flat] * 2 + flat over global ranges of the given sizes (no buffers needed to lower it)."""
  idx = UOp.const(dtypes.index, 0)
  for i, n in enumerate(sizes):
    idx = idx * n + UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, n),), RangeArg(i, AxisType.GLOBAL))
  out = UOp(Ops.DEFINE_GLOBAL, dtypes.float32, (), (0, True))
  inp = UOp(Ops.DEFINE_GLOBAL, dtypes.float32, (), (1, False))
  val = UOp(Ops.LOAD, dtypes.float32, (inp, idx)) * UOp.const(dtypes.float32, 2.0)
  val = val + UOp(Ops.CAST, dtypes.float32, (idx,))
  return UOp(Ops.SINK, dtypes.bool, (UOp(Ops.STORE, dtypes.bool, (out, idx, val)),))


def data(*shape, dtype=np.float32, seed=0, low=-2.0, high=2.0) -> np.ndarray:
  rng = np.random.default_rng(seed)
  if np.dtype(dtype).kind in "iu": return rng.integers(int(low), int(high), shape).astype(dtype)
  return rng.uniform(low, high, shape).astype(dtype)


def t(arr: np.ndarray) -> Tensor: return Tensor(arr, device="numpy")


@dataclass(frozen=True)
class Case:
  name: str
  make: Callable[[], Tensor]
  opts: tuple[Opt, ...] | None = None   # for single-kernel cases: opts instead of the heuristics
  rtol: float = 1e-5
  atol: float = 1e-5
  tags: frozenset = field(default_factory=frozenset)   # "f64", "barrier", "half"


def _elementwise():
  a, b = t(data(16, 40)), t(data(16, 40, seed=1))
  return ((a * b + 1.5).exp2() - a.abs().sqrt() + a.sin()).maximum(b) / (b.abs() + 0.5) - (-1.5)


def _nan_inf():
  a = t(np.array([[-1.0, 0.0, 1.0, 4.0], [np.inf, -np.inf, np.nan, 2.0]], np.float32))
  return (a.log2() + a.sqrt()).maximum(a * np.inf)


def _int64():
  a, b = t(data(8, 24, dtype=np.int64, low=-1000, high=1000)), t(data(8, 24, dtype=np.int64, seed=1, low=1, high=50))
  return (a * 3_000_000_000 + a // b - a % b + (b << 33) - (a ^ b)).maximum(a - (1 << 40))


def _bool():
  a, b = t(data(8, 33)), t(data(8, 33, seed=1))
  return ((a > 0) & (b < 0.5)) | ((a > b).logical_not() ^ (b > 1.0))


def _where_bool_in():
  m = t(data(6, 20, seed=2) > 0)
  return m.where(t(data(6, 20)), -1.0) + m.cast(dtypes.float32)


def _half():
  a, b = t(data(8, 64, dtype=np.float16)), t(data(8, 64, dtype=np.float16, seed=1))
  return ((a * b + a).exp() * 0.25).sum(axis=1)


def _half_out():
  a = t(data(12, 20))
  return (a.half() * 3 + 1).maximum(a.half().sqrt())


def _casts():
  a = t(data(10, 16, low=-300, high=300))
  return a.cast(dtypes.int32).cast(dtypes.int8).cast(dtypes.float32) + a.cast(dtypes.uint8).cast(dtypes.float32) \
    + a.cast(dtypes.int64).cast(dtypes.float16).cast(dtypes.float32)


def _bitcast():
  a = t(data(8, 16))
  return (a.bitcast(dtypes.int32) >> 3) + a.half().bitcast(dtypes.int16).cast(dtypes.int32)


def _bitcast_back():
  i = t(data(8, 16, dtype=np.int32, low=0x3f000000, high=0x40800000))
  return i.bitcast(dtypes.float32) + i.cast(dtypes.int16).bitcast(dtypes.float16).cast(dtypes.float32).abs().minimum(1)


def _conv():
  x, w, bias = t(data(2, 3, 9, 9)), t(data(4, 3, 3, 3, seed=1)), t(data(4, seed=2))
  return F.conv2d(x, w, bias, padding=1).relu()


def _conv_tiles():
  """A convolution big enough for workgroup-memory tiles: padding gates inside the tile fill."""
  x, w = t(data(1, 8, 12, 12)), t(data(16, 8, 3, 3, seed=1))
  return F.conv2d(x, w, None, padding=1)


def _conv_stem_tiles():
  """A stem convolution (7x7 window over 3 channels, stride 2): no reduce axis is a multiple of 4, so the window's
  last axis is unrolled whole and tiles are filled per step of the loop outside it."""
  x, w = t(data(1, 3, 20, 20)), t(data(16, 3, 7, 7, seed=1))
  return F.conv2d(x, w, None, stride=2, padding=3)


def _conv_window_tiles():
  """A 3x3 convolution over one channel: the whole reduction unrolls, its tiles are filled once, before it."""
  x, w = t(data(1, 1, 12, 12)), t(data(16, 1, 3, 3, seed=1))
  return F.conv2d(x, w, None, padding=1)


def _vec_misaligned():
  """Vector stores, but the loads start one element off a multiple of 4: they must stay lane by lane."""
  return t(data(8, 66))[:, 1:65] * 2 + 1


def _vec_mixed():
  """One buffer read as vectors (x) and lane by lane (its flip): WGSL binds it array<vec4<f32>> and reads
  components."""
  x = t(data(8, 64))
  return x * 3 - x.flip(1)


def _f64():
  a = t(data(16, 24, dtype=np.float64))
  return (a.exp() * a.sin()).sum(axis=1) + a.sqrt().max(axis=1) - (-1.5)


CASES = [
  Case("elementwise", _elementwise, rtol=1e-4, atol=1e-5),
  Case("nan_inf", _nan_inf),
  Case("sum", lambda: t(data(24, 40)).sum(axis=1), rtol=1e-5, atol=1e-5),
  Case("max_axis0", lambda: t(data(24, 40)).max(axis=0)),
  Case("matmul", lambda: t(data(16, 48)) @ t(data(48, 24, seed=1)), rtol=1e-4, atol=1e-4),
  Case("matmul_upcast", lambda: t(data(16, 48)) @ t(data(48, 24, seed=1)),
       (Opt("UPCAST", 1, 8), Opt("UPCAST", 0, 2)), rtol=1e-4, atol=1e-4),
  Case("matmul_upcast_local", lambda: t(data(16, 48)) @ t(data(48, 24, seed=1)),
       (Opt("UPCAST", 0, 4), Opt("LOCAL", 1, 8), Opt("UNROLL", 0, 4)), rtol=1e-4, atol=1e-4),
  Case("softmax", lambda: t(data(32, 50)).softmax(-1), rtol=1e-5, atol=1e-6),
  Case("group_sum", lambda: t(data(16, 48)).sum(axis=1), (Opt("GROUP", 0, 16),), rtol=1e-5, atol=1e-5,
       tags=frozenset({"barrier"})),
  Case("group_max", lambda: t(data(8, 256)).max(axis=1), (Opt("GROUP", 0, 32),), tags=frozenset({"barrier"})),
  Case("group_heuristic", lambda: t(data(4, 1024)).sum(axis=1), rtol=1e-4, atol=1e-4, tags=frozenset({"barrier"})),
  Case("half", _half, rtol=1e-2, atol=1e-2, tags=frozenset({"half"})),
  Case("half_out", _half_out, rtol=1e-3, atol=1e-3, tags=frozenset({"half"})),
  Case("int64", _int64),
  Case("bool", _bool),
  Case("where_bool_in", _where_bool_in),
  Case("casts", _casts, rtol=1e-3, atol=1e-3, tags=frozenset({"half"})),
  Case("bitcast", _bitcast, tags=frozenset({"half"})),
  Case("bitcast_back", _bitcast_back, rtol=1e-3, tags=frozenset({"half"})),
  Case("bitcast_bool", lambda: (t(data(4, 8)) > 0).bitcast(dtypes.uint8) * 3),
  Case("conv2d", _conv, rtol=1e-4, atol=1e-4),
  Case("matmul_tiles", lambda: t(data(64, 96)) @ t(data(96, 80, seed=1)) + 1, rtol=1e-4, atol=1e-4),
  Case("conv_tiles", _conv_tiles, rtol=1e-4, atol=1e-4),
  Case("conv_stem_tiles", _conv_stem_tiles, rtol=1e-4, atol=1e-4),
  Case("conv_window_tiles", _conv_window_tiles, rtol=1e-4, atol=1e-4),
  Case("vec_misaligned", _vec_misaligned),
  Case("vec_mixed", _vec_mixed, (Opt("VECTOR", 1, 4), Opt("LOCAL", 1, 16))),
  Case("float64", _f64, rtol=1e-12, atol=1e-12, tags=frozenset({"f64"})),
]


def programs(case: Case, target):
  """(schedule items, output BUFFERs, one KernelProgram per item) of the case lowered for `target` (a name, a
  Target or a renderer)."""
  target = target.target if isinstance(target, CStyleRenderer) else as_target(target)
  items, outs = schedule([case.make().uop], _alloc("numpy"))
  if case.opts is not None: assert len(items) == 1, f"{case.name}: opts need a single kernel, got {len(items)}"
  progs = [lower(it.ast, target, list(case.opts) if case.opts is not None else None) for it in items]
  return items, outs, progs


def run_case(case: Case, target: str, execute: Callable[[KernelProgram, list[np.ndarray]], None]) -> np.ndarray:
  """Run the case's kernels in order on host copies of its buffers; `execute` runs one program in place."""
  items, outs, progs = programs(case, target)
  host: dict = {}
  written = {b for it in items for b in it.bufs[:it.outputs]}
  for it in items:
    for b in it.bufs:
      if b in host: continue
      host[b] = np.full(max(buffers.nbytes(b), 1), 0xFF, np.uint8)   # outputs start as NaN / -1, never stale data
      if b not in written:
        raw = np.ascontiguousarray(buffers.storage(b)).reshape(-1).view(np.uint8)[:buffers.nbytes(b)]
        host[b][:raw.size] = raw
  for it, prg in zip(items, progs): execute(prg, [host[b] for b in it.bufs])
  out = outs[0]
  return host[out][:buffers.nbytes(out)].view(out.dtype.np).reshape(out.arg[1])


def on_runtime(rt) -> Callable[[KernelProgram, list[np.ndarray]], None]:
  """An `execute` for run_case that runs each program on a device runtime: buffers copied in, one launch, copied
  back."""
  def execute(prg: KernelProgram, arrays: list[np.ndarray]) -> None:
    bufs = [rt.alloc(a.nbytes) for a in arrays]
    for b, a in zip(bufs, arrays): rt.copyin(b, a)
    rt.load(prg)(*bufs, global_size=prg.global_size, local_size=prg.local_size)
    rt.synchronize()
    for b, a in zip(bufs, arrays): a[:] = rt.copyout(b)
  return execute


def expected(case: Case) -> np.ndarray: return case.make().numpy()


def check(case: Case, got: np.ndarray) -> None:
  want = expected(case)
  assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
  if want.dtype.kind == "f": np.testing.assert_allclose(got, want, rtol=case.rtol, atol=case.atol)
  else: np.testing.assert_array_equal(got, want)
