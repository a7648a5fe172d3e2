"""Loop unswitching of gated loads (codegen/unswitch.py): a padded convolution's channel loop is emitted once with
plain loads for the interior of the image and once as it was for the borders; both agree with the reference."""
from __future__ import annotations
import numpy as np

from tgc.frontend import Tensor
from tgc.frontend.realize import _alloc
from tgc.codegen.schedule import schedule
from tgc.codegen.lower import lower
from tgc.codegen.unswitch import unswitch_gated_loops
from tgc.codegen.target import Target
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
