"""Work on weights done at compile time, after a kernel's opts are chosen. Two steps on the kernel AST, given the
argument positions of the weights only this kernel reads (`own`):

1. `fold_weights` (a rule table) moves per-output-channel affine ops that follow a reduction into its weights: a
   BatchNorm's scale after a convolution or matmul multiplies the convolution's weights, its shift joins the bias.
2. Every maximal expression of own weights (one weight load, or those weights combined with constants: `W * scale`,
   `bias * scale + shift`) becomes one load of a new buffer holding its values in the order the kernel reads them:
   output loops, then reduce loops, then upcast and unroll copies, then the VECTOR lanes innermost. Its index steps
   through memory contiguously (vector loads, panels of a matmul's right-hand side, a convolution's output channels
   next to each other), so nothing is repacked or recomputed at run time. The new buffer takes the argument position
   of one of the expression's weights; weights no longer read are dropped by the caller. Elements the kernel never
   reads are dropped; gated loads give zeros where their gate is off (when the gate depends only on the expression's
   loops). An expression whose values would take more than a quarter more than its weights is left alone, but for
   its values before a conversion (int8 weights stay int8 and are converted on load; the copies of a padded VECTOR
   or UPCAST axis, a few percent more, are stored).
   An unroll axis whose copies one integer dot-product instruction sums (`inner`: codegen/dot.py) goes inside the
   vector lanes: each lane's copies side by side.
   On GPUs (`GPU_ORDER`) the work-item axes come after the upcast and unroll copies, just outside the vector lanes:
   neighbouring work-items of a work-group then read neighbouring elements at each step (coalesced), and what a
   work-group reads in one step of its reduction is one contiguous block.

A `Relayout` is the recipe (which weights, where each value comes from, how they combine), not the data: one kernel
can be called with different weights of the same shape."""
from __future__ import annotations
import math
from dataclasses import dataclass
import numpy as np
from tgc.ir import Ops, GroupOp, UOp, AxisType, PatternMatcher, UPat, dtypes, graph_rewrite, substitute
from tgc.ir.exec import exec_alu, exec_cast
from tgc.ir.symbolic import simplify
from tgc.codegen.knobs import RELAYOUT_MAX_GROWTH

INDEX = dtypes.index
MAX_ELEMENTS = 1 << 28
GPU_ORDER = {AxisType.GLOBAL: 0, AxisType.REDUCE: 1, AxisType.UPCAST: 2, AxisType.UNROLL: 2, AxisType.LOCAL: 3,
             AxisType.GROUP: 3, AxisType.VECTOR: 4}
_ORDER = {AxisType.GLOBAL: 0, AxisType.LOCAL: 0, AxisType.REDUCE: 1, AxisType.GROUP: 1, AxisType.UPCAST: 2,
          AxisType.UNROLL: 2, AxisType.VECTOR: 3}


@dataclass(frozen=True)
class Relayout:
  """How to build the new contents of one weight argument: the expression `expr` (loads of weight arguments and
  constants) evaluated at every combination of `ranges`, in that order (the last fastest)."""
  expr: UOp
  ranges: tuple[UOp, ...]

  @property
  def positions(self) -> list[int]:
    """The weight arguments the values come from."""
    return sorted({n.src[0].arg[0] for n in self.expr.toposort() if n.op is Ops.LOAD})

  def apply(self, data: dict[int, np.ndarray]) -> np.ndarray:
    """The new flat contents from the weights' data by argument position."""
    sizes = [r.src[0].arg for r in self.ranges]
    env = {r: np.arange(s, dtype=np.int64).reshape([-1 if j == i else 1 for j in range(len(sizes))])
           for i, (r, s) in enumerate(zip(self.ranges, sizes))}
    out = evaluate(self.expr, env, {p: np.ascontiguousarray(d).reshape(-1) for p, d in data.items()})
    return np.ascontiguousarray(np.broadcast_to(out, sizes).astype(self.expr.dtype.numpy, copy=False)).reshape(-1)


def evaluate(u: UOp, env: dict[UOp, np.ndarray], data: dict[int, np.ndarray] | None = None) -> np.ndarray:
  """An expression of ranges (`env`: range -> its values, broadcastable) and loads of `data` (argument position ->
  flat array; a gated-off or out-of-range element is 0)."""
  memo: dict[UOp, np.ndarray] = dict(env)
  for n in u.toposort():
    if n in memo: continue
    if n.op is Ops.CONST: memo[n] = np.asarray(n.arg, dtype=np.int64 if n.dtype == INDEX else n.dtype.numpy)
    elif n.op is Ops.DEFINE_GLOBAL: memo[n] = np.zeros(())
    elif n.op is Ops.LOAD:
      flat = data[n.src[0].arg[0]]
      idx = memo[n.src[1]]
      ok = (idx >= 0) & (idx < flat.size)
      for g in n.src[2:]: ok = ok & memo[g]
      memo[n] = np.where(ok, flat[np.where(ok, idx, 0)], np.zeros((), flat.dtype))
    elif n.op is Ops.CAST: memo[n] = exec_cast(memo[n.src[0]], n.dtype)
    else: memo[n] = exec_alu(n.op, dtypes.int64 if n.dtype == INDEX else n.dtype, *(memo[s] for s in n.src))
  return memo[u]


# ---------------------------------------------------------------- 1. affine ops after a reduction into its weights
def _is_weights(n: UOp, own: frozenset) -> bool:
  """An expression of own weights and constants (no input, no loop of the reduction it is moved into)."""
  return all(m.op in (Ops.CONST, Ops.RANGE) or m.op in GroupOp.ALU | {Ops.CAST} or
             (m.op is Ops.LOAD and m.src[0].op is Ops.DEFINE_GLOBAL and m.src[0].arg[0] in own) or
             (m.op is Ops.DEFINE_GLOBAL and m.arg[0] in own) for m in n.toposort()) and \
    any(m.op is Ops.LOAD for m in n.toposort())


def _narrow_weights(w: UOp) -> bool:
  """Weights stored narrower than they are used (int8 converted to float): scaling them would store them wide."""
  return any(n.op is Ops.LOAD and n.dtype.itemsize < w.dtype.itemsize for n in w.toposort())


def _scale_into_reduce(ctx: frozenset, red: UOp, a: UOp, w: UOp, s: UOp) -> UOp | None:
  if red.arg is not Ops.ADD or not _is_weights(w, ctx) or not _is_weights(s, ctx) or _narrow_weights(w): return None
  if any(r in s.toposort() for r in red.src[1:]): return None
  return UOp(Ops.REDUCE, red.dtype, (a * (w * s),) + red.src[1:], red.arg)


def _scale_bias(ctx: frozenset, red: UOp, b: UOp, s: UOp) -> UOp | None:
  if red.arg is not Ops.ADD or not _is_weights(b, ctx) or not _is_weights(s, ctx): return None
  return red * s + b * s


def _join_biases(ctx: frozenset, x: UOp, c1: UOp, c2: UOp) -> UOp | None:
  if x.op is not Ops.REDUCE or not _is_weights(c1, ctx) or not _is_weights(c2, ctx): return None
  return x + (c1 + c2)


_red = UPat(Ops.REDUCE, name="red", src=(UPat(Ops.MUL, src=[UPat.var("a"), UPat.var("w")]),), allow_any_len=True)
fold_weights = PatternMatcher([
  # REDUCE(a * W) * S -> REDUCE(a * (W * S)): a scale per output channel goes into the weights
  (UPat(Ops.MUL, src=[_red, UPat.var("s")]), _scale_into_reduce),
  # (REDUCE + b) * S -> REDUCE * S + b * S: a bias before a scale is scaled too
  (UPat(Ops.MUL, src=[UPat(Ops.ADD, src=[UPat(Ops.REDUCE, name="red"), UPat.var("b")]), UPat.var("s")]), _scale_bias),
  # (x + c1) + c2 -> x + (c1 + c2): the shift joins the bias
  (UPat(Ops.ADD, src=[UPat(Ops.ADD, src=[UPat.var("x"), UPat.var("c1")]), UPat.var("c2")]), _join_biases),
])


# ---------------------------------------------------------------- 2. weight expressions stored in read order
def relayout(ast: UOp, sizes: dict[int, int], order: dict | None = None,
             inner: UOp | None = None) -> tuple[UOp, dict[int, Relayout]]:
  """`ast` (opts applied, before expansion) with the affine ops after its reductions folded into their weights and
  each maximal expression of the weight arguments at the positions of `sizes` (position -> elements the buffer
  holds) read from a new buffer in loop order (`order`: the rank of each axis kind in the new layout; default the
  loop order, GPUs: GPU_ORDER; `inner`: a range stored innermost); the relayout of each argument position it gives
  new contents."""
  own = frozenset(sizes)
  ast = graph_rewrite(ast, fold_weights, ctx=own)
  exprs = _maximal_weight_exprs(ast, own)
  reads: dict[int, set[UOp]] = {}
  for e in exprs:
    for ld in (n for n in e.toposort() if n.op is Ops.LOAD): reads.setdefault(ld.src[0].arg[0], set()).add(e)
  all_loads: dict[int, int] = {}
  for n in ast.toposort():
    if n.op is Ops.LOAD and n.src[0].op is Ops.DEFINE_GLOBAL: all_loads[n.src[0].arg[0]] = \
      all_loads.get(n.src[0].arg[0], 0) + 1
  sub: dict[UOp, UOp] = {}
  out: dict[int, Relayout] = {}
  for e in exprs:
    leaves = sorted({n.src[0] for n in e.toposort() if n.op is Ops.LOAD}, key=lambda b: b.arg[0])
    # the new values go to an argument this expression alone reads (its other reads would see them)
    free = [b for b in leaves if b.arg[0] not in out and reads[b.arg[0]] == {e} and
            sum(1 for n in e.toposort() if n.op is Ops.LOAD and n.src[0] is b) == all_loads[b.arg[0]]]
    if not free or any(b.dtype.storage_only for b in leaves): continue
    made = _relayout_narrowest(e, free[0], sum(sizes[b.arg[0]] * b.dtype.itemsize for b in leaves), order or _ORDER,
                               inner)
    if made is None: continue
    sub[made[0]], out[free[0].arg[0]] = made[1]
  return (simplify(substitute(ast, sub)) if sub else ast), out


def _maximal_weight_exprs(ast: UOp, own: frozenset) -> list[UOp]:
  """Expressions of own weights no bigger expression of own weights contains, in graph order."""
  users: dict[UOp, list[UOp]] = {}
  for n in ast.toposort():
    for s in n.src: users.setdefault(s, []).append(n)
  weighty = {n for n in ast.toposort() if n.op is not Ops.DEFINE_GLOBAL and n.dtype != INDEX and
             not n.dtype.is_bool and _is_weights(n, own)}
  return [n for n in ast.toposort() if n in weighty and not any(u in weighty for u in users.get(n, ()))]


def _relayout_narrowest(e: UOp, target: UOp, old_bytes: int, order: dict,
                        inner: UOp | None) -> tuple[UOp, tuple] | None:
  """(the expression relaid, `_relayout_expr` of it) for `e`, or for its values before a conversion when `e` would
  take too many bytes (int8 weights converted to float: stored as int8, converted on load)."""
  while True:
    made = _relayout_expr(e, target, old_bytes, order, inner)
    if made is not None or e.op is not Ops.CAST: return (e, made) if made is not None else None
    e = e.src[0]


def _relayout_expr(e: UOp, target: UOp, old_bytes: int, order: dict,
                   inner: UOp | None) -> tuple[UOp, Relayout] | None:
  """The load replacing expression `e` (into argument `target`) and its recipe; None when not worth it (its values
  would take more than RELAYOUT_MAX_GROWTH times the bytes of the weights they come from: int8 weights stay int8)."""
  own = {n for n in e.toposort() if n.op is Ops.RANGE}
  loads = [n for n in e.toposort() if n.op is Ops.LOAD]
  gated = any(len(ld.src) > 2 for ld in loads)
  outer_gates = [g for ld in loads for g in ld.src[2:] if not {n for n in g.toposort() if n.op is Ops.RANGE} <= own]
  if outer_gates: return None       # a gate over another loop: the kernel keeps reading the weights as they are
  rs = tuple(sorted(own, key=lambda r: (r is inner, order[r.arg.kind], r.arg.id)))
  if any(r.src[0].op is not Ops.CONST for r in rs): return None   # a loop over a size known only at run time
  numel = math.prod(r.src[0].arg for r in rs)
  if numel > MAX_ELEMENTS or numel * e.dtype.itemsize > RELAYOUT_MAX_GROWTH * old_bytes + 256: return None
  new_idx = UOp.const(INDEX, 0)
  step = 1
  for r in reversed(rs):
    new_idx = new_idx + r * step
    step *= r.src[0].arg
  new_idx = simplify(new_idx)
  if e.op is Ops.LOAD and e.src[1] is new_idx and not gated: return None      # already read in order
  buf = target if target.dtype == e.dtype else UOp(Ops.DEFINE_GLOBAL, e.dtype, (), target.arg)
  return UOp(Ops.LOAD, e.dtype, (buf, new_idx)), Relayout(e, rs)
