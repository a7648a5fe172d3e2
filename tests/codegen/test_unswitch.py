"""Loop unswitching of gated loads (codegen/unswitch.py): a padded convolution's channel loop is emitted once with
plain loads for the interior of the image and once as it was for the borders; both agree with the reference. In C,
the border copy's loads, gated by conditions computed outside the loop, read a row of zeros when gated off
(`render.cstyle.zero_rows`)."""
from __future__ import annotations
import numpy as np

from tgc.frontend import Tensor
from tgc.frontend.realize import _alloc
from tgc.codegen.schedule import schedule
from tgc.codegen.lower import lower
from tgc.codegen.unswitch import unswitch_gated_loops
from tgc.codegen.target import Target
from tgc.codegen.render.cstyle import zero_rows
from tgc.ir import Ops, UOp, AxisType, RangeArg, dtypes

RNG = np.random.default_rng(3)


def _conv(device: str, x: np.ndarray, w: np.ndarray) -> Tensor:
  return Tensor(x, device=device).conv2d(Tensor(w, device=device), padding=1)


def test_padded_convolution_is_versioned_and_correct():
  x = RNG.standard_normal((1, 16, 9, 7)).astype(np.float32)
  w = RNG.standard_normal((32, 16, 3, 3)).astype(np.float32)
  items, _ = schedule([_conv("c", x, w).uop], _alloc("c"))
  conv = max(items, key=lambda it: sum(1 for n in it.ast.toposort() if n.op is Ops.LOAD and len(n.src) > 2))
  src = lower(conv.ast, Target.make("c"), name="conv").src
  assert "} else {" in src
  got = _conv("c", x, w).numpy()
  want = _conv("numpy", x, w).numpy()
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_stem_convolution_is_versioned_around_its_whole_reduction():
  """An RGB stem (3 channels, 7x7 taps, stride 2, padding 3): the channel loop is too short to carry a test per tap,
  so the whole reduction is versioned on its gates holding for every tap: one test per block of outputs before the
  tap loops, with no gated load in the first copy; both copies agree with the reference (borders and interior)."""
  x = RNG.standard_normal((1, 3, 20, 18)).astype(np.float32)
  w = RNG.standard_normal((16, 3, 7, 7)).astype(np.float32)
  stem = lambda device: Tensor(x, device=device).conv2d(Tensor(w, device=device), stride=2, padding=3)  # noqa: E731
  items, _ = schedule([stem("c").uop], _alloc("c"))
  conv = max(items, key=lambda it: sum(1 for n in it.ast.toposort() if n.op is Ops.LOAD and len(n.src) > 2))
  program = lower(conv.ast, Target.make("c", cpu="x86-64-v3"), name="stem", weights={2: w.size})
  body = program.function.split("\n")
  first_reduce = next(i for i, line in enumerate(body) if "for (int ridx" in line)
  assert body[first_reduce - 1].strip().startswith("if (")              # the test, before the tap loops
  interior = body[first_reduce:next(i for i, line in enumerate(body) if line.strip() == "} else {")]
  assert not any("?" in line and "data1[" in line for line in interior)  # plain loads inside
  np.testing.assert_allclose(stem("c").numpy(), stem("numpy").numpy(), rtol=1e-4, atol=1e-4)


def _gated_loop_program(gate_inside: bool) -> list[UOp]:
  """RANGE r; LOAD(buf, r, gate) accumulated; ENDRANGE, with the gate computed before the loop or inside it."""
  idx = lambda n, k: UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, n),), RangeArg(k, AxisType.REDUCE))
  outer, r = idx(3, 0), idx(8, 1)
  buf = UOp(Ops.DEFINE_GLOBAL, dtypes.float32, (), (1, False))
  gate = (r if gate_inside else outer).lt(2)
  acc = UOp(Ops.DEFINE_ACC, dtypes.float32, (UOp.const(dtypes.float32, 0.0),), 0)
  load = UOp(Ops.LOAD, dtypes.float32, (buf, outer * 8 + r, gate))
  body = [gate] if gate_inside else []
  head = [] if gate_inside else [gate]
  return [outer, *head, acc, r, *body, load, UOp(Ops.ASSIGN, dtypes.float32, (acc, load)),
          UOp(Ops.ENDRANGE, dtypes.bool, (r,)), UOp(Ops.ENDRANGE, dtypes.bool, (outer,))]


def test_only_loops_with_gates_computed_outside_are_versioned():
  program = _gated_loop_program(gate_inside=False)
  out = unswitch_gated_loops(program)
  ops = [u.op for u in out]
  assert ops.count(Ops.IF) == 1 and ops.count(Ops.ELSE) == 1 and ops.count(Ops.ENDIF) == 1
  first = out[ops.index(Ops.IF):ops.index(Ops.ELSE)]
  second = out[ops.index(Ops.ELSE):ops.index(Ops.ENDIF)]
  assert all(len(u.src) == 2 for u in first if u.op is Ops.LOAD)          # the interior copy loads plainly
  assert any(len(u.src) == 3 for u in second if u.op is Ops.LOAD)         # the border copy keeps its gates
  assert unswitch_gated_loops(_gated_loop_program(gate_inside=True)) == _gated_loop_program(gate_inside=True)


def test_a_test_of_several_gates_is_computed_in_a_program_that_repeats_ops():
  """A nest versioned whole repeats its ops in both copies: a node's place in the program is no longer below the
  count of distinct nodes, and the AND of a loop's gates, new, must still be computed before its IF."""
  idx = lambda n, k: UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, n),), RangeArg(k, AxisType.REDUCE))
  outer, r = idx(3, 0), idx(8, 1)
  buf = UOp(Ops.DEFINE_GLOBAL, dtypes.float32, (), (1, False))
  g1, g2 = outer.lt(2), (outer * 2).lt(3)
  acc = UOp(Ops.DEFINE_ACC, dtypes.float32, (UOp.const(dtypes.float32, 0.0),), 0)
  a, b = UOp(Ops.LOAD, dtypes.float32, (buf, outer * 8 + r, g1)), UOp(Ops.LOAD, dtypes.float32, (buf, r, g2))
  repeated = [outer * 2] * 40                                      # the same op again and again, as two copies do
  program = [outer, *repeated, g1, g2, acc, r, a, b, UOp(Ops.ASSIGN, dtypes.float32, (acc, a + b)),
             UOp(Ops.ENDRANGE, dtypes.bool, (r,)), UOp(Ops.ENDRANGE, dtypes.bool, (outer,))]
  out = unswitch_gated_loops(program)
  test = next(u for u in out if u.op is Ops.IF).src[0]
  assert test.op is Ops.AND and out.index(test) < out.index(next(u for u in out if u.op is Ops.IF))


def test_loads_gated_outside_their_loop_read_a_zero_row():
  program = _gated_loop_program(gate_inside=False)
  rows = zero_rows(program)
  load = next(u for u in program if u.op is Ops.LOAD)
  assert list(rows) == [load]
  row = rows[load]
  outer, r = (u for u in program if u.op is Ops.RANGE)
  assert row.loop is r and row.step == 1 and row.terms == ((outer, 8),) and row.const == 0 and row.size == 8
  assert zero_rows(_gated_loop_program(gate_inside=True)) == {}


def test_a_padded_convolution_in_c_reads_zero_rows_without_branches():
  x = RNG.standard_normal((1, 16, 9, 7)).astype(np.float32)
  w = RNG.standard_normal((32, 16, 3, 3)).astype(np.float32)
  items, _ = schedule([_conv("c", x, w).uop], _alloc("c"))
  conv = max(items, key=lambda it: sum(1 for n in it.ast.toposort() if n.op is Ops.LOAD and len(n.src) > 2))
  program = lower(conv.ast, Target.make("c"), name="conv", weights={2: w.size})
  assert "tg_zero_float32_" in program.src and "?data1[" not in program.src.replace(" ", "")
  assert any(line.startswith("static const float tg_zero_float32_") for line in program.prefix)


def _vector_mask_program(mask_inside: bool) -> list[UOp]:
  """A loop of masked 4-lane loads: the mask `base + lane < n` over a size `n` known at run time, with `base` the
  outer index (the mask computed before the loop) or the loop's own (computed inside it, as at a row's end); the
  loaded vector is selected on the mask and stored through it."""
  idx = lambda n, k: UOp(Ops.RANGE, dtypes.index, (n if isinstance(n, UOp) else UOp.const(dtypes.index, n),),
                         RangeArg(k, AxisType.REDUCE))
  n = UOp(Ops.DEFINE_VAR, dtypes.index, (), ("n", 1, 64))
  outer, r = idx(3, 0), idx(n, 1)
  src, dst = (UOp(Ops.DEFINE_GLOBAL, dtypes.float32, (), (i, i == 0)) for i in (1, 0))
  base = r * 4 if mask_inside else outer * 4
  lanes = UOp(Ops.VECTORIZE, dtypes.index.vec(4), tuple(UOp.const(dtypes.index, i) for i in range(4)))
  at = UOp(Ops.ADD, dtypes.index.vec(4), (UOp(Ops.VECTORIZE, dtypes.index.vec(4), (base,)), lanes))
  mask = UOp(Ops.CMPLT, dtypes.bool.vec(4), (at, UOp(Ops.VECTORIZE, dtypes.index.vec(4), (n,))))
  load = UOp(Ops.LOAD, dtypes.float32.vec(4), (src, base, mask))
  zero = UOp(Ops.VECTORIZE, dtypes.float32.vec(4), (UOp.const(dtypes.float32, 0.0),))
  picked = UOp(Ops.WHERE, dtypes.float32.vec(4), (mask, load, zero))
  store = UOp(Ops.STORE, dtypes.bool, (dst, base + r, picked, mask))
  mask_ops = [base, lanes, at, mask]
  head, body = ([], mask_ops) if mask_inside else (mask_ops, [])
  return [n, src, dst, outer, *head, zero, r, *body, load, picked, store,
          UOp(Ops.ENDRANGE, dtypes.bool, (r,)), UOp(Ops.ENDRANGE, dtypes.bool, (outer,))]


def _copies(out: list[UOp]) -> tuple[list[UOp], list[UOp]]:
  ops = [u.op for u in out]
  return out[ops.index(Ops.IF):ops.index(Ops.ELSE)], out[ops.index(Ops.ELSE):ops.index(Ops.ENDIF)]


def test_a_lane_mask_computed_before_the_loop_versions_the_loop_on_one_comparison():
  out = unswitch_gated_loops(_vector_mask_program(mask_inside=False))
  ops = [u.op for u in out]
  assert ops.count(Ops.IF) == 1 and ops.index(Ops.IF) < ops.index(Ops.RANGE, ops.index(Ops.IF))   # before the loop
  test = out[ops.index(Ops.IF)].src[0]
  # every lane of outer*4 + (0..3) < n: the last lane's index outer*4 + 3 < n, no lane read one by one
  assert test.op is Ops.CMPLT and test.src[0].op is Ops.ADD and test.src[0].src[1].arg == 3
  assert not any(u.op is Ops.GEP for u in test.toposort())
  fast, slow = _copies(out)
  assert not any(u.op is Ops.WHERE for u in fast)                  # where(mask, x, 0) -> x
  assert all(len(u.src) == 2 for u in fast if u.op is Ops.LOAD) and all(len(u.src) == 3 for u in fast
                                                                      if u.op is Ops.STORE)
  assert any(len(u.src) == 3 for u in slow if u.op is Ops.LOAD)


def test_a_lane_mask_that_changes_with_the_loop_versions_each_iteration():
  out = unswitch_gated_loops(_vector_mask_program(mask_inside=True))
  ops = [u.op for u in out]
  assert ops.count(Ops.IF) == 1 and ops.count(Ops.RANGE) == 2      # no loop emitted twice
  r = [u for u in out if u.op is Ops.RANGE][1]
  assert out.index(r) < ops.index(Ops.IF) < ops.index(Ops.ENDIF) < out.index(next(
    u for u in out if u.op is Ops.ENDRANGE and u.src[0] is r))     # the test is inside the loop
  mask = next(u for u in out if u.op is Ops.CMPLT and u.dtype.count == 4)
  assert out.index(mask) < ops.index(Ops.IF)                       # the mask is computed once, before both copies
  fast, slow = _copies(out)
  assert all(len(u.src) == 2 for u in fast if u.op is Ops.LOAD) and not any(u.op is Ops.WHERE for u in fast)
  assert any(u.op is Ops.WHERE for u in slow)


def test_the_last_loop_closed_where_the_program_ends_is_versioned_too():
  """Output loops have no ENDRANGE: they close where the program ends. The innermost one of a softmax's last pass
  (a vector loop along a row of 750 keys, masked at its end) is versioned per iteration like a reduce loop, so on
  AVX2 every vector but the row's last is a plain load and store (`vmaskmovps` stores are slow on some CPUs)."""
  program = _vector_mask_program(mask_inside=True)[:-2]          # no ENDRANGEs: both loops close at the end
  out = unswitch_gated_loops(program)
  ops = [u.op for u in out]
  assert ops.count(Ops.IF) == 1 and ops.count(Ops.RANGE) == 2 and ops.index(Ops.RANGE, 1) < ops.index(Ops.IF)
  fast, slow = _copies(out)
  assert all(len(u.src) == 2 for u in fast if u.op is Ops.LOAD) and all(len(u.src) == 3 for u in fast
                                                                      if u.op is Ops.STORE)
  assert any(len(u.src) == 3 for u in slow if u.op is Ops.LOAD)
  x = RNG.standard_normal((3, 750)).astype(np.float32) * 4
  items, _ = schedule([Tensor(x, device="c").softmax(-1).uop], _alloc("c"))
  v3 = Target.make("c", cpu="x86-64-v3")
  source = lower(items[-1].ast, v3, name="normalize").src
  plain, masked = source.split("} else {")
  assert "tg_mstore_f32x8(" not in plain.split("if (")[-1] and "tg_mstore_f32x8(" in masked
