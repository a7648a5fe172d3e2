"""Fusion is asserted by kernel counts, launch sizes and op counts: no kernel recomputes a reduce per output
element, no large kernel runs with a global size of 1, movement ops add no kernels."""
import numpy as np
import pytest
from tgc.frontend import Tensor
from tgc.frontend.realize import _alloc
from tgc.codegen.schedule import schedule
from tgc.codegen.lower import lower
from tgc.codegen.target import as_target
from tgc.ir import Ops


def kernels(t: Tensor, target="c"):
  items, _ = schedule([t.uop], _alloc("numpy"))
  return [lower(it.ast, as_target(target)) for it in items]


def rnd(*shape, seed=0):
  return Tensor(np.random.default_rng(seed).standard_normal(shape, dtype=np.float32) + 0.5, device="numpy")


def test_elementwise_into_reduce_is_one_kernel():
  a, b = rnd(33, 7), rnd(33, 7, seed=1)
  ks = kernels((a + b).relu().sum(axis=1))
  assert len(ks) == 1
  assert ks[0].global_size[0] == 33           # one work-item per output row, not 1
  assert ks[0].ops <= 3 * 33 * 7 + 33         # add, max, accumulate per input element: no recomputed reduce


def test_matmul_bias_relu_is_one_kernel():
  x, w, b = rnd(16, 32), rnd(32, 24, seed=1), rnd(24, seed=2)
  ks = kernels((x @ w + b).relu())
  assert len(ks) == 1
  assert ks[0].ops <= 2 * 16 * 32 * 24 + 2 * 16 * 24 + 16 * 24


def test_softmax_at_most_three_kernels_and_no_recomputed_reduce():
  x = rnd(64, 100)
  ks = kernels(x.softmax(-1))
  assert len(ks) <= 3
  for k in ks: assert k.ops <= 8 * 64 * 100     # a reduce recomputed per element would be 100x more


def test_an_erf_several_kernels_read_is_computed_once():
  """Whisper's residual stream: the GELU (an erf per element) of a convolution's output, transposed and added to the
  positions, is read by the layer norm's reductions and the residual adds. Each kernel computed the erf again; the
  value is now realized once, so exactly one kernel evaluates it, and the result matches numpy."""
  import math
  x, w, pos = rnd(48, 40), rnd(40, 64, seed=1), rnd(64, 48, seed=2)
  h = (x @ w).gelu().permute(1, 0) + pos
  mean = h.mean(axis=0, keepdim=True)
  out = (h - mean) * (h * h).mean(axis=0, keepdim=True) + h.sum(axis=1, keepdim=True)
  items, _ = schedule([out.uop], _alloc("numpy"))
  assert sum(any(n.op is Ops.EXP2 for n in it.ast.toposort()) for it in items) == 1
  xw = x.numpy() @ w.numpy()
  hh = (0.5 * xw * (1 + np.vectorize(math.erf)(xw / math.sqrt(2)))).T + pos.numpy()
  want = (hh - hh.mean(0, keepdims=True)) * (hh * hh).mean(0, keepdims=True) + hh.sum(1, keepdims=True)
  np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-3)


def test_a_strided_transposed_convolution_multiplies_no_inserted_zero():
  """A 2x2 stride-2 transposed convolution (a U-Net's upsampling) computes each output from the one input pixel it
  comes from: a multiply-add per input channel, not one per tap of a zero-stuffed input (4x as many)."""
  x, w = rnd(1, 8, 6, 5), rnd(8, 4, 2, 2, seed=1)
  ks = kernels(x.conv_transpose2d(w, stride=2))
  outputs = 4 * 12 * 10
  assert sum(k.ops for k in ks) <= 2 * 8 * outputs + 2 * outputs


@pytest.mark.parametrize("move", [lambda t: t.reshape(8, 4, 9), lambda t: t.permute(1, 0),
                                  lambda t: t.reshape(32, 9, 1).expand(32, 9, 5)])
def test_movement_before_elementwise_adds_no_kernel(move):
  a = rnd(32, 9)
  assert len(kernels((move(a) * 2 + 1).exp())) == 1


def test_broadcast_reduce_is_realized_once():
  x = rnd(50, 60)
  ks = kernels(x - x.mean(axis=1, keepdim=True))
  assert len(ks) == 2
  assert max(k.ops for k in ks) <= 4 * 50 * 60


def test_no_large_kernel_with_global_size_one():
  x = rnd(64, 64)
  for k in kernels((x * 3).sum(axis=0)) + kernels(x.exp()):
    assert k.global_size[0] > 1


def test_buffer_limit_splits_kernels():
  xs = [np.random.default_rng(i).standard_normal((5, 3), dtype=np.float32) for i in range(20)]
  out, ref = Tensor(xs[0], device="c"), xs[0]
  for x in xs[1:]:
    out, ref = out * 0.5 + Tensor(x, device="c"), ref * 0.5 + x
  items, outs = schedule([out.uop], _alloc("c"), max_buffers=8)
  assert all(len(it.bufs) <= 8 for it in items) and len(items) >= 3
  from tgc.frontend.realize import run_items, to_numpy
  run_items(items, "c")
  np.testing.assert_allclose(to_numpy(outs[0]), ref, rtol=1e-6)


def test_buffer_limit_impossible_is_a_clear_error():
  from tgc.codegen.schedule import ScheduleError
  xs = [rnd(4, seed=i) for i in range(4)]
  with pytest.raises(ScheduleError, match="allows 2 storage buffers"):
    schedule([(xs[0] + xs[1] + xs[2]).uop], _alloc("numpy"), max_buffers=2)
