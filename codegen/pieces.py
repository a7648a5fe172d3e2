"""Kernels that store a concatenation split into one kernel per piece. A Concat of computed values is a select
between them by where the output element lies (`WHERE(i < 4800, head0, WHERE(i < 6000, head1, head2))`): in one
kernel, every element computes every piece and keeps one (a detector's three heads: three sigmoids per element, and
a channels-last Concat of two 16-channel pieces cannot move as vectors). Cut along the output axes at the bounds of
those selects, each part is a kernel of its own whose selects fold away: it computes only its piece, and its
stores and loads are contiguous again. The parts write disjoint parts of the same buffer.
A stack of phases (a bilinear upsampling by 4: output x = 4q + r is phase r's value at q) selects by `x % 4`: the
axis is first split into q and a phase axis r, then cut along r (each part stores every 4th element)."""
from __future__ import annotations
import math
from dataclasses import replace
from tgc.ir import Ops, UOp, AxisType, RangeArg, dtypes, substitute
from tgc.ir.symbolic import simplify, split_terms

INDEX = dtypes.index
MAX_PARTS = 64      # a kernel is cut into at most this many parts ...
MAX_GROWTH = 1.5    # ... and only while its two halves take at most this many times its nodes


def split_pieces(item) -> list:
  """`item` (a ScheduleItem) as one item per piece of the concatenation it stores (itself when it stores none)."""
  ast = item.ast
  if len(ast.src) != 1 or ast.src[0].op is not Ops.STORE or any(u.op is Ops.REDUCE for u in ast.toposort()):
    return [item]
  ast, phases = _phases_apart(ast)
  cuts = _cuts(ast, phases)
  if not cuts or math.prod(len(c) + 1 for c in cuts.values()) > MAX_PARTS: return [item]
  parts = [ast]
  for r, points in sorted(cuts.items(), key=lambda kv: kv[0].arg.id):
    # a part an earlier cut left without selects along r (the other piece of a concatenation of a stack of phases
    # and a value) stays whole
    cut = [_cut(p, r.arg, 0, r.src[0].arg, sorted(points)) if _selects_along(p, r.arg) else [p] for p in parts]
    if any(c is None for c in cut): return [item]
    parts = [q for c in cut for q in c]
  return [replace(item, ast=p, meta=dict(item.meta)) for p in parts]


def _selects_along(ast: UOp, arg: RangeArg) -> bool:
  """Whether a select of `ast` compares its range numbered `arg`."""
  return any(u.op is Ops.RANGE and u.arg == arg for c in _comparisons(ast, computed_only=False) for u in c.toposort())


def _cuts(ast: UOp, phases: set[UOp]) -> dict[UOp, set[int]]:
  """Per output range, where the selects between two computed values change sides (`r + k < c`: at c - k). With
  `phases` (ranges over the phases of a stack), along those, where any select counts (a stack of phases is a sum of
  pieces each zero outside its phase), and along the ranges of the selects the stored value is made of at its root
  (a concatenation of a stack of phases and another value: a Winograd convolution's output tiles beside a branch),
  not along the selects inside a phase (an upsampling's clamped edges)."""
  cuts: dict[UOp, set[int]] = {}
  root = set(_root_comparisons(ast.src[0].src[2])) if phases else set()
  for cmp in _comparisons(ast, computed_only=not phases):
    terms, k = split_terms(cmp.src[0])
    if len(terms) != 1: continue
    (r, coef), = terms.items()
    if not _splittable(r) or coef != 1 or (phases and r not in phases and cmp not in root): continue
    at = cmp.src[1].arg - k
    if 0 < at < r.src[0].arg: cuts.setdefault(r, set()).add(at)
  return cuts


def _root_comparisons(value: UOp) -> list[UOp]:
  """The `x < constant` comparisons of the selects between two computed values that `value` is at its root (a
  concatenation: a select between its pieces, each maybe a select between further pieces)."""
  out, todo = [], [value]
  while todo:
    w = todo.pop()
    if w.op is not Ops.WHERE or w.src[1].op is Ops.CONST or w.src[2].op is Ops.CONST: continue
    out += [u for u in w.src[0].toposort() if u.op is Ops.CMPLT and u.src[1].op is Ops.CONST]
    todo += [w.src[1], w.src[2]]
  return out


def _comparisons(ast: UOp, computed_only: bool) -> list[UOp]:
  """The `x < constant` comparisons in the conditions of the selects of `ast` (with `computed_only`, of selects
  between two computed values: a pad selects a constant)."""
  out = []
  for w in (u for u in ast.toposort() if u.op is Ops.WHERE):
    if computed_only and (w.src[1].op is Ops.CONST or w.src[2].op is Ops.CONST): continue
    out += [u for u in w.src[0].toposort() if u.op is Ops.CMPLT and u.src[1].op is Ops.CONST]
  return out


def _phases_apart(ast: UOp) -> tuple[UOp, set[UOp]]:
  """`ast` with each output range that selects by its remainder modulo P (`x % P < c`) split into x // P and a
  new range over the phases x % P (when P divides its size), and those new ranges."""
  periods: dict[UOp, int] = {}
  for cmp in _comparisons(ast, computed_only=False):
    m = cmp.src[0]
    if m.op is not Ops.MOD or m.src[1].op is not Ops.CONST or not _splittable(m.src[0]): continue
    if m.src[0].src[0].arg % m.src[1].arg == 0 and m.src[1].arg < m.src[0].src[0].arg:
      periods.setdefault(m.src[0], m.src[1].arg)
  if not periods: return ast, set()
  next_id = max(u.arg.id for u in ast.toposort() if u.op is Ops.RANGE) + 1
  sub, phases = {}, set()
  for i, (r, p) in enumerate(sorted(periods.items(), key=lambda kv: kv[0].arg.id)):
    outer = UOp(Ops.RANGE, INDEX, (UOp.const(INDEX, r.src[0].arg // p),), r.arg)
    phase = UOp(Ops.RANGE, INDEX, (UOp.const(INDEX, p),), RangeArg(next_id + i, AxisType.GLOBAL))
    sub[r] = outer * p + phase
    phases.add(phase)
  return simplify(substitute(ast, sub)), phases


def _splittable(r: UOp) -> bool:
  return r.op is Ops.RANGE and r.arg.kind is AxisType.GLOBAL and r.src[0].op is Ops.CONST


def _cut(ast: UOp, arg: RangeArg, lo: int, hi: int, points: list[int]) -> list[UOp] | None:
  """The parts of `ast` (computing entries lo..hi-1 along the range numbered `arg`) cut at `points`: halved at the
  middle point, each half simplified before it is cut again (a stack of 64 steps: each cut works on a kernel that
  selects among half as many steps). None when the halves do not shrink (pieces that share most of their work: the
  steps of a recurrence, each computed from all the steps before it): cutting would copy that work into every part."""
  inner = [p for p in points if lo < p < hi]
  if not inner: return [ast]
  mid = inner[len(inner) // 2]
  halves = [_part(ast, arg, 0, mid - lo), _part(ast, arg, mid - lo, hi - lo)]
  if sum(len(h.toposort()) for h in halves) > MAX_GROWTH * len(ast.toposort()): return None
  left, right = _cut(halves[0], arg, lo, mid, inner), _cut(halves[1], arg, mid, hi, inner)
  return None if left is None or right is None else left + right


def _part(ast: UOp, arg: RangeArg, lo: int, hi: int) -> UOp:
  """`ast` computing only entries lo..hi-1 of its range numbered `arg` (a loop over hi - lo entries from lo)."""
  # a part one entry long has no loop (a range is never one long)
  new = UOp(Ops.RANGE, INDEX, (UOp.const(INDEX, hi - lo),), arg) if hi - lo > 1 else UOp.const(INDEX, 0)
  ranges = {u for u in ast.toposort() if u.op is Ops.RANGE and u.arg == arg}
  return simplify(substitute(ast, {old: new + lo if lo else new for old in ranges}))
