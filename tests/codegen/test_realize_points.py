"""Realize points for values a reduce reads through an expand: a computed elementwise producer (BatchNorm+Relu
before a conv, Gelu before a matmul, softmax before attention's second matmul) is computed once into a buffer of
its own, never once per use; a buffer is never a broadcast copy bigger than its sources. Evaluation counts are read
from the kernel ASTs (an op inside loops runs once per iteration of every range it depends on)."""
import math
import numpy as np
import pytest
from tgc.frontend import Tensor
from tgc.frontend.onnx import compose_nn
from tgc.frontend.realize import _alloc
from tgc.codegen.schedule import schedule
from tgc.ir import Ops, dtypes


def rnd(*shape, seed=0, device="numpy"):
  return Tensor(np.random.default_rng(seed).standard_normal(shape, dtype=np.float32), device=device)


def scheduled(t: Tensor, max_buffers=None):
  items, _ = schedule([t.uop], _alloc("numpy"), max_buffers=max_buffers)
  return items


def evaluations(items, op: Ops) -> int:
  """How many times the kernels evaluate `op`: per node, the product of the sizes of the ranges it depends on."""
  total = 0
  for it in items:
    for n in it.ast.toposort():
      if n.op is op:
        total += math.prod(r.src[0].arg for r in n.toposort() if r.op is Ops.RANGE)
  return total


def out_shapes(items) -> list[tuple]:
  return [tuple(it.bufs[0].arg[1]) for it in items]


def out_sizes(items) -> list[tuple]:
  """Output shapes without their size-1 dims (a realized reduce keeps its reduced dims)."""
  return [tuple(s for s in it.bufs[0].arg[1] if s != 1) for it in items]


def batchnorm(x, c: int, seed: int, device="numpy"):
  """Inference BatchNorm with per-channel statistics as buffers (not folded), as the ONNX importer builds it."""
  mean, scale, bias, var = (rnd(c, 1, 1, seed=seed + i, device=device) for i in range(4))
  return (x - mean) / (var.abs() + 0.5 + 1e-5).sqrt() * scale + bias


def bn_relu_conv(device="numpy"):
  x, w = rnd(1, 8, 12, 12, device=device), rnd(16, 8, 3, 3, seed=1, device=device)
  return batchnorm(x, 8, 2, device).relu().conv2d(w, padding=1)


def test_batchnorm_relu_before_conv_is_computed_once():
  items = scheduled(bn_relu_conv())
  assert out_shapes(items) == [(1, 8, 12, 12), (1, 16, 12, 12)]   # realized un-padded, un-windowed
  # one division per input element; fused into the conv it ran per output element, tap and input channel
  assert evaluations(items, Ops.FDIV) == 8 * 12 * 12


def test_gelu_before_matmul_is_computed_once():
  h, w = rnd(32, 64), rnd(64, 48, seed=1)
  items = scheduled((h * 0.5 * (1 + (h * 0.7071).tanh())) @ w)
  assert out_shapes(items) == [(32, 64), (32, 48)]
  assert evaluations(items, Ops.EXP2) == 32 * 64                # not 48 times each


def test_softmax_before_matmul_is_computed_once():
  q, k, v = rnd(32, 16), rnd(32, 16, seed=1), rnd(32, 16, seed=2)
  items = scheduled((q @ k.T).softmax(-1) @ v)
  assert (32, 32) in out_shapes(items)
  assert evaluations(items, Ops.EXP2) <= 2 * 32 * 32            # the sum's exp and the normalized values', once each


def test_cheap_producer_stays_fused():
  x, w = rnd(16, 32), rnd(32, 24, seed=1)
  assert len(scheduled((x * 2) @ w)) == 1                       # one multiply by a constant: no buffer for it
  assert len(scheduled(x.cast(dtypes.float16) @ w)) == 1         # casts only


def test_mobilenet_block_realizes_activations_not_windows():
  """MobileNet's block: BN+Relu6 into a depthwise conv, BN+Relu6 into a 1x1 conv, plus a residual, with the
  8-buffer limit every capture uses: each activation is one [1, C, H, W] buffer, no window or per-channel copy."""
  x = rnd(1, 8, 12, 12)
  dw, pw = rnd(8, 1, 3, 3, seed=1), rnd(24, 8, 1, 1, seed=2)
  y = batchnorm(batchnorm(x, 8, 3).clip(0, 6).conv2d(dw, padding=1, groups=8), 8, 7).clip(0, 6)
  items = scheduled(batchnorm(y.conv2d(pw), 24, 11) + rnd(1, 24, 12, 12, seed=15), max_buffers=8)
  assert all(len(it.bufs) <= 8 for it in items)
  assert out_shapes(items) == [(1, 8, 12, 12), (1, 8, 12, 12), (1, 24, 12, 12)]


def test_buffer_limit_never_splits_off_a_broadcast_copy():
  """Nine inputs exceed the limit; the node reading the most of them is an outer product (a broadcast of a [8] and
  a [100] value): the split goes on its un-expanded [8] operand, the outer product stays index math."""
  small = [rnd(8, seed=i) for i in range(6)]
  p = small[0]
  for t in small[1:]: p = p * t
  outer = p.reshape(8, 1).expand(8, 100) * rnd(1, 100, seed=6).expand(8, 100)
  items = scheduled(outer + rnd(8, 100, seed=7) + rnd(8, 100, seed=8), max_buffers=8)
  assert out_shapes(items) == [(8,), (8, 100)]


@pytest.mark.parametrize("build", ["bn_relu_conv", "gelu_matmul", "attention"])
def test_realized_producers_compute_the_same_values(build):
  if build == "bn_relu_conv":
    got, ref = bn_relu_conv("c"), bn_relu_conv("numpy")
  else:
    def model(device):
      a, b, c = rnd(24, 40, device=device), rnd(40, 24, seed=1, device=device), rnd(24, 16, seed=2, device=device)
      if build == "gelu_matmul": return ((a * 0.5 * (1 + (a * 0.7071).tanh())) @ b).relu()
      return (a @ b).softmax(-1) @ c
    got, ref = model("c"), model("numpy")
  np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-4, atol=1e-5)


def test_schedule_is_the_same_for_the_same_graph():
  """Kernels do not depend on where nodes sit in memory or on buffer numbering: a graph with ties for where to split
  (a balanced sum of 9 buffers, over the 8-buffer limit: two equal halves) schedules the same every time it is
  built, in one process, while earlier copies are still alive."""
  def build():
    xs = [rnd(4, 4, seed=i) for i in range(9)]
    pairs = [xs[i] + xs[i + 1] for i in range(0, 8, 2)]
    return ((pairs[0] + pairs[1]) + (pairs[2] + pairs[3])) + xs[8]
  graphs = [build() for _ in range(8)]
  schedules = {tuple(it.ast.key for it in scheduled(t, max_buffers=8)) for t in graphs}
  assert len(schedules) == 1


def test_concatenation_read_by_a_convolution_is_computed_once():
  """A Concat of upsampled maps feeding a 3x3 conv (an FPN head): the concatenation is one buffer, not a chain of
  selects and divisions evaluated for every tap of every output channel; each of its pieces is a kernel of its own
  writing its part of that buffer."""
  a, b = rnd(1, 4, 8, 8), rnd(1, 4, 4, 4, seed=1)
  up = b.reshape(1, 4, 4, 1, 4, 1).expand(1, 4, 4, 2, 4, 2).reshape(1, 4, 8, 8)
  w = rnd(6, 8, 3, 3, seed=2)
  items = scheduled(Tensor.cat(a, up, dim=1).conv2d(w, padding=1))
  assert out_shapes(items) == [(1, 8, 8, 8), (1, 8, 8, 8), (1, 6, 8, 8)]
  assert items[0].bufs[0] is items[1].bufs[0] and not any(n.op is Ops.WHERE for n in items[0].ast.toposort())


def test_unrelated_reductions_get_kernels_of_their_own():
  """A residual block's 3x3 conv plus its 1x1 downsample conv of another input: two kernels (each register-blocked
  on its own), the sum in the epilogue of the larger one."""
  x, y = rnd(1, 8, 8, 8), rnd(1, 4, 8, 8, seed=1)
  w3, w1 = rnd(16, 8, 3, 3, seed=2), rnd(16, 4, 1, 1, seed=3)
  items = scheduled((x.conv2d(w3, padding=1) + y.conv2d(w1)).relu())
  assert out_sizes(items) == [(16, 8, 8), (16, 8, 8)]
  assert [sum(n.op is Ops.REDUCE for n in it.ast.toposort()) for it in items] == [1, 1]


def test_reductions_of_the_same_values_stay_together():
  x = rnd(16, 64)
  mean, mean_sq = x.mean(-1, keepdim=True), (x * x).mean(-1, keepdim=True)
  items = scheduled(mean_sq - mean * mean)
  assert len(items) == 1


def test_a_reduction_read_in_halves_is_computed_once():
  """An STFT as a conv whose output channels are split into real and imaginary halves (Slice, then re^2 + im^2):
  the conv is one kernel (blocked over all its channels), not two reductions per output element."""
  x, w = rnd(1, 1, 400), rnd(16, 1, 40, seed=1)
  spec = x.reshape(1, 1, 1, 400).conv2d(w.reshape(16, 1, 1, 40), stride=(1, 20)).reshape(1, 16, 19)
  re, im = spec[:, :8], spec[:, 8:]
  items = scheduled(re * re + im * im)
  assert out_sizes(items) == [(16, 19), (8, 19)]


def test_softmax_input_is_stored_once_when_computed():
  """The values a maximum is taken of are stored before the softmax reads them: every kernel then sees the same
  roundings (a scale recomputed in each kernel, contracted into an FMA in one, could put x - max x far below zero
  everywhere for large x)."""
  x = rnd(4, 100)
  items = scheduled((x * 0.125).softmax(-1))
  assert (4, 100) in out_shapes(items)[:-1]


def test_a_reduction_two_kernels_read_is_computed_once():
  """An LRN after a conv: the activation is squared into a realized window sum over channels and divided by that
  sum. The conv is its own kernel, not computed again in both."""
  x, w = rnd(1, 4, 6, 6), rnd(8, 4, 3, 3, seed=1)
  act = x.conv2d(w, padding=1).relu()
  window = compose_nn.move_axis(compose_nn.windows(compose_nn.move_axis(act * act, 1, -1), (5,), (1,), (1,),
                                                  [(2, 2)]).sum(-1), -1, 1)
  items = scheduled(act / (1 + 1e-4 * window) ** 0.75)
  assert evaluations(items, Ops.REDUCE) == evaluations(scheduled(x.conv2d(w, padding=1)), Ops.REDUCE) + 8 * 6 * 6 * 5
