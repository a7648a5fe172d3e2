"""Reductions of an unrolled loop batched over its steps (codegen/batch_steps.py): x[t] @ W for every step t of a
recurrence becomes one matmul over all steps, read back step by step; the recurrence itself (h[t] from h[t-1]) is
never batched. Checked on the kernels the scheduler makes and on the numbers they compute (numpy references)."""
import numpy as np
import pytest
from tgc.frontend import Tensor
from tgc.frontend.realize import _alloc
from tgc.codegen.schedule import schedule
from tgc.codegen.batch_steps import batch_sliced_reductions
from tgc.ir import Ops

RNG = np.random.default_rng(3)


def _arr(*shape):
  return RNG.standard_normal(shape).astype(np.float32)


def _elman(x: Tensor, w: Tensor, u: Tensor, steps, reverse: bool = False) -> Tensor:
  """h[t] = tanh(x[t] @ w + h[t-1] @ u), the steps in the order given, outputs stacked in time order."""
  h = Tensor(np.zeros((1, u.shape[0]), np.float32), device=x.device)
  outs = {}
  for t in (reversed(steps) if reverse else steps):
    h = (x[t] @ w + h @ u).tanh()
    outs[t] = h
  return Tensor.stack([outs[t] for t in steps], 0)


def _elman_np(x, w, u, steps, reverse=False):
  h, outs = np.zeros((1, u.shape[0]), np.float32), {}
  for t in (reversed(steps) if reverse else steps):
    h = np.tanh(x[t] @ w + h @ u)
    outs[t] = h
  return np.stack([outs[t] for t in steps], 0)


def _reduce_kernels(items):
  return [it for it in items if any(n.op is Ops.REDUCE for n in it.ast.toposort())]


def test_input_projection_of_every_step_is_one_matmul():
  x, w, u = Tensor(_arr(9, 1, 24)), Tensor(_arr(24, 20)), Tensor(_arr(20, 20))
  items, _ = schedule([_elman(x, w, u, list(range(9))).uop], _alloc("numpy"))
  reads_w = [it for it in _reduce_kernels(items) if any(b.arg[1] == (24, 20) for b in it.bufs)]
  assert len(reads_w) == 1 and reads_w[0].bufs[0].arg[1][0] == 9       # one kernel: all 9 steps
  reads_u = [it for it in _reduce_kernels(items) if any(b.arg[1] == (20, 20) for b in it.bufs)]
  assert len(reads_u) >= 8                                              # the recurrence stays step by step


@pytest.mark.parametrize("device", ["numpy", "c"])
@pytest.mark.parametrize("steps,reverse", [(list(range(7)), False), (list(range(7)), True), ([1, 2, 4, 5], False)])
def test_batched_steps_compute_the_recurrence(device, steps, reverse):
  xa, wa, ua = _arr(7, 1, 16), _arr(16, 12) * 0.5, _arr(12, 12) * 0.5
  x, w, u = (Tensor(a, device=device) for a in (xa, wa, ua))
  got = _elman(x, w, u, steps, reverse).numpy()
  np.testing.assert_allclose(got, _elman_np(xa, wa, ua, steps, reverse), rtol=1e-4, atol=1e-5)


def test_steps_fed_by_their_own_results_are_not_batched():
  """An autoregressive loop: step t+1 reads the output of step t, cut from the stack of the outputs so far (another
  tensor at every step): nothing is batched."""
  w = Tensor(_arr(8, 8) * 0.5)
  ys = [Tensor(_arr(1, 8))]
  for _ in range(4):
    seq = Tensor.stack(ys, 0)                               # (t, 1, 8): every output so far
    ys.append((seq[len(ys) - 1] @ w).tanh())
  roots = [Tensor.stack(ys, 0).uop]
  assert batch_sliced_reductions(roots) == roots


def test_few_steps_of_a_long_axis_are_not_batched():
  """Two slices far apart: a batched reduction would compute every step between them."""
  x, w = Tensor(_arr(50, 1, 8)), Tensor(_arr(8, 4))
  roots = [((x[0] @ w) + (x[49] @ w)).uop]
  assert batch_sliced_reductions(roots) == roots
