"""Gathers as indexed loads: a sum over a range of `where(x == range, value(range), 0)` (how the Tensor API selects
by a data-dependent index: Gather, embeddings, take, advanced indexing) picks at most one term, the one at
range = x. The rule table here replaces the reduction by that term: `value(x)` read at the clamped index, zero
where x is out of range. One load per output element instead of a pass over the whole table."""
from __future__ import annotations
from tgc.ir import Ops, UOp, UPat, PatternMatcher, dtypes, substitute

INDEX = dtypes.index


def _conjuncts(cond: UOp) -> list[UOp]:
  """The terms of a chain of ANDs."""
  return _conjuncts(cond.src[0]) + _conjuncts(cond.src[1]) if cond.op is Ops.AND else [cond]


def _selected_range(term: UOp, ranges: tuple[UOp, ...]) -> tuple[UOp, UOp] | None:
  """(range, x) when `term` is `x == range` (either side, the range possibly cast to x's type) for one of `ranges`
  and x does not depend on that range."""
  if term.op is not Ops.CMPEQ: return None
  for a, b in (term.src, term.src[::-1]):
    r = b.src[0] if b.op is Ops.CAST and b.dtype.is_int else b
    if r in ranges and a.dtype.is_int and r not in a.toposort(): return r, a
  return None


def _select_load(red: UOp, cond: UOp, value: UOp, zero: UOp) -> UOp | None:
  """sum over r of where(x == r & rest, value(r), 0) -> where(0 <= x < n & rest(x), value(clamp(x)), 0)."""
  if red.arg is not Ops.ADD or zero.arg != 0: return None
  ranges = red.src[1:]
  terms = _conjuncts(cond)
  for i, term in enumerate(terms):
    if (hit := _selected_range(term, ranges)) is None: continue
    r, x = hit
    n = r.src[0]
    xi = x.cast(INDEX)
    inside = xi.lt(0).ne(True).logical_and(xi.lt(n))
    at = inside.where(xi, UOp.const(INDEX, 0))        # every load stays in bounds; the select zeroes the rest
    rest = [substitute(t, {r: at}) for k, t in enumerate(terms) if k != i]
    keep = inside
    for t in rest: keep = keep.logical_and(t)
    picked = keep.where(substitute(value, {r: at}), zero)
    others = tuple(s for s in ranges if s is not r)
    return UOp(Ops.REDUCE, red.dtype, (picked,) + others, red.arg) if others else picked
  return None


select_loads = PatternMatcher([
  # sum_r where(x == r & c, v(r), 0) -> where(0 <= x < n & c(x), v(x), 0): a gather is one load, not a pass
  (UPat(Ops.REDUCE, name="red", src=(UPat(Ops.WHERE, src=(UPat.var("cond"), UPat.var("value"), UPat.cvar("zero"))),),
        allow_any_len=True),
   lambda red, cond, value, zero: _select_load(red, cond, value, zero)),
])
