"""Opt actions reshape a kernel's loop nest:
  UPCAST  an output axis into registers (straight-line copies)     UNROLL  a reduce axis into straight-line copies
  VECTOR  an output or reduce axis into the lanes of a SIMD vector  SWAP    two loops of one kind trade places
  LOCAL   an output axis into the work-group (GPUs)                 GROUP   a reduce axis across the work-group (GPUs)
  MERGE   two output loops every access steps through as one (an NCHW image's height and width) into one loop
A `Kernel` is an AST plus the opts applied to it; applying a split substitutes one range by outer*amount + inner,
SWAP exchanges the numbers that order two loops, MERGE substitutes a loop's two ranges by p//inner and p%inner (kept
only when no division is left: every access and gate then steps through p as one). A LOCAL amount need not divide
its axis: the axis is padded to a multiple of it (work-groups of any shape on GPUs), the padded work-items compute
the last element again (the range is clamped, so every load stays in bounds and barriers stay uniform) and store
nothing. A VECTOR or an UPCAST of an output axis is padded the same way (GPT-2's 50257 logits in vectors of 16,
ViT's 197 tokens in register blocks of 4: the extra lanes and copies recompute the last element and store nothing).
An UNROLL need not divide the axis of a sum either: its copies past the end read the last element and add zero (the
body is gated)."""
from __future__ import annotations
import math
from dataclasses import dataclass, field
from tgc.ir.words import WordEnum
from tgc.ir import Ops, UOp, UPat, PatternMatcher, AxisType, RangeArg, dtypes, graph_rewrite, substitute
from tgc.ir.symbolic import simplify, split_terms
from tgc.codegen.linearize import reduce_identity

INDEX = dtypes.index
G, R = AxisType.GLOBAL, AxisType.REDUCE


class OptOps(WordEnum):
  """The opt actions (module docstring). The value is the name tuning files, search caches and manifests store."""
  UPCAST = "UPCAST"
  UNROLL = "UNROLL"
  VECTOR = "VECTOR"
  SWAP = "SWAP"
  LOCAL = "LOCAL"
  GROUP = "GROUP"
  MERGE = "MERGE"


# which range kinds each opt applies to (its axis numbers index Kernel.axes of these kinds) and the new inner kind
OPT_KINDS: dict[OptOps, tuple[tuple[AxisType, ...], AxisType | None]] = {
  OptOps.UPCAST: ((G,), AxisType.UPCAST), OptOps.LOCAL: ((G,), AxisType.LOCAL), OptOps.UNROLL: ((R,), AxisType.UNROLL),
  OptOps.GROUP: ((R,), AxisType.GROUP), OptOps.VECTOR: ((G, R), AxisType.VECTOR), OptOps.SWAP: ((G, R), None),
  OptOps.MERGE: ((G,), None)}


def divisors(n: int, limit: int | None = None) -> list[int]:
  """Every divisor of n (up to `limit`), ascending (trial division up to its square root)."""
  small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
  out = small + [n // d for d in reversed(small) if d * d != n]
  return out if limit is None else [d for d in out if d <= limit]


class OptError(ValueError):
  """An opt that does not apply to this kernel."""


def _split_reduce_range(red: UOp) -> UOp | None:
  if all(s.op is Ops.RANGE for s in red.src[1:]): return None
  rs = {x for s in red.src[1:] for x in s.toposort() if x.op is Ops.RANGE}
  return red.replace(src=(red.src[0],) + tuple(sorted(rs, key=lambda x: x.arg.id)))


def _sort_reduce_ranges(red: UOp) -> UOp | None:
  rs = tuple(sorted(red.src[1:], key=lambda x: x.arg.id))
  return None if rs == red.src[1:] else red.replace(src=(red.src[0],) + rs)


reduce_ranges = PatternMatcher([
  # REDUCE(v, outer*n + inner) -> REDUCE(v, outer, inner): a split reduce range keeps both parts as loops
  (UPat(Ops.REDUCE, name="red"), _split_reduce_range),
  # REDUCE(v, r2, r1) -> REDUCE(v, r1, r2): a reduce's loops in loop order
  (UPat(Ops.REDUCE, name="red"), _sort_reduce_ranges),
])


def _gate_stores(sink: UOp, cond: UOp) -> UOp:
  """Every store of a kernel's SINK also gated by `cond`."""
  def gated(st: UOp) -> UOp:
    gate = cond if len(st.src) < 4 else st.src[3].logical_and(cond)
    return st.replace(src=st.src[:3] + (gate,) + st.src[4:])
  return sink.replace(src=tuple(gated(st) for st in sink.src))


def _sums_only(ast: UOp, r: UOp) -> bool:
  """Every reduction over `r` is a sum (padded copies can add zero)."""
  reds = [n for n in ast.toposort() if n.op is Ops.REDUCE and r in n.src[1:]]
  return bool(reds) and all(red.arg is Ops.ADD for red in reds)


def _end(n) -> UOp: return n if isinstance(n, UOp) else UOp.const(INDEX, n)


def _gate_loads(ast: UOp, inside: UOp, inner: UOp) -> UOp:
  """Every global-memory load whose index moves with the padded range `inner` also gated by `inside`: padded
  iterations read nothing (a vector of them is one masked load)."""
  def gated(ld: UOp) -> UOp:
    gate = inside if len(ld.src) < 3 else ld.src[2].logical_and(inside)
    return ld.replace(src=ld.src[:2] + (gate,) + ld.src[3:])
  loads = [n for n in ast.toposort() if n.op is Ops.LOAD and n.src[0].op is Ops.DEFINE_GLOBAL and
           inner in n.src[1].toposort()]
  return substitute(ast, {ld: gated(ld) for ld in loads}) if loads else ast


def _mask_reduces(ast: UOp, inside: UOp, inner: UOp) -> UOp:
  """A padded reduce axis: the reductions over its new inner range take their identity where the padded index is
  past the end (a sum adds zero)."""
  def masked(red: UOp) -> UOp:
    identity = UOp.const(red.dtype, reduce_identity(red.arg, red.dtype))
    return red.replace(src=(inside.where(red.src[0], identity),) + red.src[1:])
  reds = [n for n in ast.toposort() if n.op is Ops.REDUCE and any(inner in s.toposort() for s in n.src[1:])]
  return substitute(ast, {red: masked(red) for red in reds}) if reds else ast


@dataclass(frozen=True, order=True)
class Opt:
  op: OptOps     # an OptOps (its name is accepted and converted: OptError for an unknown one)
  axis: int      # position in Kernel.axes() of the kinds the op applies to
  amount: int    # the split size; SWAP: the other axis; MERGE: the inner axis merged into `axis`

  def __post_init__(self):
    if not isinstance(self.op, OptOps):
      if self.op not in OptOps.__members__: raise OptError(f"unknown opt {self.op}")
      object.__setattr__(self, "op", OptOps(self.op))

  def __repr__(self): return f"Opt({self.op.value},{self.axis},{self.amount})"

  def to_json(self) -> list:
    """[op, axis, amount]: how tuning files, search caches and manifests store an opt."""
    return [self.op.value, self.axis, self.amount]

  @staticmethod
  def from_json(item) -> Opt:
    """The opt stored as [op, axis, amount]; OptError when it is not one."""
    if not isinstance(item, (list, tuple)) or len(item) != 3 or not all(isinstance(v, int) for v in item[1:]):
      raise OptError(f"not an opt: {item!r}")
    return Opt(str(item[0]), int(item[1]), int(item[2]))


@dataclass
class Kernel:
  """A kernel AST and the ranges it loops over."""
  ast: UOp
  opts: list[Opt] = field(default_factory=list)

  def ranges(self) -> list[UOp]:
    rs = {n for n in self.ast.toposort() if n.op is Ops.RANGE}
    return sorted(rs, key=lambda r: r.arg.id)

  def axes(self, kinds: tuple[AxisType, ...]) -> list[UOp]:
    return [r for r in self.ranges() if r.arg.kind in kinds]

  @staticmethod
  def size(r: UOp) -> int:
    """The length of a loop; over a size known only at run time, the length heuristics plan for: the geometric mean
    of its lowest and highest value (opts that suit the middle of the range, not only its largest sizes), a multiple
    of what divides every length it takes (`multiple`)."""
    if r.src[0].op is Ops.CONST: return r.src[0].arg
    step = Kernel.multiple(r)
    return max(step, round(math.sqrt(max(r.src[0].vmin, 1) * r.src[0].vmax) / step) * step)

  @staticmethod
  def multiple(r: UOp) -> int:
    """What divides the loop's length whatever sizes a run has: the length itself when fixed; over sizes known at
    run time, the common factor of its terms (16 for `h*16`, a map of a height given in steps of 32)."""
    if r.src[0].op is Ops.CONST: return r.src[0].arg
    terms, const = split_terms(r.src[0])
    return math.gcd(const, *terms.values())

  def next_id(self) -> int: return max((r.arg.id for r in self.ranges()), default=-1) + 1

  def apply(self, opt: Opt) -> Kernel:
    """A new Kernel with `opt` applied; raises OptError if it does not fit."""
    if {opt.op, *(o.op for o in self.opts)} >= {OptOps.LOCAL, OptOps.GROUP}:
      raise OptError(f"{opt}: LOCAL and GROUP cannot share a work-group")
    if opt.op is OptOps.VECTOR and any(o.op is OptOps.VECTOR for o in self.opts):
      raise OptError(f"{opt}: one VECTOR axis only")
    kinds, inner_kind = OPT_KINDS[opt.op]
    axes = self.axes(kinds)
    if not 0 <= opt.axis < len(axes): raise OptError(f"{opt}: no axis {opt.axis}")
    r = axes[opt.axis]
    if opt.op is OptOps.SWAP: return self._swap(opt, r, axes)
    if opt.op is OptOps.MERGE: return self._merge(opt, r, axes)
    n = r.src[0].arg if r.src[0].op is Ops.CONST else r.src[0]
    if opt.amount <= 1: raise OptError(f"{opt}: splits by {opt.amount}")
    if opt.op is OptOps.VECTOR and opt.amount & (opt.amount - 1): raise OptError(f"{opt}: lanes must be a power of two")
    padded = Kernel.multiple(r) % opt.amount != 0
    if padded and not (opt.op in (OptOps.LOCAL, OptOps.VECTOR) or opt.op is OptOps.UPCAST and r.arg.kind is G or
                       opt.op is OptOps.UNROLL and (_sums_only(self.ast, r) or not isinstance(n, int))):
      raise OptError(f"{opt}: {opt.amount} does not divide {n}")
    groups = -(-n // opt.amount) if isinstance(n, int) else simplify((n + (opt.amount - 1)) // opt.amount)
    outer = UOp(Ops.RANGE, INDEX, (_end(groups),), RangeArg(r.arg.id, r.arg.kind)) \
      if not isinstance(groups, int) or groups > 1 else UOp.const(INDEX, 0)
    inner = UOp(Ops.RANGE, INDEX, (UOp.const(INDEX, opt.amount),), RangeArg(self.next_id(), inner_kind, r.arg.id))
    flat = outer * opt.amount + inner
    clamped = flat.lt(n).where(flat, n - 1)
    if not padded: new_ast = simplify(substitute(self.ast, {r: flat}))
    elif isinstance(n, UOp) or opt.op is OptOps.VECTOR and r.arg.kind is R:
      # a size known at run time, or vectors over a fixed reduce axis they do not divide: past the end loads are
      # gated off (masked vector loads), reductions take their identity, stores are gated
      inside = flat.lt(n)
      gated = _gate_loads(substitute(self.ast, {r: flat}), inside, inner)
      new_ast = simplify(_mask_reduces(gated, inside, inner) if r.arg.kind is R else _gate_stores(gated, inside))
    elif opt.op is OptOps.UNROLL:
      new_ast = simplify(_mask_reduces(substitute(self.ast, {r: clamped}), flat.lt(n), inner))
    else: new_ast = simplify(_gate_stores(substitute(self.ast, {r: clamped}), flat.lt(n)))
    return Kernel(graph_rewrite(new_ast, reduce_ranges), self.opts + [opt])

  def _swap(self, opt: Opt, r: UOp, axes: list[UOp]) -> Kernel:
    if not 0 <= opt.amount < len(axes) or opt.amount == opt.axis: raise OptError(f"{opt}: no other axis {opt.amount}")
    o = axes[opt.amount]
    if r.arg.kind != o.arg.kind: raise OptError(f"{opt}: a {r.arg.kind.value} and a {o.arg.kind.value} loop")
    swap = {r.arg.id: o.arg.id, o.arg.id: r.arg.id}
    sub = {x: x.replace(arg=x.arg.replace(id=swap.get(x.arg.id, x.arg.id), parent=swap.get(x.arg.parent,
                                                                                           x.arg.parent)))
           for x in self.ranges() if x.arg.id in swap or x.arg.parent in swap}
    return Kernel(graph_rewrite(substitute(self.ast, sub), reduce_ranges), self.opts + [opt])

  def _merge(self, opt: Opt, r: UOp, axes: list[UOp]) -> Kernel:
    if not 0 <= opt.amount < len(axes) or opt.amount == opt.axis: raise OptError(f"{opt}: no other axis {opt.amount}")
    o = axes[opt.amount]
    if r.src[0].op is not Ops.CONST or o.src[0].op is not Ops.CONST:
      raise OptError(f"{opt}: a loop over a size known only at run time")
    if any(x.arg.parent in (r.arg.id, o.arg.id) for x in self.ranges()): raise OptError(f"{opt}: a loop already split")
    inner = o.src[0].arg
    p = UOp(Ops.RANGE, INDEX, (UOp.const(INDEX, r.src[0].arg * inner),), RangeArg(r.arg.id, G))
    new_ast = simplify(substitute(self.ast, {r: p // inner, o: p % inner}))
    if any(n.op in (Ops.IDIV, Ops.MOD) and p in n.src[0].toposort() for n in new_ast.toposort()):
      raise OptError(f"{opt}: an access does not step through the two loops as one")
    return Kernel(graph_rewrite(new_ast, reduce_ranges), self.opts + [opt])

  def apply_all(self, opts) -> Kernel:
    k = self
    for o in opts: k = k.apply(o)
    return k
