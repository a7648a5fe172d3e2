"""Integer dot products: reductions of 8-bit products summed by the CPU's dot-product instruction.

A reduction that sums products of small integers (8-bit values converted to float32 or int32, an activation minus its
zero point: a QDQ convolution or matrix product computed on its 8-bit values) multiplies and adds g products per
32-bit lane in one instruction where the C target's CPU level has one (`CPU.dot`, the kinds of `INSTRUCTIONS`: x86's
pmaddwd takes pairs of int16, VNNI's vpdpbusd and Arm's sdot groups of four 8-bit values; `madd4` is vpdpbusd's
four uint8 x int8 done in two pmaddwd on x86 levels without VNNI, its operands split into their even and odd bytes).
A level tries its kinds in the order of `TRIED` (the 8-bit groups of four, then pmaddwd's pairs of int16 for the
integers too wide for 8 bits). Three steps, one per stage of lowering:

1. `dot_unroll` (heuristics): a reduce axis is unrolled by g, when every reduction of the kernel is such a sum:
   (one integer value the VECTOR lanes share) x (8-bit weights that differ per lane). An axis g divides, else one
   padded by up to a third (the copies past its end add zero: a convolution's 7 taps in 4 pairs, an image's 3
   channels as 4).
2. `dot_prepare` (lowering, before relayout): the gate of padded copies moves from the product onto the shared
   integer, and the UNROLL range is what the weights' relayout stores innermost, inside the VECTOR lanes: each
   output lane's g weights side by side, the layout the instruction reads.
3. `dot_products` (a rule table, after vectorization): a vector reduction whose body adds g products of a broadcast
   integer and weight lanes read at base + g*lane + j (product j) becomes a DOT of the g integers packed into one
   32-bit word and broadcast (one 32-bit load where they are consecutive elements of one buffer, the channels of a
   channels-last activation: their bytes are the word already; else bytes shifted into place), and the g*lanes
   weights loaded as one vector; it sums into an int32 accumulator that is converted after the reduction when the
   sum was a float one. The linearizer lets the DOT add into the accumulator itself; the C renderer spells it per
   CPU level. Integers whose range is as wide as the instruction's operand but elsewhere (uint8 minus a zero point
   for an unsigned or signed 8-bit operand) are shifted into it by a constant c: sum(a*w) = sum((a - c)*w) +
   c*sum(w), and sum(w) per output lane is one more DOT (of ones) in one more accumulator, which every
   register-block copy reading the same weights shares. Without VNNI (madd4), a register block that copies none of
   its shared integers (a matrix-vector product: `shares_one_integer`, unrolled by 2 more in step 1) sums two groups
   as one DOT(a0, b0, a1, b1) (`dot_pairs`), which the C renderer spells in pmaddubsw, exactly.

The integer sums are exact. The float32 sums they replace are the same numbers wherever those are exact (every
partial sum below 2**24: the 8-bit kernels' float sums are exact integer sums there); the rule fires only when every
operand fits the instruction's element type and, for a float sum, the whole sum fits int32, by interval bounds. An
int32 sum needs no bound: it wraps modulo 2**32 as the instructions' sums do (pmaddwd's pairs of int16 weights
times int16 integers, the integer Winograd form's products, whatever their range)."""
from __future__ import annotations
import math
from tgc.ir import Ops, UOp, AxisType, PatternMatcher, UPat, dtypes, graph_rewrite
from tgc.ir.symbolic import simplify, split_terms
from tgc.codegen.opts import Kernel, Opt, OptOps
from tgc.codegen.kernel_access import depends, reduce_body_loads, try_opt
from tgc.codegen.knobs import DOT_MAX_PADDING

I32, U32 = dtypes.int32, dtypes.uint32
# the instructions by CPU.dot: (products per 32-bit lane, element type of the shared integers, of the weights)
INSTRUCTIONS = {"madd": (2, dtypes.int16, dtypes.int16), "vnni": (4, dtypes.uint8, dtypes.int8),
                "madd4": (4, dtypes.uint8, dtypes.int8), "sdot": (4, dtypes.int8, dtypes.int8)}
# the kinds a CPU.dot tries, in order (every x86 level has pmaddwd for integers wider than 8 bits)
TRIED = {"vnni": ("vnni", "madd"), "madd4": ("madd4", "madd")}
EXACT = 1 << 24                                    # float32 holds every integer below this


def tried(kind: str) -> tuple[str, ...]:
  """The instructions a level whose CPU.dot is `kind` tries, in order ("": none)."""
  return TRIED.get(kind, (kind,) if kind else ())


# instructions madd4 spends on one copy of an operand (the C renderer's tg_dot4 helpers): the shared integer's
# broadcast, then its even and odd bytes; the weights' load, then their even and odd bytes sign-extended
MADD4_UNPACK = {"shared": 3, "weights": 4}


def unpacks(k: Kernel, kind: str, constant: frozenset) -> bool:
  """Whether the instruction a level whose CPU.dot is `kind` takes kernel `k`'s reductions with (its VECTOR split
  applied) splits both operands apart at every use (madd4: even and odd bytes widened to int16 for two pmaddwd):
  its register block holds accumulators only, each unpacked operand is used and dropped."""
  return next((kd for kd in tried(kind) if _dot_kernel(k.ast, kd, constant)), None) == "madd4"


def unpack_cost(ld: UOp, constant: frozenset) -> int:
  """What unpacking one copy of a reduction load `ld` of a madd4 kernel costs, in instructions."""
  return MADD4_UNPACK["weights" if ld.src[0].arg[0] in constant else "shared"]


def bytes_group(kind: str) -> int:
  """How many consecutive 8-bit values the first instruction a level whose CPU.dot is `kind` tries takes per 32-bit
  lane (0: none)."""
  return INSTRUCTIONS[tried(kind)[0]][0] if kind else 0


# ---------------------------------------------------------------- integer values
def int_form(u: UOp) -> UOp | None:
  """The scalar `u` (float or integer) as an int32 expression of the same value, when it is computed from integers of
  8 or 16 bits by conversions, integer constants, +, -, * and selects, every step exact (below 2**24); else None."""
  out = _int_form(u)
  if out is None or any(n.dtype == I32 and not -EXACT < n.vmin <= n.vmax < EXACT for n in out.toposort()): return None
  return out


def _int_form(u: UOp) -> UOp | None:
  if u.dtype.count > 1: return None
  if u.op is Ops.CONST:
    ok = not isinstance(u.arg, bool) and float(u.arg).is_integer() and abs(u.arg) < EXACT
    return UOp.const(I32, int(u.arg)) if ok else None
  narrow = u.dtype.is_int and u.dtype.itemsize <= 2
  if u.op is Ops.LOAD: return u.cast(I32) if narrow else None
  if u.op is Ops.CAST:
    src = u.src[0]
    if src.dtype.is_int and src.dtype.itemsize <= 2: return src.cast(I32)
    return _int_form(src) if not narrow and (u.dtype.is_float or u.dtype == I32) else None
  if narrow: return None
  srcs = [_int_form(s) for s in (u.src[1:] if u.op is Ops.WHERE else u.src)]
  if any(s is None for s in srcs): return None
  if u.op is Ops.ADD: return srcs[0] + srcs[1]
  if u.op is Ops.SUB: return srcs[0] - srcs[1]
  if u.op is Ops.MUL: return srcs[0] * srcs[1]
  if u.op is Ops.NEG: return -srcs[0]
  if u.op is Ops.WHERE: return UOp(Ops.WHERE, I32, (u.src[0], srcs[0], srcs[1]))
  return None


def _range(dtype) -> tuple[int, int]:
  bits = 8 * dtype.itemsize
  return (0, (1 << bits) - 1) if dtype.is_unsigned else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)


def _fits(u: UOp, dtype) -> bool:
  lo, hi = _range(dtype)
  return lo <= u.vmin and u.vmax <= hi


def _shiftable(u: UOp, dtype) -> bool:
  """`u` minus some constant fits `dtype` (its range is no wider)."""
  lo, hi = _range(dtype)
  return u.vmax - u.vmin <= hi - lo


# ---------------------------------------------------------------- 1. and 2.: the kernel's reductions, before expansion
def _dot_operands(red: UOp, vec: UOp, kind: str, constant: frozenset) -> bool:
  """REDUCE(ADD, a * w): `a` an integer the lanes share (the instruction's operand holds it, maybe shifted), `w` a
  weight load (or its conversion) the instruction takes (8-bit; pmaddwd's int16 too) that differs per lane along the
  output axis `vec`."""
  _, act, wt = INSTRUCTIONS[kind]
  body = red.src[0]
  if red.arg is not Ops.ADD or body.op is not Ops.MUL or vec in red.src[1:]: return False
  for a, w in (body.src, body.src[::-1]):
    ld = w.src[0] if w.op is Ops.CAST else w
    if ld.op is not Ops.LOAD or ld.src[0].op is not Ops.DEFINE_GLOBAL or ld.src[0].arg[0] not in constant: continue
    if ld.dtype.itemsize > wt.itemsize or not _fits(ld, wt) or not depends(ld.src[1], vec): continue
    ia = int_form(a)
    if ia is not None and not depends(a, vec) and _shiftable(ia, act): return True
  return False


def _dot_kernel(ast: UOp, kind: str, constant: frozenset) -> bool:
  """Every reduction of the kernel sums products `_dot_operands` takes, along its output VECTOR axis."""
  vec = next((n for n in ast.toposort() if n.op is Ops.RANGE and n.arg.kind is AxisType.VECTOR), None)
  reds = [n for n in ast.toposort() if n.op is Ops.REDUCE]
  return vec is not None and bool(reds) and all(_dot_operands(r, vec, kind, constant) for r in reds)


def dot_unroll(k: Kernel, kind: str, constant: frozenset) -> Kernel:
  """`k` with a reduce axis unrolled by the products per lane of the first dot-product instruction the target tries
  (`tried(kind)`, "": none) that takes the kernel's reductions: the innermost axis its group divides, else the one it
  pads least (at most DOT_MAX_PADDING: the weights are stored padded)."""
  sizes = [Kernel.size(r) for r in k.axes((AxisType.REDUCE,))]
  for kd in tried(kind):
    if not _dot_kernel(k.ast, kd, constant): continue
    group = INSTRUCTIONS[kd][0]
    padding = [(-(-n // group) * group - n) / n for n in sizes]
    best = min(range(len(sizes)), key=lambda i: (padding[i], -i), default=None)
    if best is None or padding[best] > DOT_MAX_PADDING: continue
    if math.prod(sizes) <= group: continue        # one group is the whole sum: no reduction left for the DOT rule
    k = try_opt(k, Opt(OptOps.UNROLL, best, group))
    if kd == "madd4" and sizes[best] % (2 * group) == 0 and shares_one_integer(k, constant):
      k = try_opt(k, Opt(OptOps.UNROLL, best, 2))
    return k
  return k


def shares_one_integer(k: Kernel, constant: frozenset) -> bool:
  """Whether kernel `k`'s register block reads one copy of the integers its weights multiply (a matrix-vector
  product: no UPCAST axis moves a reduction load that is not a weight). Without VNNI such a block sums two groups of
  products at a time (`madd4` pairs, pmaddubsw: five instructions per 32 products and the shared integer split once
  for every weight vector, where two pmaddwd take four and unpack each weight vector: a recurrent matrix-vector
  product of 2048 x 512 int8 weights, about 21 -> 17 us at x86-64-v3)."""
  ups = [r for r in k.ranges() if r.arg.kind is AxisType.UPCAST]
  return all(not depends(ld.src[1], r) for ld in reduce_body_loads(k) if ld.src[0].arg[0] not in constant
             for r in ups)


def _gate_operand(c: UOp, a: UOp, w: UOp, z: UOp) -> UOp | None:
  if z.arg != 0 or w.src[0].op is not Ops.LOAD or not w.src[0].dtype.is_int: return None
  return c.where(a, 0) * w


gated_products = PatternMatcher([
  # where(c, a * cast(int load), 0) -> where(c, a, 0) * cast(int load): the weights are finite, so the product is
  # zero either way; the gate of a padded copy goes onto the integer the dot product packs
  (UPat(Ops.WHERE, src=(UPat.var("c"), UPat(Ops.MUL, src=[UPat.var("a"), UPat(Ops.CAST, name="w")]), UPat.cvar("z"))),
   _gate_operand),
])


def dot_prepare(ast: UOp, kind: str, constant: frozenset) -> tuple[UOp, UOp | None]:
  """`ast` (opts applied) with the gates of padded products on their shared integer, and the UNROLL range whose
  copies one dot-product instruction (`kind`, "": none) will sum (see `dot_unroll`), which the weights' relayout
  stores inside the VECTOR lanes; (`ast`, None) when the kernel has none."""
  if not kind: return ast, None
  prepared = graph_rewrite(ast, gated_products)
  for kd in tried(kind):
    if not _dot_kernel(prepared, kd, constant): continue
    inner = next((n for n in prepared.toposort() if n.op is Ops.RANGE and n.arg.kind is AxisType.UNROLL and
                  Kernel.size(n) == INSTRUCTIONS[kd][0]), None)
    if inner is not None: return prepared, inner
  return ast, None


# ---------------------------------------------------------------- 3.: vector reductions to DOT, after vectorization
def _summands(u: UOp) -> list[UOp]:
  return _summands(u.src[0]) + _summands(u.src[1]) if u.op is Ops.ADD else [u]


def _weight_lanes(w: UOp, lanes: int) -> list[UOp] | None:
  """The lane loads of 8- or 16-bit weights read lane by lane (a VECTORIZE of ungated scalar loads, maybe converted)."""
  while w.op is Ops.CAST: w = w.src[0]
  if w.op is not Ops.VECTORIZE or len(w.src) != lanes: return None
  ok = all(s.op is Ops.LOAD and len(s.src) == 2 and s.dtype.itemsize <= 2 and s.src[0] is w.src[0].src[0]
           for s in w.src)
  return list(w.src) if ok else None


def _term(t: UOp, lanes: int, act, wt) -> tuple[UOp, list[UOp]] | None:
  """A product of the vector body as (the broadcast integer in int32, the weights' lane loads)."""
  if t.op is not Ops.MUL: return None
  for a, w in (t.src, t.src[::-1]):
    ws = _weight_lanes(w, lanes)
    if ws is None or a.op is not Ops.VECTORIZE or len(a.src) != 1 or not _fits(ws[0], wt): continue
    ia = int_form(a.src[0])
    if ia is not None and _shiftable(ia, act): return ia, ws
  return None


def _offset(ld: UOp, base: UOp) -> int | None:
  """How many elements after the load `base` the load `ld` reads (same buffer, constant distance), else None."""
  if ld.src[0] is not base.src[0]: return None
  (terms, c), (base_terms, base_c) = split_terms(ld.src[1]), split_terms(base.src[1])
  return c - base_c if terms == base_terms else None


def _groups(terms: list, group: int) -> list[tuple[list[UOp], UOp]] | None:
  """The products in groups of `group` whose weights are read at base + group*lane + j (product j of the group), as
  (the group's integers, the load at base); None unless every product belongs to one."""
  out, left = [], list(terms)
  while left:
    base = left[0][1][0]
    members = [next((t for t in left if _offset(t[1][0], base) == j), None) for j in range(group)]
    if any(m is None for m in members): return None
    if any(_offset(ld, base) != group * i + j for j, m in enumerate(members) for i, ld in enumerate(m[1])): return None
    out.append(([m[0] for m in members], base))
    left = [t for t in left if all(t is not m for m in members)]
  return out


def _plus_const(u: UOp) -> tuple[UOp, int]:
  return (u.src[0], u.src[1].arg) if u.op is Ops.ADD and u.src[1].op is Ops.CONST else (u, 0)


def _element_read(a: UOp, bits: int) -> tuple[UOp | None, UOp, int, int] | None:
  """`a` as (gate, load, add, fill): `load + add` where `gate` holds (always where it is None), `fill` elsewhere,
  for a load of `bits`-bit integers converted to int32: `x + k`, `where(gate, x + k1, f) + k2` (a padding of value
  f: a zero point); else None."""
  a, outer = _plus_const(a)
  gate, other = None, 0
  if a.op is Ops.WHERE and a.src[2].op is Ops.CONST: gate, a, other = a.src[0], a.src[1], a.src[2].arg
  a, inner = _plus_const(a)
  if gate is None and inner: return None
  if a.op is not Ops.CAST or a.src[0].op is not Ops.LOAD or 8 * a.src[0].dtype.itemsize != bits: return None
  return gate, a.src[0], inner + outer, other + outer


def _loaded_word(acts: list[UOp], act) -> UOp | None:
  """The integers `acts` as one 32-bit load when they are consecutive elements of one buffer (the bytes the
  instruction takes are side by side in memory), read under one gate, each plus one constant that changes its bytes
  alone (0, or 128 for 8 bits: the top bit flipped); else None."""
  bits = 8 * act.itemsize
  reads = [_element_read(a, bits) for a in acts]
  if any(r is None for r in reads) or len({(r[0], r[2], r[3]) for r in reads}) != 1: return None
  gate, first, add, fill = reads[0]
  flip = add % (1 << bits)
  if flip not in (0, 1 << (bits - 1)): return None
  if any(_offset(ld, first) != j or ld.src[2:] != first.src[2:] for j, (_, ld, _, _) in enumerate(reads)): return None
  word = UOp(Ops.BITCAST, U32, (UOp(Ops.LOAD, first.dtype.vec(len(acts)), first.src),))
  if flip: word = UOp(Ops.XOR, U32, (word, _repeated(flip, bits, len(acts))))
  if gate is None: return word
  return UOp(Ops.WHERE, U32, (gate, word, _repeated(fill & ((1 << bits) - 1), bits, len(acts))))


def _repeated(element: int, bits: int, count: int) -> UOp:
  """The 32-bit word of `count` copies of the `bits`-bit `element`."""
  return UOp.const(U32, sum(element << (bits * j) for j in range(count)))


def _dot(acts: list[UOp], base: UOp, lanes: int, act, wt) -> UOp:
  """DOT of the integers `acts` packed into one 32-bit word (broadcast) and the weights at `base` as one vector."""
  group, bits = len(acts), 8 * act.itemsize
  word = _loaded_word(acts, act)
  for j, a in enumerate(acts if word is None else []):
    part = UOp(Ops.AND, U32, (a.cast(U32), UOp.const(U32, (1 << bits) - 1))) if a.op is not Ops.CONST else \
      UOp.const(U32, a.arg & ((1 << bits) - 1))
    if j: part = UOp(Ops.SHL, U32, (part, UOp.const(U32, bits * j)))
    word = part if word is None else UOp(Ops.OR, U32, (word, part))
  packed = UOp(Ops.BITCAST, act.vec(group * lanes), (UOp(Ops.VECTORIZE, U32.vec(lanes), (simplify(word),)),))
  weights = UOp(Ops.LOAD, base.dtype.vec(group * lanes), base.src).cast(wt.vec(group * lanes))
  return UOp(Ops.DOT, I32.vec(lanes), (packed, weights))


def _summed(parts: list[UOp], rest: tuple) -> UOp:
  total = parts[0]
  for p in parts[1:]: total = total + p
  return UOp(Ops.REDUCE, total.dtype, (total,) + rest, Ops.ADD) if rest else total


def _shift(terms: list, act) -> int:
  """The constant c the shared integers are shifted by (a - c) so that all of them fit the operand type `act`."""
  lo, hi = min(a.vmin for a, _ in terms), max(a.vmax for a, _ in terms)
  olo, ohi = _range(act)
  return 0 if olo <= lo and hi <= ohi else lo - olo


def _dot_reduce(ctx: tuple[str, int], red: UOp) -> UOp | None:
  kinds, vector_bytes = ctx
  return next((d for d in (_dot_reduce_as(kind, vector_bytes, red) for kind in kinds) if d is not None), None)


def _dot_reduce_as(kind: str, vector_bytes: int, red: UOp) -> UOp | None:
  group, act, wt = INSTRUCTIONS[kind]
  body, rest = red.src[0], red.src[1:]
  lanes = body.dtype.count
  if red.arg is not Ops.ADD or lanes == 1 or not 16 <= 4 * lanes <= vector_bytes: return None
  terms = [_term(t, lanes, act, wt) for t in _summands(body)]
  if not terms or any(t is None for t in terms): return None
  groups = _groups(terms, group)
  c = _shift(terms, act)
  if groups is None or max(a.vmax for a, _ in terms) - c > _range(act)[1]: return None
  # a float sum must fit int32 (an int32 one wraps as the instruction's does): the largest product times the
  # products summed (the shifted ones, sum(w) times c)
  wmax = max(max(-ws[0].vmin, ws[0].vmax) for _, ws in terms)
  bound = sum(max(abs(a.vmin - c), abs(a.vmax - c)) for a, _ in terms) * wmax + abs(c) * len(terms) * wmax
  if red.dtype.is_float and bound * math.prod(r.src[0].arg for r in rest) >= 1 << 31: return None
  total = _summed([_dot([simplify(a - c) for a in acts], base, lanes, act, wt) for acts, base in groups], rest)
  if c:     # + c * sum(w): the weights' sums per lane, a DOT of ones in an accumulator of their own
    ones = _summed([_dot([UOp.const(I32, 1)] * group, base, lanes, act, wt) for _, base in groups], rest)
    total = total + ones * UOp(Ops.VECTORIZE, ones.dtype, (UOp.const(I32, c),))
  return total.cast(red.dtype)


dot_products = PatternMatcher([
  # REDUCE(ADD, sum of g products of a broadcast integer and weight lanes at base + g*lane + j) -> REDUCE(ADD, DOT)
  (UPat(Ops.REDUCE, name="red"), _dot_reduce),
])


def _paired(red: UOp) -> UOp | None:
  dots = _summands(red.src[0])
  if len(dots) % 2 or any(d.op is not Ops.DOT or len(d.src) != 2 or d.src[0].dtype.itemsize != 1 for d in dots):
    return None
  pairs = [UOp(Ops.DOT, d.dtype, d.src + e.src) for d, e in zip(dots[::2], dots[1::2])]
  return red.replace(src=(_summed(pairs, ()),) + red.src[1:])


dot_pairs = PatternMatcher([
  # REDUCE(ADD, DOT(a0, b0) + DOT(a1, b1)) -> REDUCE(ADD, DOT(a0, b0, a1, b1)): madd4's two groups in one pmaddubsw sum
  (UPat(Ops.REDUCE, name="red"), _paired),
])


def dot_rewrite(ast: UOp, kind: str, vector_bytes: int) -> UOp:
  """`ast` (vectorized) with its reductions of 8-bit products summed by the first dot-product instruction of those a
  level whose CPU.dot is `kind` tries that takes them (`tried`), on vectors of up to `vector_bytes`; by madd4, in pairs
  of groups where no weights are read by two reductions (the block of a matrix-vector product: `shares_one_integer`
  unrolled it for them)."""
  out = graph_rewrite(ast, dot_products, ctx=(tried(kind), vector_bytes))
  return graph_rewrite(out, dot_pairs) if kind == "madd4" and _weights_read_once(out) else out


def _weights_read_once(ast: UOp) -> bool:
  """No weight vector of a DOT is read by two reductions that multiply it by different integers (a register block
  copying its shared integers: each weight vector's unpacking is shared by them, `tg_dot4` pays)."""
  readers: dict[UOp, set] = {}
  for red in (n for n in ast.toposort() if n.op is Ops.REDUCE):
    for d in _summands(red.src[0]):
      if d.op is Ops.DOT and len(d.src) == 2 and any(n.op is Ops.LOAD for n in d.src[0].toposort()):
        readers.setdefault(d.src[1], set()).add(d.src[0])
  return bool(readers) and all(len(r) == 1 for r in readers.values())
