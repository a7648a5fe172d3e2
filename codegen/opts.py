"""Opt actions reshape a kernel's loop nest: UPCAST (output axis into registers), UNROLL (reduce axis into
registers), LOCAL (output axis into a workgroup), GROUP (reduce axis split across a workgroup). A `Kernel` is an
AST plus the opts applied to it; applying an opt substitutes one range by outer*amount + inner."""
from __future__ import annotations
from dataclasses import dataclass, field
from tgc.ir import Ops, UOp, UPat, PatternMatcher, dtypes, graph_rewrite, substitute
from tgc.ir.symbolic import simplify

INDEX = dtypes.index
# which range kinds each opt splits, and the kind of the new inner range
_OPT_KINDS = {"UPCAST": (("global",), "upcast"), "LOCAL": (("global",), "local"),
              "UNROLL": (("reduce",), "unroll"), "GROUP": (("reduce",), "group")}


class OptError(ValueError):
  """An opt that does not apply to this kernel."""


def _split_reduce_range(red: UOp) -> UOp | None:
  if all(s.op is Ops.RANGE for s in red.src[1:]): return None
  rs = {x for s in red.src[1:] for x in s.toposort() if x.op is Ops.RANGE}
  return red.replace(src=(red.src[0],) + tuple(sorted(rs, key=lambda x: x.arg[0])))


reduce_ranges = PatternMatcher([
  # REDUCE(v, outer*n + inner) -> REDUCE(v, outer, inner): a split reduce range keeps both parts as loops
  (UPat(Ops.REDUCE, name="red"), _split_reduce_range),
])


@dataclass(frozen=True, order=True)
class Opt:
  op: str        # UPCAST | UNROLL | LOCAL | GROUP
  axis: int      # position in Kernel.axes() of the kind the op splits
  amount: int
  def __repr__(self): return f"Opt({self.op},{self.axis},{self.amount})"


@dataclass
class Kernel:
  """A kernel AST and the ranges it loops over."""
  ast: UOp
  opts: list[Opt] = field(default_factory=list)

  def ranges(self) -> list[UOp]:
    rs = {n for n in self.ast.toposort() if n.op is Ops.RANGE}
    return sorted(rs, key=lambda r: r.arg[0])

  def axes(self, kinds: tuple[str, ...]) -> list[UOp]:
    return [r for r in self.ranges() if r.arg[1] in kinds]

  @staticmethod
  def size(r: UOp) -> int: return r.src[0].arg

  def next_id(self) -> int: return max((r.arg[0] for r in self.ranges()), default=-1) + 1

  def apply(self, opt: Opt) -> Kernel:
    """A new Kernel with `opt` applied; raises OptError if it does not fit."""
    if opt.op not in _OPT_KINDS: raise OptError(f"unknown opt {opt.op}")
    if {opt.op, *(o.op for o in self.opts)} >= {"LOCAL", "GROUP"}:
      raise OptError(f"{opt}: LOCAL and GROUP cannot share a work-group")
    kinds, inner_kind = _OPT_KINDS[opt.op]
    axes = self.axes(kinds)
    if not 0 <= opt.axis < len(axes): raise OptError(f"{opt}: no axis {opt.axis}")
    r = axes[opt.axis]
    n = self.size(r)
    if opt.amount <= 1 or n % opt.amount: raise OptError(f"{opt}: {opt.amount} does not divide {n}")
    nid = self.next_id()
    outer = UOp(Ops.RANGE, INDEX, (UOp.const(INDEX, n // opt.amount),), (r.arg[0], r.arg[1])) \
      if n // opt.amount > 1 else UOp.const(INDEX, 0)
    inner = UOp(Ops.RANGE, INDEX, (UOp.const(INDEX, opt.amount),), (nid, inner_kind, r.arg[0]))
    new_ast = simplify(substitute(self.ast, {r: outer * opt.amount + inner}))
    return Kernel(graph_rewrite(new_ast, reduce_ranges), self.opts + [opt])

  def apply_all(self, opts) -> Kernel:
    k = self
    for o in opts: k = k.apply(o)
    return k
