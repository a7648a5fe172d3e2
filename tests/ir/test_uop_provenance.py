"""Provenance in the IR: UOps built inside `origin(...)` record it, nodes built outside record nothing, and rebuilds
and rewrites keep the origin of the node they stand for."""
import os
import sys
from tgc.ir import UOp, Ops, dtypes, UPat, PatternMatcher, graph_rewrite, substitute
from tgc.ir.provenance import Origin, origin, origin_of, call_sites


def _buffer(n: int) -> UOp:
  return UOp(Ops.BUFFER, dtypes.float32, (), (f"prov{n}", (4,)))


def _exp2(x: UOp) -> UOp:
  return UOp(Ops.EXP2, dtypes.float32, (x,))


def test_nodes_record_the_origin_they_are_built_in():
  a = _buffer(1)
  with origin("layer1/Add", "Add"):
    s = a + UOp.const(dtypes.float32, 2.5)
    with origin("inner", "Mul"): m = s * s        # the inner origin wins
  assert origin_of(s) == Origin("layer1/Add", "Add")
  assert origin_of(m) == Origin("inner", "Mul")
  assert origin_of(a) is None                     # built outside any origin
  assert origin_of(a - UOp.const(dtypes.float32, 7.0)) is None


def test_hash_consed_nodes_keep_the_first_origin():
  a = _buffer(2)
  with origin("first", "Relu"): r1 = a.maximum(UOp.const(dtypes.float32, 0.0))
  with origin("second", "Relu"): r2 = a.maximum(UOp.const(dtypes.float32, 0.0))
  assert r1 is r2 and origin_of(r2) == Origin("first", "Relu")


def test_rebuilds_and_rewrites_inherit():
  a, b = _buffer(3), _buffer(4)
  with origin("n", "Mul"): m = a * UOp.const(dtypes.float32, 1.0)
  with origin("top", "Exp"): top = _exp2(m + b)
  # substitute rebuilds every user of the replaced node: the rebuilt nodes keep their origins
  rebuilt = substitute(top, {b: _buffer(5)})
  assert rebuilt is not top and origin_of(rebuilt) == Origin("top", "Exp")
  # a rule replacing x*1 by x: the result (here a buffer of no origin) is not renamed, its user keeps its origin
  pm = PatternMatcher([(UPat(Ops.MUL, src=(UPat.var("x"), UPat(Ops.CONST, arg=1.0))), lambda x: x)])
  out = graph_rewrite(top, pm)
  assert out.src[0].src[0] is a and origin_of(out) == Origin("top", "Exp")
  # a rule building a new node: the new node takes the origin of the node it replaced
  pm2 = PatternMatcher([(UPat(Ops.EXP2, src=(UPat.var("x"),)), lambda x: _exp2(x * 1.4426950408889634)
                         if x.op is not Ops.MUL else None)])
  out2 = graph_rewrite(top, pm2)
  assert out2 is not top and origin_of(out2) == Origin("top", "Exp")


def test_call_sites_name_the_callers_line():
  a = _buffer(6)
  with call_sites():
    line = sys._getframe().f_lineno + 1
    s = a + UOp.const(dtypes.float32, 0.5)
  o = origin_of(s)
  assert o is not None and o.name == f"{os.path.basename(__file__)}:{line}"
  with call_sites(), call_sites(False): t = a + UOp.const(dtypes.float32, 0.25)
  assert origin_of(t) is None
