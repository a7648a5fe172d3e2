"""Expansion: UPCAST and UNROLL ranges become straight-line code. Each unrolled reduce range is replaced by its
values inside the reduction (combined with the reduce op); each upcast range multiplies the stores. Identical
loads and arithmetic across the copies are shared (hash-consing), which is where the register reuse comes from."""
from __future__ import annotations
import itertools
from tgc.ir import Ops, UOp, AxisType, dtypes, graph_rewrite, PatternMatcher, UPat, substitute
from tgc.ir.symbolic import simplify

INDEX = dtypes.index
COMBINE = {Ops.ADD: lambda a, b: a + b, Ops.MUL: lambda a, b: a * b, Ops.MAX: lambda a, b: a.maximum(b)}


def _ranges_of(u: UOp, kind: AxisType) -> list[UOp]:
  return sorted({n for n in u.toposort() if n.op is Ops.RANGE and n.arg.kind is kind}, key=lambda r: r.arg.id)


def _combos(rs: list[UOp]):
  for vals in itertools.product(*(range(r.src[0].arg) for r in rs)):
    yield {r: UOp.const(INDEX, v) for r, v in zip(rs, vals)}


def _expand_reduce(red: UOp) -> UOp | None:
  unrolled = [r for r in red.src[1:] if r.arg.kind is AxisType.UNROLL]
  if not unrolled: return None
  copies = [substitute(red.src[0], m) for m in _combos(unrolled)]
  body = copies[0]
  for c in copies[1:]: body = COMBINE[red.arg](body, c)
  rest = tuple(r for r in red.src[1:] if r.arg.kind is not AxisType.UNROLL)
  if not rest: return body
  return UOp(Ops.REDUCE, red.dtype, (body,) + rest, red.arg)


def _expand_store(st: UOp) -> UOp | None:
  # the longest upcast outermost: a register block's copies of the load that moves along it are each used for the
  # copies of the shorter axes right away, while those of the shorter axes stay in registers (4 rows x 2 weight
  # vectors holds 2 weight vectors and one broadcast row at a time, not 4 broadcast rows)
  ups = sorted(_ranges_of(st, AxisType.UPCAST), key=lambda r: -r.src[0].arg)
  if not ups: return None
  return UOp(Ops.SINK, dtypes.bool, tuple(substitute(st, m) for m in _combos(ups)))


def _flatten_sink(sink: UOp) -> UOp | None:
  if not any(s.op is Ops.SINK for s in sink.src): return None
  out = []
  for s in sink.src: out.extend(s.src if s.op is Ops.SINK else (s,))
  return UOp(Ops.SINK, dtypes.bool, tuple(out))


expander = PatternMatcher([
  # REDUCE over unrolled ranges -> combine the unrolled copies of the body
  (UPat(Ops.REDUCE, name="red"), _expand_reduce),
  # STORE depending on upcast ranges -> one STORE per upcast value
  (UPat(Ops.STORE, name="st"), _expand_store),
  # SINK(SINK(a, b), c) -> SINK(a, b, c)
  (UPat(Ops.SINK, name="sink"), _flatten_sink),
])


def expand(ast: UOp) -> UOp:
  return simplify(graph_rewrite(ast, expander))
