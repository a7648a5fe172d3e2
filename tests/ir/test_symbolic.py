"""Symbolic integer rules: hypothesis property tests (simplified == original and vmin <= value <= vmax for every
assignment of the loop variables, C truncating // and %) plus unit tests of the named identities."""
import itertools
import random

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from tgc.ir import UOp, Ops, dtypes
from tgc.ir.symbolic import simplify

INT32 = (-2**31, 2**31 - 1)


def rng_range(axis: int, n: int) -> UOp:
  return UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, n),), (axis, "loop"))


def idx(v: int) -> UOp: return UOp.const(dtypes.index, v)


# ---- a Python-integer evaluator with C semantics (as ir/exec.py defines them) ----

def c_div(a: int, b: int) -> int:
  if b == 0: return 0
  q = abs(a) // abs(b)
  return -q if (a < 0) != (b < 0) else q


def c_mod(a: int, b: int) -> int:
  return 0 if b == 0 else a - c_div(a, b) * b


class Overflow(Exception):
  """An intermediate value left int32: the expression is not a valid test case."""


def evaluate(root: UOp, env: dict[int, int], check_bounds: bool = True) -> dict[UOp, int]:
  """Value of every node under root for the range values `env` (axis -> value); checks each node's bounds."""
  vals: dict[UOp, int] = {}
  for n in root.toposort():
    s = [vals[x] for x in n.src]
    if n.op is Ops.CONST: v = n.arg
    elif n.op is Ops.RANGE: v = env[n.arg[0]]
    elif n.op is Ops.ADD: v = s[0] + s[1]
    elif n.op is Ops.MUL: v = s[0] * s[1]
    elif n.op is Ops.IDIV: v = c_div(s[0], s[1])
    elif n.op is Ops.MOD: v = c_mod(s[0], s[1])
    elif n.op is Ops.MAX: v = max(s[0], s[1])
    elif n.op is Ops.CMPLT: v = s[0] < s[1]
    elif n.op is Ops.CMPNE: v = s[0] != s[1]
    elif n.op is Ops.CMPEQ: v = s[0] == s[1]
    elif n.op is Ops.AND: v = s[0] and s[1]
    elif n.op is Ops.OR: v = s[0] or s[1]
    elif n.op is Ops.WHERE: v = s[1] if s[0] else s[2]
    else: raise AssertionError(f"evaluator has no {n.op}")
    if not isinstance(v, bool) and not INT32[0] <= v <= INT32[1]: raise Overflow(n)
    if check_bounds: assert n.vmin <= v <= n.vmax, f"{n} = {v} outside [{n.vmin}, {n.vmax}] at {env}"
    vals[n] = v
  return vals


# ---- random expression trees ----

small = st.integers(-9, 9)
nonzero = st.integers(-9, 9).filter(lambda v: v != 0)


@st.composite
def linear_expr(draw, ranges: list[UOp]) -> UOp:
  """k0*r0 + k1*r1 + ... + c with small (possibly negative) coefficients."""
  out = idx(draw(st.integers(-20, 20)))
  for r in draw(st.lists(st.sampled_from(ranges), min_size=1, max_size=3)):
    out = r * draw(small) + out
  return out


@st.composite
def int_expr(draw, ranges: list[UOp], depth: int) -> UOp:
  """An index expression over `ranges` and constants."""
  if depth == 0 or draw(st.integers(0, 4)) == 0:
    leaf = draw(st.integers(0, 2))
    if leaf == 0: return idx(draw(small))
    if leaf == 1: return draw(st.sampled_from(ranges))
    return draw(linear_expr(ranges))
  kind = draw(st.sampled_from(["add", "add", "mul_c", "mul", "div", "mod", "max", "where", "sub"]))
  a = draw(int_expr(ranges, depth - 1))
  if kind == "mul_c": return a * draw(small)
  if kind == "div": return a // draw(nonzero)
  if kind == "mod": return a % draw(nonzero)
  b = draw(int_expr(ranges, depth - 1))
  if kind == "add": return a + b
  if kind == "sub": return a - b
  if kind == "mul": return a * b
  if kind == "max": return a.maximum(b)
  return draw(bool_expr(ranges, depth - 1)).where(a, b)


@st.composite
def bool_expr(draw, ranges: list[UOp], depth: int) -> UOp:
  """A comparison of index expressions (against another expression or a constant)."""
  a = draw(int_expr(ranges, max(depth, 0)))
  b = draw(int_expr(ranges, max(depth - 1, 0))) if draw(st.booleans()) else idx(draw(small))
  return a.lt(b) if draw(st.integers(0, 3)) else a.ne(b)


@st.composite
def case(draw):
  sizes = draw(st.lists(st.integers(1, 9), min_size=1, max_size=3))
  ranges = [rng_range(i, n) for i, n in enumerate(sizes)]
  root = draw(int_expr(ranges, 4)) if draw(st.integers(0, 4)) else draw(bool_expr(ranges, 3))
  return sizes, root


def assignments(sizes: list[int]):
  for vals in itertools.product(*(range(n) for n in sizes)):
    yield dict(enumerate(vals))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case())
def test_simplify_preserves_value_and_bounds(c):
  sizes, root = c
  try:
    originals = [evaluate(root, env)[root] for env in assignments(sizes)]
  except Overflow:
    assume(False)
  out = simplify(root)
  assert out.dtype == root.dtype
  for env, want in zip(assignments(sizes), originals):
    got = evaluate(out, env)[out]
    assert got == want, f"{root} -> {out}: {got} != {want} at {env}"
  assert simplify(out) is out, f"not a fixed point: {out} -> {simplify(out)}"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 12), min_size=2, max_size=2), st.integers(1, 16), st.integers(-20, 20),
       st.integers(1, 16))
def test_linear_divmod_identities(sizes, k, c, d):
  """(k*r0 + r1 + c) // d and % d for positive d: exact for every assignment, and the pair recombines to x."""
  r0, r1 = rng_range(0, sizes[0]), rng_range(1, sizes[1])
  x = r0 * k + r1 + c
  q, m = simplify(x // d), simplify(x % d)
  back = simplify((x // d) * d + x % d)
  for env in assignments(sizes):
    v = k * env[0] + env[1] + c
    assert evaluate(q, env)[q] == c_div(v, d)
    assert evaluate(m, env)[m] == c_mod(v, d)
    assert evaluate(back, env)[back] == v


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_div_mod_cmp_chains_on_linear_forms(data):
  """A linear form under a chain of //, %, *, + by constants, optionally compared with a constant at the end."""
  sizes = data.draw(st.lists(st.integers(1, 9), min_size=1, max_size=3))
  ranges = [rng_range(i, n) for i, n in enumerate(sizes)]
  root = data.draw(linear_expr(ranges))
  for op in data.draw(st.lists(st.sampled_from(["div", "mod", "mul", "add"]), min_size=1, max_size=3)):
    if op == "div": root = root // data.draw(nonzero)
    elif op == "mod": root = root % data.draw(nonzero)
    elif op == "mul": root = root * data.draw(small)
    else: root = root + data.draw(small)
  if data.draw(st.booleans()): root = root.lt(data.draw(st.integers(-30, 30)))
  try:
    originals = [evaluate(root, env)[root] for env in assignments(sizes)]
  except Overflow:
    assume(False)
  out = simplify(root)
  for env, want in zip(assignments(sizes), originals):
    assert evaluate(out, env)[out] == want, f"{root} -> {out} at {env}"


# ---- the named identities ----

R0, R1, R2 = rng_range(0, 16), rng_range(1, 8), rng_range(2, 9)


@pytest.mark.parametrize("expr, want", [
  (R0 * 1, R0), (1 * R0, R0), (R0 + 0, R0), (0 + R0, R0), (R0 // 1, R0), (R0 % 1, idx(0)), (R0 * 0, idx(0)),
  ((R0 * 3) * 5, R0 * 15), (R0 + R0, R0 * 2), (R0 * 2 + R0 * 3, R0 * 5), ((R0 + 1) + 2, R0 + 3),
  (R0 - R0, idx(0)), ((R1 + 7) - 7, R1),
])
def test_identities(expr, want):
  assert simplify(expr) is want


def ops_in(u: UOp) -> set:
  return {n.op for n in u.toposort()}


def same_values(a: UOp, b: UOp, sizes: dict[int, int]) -> bool:
  axes = sorted(sizes)
  for vals in itertools.product(*(range(sizes[ax]) for ax in axes)):
    env = dict(zip(axes, vals))
    if evaluate(a, env)[a] != evaluate(b, env)[b]: return False
  return True


def test_div_mod_recombine():
  assert simplify((R0 // 4) * 4 + R0 % 4) is R0
  assert simplify(R0 % 4 + (R0 // 4) * 4) is R0
  x = R1 - 5                # negative values: C semantics still recombine
  assert simplify((x // 3) * 3 + x % 3) is simplify(x)
  for x in (R0, R0 * 3 + R1, R0 - 5, R1 * -2 + 3):
    for c in (2, 3, 4, 7, -3):
      out = simplify((x // c) * c + x % c)
      assert not ops_in(out) & {Ops.IDIV, Ops.MOD}, (x, c, out)
      assert same_values(out, x, {0: 16, 1: 8}), (x, c, out)


def test_div_mod_pairs_recombine_inside_a_longer_sum():
  """(x//c)*(c*k) + (x%c)*k among other terms of a sum -> x*k (an NCHW image's height and width merged into one
  loop p: (p//14)*14 + p%14 plus the channel's term)."""
  out = simplify((R0 // 14) * 14 + R1 * 196 + R0 % 14)
  assert not ops_in(out) & {Ops.IDIV, Ops.MOD} and same_values(out, R0 + R1 * 196, {0: 16, 1: 8}), out
  out = simplify((R0 // 7) * (7 * 136) + R2 + (R0 % 7) * 136 + 5)
  assert not ops_in(out) & {Ops.IDIV, Ops.MOD}, out
  assert same_values(out, R0 * 136 + R2 + 5, {0: 16, 2: 9})
  assert ops_in(simplify((R0 // 7) * 14 + R1 + R0 % 7)) & {Ops.IDIV}      # coefficients that do not pair stay


def test_div_of_packed_index():
  x = R0 * 8 + R1           # R1 < 8
  assert simplify(x // 8) is R0
  assert simplify(x % 8) is R1
  y = R0 * 8 + R2           # R2 < 9: the remainder can carry
  assert simplify(y // 8) is not R0
  for a in range(16):
    for b in range(9):
      env = {0: a, 2: b}
      assert evaluate(simplify(y // 8), env)[simplify(y // 8)] == (a * 8 + b) // 8


def test_nested_div_mod():
  assert simplify((R0 // 2) // 4) is simplify(R0 // 8)
  assert simplify((R0 % 12) % 4) is simplify(R0 % 4)
  assert simplify((R0 // 16)) is idx(0)
  assert simplify(R0 % 16) is R0
  assert simplify(R0 % 17) is R0


def test_div_mod_negative_dividend_keeps_c_semantics():
  x = R1 - 4                # -4 .. 3
  for c in (2, 3, -2, -3):
    dq, dm = simplify(x // c), simplify(x % c)
    for v in range(8):
      assert evaluate(dq, {1: v})[dq] == c_div(v - 4, c)
      assert evaluate(dm, {1: v})[dm] == c_mod(v - 4, c)


def test_comparisons_fold_with_bounds():
  assert simplify(R0.lt(16)) is UOp.const(dtypes.bool, True)
  assert simplify(R0.lt(100)) is UOp.const(dtypes.bool, True)
  assert simplify(R0.lt(0)) is UOp.const(dtypes.bool, False)
  assert simplify((R0 + 3).lt(3)) is UOp.const(dtypes.bool, False)
  assert simplify(R0.lt(R1 + 16)) is UOp.const(dtypes.bool, True)
  assert simplify(R0.ne(-1)) is UOp.const(dtypes.bool, True)
  assert simplify(R0.lt(5)) is R0.lt(5)
  assert simplify((R0 * 2 + 3).lt(9)) is R0.lt(3)
  assert simplify((R0 * 4).lt(10)) is R0.lt(3)


def test_where_folding():
  a, b = R1 * 3, R2 + 1
  assert simplify(R0.lt(16).where(a, b)) is a
  assert simplify(R0.lt(0).where(a, b)) is b
  assert simplify(R0.lt(5).where(a, a)) is a
  assert simplify(UOp.const(dtypes.bool, True).where(a, b)) is a
  cond = R0.lt(5)
  assert simplify(cond.where(a, b)) is cond.where(a, b)


def test_max_folding():
  assert simplify(R0.maximum(0)) is R0
  assert simplify(R0.maximum(-7)) is R0
  assert simplify(R0.maximum(15)) is idx(15)
  assert simplify(R0.maximum(20)) is idx(20)
  assert simplify(R0.maximum(3)) is R0.maximum(3)


def test_bounds_of_div_mod_mul():
  x = R1 - 4    # -4 .. 3
  assert (x // 2).bounds == (-2, 1)
  assert (x % 3).vmin >= -2 and (x % 3).vmax <= 2
  assert (R0 % 5).bounds == (0, 4)
  assert (R1 % 20).bounds == (0, 7)
  assert (x * -3).bounds == (-9, 12)
  assert (x * x).vmin <= 0 and (x * x).vmax >= 16
  assert R0.lt(R1).bounds == (False, True)
  assert R1.lt(R0 + 8).bounds == (True, True)


def test_random_constants_fold():
  rnd = random.Random(17)
  for _ in range(200):
    a, b = rnd.randint(-1000, 1000), rnd.choice([v for v in range(-30, 31) if v != 0])
    assert simplify(idx(a) // b) is idx(c_div(a, b))
    assert simplify(idx(a) % b) is idx(c_mod(a, b))
    assert simplify(idx(a) + b) is idx(a + b)
    assert simplify(idx(a).lt(b)) is UOp.const(dtypes.bool, a < b)


def test_small_float_powers_are_multiplies():
  buf = UOp(Ops.DEFINE_GLOBAL, dtypes.float32, (), (0, False))
  x = UOp(Ops.LOAD, dtypes.float32, (buf, UOp.const(dtypes.index, 0)))
  cube = simplify(UOp(Ops.POW, dtypes.float32, (x, UOp.const(dtypes.float32, 3.0))))
  assert Ops.POW not in {n.op for n in cube.toposort()} and cube.op is Ops.MUL
  assert simplify(UOp(Ops.POW, dtypes.float32, (x, UOp.const(dtypes.float32, 2.5)))).op is Ops.POW


def test_loop_indexes_compare_with_run_time_sizes():
  """i < n is true for a loop i over n, i + n < n is false (n a size known only at run time, even from 0)."""
  from tgc.ir.sint import Variable
  n = Variable("n", 0, 64)
  i = UOp(Ops.RANGE, dtypes.index, (n,), (0, "loop"))
  assert simplify(i.lt(n)).arg is True
  assert simplify((i + n).lt(n)).arg is False
  assert simplify((i + 1).lt(n)).op is Ops.CMPLT          # undecided: i + 1 == n at the last step


def test_64_bit_index_math_is_done_in_32_bits():
  """int64(i) + int64(n) -> int64(i + n) when the sum fits 32 bits; int64 comparisons of widened 32-bit values
  compare those values (an exported Range's causal mask); a sum that may not fit stays 64-bit."""
  from tgc.ir.sint import Variable
  n = Variable("n", 1, 512)
  i, j = rng_range(0, 512), rng_range(1, 1024)
  wide = lambda u: u.cast(dtypes.int64)   # noqa: E731
  out = simplify((wide(i) + wide(n)).lt(wide(j)))
  assert out.op is Ops.CMPLT and all(s.dtype is dtypes.index for s in out.src)
  assert simplify(wide(i).eq(wide(j))).src[0] is i
  a, b = (UOp(Ops.LOAD, dtypes.int32, (UOp(Ops.DEFINE_GLOBAL, dtypes.int32, (), (k, False)), i)) for k in (0, 1))
  total = simplify(wide(a) + wide(b))              # may pass 2**31: kept in 64 bits
  assert total.op is Ops.ADD and all(s.dtype is dtypes.int64 for s in total.src)
