"""Vectorization: the one VECTOR range of a kernel (W lanes) becomes SIMD values. After expansion, every value that
depends on the VECTOR range is turned into a `dtype.vec(W)` value:
  LOAD(buf, base + v)           -> one contiguous vector load at base (a gate that does not depend on v stays scalar)
  LOAD(buf, idx(v)) otherwise   -> a gather: VECTORIZE of the W lane loads (also for elements narrower than a lane:
                                   a byte mask is loaded lane by lane)
  LOAD(buf, base + v, gate(v))  -> a masked vector load (renderers that have them: the end of a loop over a size
                                   known at run time or of a padded axis; where they are single instructions, any
                                   gate of comparisons of base + v, such as a convolution's padding); STOREs alike
  STORE(buf, base + v, x)       -> one contiguous vector store; otherwise one store per lane (GEP)
  ALU(x, y) with vector sources -> the vector ALU; scalar sources are broadcast (VECTORIZE of one source)
  REDUCE(x, v, rest)            -> a vector accumulator over `rest`, then its lanes combined (a horizontal reduce)
Ops the renderer cannot do on vectors (`native`: e.g. exp2 in C) are done lane by lane. Index arithmetic stays
scalar: loads and stores read the VECTOR range out of their index. Where the language needs aligned vector
accesses (GPUs: 16-byte `float4`), `aligned(buffer, base)` says whether a contiguous access at `base` may be one
vector load or store; where it may not, the lanes are loaded and stored one by one."""
from __future__ import annotations
from dataclasses import dataclass, field
from typing import Callable
from tgc.ir import Ops, GroupOp, UOp, AxisType, PatternMatcher, UPat, graph_rewrite, substitute, dtypes
from tgc.ir.symbolic import simplify, split_terms
from tgc.codegen.expand import COMBINE

INDEX = dtypes.index


@dataclass
class VectorCtx:
  v: UOp                                   # the VECTOR range
  native: frozenset                        # ops the renderer does on vectors
  aligned: Callable[[UOp, UOp], bool] | None = None    # (buffer, base) -> a vector access there is allowed
  itemsizes: frozenset = frozenset({4})    # element sizes the renderer loads and stores as vectors
  masked: bool = False                     # the renderer has masked vector loads and stores (a gate per lane)
  lane_masks: bool = False                 # ... as single instructions: any gate of lane comparisons is a mask
  depends: dict = field(default_factory=dict)

  @property
  def lanes(self) -> int: return self.v.src[0].arg

  def on_v(self, u: UOp) -> bool:
    """Whether `u` (a scalar node) depends on the VECTOR range."""
    if u not in self.depends: self.depends[u] = u is self.v or any(self.on_v(s) for s in u.src)
    return self.depends[u]

  def vector_access(self, buf: UOp, base: UOp | None) -> bool:
    return base is not None and (self.aligned is None or self.aligned(buf, base))

  def lane(self, u: UOp, i: int) -> UOp:
    """Lane i of `u`: its element of a vector value (a gather index converted from 8-bit lanes), else `u` at v = i."""
    if u.dtype.count > 1: return gep(u, i)
    return simplify(substitute(u, {self.v: UOp.const(INDEX, i)}))

  def vec(self, u: UOp) -> UOp:
    """`u` as a vector: itself if it is one, its lanes if it depends on v, else broadcast."""
    if u.dtype.count > 1: return u
    if self.on_v(u):
      if (mask := self.end_mask(u)) is not None: return mask
      return UOp(Ops.VECTORIZE, u.dtype.vec(self.lanes), tuple(self.lane(u, i) for i in range(self.lanes)))
    return UOp(Ops.VECTORIZE, u.dtype.vec(self.lanes), (u,))

  def end_mask(self, u: UOp) -> UOp | None:
    """`base + v < n` (the end of a loop over a size known at run time) as one vector compare of base + (0, 1, ...)
    with n, and such a compare `and` conditions the lanes share (a padded split of the outer part too) as one vector
    AND; None for any other value. With `lane_masks`, any gate `lane_condition` accepts (a convolution's padding:
    `0 < x + v` and `x + v < 15`, negated compares, several of them `and`ed)."""
    if self.lane_masks and u.dtype == dtypes.bool and lane_condition(u, self.v): return self._lane_mask(u)
    if u.op is Ops.AND and u.dtype.is_bool and sum(self.on_v(s) for s in u.src) == 1:
      lane = next(s for s in u.src if self.on_v(s))
      if (mask := self.end_mask(lane)) is None: return None
      return UOp(Ops.AND, mask.dtype, tuple(mask if s is lane else self.vec(s) for s in u.src))
    if u.op is not Ops.CMPLT or self.on_v(u.src[1]) or contiguous_base(u.src[0], self.v) is None: return None
    return self._lane_mask(u)

  def _iota(self, base: UOp) -> UOp:
    """base + (0, 1, ..., lanes-1)."""
    w = self.lanes
    return UOp(Ops.ADD, INDEX.vec(w), (UOp(Ops.VECTORIZE, INDEX.vec(w), (base,)),
                                       UOp(Ops.VECTORIZE, INDEX.vec(w), tuple(UOp.const(INDEX, i) for i in range(w)))))

  def _lane_mask(self, u: UOp) -> UOp:
    """A gate `lane_condition` accepts as a vector of lane masks."""
    if not self.on_v(u): return self.vec(u)
    if u.op is Ops.AND: return UOp(Ops.AND, dtypes.bool.vec(self.lanes), tuple(self._lane_mask(s) for s in u.src))
    if u.op is not Ops.CMPLT:     # not (a < b) -> b < a + 1
      a, b = u.src[0].src
      return self._lane_mask(UOp(Ops.CMPLT, dtypes.bool, (b, simplify(a + 1))))
    a, b = u.src
    if self.on_v(a): return UOp(Ops.CMPLT, dtypes.bool.vec(self.lanes), (self._iota(contiguous_base(a, self.v)),
                                                                         self.vec(b)))
    return UOp(Ops.CMPLT, dtypes.bool.vec(self.lanes), (self.vec(a), self._iota(contiguous_base(b, self.v))))


def lane_condition(g: UOp, v: UOp) -> bool:
  """Whether gate `g` is, lane by lane along `v`, comparisons of integer `base + v` with values the lanes share,
  possibly negated and `and`ed with each other and with conditions the lanes share (a convolution's padding along
  its vector axis): one vector compare per comparison gives its mask."""
  if v not in g.toposort(): return True
  if g.op is Ops.AND and g.dtype == dtypes.bool: return all(lane_condition(s, v) for s in g.src)
  if g.op in (Ops.CMPNE, Ops.XOR) and g.src[1].op is Ops.CONST and g.src[1].arg is True:     # not (a < b)
    return g.src[0].op is Ops.CMPLT and lane_condition(g.src[0], v)
  if g.op is not Ops.CMPLT or not g.src[0].dtype.is_int: return False
  moving = [s for s in g.src if v in s.toposort()]
  return len(moving) == 1 and contiguous_base(moving[0], v) is not None


def gep(u: UOp, i: int) -> UOp:
  """Lane i of the vector `u`."""
  if u.op is Ops.VECTORIZE: return u.src[0] if len(u.src) == 1 else u.src[i]
  return UOp(Ops.GEP, u.dtype.scalar, (u,), i)


def contiguous_base(idx: UOp, v: UOp) -> UOp | None:
  """idx = base + v (v appears once, with coefficient 1, outside any other term) -> base; else None."""
  terms, const = split_terms(idx)
  if terms.get(v) != 1: return None
  rest = {t: c for t, c in terms.items() if t is not v}
  if any(v in t.toposort() for t in rest): return None
  base = UOp.const(INDEX, const)
  for t, c in sorted(rest.items(), key=lambda tc: tc[0].key):
    base = base + (t if c == 1 else t * c)
  return simplify(base)


def _per_lane(ctx: VectorCtx, s: UOp) -> bool:
  """Whether a load's index or gate differs per lane: it depends on v, or it is a vector value (a gather's indices
  loaded as a vector, and gates computed from them)."""
  return s.dtype.count > 1 or ctx.on_v(s)


def _clamp(idx: UOp, v: UOp) -> UOp | None:
  """The clamp `flat < n ? flat : n-1` of a padded output axis in `idx`, or None. The compare may be on `flat - d`
  (`r*16 + v < 742 ? r*16 + 8 + v : 749`: the simplifier moved the constant of the second vector of an upcast
  axis across)."""
  for w in idx.toposort():
    if w.op is Ops.WHERE and w.src[0].op is Ops.CMPLT and w.src[2].op is Ops.CONST and loop_end(w.src[0], v) and \
       (w.src[0].src[0] is w.src[1] or _shifted_clamp(w)):
      return w
  return None


def _shifted_clamp(w: UOp) -> bool:
  """`a < n ? a + d : n + d - 1` for a constant d: the clamp of `a + d` at n + d - 1."""
  (a, n), flat, fill = w.src[0].src, w.src[1], w.src[2]
  if n.op is not Ops.CONST: return False
  (terms_a, const_a), (terms_f, const_f) = split_terms(a), split_terms(flat)
  return terms_a == terms_f and fill.arg == n.arg + const_f - const_a - 1


def unclamped(idx: UOp, v: UOp) -> tuple[UOp, UOp] | None:
  """An index along a padded output axis (`flat < n ? flat : n-1`: the last vector's extra lanes at the last element)
  as (the index without the clamp, `flat < n`), else None. A store gated by that compare writes those lanes nowhere
  either way; a float load of them may read 0 instead (one masked load): they feed only gated-off stores."""
  if (w := _clamp(idx, v)) is None: return None
  return simplify(substitute(idx, {w: w.src[1]})), w.src[0]


def unclamped_access(access: UOp, v: UOp, lane_masks: bool = False) -> tuple[UOp, tuple] | None:
  """A load or store's (index, gates) with `unclamped`'s clamp taken out where that is the same access: a float load
  without gates (then gated by the compare), a store gated by exactly that compare; with `lane_masks`, a float load
  whose gates are lane conditions too (a padded convolution's: the clamp taken out of them as well, the compare
  added)."""
  if (w := _clamp(access.src[1], v)) is None: return None
  idx, end = simplify(substitute(access.src[1], {w: w.src[1]})), w.src[0]
  if access.op is Ops.LOAD:
    if not access.dtype.is_float: return None
    if len(access.src) == 2: return idx, (end,)
    gates = tuple(simplify(substitute(g, {w: w.src[1]})) for g in access.src[2:])
    return (idx, gates + (end,)) if lane_masks and all(lane_condition(g, v) for g in gates) else None
  return (idx, access.src[3:]) if access.src[3:] == (end,) else None


def _load(ctx: VectorCtx, ld: UOp) -> UOp | None:
  if ld.dtype.count > 1 or not any(_per_lane(ctx, s) for s in ld.src[1:]): return None
  buf, idx, gate = ld.src[0], ld.src[1], ld.src[2:]
  if ctx.masked and ld.dtype.itemsize == 4 and \
     (found := unclamped_access(ld, ctx.v, ctx.lane_masks)) is not None: idx, gate = found
  base = contiguous_base(idx, ctx.v)
  if ctx.vector_access(buf, base) and not any(_per_lane(ctx, g) for g in gate) and ld.dtype.itemsize in ctx.itemsizes:
    return UOp(Ops.LOAD, ld.dtype.vec(ctx.lanes), (buf, base) + gate)
  if (mask := _mask(ctx, buf, base, gate, ld.dtype)) is not None:
    return UOp(Ops.LOAD, ld.dtype.vec(ctx.lanes), (buf, base, mask))
  # each lane's load: only the sources that differ per lane change (a workgroup-memory read keeps its barrier as is)
  return UOp(Ops.VECTORIZE, ld.dtype.vec(ctx.lanes), tuple(
    ld.replace(src=(buf,) + tuple(ctx.lane(s, i) if _per_lane(ctx, s) else s for s in ld.src[1:]))
    for i in range(ctx.lanes)))


def _mask(ctx: VectorCtx, buf: UOp, base: UOp | None, gate: tuple, dtype) -> UOp | None:
  """The vector mask of a contiguous access of 32-bit elements gated per lane, where the renderer has masked vector
  loads and stores: the end of a padded loop (`loop_end`), or with `lane_masks` any gates `lane_condition` accepts
  (`and`ed into one mask); else None."""
  if not (ctx.masked and ctx.vector_access(buf, base) and dtype.itemsize == 4) or \
     any(g.dtype.count > 1 for g in gate) or not any(ctx.on_v(g) for g in gate): return None
  if not mask_gates(gate, ctx.v, ctx.lane_masks): return None
  if len(gate) == 1 and loop_end(gate[0], ctx.v): return ctx.vec(gate[0])
  both = gate[0]
  for g in gate[1:]: both = UOp(Ops.AND, dtypes.bool, (both, g))
  return ctx._lane_mask(both)


def mask_gates(gates: tuple, v: UOp, lane_masks: bool) -> bool:
  """Whether the gates of a contiguous access that differ per lane along `v` are one vector mask: the end of a padded
  loop (`loop_end`), or with `lane_masks` any gates `lane_condition` accepts."""
  return len(gates) == 1 and loop_end(gates[0], v) or lane_masks and all(lane_condition(g, v) for g in gates)


def loop_end(gate: UOp, v: UOp) -> bool:
  """Whether a gate is the end of a padded loop along vector range `v`: it compares with a size known only at run
  time, or it is `outer*k*lanes + c*lanes + v < constant` (a fixed axis no vector width divides: a softmax's 750
  keys; `outer` a loop, or its part of a task loop it was folded into: `gidx0 % 47`; none for an axis shorter than
  one vector; k >= 1 and c >= 0 when the axis is upcast too: the second vector of a 16-column block is
  `gidx2*16 + 8 + v`).
  The gates masked vector accesses are used for; other gates (a convolution's padding) keep lane-by-lane accesses
  unless the renderer's masked accesses are single instructions (`lane_condition`)."""
  nodes = gate.toposort()
  if any(n.op is Ops.DEFINE_VAR for n in nodes): return True
  lanes = v.src[0].arg
  for n in nodes:
    if n.op is Ops.CMPLT and n.src[1].op is Ops.CONST:
      terms, const = split_terms(n.src[0])
      outer = [(t, c) for t, c in terms.items() if t is not v]
      if const >= 0 and const % lanes == 0 and terms.get(v) == 1 and \
         (not outer or len(outer) == 1 and v not in outer[0][0].toposort() and outer[0][1] > 0 and
          outer[0][1] % lanes == 0): return True
  return False


def _store(ctx: VectorCtx, st: UOp) -> UOp | None:
  buf, idx, val, gate = st.src[0], st.src[1], st.src[2], st.src[3:]
  if ctx.masked and val.dtype.itemsize == 4 and (found := unclamped_access(st, ctx.v)) is not None: idx = found[0]
  if val.dtype.count == 1 and not ctx.on_v(st): return None
  # a vector store (every output index depends on the output's VECTOR axis: one without it is already rewritten)
  if val.dtype.count > 1 and not ctx.on_v(idx) and not any(ctx.on_v(g) for g in gate): return None
  base = contiguous_base(idx, ctx.v)
  if ctx.vector_access(buf, base) and not any(ctx.on_v(g) for g in gate) and val.dtype.itemsize in ctx.itemsizes:
    return UOp(Ops.STORE, dtypes.bool, (buf, base, ctx.vec(val)) + gate)
  if (mask := _mask(ctx, buf, base, gate, val.dtype)) is not None:
    return UOp(Ops.STORE, dtypes.bool, (buf, base, ctx.vec(val), mask))
  vals = ctx.vec(val)
  return UOp(Ops.SINK, dtypes.bool, tuple(UOp(Ops.STORE, dtypes.bool, (buf, ctx.lane(idx, i), gep(vals, i)) +
                                              tuple(ctx.lane(g, i) for g in gate)) for i in range(ctx.lanes)))


def _alu(ctx: VectorCtx, x: UOp) -> UOp | None:
  if x.dtype.count > 1: return None
  if not any(s.dtype.count > 1 for s in x.src):
    # a value computed from the vector range itself (a cast of an index, a comparison of it): per lane
    if x.dtype != INDEX and any(ctx.on_v(s) for s in x.src) and not x.dtype.is_bool:
      return ctx.vec(x)
    return None
  out = x.dtype.vec(ctx.lanes)
  if x.op in ctx.native and all(_lanes32(d) for d in (x.dtype, *(s.dtype for s in x.src))):
    return UOp(x.op, out, tuple(ctx.vec(s) for s in x.src), x.arg)
  # a conversion between 32-bit lanes and narrow integers the renderer loads and stores as vectors
  if x.op is Ops.CAST and x.op in ctx.native and _narrow_cast(ctx, x.dtype, x.src[0].dtype):
    return UOp(x.op, out, (ctx.vec(x.src[0]),), x.arg)
  srcs = [ctx.vec(s) for s in x.src]
  return UOp(Ops.VECTORIZE, out, tuple(UOp(x.op, x.dtype, tuple(gep(s, i) for s in srcs), x.arg)
                                       for i in range(ctx.lanes)))


def _narrow_cast(ctx: VectorCtx, dst, src) -> bool:
  """A cast of 32-bit lanes from or to 8/16-bit integers stored as vectors (int8 weights to float, float to uint8
  activations)."""
  if dst.scalar.is_bool or src.scalar.is_bool: return False     # masks are 32-bit lanes: compared lane by lane
  narrow = [d for d in (dst, src) if not _lanes32(d)]
  return len(narrow) == 1 and narrow[0].scalar.is_int and narrow[0].scalar.itemsize in ctx.itemsizes


def _lanes32(d) -> bool:
  """Vector ops are on 32-bit lanes; bool lanes are masks of them."""
  return d.scalar.is_bool or d.scalar.itemsize == 4


def _reduce(ctx: VectorCtx, red: UOp) -> UOp | None:
  body, rs = red.src[0], red.src[1:]
  if ctx.v in rs:
    rest = tuple(r for r in rs if r is not ctx.v)
    vb = ctx.vec(body)
    acc = UOp(Ops.REDUCE, vb.dtype, (vb,) + rest, red.arg) if rest else vb
    lanes = [gep(acc, i) for i in range(ctx.lanes)]
    while len(lanes) > 1:      # pairwise: the same association on every target
      lanes = [COMBINE[red.arg](lanes[i], lanes[i + 1]) for i in range(0, len(lanes), 2)]
    return lanes[0]
  if body.dtype.count > 1 and red.dtype.count == 1: return UOp(Ops.REDUCE, body.dtype, red.src, red.arg)
  return None


def _vectorize_const_gep(g: UOp, x: UOp) -> UOp | None:
  return gep(x, g.arg) if x.op is Ops.VECTORIZE else None


vectorizer = PatternMatcher([
  # LOAD(buf, base + v) -> vector load; any other index or gate that depends on v -> the lanes' loads
  (UPat(Ops.LOAD, name="ld"), _load),
  # STORE(buf, base + v, x) -> vector store; otherwise one store per lane
  (UPat(Ops.STORE, name="st"), _store),
  # REDUCE over v -> vector accumulator, lanes combined; REDUCE of a vector body -> vector accumulator
  (UPat(Ops.REDUCE, name="red"), _reduce),
  # ALU/CAST with a vector source -> vector op (scalars broadcast), or lane by lane where the renderer has no vector op
  (UPat(GroupOp.Elementwise, name="x"), _alu),
  # GEP(VECTORIZE(a, b, ...), i) -> the i-th source
  (UPat(Ops.GEP, name="g", src=(UPat.var("x"),)), _vectorize_const_gep),
])


def vectorize(ast: UOp, native: frozenset, aligned: Callable[[UOp, UOp], bool] | None = None,
              itemsizes: frozenset = frozenset({4}), masked: bool = False, lane_masks: bool = False) -> UOp:
  """`ast` with its VECTOR range (if any) turned into vector values (`aligned`: see the module docstring; `itemsizes`:
  the element sizes loaded and stored as vectors, others lane by lane; `masked`: the renderer has masked vector
  loads and stores; `lane_masks`: as single instructions, so a gate of any lane comparisons is a mask)."""
  vs = [n for n in ast.toposort() if n.op is Ops.RANGE and n.arg.kind is AxisType.VECTOR]
  if not vs: return ast
  if len(vs) > 1: raise ValueError("a kernel vectorizes one axis")
  out = graph_rewrite(ast, vectorizer, ctx=VectorCtx(vs[0], native, aligned, itemsizes, masked, lane_masks))
  return _flatten(out)


def _flatten(sink: UOp) -> UOp:
  if not any(s.op is Ops.SINK for s in sink.src): return sink
  return UOp(Ops.SINK, dtypes.bool, tuple(x for s in sink.src for x in (s.src if s.op is Ops.SINK else (s,))))
