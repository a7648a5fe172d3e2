"""Weights stored in the order a kernel reads them. After a kernel's opts are chosen, a weight buffer that only this
kernel reads is replaced by a copy whose element at position p is the one the kernel reads at its p-th access in
loop order: output loops, then reduce loops, then upcast and unroll copies, then the VECTOR lanes innermost. Its
load becomes an index that steps through memory contiguously (vector loads, panels of a matmul's right-hand side,
a convolution's output channels next to each other), so nothing is repacked at run time. Elements the kernel
never reads are dropped; gated loads get zeros where the gate is off (when the gate depends only on the load's own
loops). A relayout that would make the buffer more than a few percent bigger (a weight read several times) is not
made."""
from __future__ import annotations
import math
from dataclasses import dataclass
import numpy as np
from tgc.ir import Ops, UOp, AxisType, dtypes, substitute
from tgc.ir.exec import exec_alu, exec_cast
from tgc.ir.symbolic import simplify

INDEX = dtypes.index
MAX_GROWTH = 1.05
MAX_ELEMENTS = 1 << 28
_ORDER = {AxisType.GLOBAL: 0, AxisType.LOCAL: 0, AxisType.REDUCE: 1, AxisType.GROUP: 1, AxisType.UPCAST: 2,
          AxisType.UNROLL: 2, AxisType.VECTOR: 3}


@dataclass(frozen=True)
class Relayout:
  """How to build a weight buffer's new contents from its old flat storage: `new = old[gather]`, with zeros where
  `gather` is -1."""
  gather: np.ndarray

  def apply(self, data: np.ndarray) -> np.ndarray:
    flat = np.ascontiguousarray(data).reshape(-1)
    out = flat[np.maximum(self.gather, 0)]
    if (self.gather < 0).any(): out = np.where(self.gather < 0, np.zeros((), flat.dtype), out)
    return out


def evaluate(u: UOp, env: dict[UOp, np.ndarray]) -> np.ndarray:
  """An integer/bool expression of ranges over numpy arrays (`env`: range -> its values, broadcastable)."""
  memo: dict[UOp, np.ndarray] = dict(env)
  for n in u.toposort():
    if n in memo: continue
    if n.op is Ops.CONST: memo[n] = np.asarray(n.arg, dtype=np.int64 if n.dtype == INDEX else n.dtype.numpy)
    elif n.op is Ops.CAST: memo[n] = exec_cast(memo[n.src[0]], n.dtype)
    else:
      dt = dtypes.int64 if n.dtype == INDEX else n.dtype
      memo[n] = exec_alu(n.op, dt, *(memo[s] for s in n.src))
  return memo[u]


def relayout(ast: UOp, sizes: dict[int, int]) -> tuple[UOp, dict[int, Relayout]]:
  """`ast` (opts applied, before expansion) with the loads of the weight arguments at the positions of `sizes`
  (position -> elements the buffer holds) reading their relaid copies, and the relayout of each argument it
  changed."""
  loads: dict[int, list[UOp]] = {}
  for n in ast.toposort():
    if n.op is Ops.LOAD and n.src[0].op is Ops.DEFINE_GLOBAL and n.src[0].arg[0] in sizes:
      loads.setdefault(n.src[0].arg[0], []).append(n)
  sub: dict[UOp, UOp] = {}
  out: dict[int, Relayout] = {}
  for pos, lds in sorted(loads.items()):
    if len(lds) != 1 or lds[0].dtype.storage_only: continue    # read at two places, or packed: kept as stored
    made = _relayout_load(lds[0], sizes[pos])
    if made is None: continue
    sub[lds[0]], out[pos] = made
  return (simplify(substitute(ast, sub)) if sub else ast), out


def _relayout_load(ld: UOp, old: int) -> tuple[UOp, Relayout] | None:
  buf, idx, gates = ld.src[0], ld.src[1], ld.src[2:]
  own = {n for n in idx.toposort() if n.op is Ops.RANGE}
  gate_ranges = {n for g in gates for n in g.toposort() if n.op is Ops.RANGE}
  inner_gate = bool(gates) and gate_ranges <= own
  rs = sorted(own, key=lambda r: (_ORDER[r.arg.kind], r.arg.id))
  sizes = [r.src[0].arg for r in rs]
  numel = math.prod(sizes)
  if numel > MAX_ELEMENTS or numel > MAX_GROWTH * old + 64: return None
  env = {r: np.arange(s, dtype=np.int64).reshape([-1 if j == i else 1 for j in range(len(rs))])
         for i, (r, s) in enumerate(zip(rs, sizes))}
  gather = np.broadcast_to(evaluate(idx, env), sizes).astype(np.int64)
  ok = (gather >= 0) & (gather < old)      # a gated load's index may leave the buffer where its gate is off
  if inner_gate:
    for g in gates: ok &= np.broadcast_to(evaluate(g, env), sizes)
  gather = np.where(ok, gather, -1)
  gather = gather.reshape(-1)
  new_idx = UOp.const(INDEX, 0)
  step = 1
  for r, s in reversed(list(zip(rs, sizes))):
    new_idx = new_idx + r * step
    step *= s
  new_idx = simplify(new_idx)
  if new_idx is idx and not inner_gate: return None      # already read in order
  new_load = UOp(Ops.LOAD, ld.dtype, (buf, new_idx) + (() if inner_gate else gates))
  return new_load, Relayout(gather)

