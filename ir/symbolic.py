"""Symbolic simplification as rule tables: constant folding, identities, sum canonicalization, div/mod by
constants using interval analysis (vmin/vmax), comparison and select folding. Division is C-style (truncating)."""
from __future__ import annotations
import math
import numpy as np
from tgc.ir.dtype import dtypes
from tgc.ir.exec import exec_alu, exec_cast
from tgc.ir.ops import Ops, GroupOp
from tgc.ir.pattern import UPat, PatternMatcher
from tgc.ir.uop import UOp


def _fold(x: UOp) -> UOp | None:
  """ALU on constants only -> constant."""
  if not x.src or not all(s.op is Ops.CONST for s in x.src): return None
  if x.op is Ops.CAST: return UOp.const(x.dtype, exec_cast(np.array(x.src[0].arg, x.src[0].dtype.numpy), x.dtype)[()])
  if x.op not in GroupOp.ALU: return None
  vals = [np.array(s.arg, dtype=s.dtype.numpy) for s in x.src]
  return UOp.const(x.dtype, exec_alu(x.op, x.dtype, *vals)[()].item())


def _bounds_fold(x: UOp) -> UOp | None:
  """An integer or bool expression whose interval is a single value is that constant."""
  if x.op in (Ops.CONST, Ops.RANGE, Ops.LOAD, Ops.DEFINE_GLOBAL) or not (x.dtype.is_int or x.dtype.is_bool): return None
  lo, hi = x.bounds
  if lo == hi and not isinstance(lo, float): return UOp.const(x.dtype, lo)
  return None


def split_terms(x: UOp) -> tuple[dict[UOp, int], int]:
  """x as sum(coef * term) + const (integers)."""
  terms: dict[UOp, int] = {}
  const = 0
  stack = [(x, 1)]
  while stack:
    n, c = stack.pop()
    if n.op is Ops.ADD: stack.extend((s, c) for s in n.src)
    elif n.op is Ops.CONST: const += c * n.arg
    elif n.op is Ops.MUL and n.src[1].op is Ops.CONST: stack.append((n.src[0], c * n.src[1].arg))
    elif n.op is Ops.MUL and n.src[0].op is Ops.CONST: stack.append((n.src[1], c * n.src[0].arg))
    else: terms[n] = terms.get(n, 0) + c
  return terms, const


def build_sum(dtype, terms: dict[UOp, int], const: int) -> UOp:
  """Inverse of split_terms, in a stable order (by content key)."""
  out = None
  for t in sorted((t for t, c in terms.items() if c != 0), key=lambda t: t.key):
    c = terms[t]
    v = t if c == 1 else t * UOp.const(dtype, c)
    out = v if out is None else out + v
  if out is None: return UOp.const(dtype, const)
  return out if const == 0 else out + UOp.const(dtype, const)


def _canon_sum(x: UOp) -> UOp | None:
  """x+x -> x*2, x*2+x*3 -> x*5, (x+1)+2 -> x+3, x-x -> 0: merge like terms of a sum (only when it shrinks);
  (x//c)*(c*k) + (x%c)*k + y -> x*k + y anywhere in a sum."""
  if not x.dtype.is_int: return None
  terms, const = split_terms(x)
  if _join_divmod(terms): return build_sum(x.dtype, terms, const)
  n_leaves = _count_add_leaves(x)
  n_after = sum(1 for c in terms.values() if c != 0) + (const != 0)
  if n_after >= n_leaves: return None
  return build_sum(x.dtype, terms, const)


def _join_divmod(terms: dict[UOp, int]) -> bool:
  """Replace each pair of terms (x//c)*(c*k) + (x%c)*k (c > 0) by x*k in `terms` (in place); whether any was."""
  joined = False
  for t in [t for t in terms if t.op is Ops.IDIV and t.src[1].op is Ops.CONST and t.src[1].arg > 0]:
    m = UOp(Ops.MOD, t.dtype, t.src)
    if m not in terms or terms[t] != terms[m] * t.src[1].arg: continue
    k = terms.pop(m)
    del terms[t]
    terms[t.src[0]] = terms.get(t.src[0], 0) + k
    joined = True
  return joined


def _count_add_leaves(x: UOp) -> int:
  if x.op is Ops.ADD: return sum(_count_add_leaves(s) for s in x.src)
  if x.op is Ops.MUL and x.src[1].op is Ops.CONST and x.src[0].op is Ops.ADD: return _count_add_leaves(x.src[0]) + 1
  return 1


def _divmod_fold(x: UOp, d: UOp) -> UOp | None:
  """x//d and x%d for d > 0 and x >= 0: split x into terms; terms whose coefficient is a multiple of d leave the
  division ((a*d*t + r)//d -> a*t + r//d); if the remainder's interval fits in [0, d) the div/mod vanish;
  a common factor g of everything divides out ((g*y)//(g*e) -> y//e)."""
  c = d.arg
  if c <= 0 or x.vmin < 0 or not x.dtype.is_int: return None
  terms, const = split_terms(x)
  quo_terms = {t: k // c for t, k in terms.items() if k // c != 0}
  rem_terms = {t: k % c for t, k in terms.items() if k % c != 0}
  rem = build_sum(x.dtype, rem_terms, const % c)
  quo_const = const // c
  if rem.vmin >= 0 and rem.vmax < c:   # remainder interval inside [0, c): no division left
    return (build_sum(x.dtype, quo_terms, quo_const), rem)
  if rem.vmin >= 0 and (quo_terms or quo_const):   # pull multiples of c out
    return (build_sum(x.dtype, quo_terms, quo_const) + rem // c, rem % c)
  g = math.gcd(c, const, *terms.values())
  if g > 1:
    y = build_sum(x.dtype, {t: k // g for t, k in terms.items()}, const // g)
    return (y // (c // g), (y % (c // g)) * g)
  # x = a*y + s with a dividing c and s in [0, a): x//c = y//(c/a), x%c = (y%(c/a))*a + s (e.g. (4i+v)%16 with
  # 0 <= v < 4 -> (i%4)*4 + v)
  for a in sorted({math.gcd(c, k) for k in terms.values()} - {1, c}, reverse=True):
    big = {t: k // a for t, k in terms.items() if k % a == 0}
    small = build_sum(x.dtype, {t: k for t, k in terms.items() if k % a != 0}, const % a)
    if big and small.vmin >= 0 and small.vmax < a:
      y = build_sum(x.dtype, big, const // a)
      return (y // (c // a), (y % (c // a)) * a + small)
  return None


def _div_fold(x: UOp, d: UOp) -> UOp | None:
  r = _divmod_fold(x, d)
  return None if r is None else r[0]


def _mod_fold(x: UOp, d: UOp) -> UOp | None:
  r = _divmod_fold(x, d)
  return None if r is None else r[1]


def _lt_fold(x: UOp, c: UOp) -> UOp | None:
  """sum(k*t) + a < c -> sum(k*t) < c - a; and for a common positive factor g: g*y < c -> y < ceil(c/g)."""
  if not x.dtype.is_int: return None
  terms, const = split_terms(x)
  if not terms: return None
  g = math.gcd(*terms.values())
  if const == 0 and g <= 1: return None
  if g <= 0: return None
  y = build_sum(x.dtype, {t: k // g for t, k in terms.items()}, 0)
  bound = c.arg - const
  return y.lt(UOp.const(x.dtype, -((-bound) // g)))


def _lt_ranges(x: UOp, y: UOp) -> UOp | None:
  """x < y for index expressions of sizes known at run time, decided on x - y with each loop index at its smallest
  or largest value, as an expression of its end (i < n for a loop i over n; i + n < n is false)."""
  if x.dtype is not dtypes.index or y.op is Ops.CONST: return None
  tx, cx = split_terms(x)
  ty, cy = split_terms(y)
  diff = dict(tx)
  for t, k in ty.items(): diff[t] = diff.get(t, 0) - k
  if not any(t.op is Ops.RANGE for t, k in diff.items() if k): return None

  def extreme(largest: bool) -> UOp:
    terms, const = {}, cx - cy
    for t, k in diff.items():
      if t.op is not Ops.RANGE or (k > 0) != largest: terms[t] = terms.get(t, 0) + k; continue
      end_terms, end_const = split_terms(t.src[0])     # the loop index at end - 1
      for e, j in end_terms.items(): terms[e] = terms.get(e, 0) + k * j
      const += k * (end_const - 1)
    return build_sum(x.dtype, {t: k for t, k in terms.items() if k}, const)
  if extreme(True).vmax < 0: return UOp.const(dtypes.bool, True)
  if extreme(False).vmin >= 0: return UOp.const(dtypes.bool, False)
  return None


_NARROW = (dtypes.index, dtypes.int32)
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def _widened(u: UOp) -> UOp | None:
  """The 32-bit value a 64-bit integer is a widening cast of, or None."""
  if u.op is Ops.CAST and u.dtype is dtypes.int64 and u.src[0].dtype in _NARROW: return u.src[0]
  if u.op is Ops.CONST and u.dtype is dtypes.int64 and INT32_MIN <= u.arg <= INT32_MAX:
    return UOp.const(dtypes.index, u.arg)
  return None


def _narrowed(a: UOp, b: UOp) -> tuple[UOp, UOp] | None:
  """The 32-bit values (in one type) that two 64-bit integers, not both constants, widen; or None."""
  x, y = _widened(a), _widened(b)
  if x is None or y is None or a.op is Ops.CONST and b.op is Ops.CONST: return None
  if y.dtype is not x.dtype: y = y.cast(x.dtype) if y.op is not Ops.CONST else UOp.const(x.dtype, y.arg)
  return x, y


def _narrow_add(a: UOp, b: UOp) -> UOp | None:
  """int64(x) + int64(y) -> int64(x + y) for 32-bit x, y whose sum provably fits 32 bits (an index offset by a size:
  the causal mask's arithmetic of an exported Range stays in 32-bit lanes)."""
  pair = _narrowed(a, b)
  if pair is None: return None
  total = pair[0] + pair[1]
  return total.cast(dtypes.int64) if INT32_MIN <= total.vmin and total.vmax <= INT32_MAX else None


def _narrow_compare(c: UOp, a: UOp, b: UOp) -> UOp | None:
  """int64(x) < int64(y) -> x < y (and ==, !=) for 32-bit x, y: widening keeps the order."""
  pair = _narrowed(a, b)
  return c.replace(src=pair) if pair is not None else None


x, y, z = UPat.var("x"), UPat.var("y"), UPat.var("z")
c1, c2 = UPat.cvar("c1"), UPat.cvar("c2")
idx = UPat.var("x", dtypes.index)
ints = tuple(d for d in dtypes.all() if d.is_int and not d.storage_only)


def _small_power(x: UOp, c: UOp) -> UOp | None:
  """x**2 and x**3 of a float as multiplies."""
  if not x.dtype.is_float or c.arg not in (2, 3): return None
  return x * x if c.arg == 2 else x * x * x

symbolic = PatternMatcher([
  # constant folding: an op on constants -> constant
  (UPat(GroupOp.ALU | {Ops.CAST}, name="x"), _fold),
  # integer/bool expression with a single-valued interval -> constant
  (UPat(GroupOp.ALU, name="x"), _bounds_fold),
  # x+0 -> x
  (x + 0, lambda x: x),
  # x*1 -> x
  (x * 1, lambda x: x),
  # c*x -> x*c: constants multiply from the right (integers; one spelling per product)
  (UPat(Ops.MUL, src=(UPat.cvar("c"), x)),
   lambda c, x: x * c.arg if x.dtype.is_int and x.op is not Ops.CONST else None),
  # x*0 -> 0 (integers only: NaN*0 is NaN)
  (UPat(Ops.MUL, dtype=ints + (dtypes.index,), src=[x, UPat.const(0)], name="m"), lambda x, m: m.const_like(0)),
  # x//1 -> x
  (x // 1, lambda x: x),
  # x%1 -> 0
  (x % 1, lambda x: x.const_like(0)),
  # (x*c1)*c2 -> x*(c1*c2)
  ((x * c1) * c2, lambda x, c1, c2: x * (c1.arg * c2.arg) if x.dtype.is_int else None),
  # merge like terms of an integer sum
  (UPat(Ops.ADD, name="x"), _canon_sum),
  # (x//c)*c + x%c -> x
  ((x // c1) * c1 + x % c1, lambda x, c1: x),
  # (x//c)*(c*k) + (x%c)*k -> x*k
  ((x // c1) * c2 + (x % c1) * UPat.cvar("k"),
   lambda x, c1, c2, k: x * k.arg if c2.arg == c1.arg * k.arg else None),
  # div/mod by a positive constant with interval analysis
  (UPat(Ops.IDIV, src=(x, UPat.cvar("d"))), _div_fold),
  (UPat(Ops.MOD, src=(x, UPat.cvar("d"))), _mod_fold),
  # (x//c1)//c2 -> x//(c1*c2)
  ((x // c1) // c2, lambda x, c1, c2: x // (c1.arg * c2.arg) if c1.arg > 0 and c2.arg > 0 else None),
  # (x%c1)%c2 -> x%c2 when c2 divides c1 and x >= 0
  ((x % c1) % c2, lambda x, c1, c2: x % c2.arg if c2.arg > 0 and c1.arg % c2.arg == 0 and x.vmin >= 0 else None),
  # (x%c1)//c2 with c1 = c2 * k -> (x//c2)%k when x >= 0
  ((x % c1) // c2, lambda x, c1, c2: (x // c2.arg) % (c1.arg // c2.arg)
   if c2.arg > 0 and c1.arg % c2.arg == 0 and x.vmin >= 0 else None),
  # sum + c < d -> sum < d - c; g*y < d -> y < ceil(d/g)
  (UPat(Ops.CMPLT, src=(x, UPat.cvar("c"))), _lt_fold),
  # i < n -> True for a loop i over n; i + n < n -> False (loop indexes against sizes known at run time)
  (UPat(Ops.CMPLT, src=(x, y)), _lt_ranges),
  # int64(x) + int64(y) -> int64(x + y), int64(x) < int64(y) -> x < y: 64-bit index math done in 32 bits
  (UPat(Ops.ADD, dtype=dtypes.int64, src=(UPat.var("a"), UPat.var("b"))), _narrow_add),
  (UPat((Ops.CMPLT, Ops.CMPEQ, Ops.CMPNE), name="c", src=(UPat.var("a", dtypes.int64), UPat.var("b", dtypes.int64))),
   _narrow_compare),
  # max(x, y) -> x when x >= y always
  (x.maximum(y), lambda x, y: x if x.vmin >= y.vmax else None),
  # where(c, a, a) -> a
  (UPat(Ops.WHERE, src=(UPat.var(), x, x)), lambda x: x),
  # where(c, load(buf, i, c), 0) -> load(buf, i, c): a load gated by c is 0 where c is false already
  (UPat(Ops.WHERE, src=(UPat.var("c"), UPat(Ops.LOAD, name="ld"), UPat.cvar("z"))),
   lambda c, ld, z: ld if len(ld.src) == 3 and ld.src[2] is c and z.arg == 0 and not z.dtype.is_bool else None),
  # where(True, a, b) -> a, where(False, a, b) -> b
  (UPat(Ops.WHERE, src=(UPat.cvar("c"), x, y)), lambda c, x, y: x if c.arg else y),
  # a and True -> a; a and False -> False
  (UPat(Ops.AND, dtype=dtypes.bool, src=[x, UPat.cvar("c")]), lambda x, c: x if c.arg else c),
  # a or False -> a; a or True -> True
  (UPat(Ops.OR, dtype=dtypes.bool, src=[x, UPat.cvar("c")]), lambda x, c: c if c.arg else x),
  # a and a -> a
  (UPat(Ops.AND, src=(x, x)), lambda x: x),
  # cast to own type -> x
  (UPat(Ops.CAST, name="c", src=(x,)), lambda c, x: x if c.dtype == x.dtype else None),
  # x**2 -> x*x, x**3 -> x*x*x (floats: a tanh-GELU's cube is a multiply, not a pow call per lane)
  (UPat(Ops.POW, src=(x, UPat.cvar("c"))), _small_power),
])


def simplify(u: UOp) -> UOp:
  """Apply the symbolic table to a fixed point."""
  from tgc.ir.pattern import graph_rewrite
  return graph_rewrite(u, symbolic)
