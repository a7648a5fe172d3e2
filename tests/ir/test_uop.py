"""UOp: hash-consing, immutability, the cross-process stable `key`, toposort order and deep graphs."""
import gc
import math
import os
import pickle
import random
import subprocess
import sys
import textwrap
import weakref
from pathlib import Path

import pytest

from tgc.ir import UOp, Ops, AxisType, RangeArg, dtypes

ROOT = Path(__file__).resolve().parents[2]


def rng_range(axis: int, n: int) -> UOp:
  return UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, n),), (axis, "loop"))


# ---- hash-consing ----

def test_identical_construction_is_same_object():
  rnd = random.Random(7)
  a, b = rnd.randint(1, 1000), rnd.randint(1, 1000)
  x1 = (rng_range(0, a) * b + 3) // 5
  x2 = (rng_range(0, a) * b + 3) // 5
  assert x1 is x2
  assert UOp.const(dtypes.float32, 1.5) is UOp.const(dtypes.float32, 1.5)


def test_list_and_tuple_sources_share_the_node():
  a, b = UOp.const(dtypes.int32, 3), UOp.const(dtypes.int32, 11)
  from_tuple = UOp(Ops.ADD, dtypes.int32, (a, b))
  assert UOp(Ops.ADD, dtypes.int32, [a, b]) is from_tuple
  assert UOp(Ops.ADD, dtypes.int32, [a, b]) is UOp(Ops.ADD, dtypes.int32, [a, b])
  assert isinstance(from_tuple.src, tuple)


def test_different_args_dtypes_ops_srcs_are_different_nodes():
  r = rng_range(0, 9)
  assert UOp.const(dtypes.int32, 1) is not UOp.const(dtypes.int64, 1)
  assert UOp.const(dtypes.int32, 1) is not UOp.const(dtypes.int32, 2)
  assert rng_range(0, 9) is not rng_range(1, 9)
  assert r + 1 is not r * 1
  assert r + 1 is not (r + 2)
  a, b = UOp.const(dtypes.int32, 5), UOp.const(dtypes.int32, 6)
  assert UOp(Ops.ADD, dtypes.int32, (a, b)) is not UOp(Ops.ADD, dtypes.int32, (b, a))


def test_arg_types_are_not_conflated():
  # 1, True and 1.0 are equal in python but are different constants
  i = UOp(Ops.CONST, dtypes.int32, (), 1)
  b = UOp(Ops.CONST, dtypes.int32, (), True)
  f = UOp(Ops.CONST, dtypes.int32, (), 1.0)
  assert len({id(i), id(b), id(f)}) == 3
  assert i.key != b.key and i.key != f.key and b.key != f.key


def test_signed_zero_kept_apart():
  pz, nz = UOp.const(dtypes.float32, 0.0), UOp.const(dtypes.float32, -0.0)
  assert pz is not nz
  assert math.copysign(1.0, nz.arg) == -1.0 and math.copysign(1.0, pz.arg) == 1.0
  assert pz.key != nz.key
  assert UOp.const(dtypes.float32, -0.0) is nz


def test_nan_args_hash_cons():
  n1 = UOp.const(dtypes.float32, float("nan"))
  n2 = UOp.const(dtypes.float32, float("nan"))
  assert n1 is n2        # nan != nan, but the constant is the same one
  assert math.isnan(n1.arg)
  assert n1.key == n2.key
  assert n1 is not UOp.const(dtypes.float64, float("nan"))
  assert n1 is not UOp.const(dtypes.float32, float("inf"))


def test_unhashable_and_nested_args():
  a = UOp(Ops.RESHAPE, dtypes.float32, (), (2, (3, 4)))
  assert a is UOp(Ops.RESHAPE, dtypes.float32, (), (2, (3, 4)))
  assert a is not UOp(Ops.RESHAPE, dtypes.float32, (), (2, (4, 3)))
  d1 = UOp(Ops.SINK, dtypes.float32, (), {"b": 2.5, "a": 1})
  d2 = UOp(Ops.SINK, dtypes.float32, (), {"a": 1, "b": 2.5})
  assert d1 is d2
  assert d1.key == UOp(Ops.SINK, dtypes.float32, (), {"a": 1, "b": 2.5}).key
  assert d1 is not UOp(Ops.SINK, dtypes.float32, (), {"a": 1, "b": -2.5})


def test_cache_does_not_keep_nodes_alive():
  r = rng_range(3, 977)
  node = r * 31 + 17
  ref = weakref.ref(node)
  del node
  gc.collect()
  assert ref() is None
  assert (r * 31 + 17).src[1].arg == 17


def test_pickle_round_trip_hash_conses():
  x = (rng_range(0, 12) * 5 + 2) % 7
  y = pickle.loads(pickle.dumps(x))
  assert y is x


# ---- immutability ----

def test_immutable():
  x = rng_range(0, 5) + 1
  for attr, val in (("op", Ops.MUL), ("dtype", dtypes.int64), ("src", ()), ("arg", 3), ("new_attr", 1)):
    with pytest.raises(AttributeError):
      setattr(x, attr, val)
  with pytest.raises(AttributeError):
    del x.op
  assert x.op is Ops.ADD and x.dtype is dtypes.index and len(x.src) == 2
  with pytest.raises(TypeError):
    x.src[0] = x  # type: ignore[index]


def test_no_truth_value():
  with pytest.raises(TypeError):
    bool(rng_range(0, 4).lt(2))


def test_replace():
  x = rng_range(0, 6) + 4
  assert x.replace() is x
  y = x.replace(op=Ops.MUL)
  assert y.op is Ops.MUL and y.src == x.src and y is x.src[0] * 4


# ---- key ----

_KEY_SCRIPT = textwrap.dedent("""
  import sys
  sys.path.insert(0, sys.argv[1])
  from tgc.ir import UOp, Ops, AxisType, RangeArg, dtypes
  r0 = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, 16),), (0, "loop"))
  r1 = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, 5),), RangeArg(1, AxisType.REDUCE))
  idx = (r0 * 5 + r1) // 3 % 7
  f = UOp(Ops.WHERE, dtypes.float32, (idx.lt(4), UOp.const(dtypes.float32, -0.0), UOp.const(dtypes.float32, 0.1)))
  n = UOp.const(dtypes.float16, float("nan"))
  s = UOp(Ops.SINK, dtypes.float32, (f, n), {"name": "out", "axes": frozenset({"x", "yy", "zzz"}),
                                             "dt": dtypes.bfloat16, "op": Ops.MAX})
  print(s.key)
  print(idx.key)
""")


def _key_in_subprocess(seed: str) -> list[str]:
  env = {**os.environ, "PYTHONHASHSEED": seed}
  out = subprocess.run([sys.executable, "-c", _KEY_SCRIPT, str(ROOT)], capture_output=True, text=True, env=env,
                       check=True)
  return out.stdout.split()


def test_key_stable_across_processes():
  k1, k2 = _key_in_subprocess("1"), _key_in_subprocess("12345")
  assert len(k1) == 2 and all(len(k) == 64 for k in k1)
  assert k1 == k2
  # and the same as this process computes
  r0 = rng_range(0, 16)
  r1 = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, 5),), RangeArg(1, AxisType.REDUCE))
  assert ((r0 * 5 + r1) // 3 % 7).key == k1[1]


def test_key_depends_on_content():
  r = rng_range(0, 8)
  keys = {(r + 1).key, (r + 2).key, (r * 1).key, (1 + r).key, rng_range(0, 9).key, rng_range(1, 8).key,
          (r + 1).cast(dtypes.int64).key}
  assert len(keys) == 7


# ---- toposort ----

def test_toposort_sources_before_users():
  rnd = random.Random(11)
  leaves = [rng_range(i, rnd.randint(2, 50)) for i in range(4)]
  nodes = list(leaves)
  for _ in range(60):
    a, b = rnd.choice(nodes), rnd.choice(nodes)
    nodes.append(a + b if rnd.random() < 0.5 else a * rnd.randint(2, 9))
  root = UOp(Ops.SINK, dtypes.index, tuple(nodes[-5:]))
  order = root.toposort()
  pos = {id(n): i for i, n in enumerate(order)}
  assert len(pos) == len(order)                  # each node once
  assert order[-1] is root
  for n in order:
    for s in n.src: assert pos[id(s)] < pos[id(n)]
  # exactly the reachable set
  reach, stack = set(), [root]
  while stack:
    n = stack.pop()
    if id(n) in reach: continue
    reach.add(id(n))
    stack.extend(n.src)
  assert reach == set(pos)


def test_toposort_diamond_order():
  a = rng_range(0, 7)
  b, c = a + 1, a * 3
  d = b + c
  # depth-first, sources in src order, shared nodes (a) listed once, at their first use
  assert d.toposort() == [a.src[0], a, b.src[1], b, c.src[1], c, d]
  assert c.toposort() == [a.src[0], a, c.src[1], c]


# ---- deep graphs ----

def test_deep_chain_key_bounds_toposort():
  r = rng_range(0, 10)
  n = r
  for i in range(20000): n = n + (i % 3 + 1)
  total = sum(i % 3 + 1 for i in range(20000))
  assert n.bounds == (total, total + 9)
  assert len(n.key) == 64
  assert len(n.toposort()) == 20000 + 1 + 4   # adds, the range, consts 10, 1, 2, 3
