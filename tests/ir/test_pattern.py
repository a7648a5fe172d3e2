"""UPat matching, PatternMatcher dispatch and ctx, graph_rewrite fixed points, loop detection and rule traces."""
import random
import sys
from collections import Counter

import pytest

from tgc.ir import UOp, UPat, PatternMatcher, graph_rewrite, RewriteLoopError, Ops, dtypes


def rng_range(axis: int, n: int) -> UOp:
  return UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, n),), (axis, "loop"))


def matches(pat: UPat, u: UOp) -> list[dict]:
  return list(pat.match(u, {}))


R0, R1 = rng_range(0, 13), rng_range(1, 7)


# ---- UPat ----

def test_match_op_dtype_arg():
  c = UOp.const(dtypes.index, 5)
  assert matches(UPat(Ops.CONST), c) and not matches(UPat(Ops.RANGE), c)
  assert matches(UPat(Ops.CONST, dtypes.index), c) and not matches(UPat(Ops.CONST, dtypes.float32), c)
  assert matches(UPat(Ops.CONST, (dtypes.int32, dtypes.index)), c)
  assert matches(UPat({Ops.ADD, Ops.CONST}), c)
  assert matches(UPat.const(5), c) and not matches(UPat.const(6), c)
  # an int pattern arg does not match a bool or float arg
  assert not matches(UPat.const(1), UOp.const(dtypes.bool, True))
  assert not matches(UPat.const(1), UOp.const(dtypes.float32, 1.0))
  # a float pattern arg matches the numerically equal int
  assert matches(UPat.const(5.0), c)


def test_tuple_src_is_ordered_list_src_is_commutative():
  e = R0 + 3
  ordered_const_first = UPat(Ops.ADD, src=(UPat.cvar("c"), UPat.var("x")))
  ordered_const_last = UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar("c")))
  either = UPat(Ops.ADD, src=[UPat.cvar("c"), UPat.var("x")])
  assert not matches(ordered_const_first, e)
  assert matches(ordered_const_last, e) == [{"x": R0, "c": e.src[1]}]
  assert {"x": R0, "c": e.src[1]} in matches(either, e)
  flipped = 3 + R0
  assert flipped.src[0].op is Ops.CONST
  assert {"x": R0, "c": flipped.src[0]} in matches(either, flipped)
  # nested commutative lists: (c * x) + y in any order at both levels
  pat = UPat(Ops.ADD, src=[UPat(Ops.MUL, src=[UPat.cvar("c"), UPat.var("x")]), UPat.var("y")])
  for expr in (R0 * 4 + R1, R1 + R0 * 4, R1 + 4 * R0, 4 * R0 + R1):
    found = matches(pat, expr)
    assert any(b["x"] is R0 and b["y"] is R1 and b["c"].arg == 4 for b in found), expr


def test_same_name_must_be_same_node():
  pat = UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("x")))
  assert matches(pat, R0 + R0) == [{"x": R0}]
  assert not matches(pat, R0 + R1)
  deep = UPat(Ops.MUL, src=[UPat(Ops.ADD, src=[UPat.var("x"), UPat.cvar()]), UPat.var("x")])
  assert matches(deep, (R0 + 1) * R0)
  assert matches(deep, R0 * (1 + R0))
  assert not matches(deep, (R0 + 1) * R1)


def test_src_length_and_allow_any_len():
  ld = UOp(Ops.LOAD, dtypes.float32, (R0, R1, UOp.const(dtypes.bool, True)))
  assert not matches(UPat(Ops.LOAD, src=(UPat.var("a"), UPat.var("b"))), ld)
  got = matches(UPat(Ops.LOAD, src=(UPat.var("a"), UPat.var("b")), allow_any_len=True), ld)
  assert got == [{"a": R0, "b": R1}]


def test_name_binds_whole_node():
  e = R0 * 6
  assert matches(UPat(Ops.MUL, name="m", src=[UPat.var("x"), UPat.cvar("c")]), e)[0]["m"] is e


# ---- PatternMatcher ----

def test_ctx_passed_only_to_rules_that_take_it():
  seen = []

  def with_ctx(ctx, x):
    seen.append(ctx)
    return None

  def local_named_ctx(x):
    ctx = "a local, not a parameter"
    seen.append(ctx)
    return None

  pm = PatternMatcher([(UPat(Ops.RANGE, name="x"), with_ctx), (UPat(Ops.RANGE, name="x"), local_named_ctx)])
  token = object()
  assert pm.rewrite(R0, ctx=token) is None
  assert seen == [token, "a local, not a parameter"]


def test_ctx_drives_rewrite():
  pm = PatternMatcher([
    # replace a range by its bound value from ctx
    (UPat(Ops.RANGE, name="r"), lambda ctx, r: UOp.const(dtypes.index, ctx[r.arg[0]])),
  ])
  rnd = random.Random(3)
  vals = {0: rnd.randint(1, 99), 1: rnd.randint(1, 99)}
  out = graph_rewrite(R0 * 3 + R1, pm, ctx=vals)
  assert out is UOp.const(dtypes.index, vals[0]) * 3 + vals[1]


def test_first_matching_rule_wins_and_none_means_no_change():
  pm = PatternMatcher([
    # declines
    (UPat(Ops.RANGE), lambda: None),
    # returns the node itself (no change)
    (UPat(Ops.RANGE, name="r"), lambda r: r),
    # the first real rewrite
    (UPat(Ops.RANGE, name="r"), lambda r: r + 1),
    # never reached
    (UPat(Ops.RANGE, name="r"), lambda r: r + 2),
  ])
  new, name = pm.rewrite(R0)
  assert new is R0 + 1
  assert "(the first real rewrite)" in name


def test_matchers_add():
  a = PatternMatcher([(UPat(Ops.RANGE, name="r"), lambda r: r * 2)])  # double
  b = PatternMatcher([(UPat(Ops.CONST, name="c"), lambda c: c.const_like(c.arg + 100) if c.arg < 100 else None)])
  both = a + b
  assert both.rewrite(R0)[0] is R0 * 2
  assert both.rewrite(UOp.const(dtypes.index, 4))[0].arg == 104
  assert a.rewrite(UOp.const(dtypes.index, 4)) is None


# ---- graph_rewrite ----

def _const_fold_pm():
  return PatternMatcher([
    # add two constants
    (UPat(Ops.ADD, src=[UPat.cvar("a"), UPat.cvar("b")]), lambda a, b: a.const_like(a.arg + b.arg)),
    # multiply two constants
    (UPat(Ops.MUL, src=[UPat.cvar("a"), UPat.cvar("b")]), lambda a, b: a.const_like(a.arg * b.arg)),
    # x*1 -> x
    (UPat.var("x") * 1, lambda x: x),
    # x+0 -> x
    (UPat.var("x") + 0, lambda x: x),
  ])


def test_graph_rewrite_reaches_fixed_point():
  rnd = random.Random(5)
  pm = _const_fold_pm()
  for _ in range(30):
    a, b = rnd.randint(-50, 50), rnd.randint(-50, 50)
    c = UOp.const(dtypes.index, a)
    # ((a + b) * 1 + (a - a)) * 1 + R0 * (b - b + 1): everything but R0 folds; the R0 term survives
    e = ((c + b) * 1 + (c + (-a))) * 1 + R0 * (UOp.const(dtypes.index, b) + (1 - b))
    out = graph_rewrite(e, pm)
    assert out is UOp.const(dtypes.index, a + b) + R0 if a + b != 0 else out is R0
    assert graph_rewrite(out, pm) is out
    assert all(not pm.rewrite(n) for n in out.toposort())   # no rule applies anywhere


def test_graph_rewrite_chains_rules_to_the_end():
  pm = PatternMatcher([
    # sin -> sqrt
    (UPat(Ops.SIN, name="x"), lambda x: x.replace(op=Ops.SQRT)),
    # sqrt -> exp2
    (UPat(Ops.SQRT, name="x"), lambda x: x.replace(op=Ops.EXP2)),
    # exp2 -> log2
    (UPat(Ops.EXP2, name="x"), lambda x: x.replace(op=Ops.LOG2)),
  ])
  leaf = UOp(Ops.BUFFER, dtypes.float32, (), (0, (4,)))
  e = UOp(Ops.ADD, dtypes.float32, (UOp(Ops.SIN, dtypes.float32, (leaf,)), UOp(Ops.SQRT, dtypes.float32, (leaf,))))
  trace: Counter = Counter()
  out = graph_rewrite(e, pm, trace=trace)
  log = UOp(Ops.LOG2, dtypes.float32, (leaf,))
  assert out is UOp(Ops.ADD, dtypes.float32, (log, log))
  # sqrt(leaf) reached from sin(leaf) is the node already rewritten: each rule fires once
  assert sorted(trace.values()) == [1, 1, 1] and len(trace) == 3


def test_graph_rewrite_shares_results_of_shared_nodes():
  calls = Counter()

  def count(r):
    calls[r.arg] += 1
    return UOp.const(dtypes.index, r.arg[0] + 40)

  pm = PatternMatcher([(UPat(Ops.RANGE, name="r"), count)])
  e = (R0 + R1) * (R0 + 2) + R1
  out = graph_rewrite(e, pm)
  assert out is (UOp.const(dtypes.index, 40) + 41) * (UOp.const(dtypes.index, 40) + 2) + 41
  assert calls == Counter({R0.arg: 1, R1.arg: 1})


# ---- loops ----

def _line_of(pm: PatternMatcher, i: int) -> int:
  return pm.rules[i][1].__code__.co_firstlineno


def test_growing_rule_raises_naming_the_rule():
  pm = PatternMatcher([
    # grow a range: r -> r+0
    (UPat(Ops.RANGE, name="r"), lambda r: r + 0),
  ])
  with pytest.raises(RewriteLoopError) as e:
    graph_rewrite(R0.maximum(3), pm)
  msg = str(e.value)
  assert f"test_pattern.py:{_line_of(pm, 0)}" in msg
  assert "grow a range: r -> r+0" in msg


def test_swap_loop_raises_naming_the_rule():
  pm = PatternMatcher([
    # swap the sources of an add
    (UPat(Ops.ADD, src=(UPat.var("a"), UPat.var("b"))), lambda a, b: b + a),
  ])
  with pytest.raises(RewriteLoopError) as e:
    graph_rewrite(R0 * 2 + R1, pm)
  assert f"test_pattern.py:{_line_of(pm, 0)} (swap the sources of an add)" in str(e.value)


def test_two_rule_cycle_raises_naming_a_rule_of_the_cycle():
  pm = PatternMatcher([
    # x*2 -> x+x
    (UPat.var("x") * 2, lambda x: x + x),
    # x+x -> x*2
    (UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("x"))),
     lambda x: x * 2),
  ])
  with pytest.raises(RewriteLoopError) as e:
    graph_rewrite((R0 + R0) + 1, pm)
  msg = str(e.value)
  named = [f"test_pattern.py:{_line_of(pm, 0)} (x*2 -> x+x)", f"test_pattern.py:{_line_of(pm, 1)} (x+x -> x*2)"]
  assert any(n in msg for n in named), msg


def test_endless_new_nodes_hit_the_limit():
  pm = PatternMatcher([
    # count a constant up forever
    (UPat(Ops.CONST, name="c"), lambda c: c.const_like(c.arg + 1)),
  ])
  with pytest.raises(RewriteLoopError) as e:
    graph_rewrite(R0 + 3, pm, limit=300)
  assert "count a constant up forever" in str(e.value)
  assert f"test_pattern.py:{_line_of(pm, 0)}" in str(e.value)


def test_limit_is_per_rewrite_chain_not_per_graph():
  # 3 successive rewrites per node on a 400-node graph: 1200 firings, but no chain longer than 3
  pm = PatternMatcher([
    # sin -> sqrt
    (UPat(Ops.SIN, name="x"), lambda x: x.replace(op=Ops.SQRT)),
    # sqrt -> exp2
    (UPat(Ops.SQRT, name="x"), lambda x: x.replace(op=Ops.EXP2)),
    # exp2 -> log2
    (UPat(Ops.EXP2, name="x"), lambda x: x.replace(op=Ops.LOG2)),
  ])
  n = UOp(Ops.BUFFER, dtypes.float32, (), (1, (8,)))
  for _ in range(400): n = UOp(Ops.SIN, dtypes.float32, (n,))
  trace: Counter = Counter()
  out = graph_rewrite(n, pm, limit=10, trace=trace)
  assert sum(trace.values()) == 1200
  assert {u.op for u in out.toposort()} == {Ops.LOG2, Ops.BUFFER}
  with pytest.raises(RewriteLoopError):
    graph_rewrite(n, pm, limit=2)


# ---- trace ----

def test_trace_counts_firings_by_rule_name():
  pm = _const_fold_pm()
  rnd = random.Random(9)
  k = rnd.randint(3, 9)
  terms = [rng_range(i, rnd.randint(2, 30)) * 1 for i in range(k)]   # k firings of x*1
  e = terms[0]
  for t in terms[1:]: e = e + t
  e = e + 0                                                          # one firing of x+0
  trace: Counter = Counter()
  graph_rewrite(e, pm, trace=trace)
  names = {pm.rules[i][2]: i for i in range(len(pm.rules))}
  by_rule = {names[n]: c for n, c in trace.items()}
  assert by_rule == {2: k, 3: 1}
  mul_name = pm.rules[2][2]
  assert mul_name.startswith("test_pattern.py:") and mul_name.endswith("(x*1 -> x)")


def test_trace_is_optional_and_accumulates():
  pm = _const_fold_pm()
  trace: Counter = Counter()
  graph_rewrite(R0 * 1, pm, trace=trace)
  graph_rewrite(R1 * 1 + 0, pm, trace=trace)
  assert sorted(trace.values()) == [1, 2]
  assert graph_rewrite(R1 * 1, pm) is R1


def test_named_function_rule_uses_docstring():
  def fold_neg(x):
    """Negation of a negation is the value."""
    return x.src[0] if x.src[0].op is Ops.NEG else None
  pm = PatternMatcher([(UPat(Ops.NEG, name="x"), fold_neg)])
  assert pm.rules[0][2].endswith("fold_neg (Negation of a negation is the value.)")


# ---- deep graphs ----

def test_deep_chain_rewrites_without_recursion():
  depth = 20000
  assert depth > sys.getrecursionlimit()
  leaf = UOp(Ops.BUFFER, dtypes.float32, (), (2, (3,)))
  n = leaf
  for i in range(depth): n = UOp(Ops.SIN if i % 2 else Ops.NEG, dtypes.float32, (n,))
  pm = PatternMatcher([
    # sin -> sqrt
    (UPat(Ops.SIN, name="x"), lambda x: x.replace(op=Ops.SQRT)),
  ])
  trace: Counter = Counter()
  out = graph_rewrite(n, pm, trace=trace)
  assert sum(trace.values()) == depth // 2
  ops, u = Counter(), out
  while u.src:
    ops[u.op] += 1
    u = u.src[0]
  assert u is leaf and ops == Counter({Ops.SQRT: depth // 2, Ops.NEG: depth // 2})
  assert graph_rewrite(out, pm) is out


def test_deep_chain_collapses():
  pm = _const_fold_pm()
  n = R1
  for i in range(20000): n = n + 0 if i % 2 else n * 1
  trace: Counter = Counter()
  assert graph_rewrite(n, pm, trace=trace) is R1
  # every level rebuilds into R1*1 or R1+0: each is rewritten once, then reused
  assert sorted(trace.values()) == [1, 1]
