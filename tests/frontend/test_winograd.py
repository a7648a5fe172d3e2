"""Winograd's F(2x2, 3x3) convolution (frontend/winograd.py): the same values as the direct convolution on random
inputs (batches, odd sizes, asymmetric and no padding), the weight transform against its definition, when it
applies, and an ONNX convolution compiled for the C target in that form against onnx.reference; the integer form of
8-bit convolutions equal to numpy's integer sums exactly, and when it applies (tests/onnx/test_quantized_compute.py
compiles it)."""
from __future__ import annotations
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from tgc.frontend import Tensor, functional, winograd
from tgc.ir import dtypes

RNG = np.random.default_rng(3)


@pytest.mark.parametrize("bs, cin, cout, h, w, pads", [
    (1, 16, 16, 14, 14, ((1, 1), (1, 1))), (2, 16, 24, 15, 17, ((1, 1), (1, 1))), (1, 17, 16, 16, 16, ((0, 0), (0, 0))),
    (1, 16, 16, 15, 16, ((0, 1), (2, 1))), (1, 16, 18, 13, 13, ((2, 0), (0, 3)))])
def test_same_values_as_the_direct_convolution(bs, cin, cout, h, w, pads):
  x = RNG.standard_normal((bs, cin, h, w)).astype(np.float32)
  wt = RNG.standard_normal((cout, cin, 3, 3)).astype(np.float32)
  b = RNG.standard_normal(cout).astype(np.float32)
  want = functional.conv(Tensor(x, "numpy"), Tensor(wt, "numpy"), Tensor(b, "numpy"), 1, pads).numpy()
  got = winograd.conv2d(Tensor(x, "numpy"), wt, Tensor(b, "numpy"), pads).numpy()
  assert got.shape == want.shape
  assert np.abs(got - want).max() <= 2e-6 * np.abs(want).max()


def test_weight_transform_is_g_g_gt():
  w = RNG.standard_normal((3, 2, 3, 3))
  u = winograd.transformed_weights(w)
  for o in range(3):
    for c in range(2):
      full = winograd.G @ w[o, c] @ winograd.G.T          # rows xi, columns nu
      np.testing.assert_allclose(u[:, o, c].reshape(4, 4), full.T, rtol=1e-6, atol=1e-6)   # stored nu*4 + xi


def test_applies_only_where_it_pays_and_when_enabled():
  x = Tensor(np.zeros((1, 32, 28, 28), np.float32), "numpy")
  args = ((64, 32, 3, 3), (1, 1), [(1, 1), (1, 1)], (1, 1), 1)
  assert not winograd.applies(x, *args)                      # not enabled outside a trace for a CPU target
  with winograd.enabled():
    assert winograd.applies(x, *args)
    assert not winograd.applies(x, (64, 32, 3, 3), (2, 2), [(1, 1), (1, 1)], (1, 1), 1)     # stride 2
    assert not winograd.applies(x, (64, 32, 5, 5), (1, 1), [(2, 2), (2, 2)], (1, 1), 1)     # 5x5
    assert not winograd.applies(x, (64, 8, 3, 3), (1, 1), [(1, 1), (1, 1)], (1, 1), 4)      # grouped
    assert not winograd.applies(x, (64, 32, 3, 3), (1, 1), [(1, 1), (1, 1)], (2, 2), 1)     # dilated
    small = Tensor(np.zeros((1, 32, 12, 12), np.float32), "numpy")
    assert not winograd.applies(small, *args)                # a 12x12 output
    odd = Tensor(np.zeros((1, 32, 27, 27), np.float32), "numpy")
    assert not winograd.applies(odd, *args)                  # a 27x27 output
    assert not winograd.applies(x, (16, 32, 3, 3), *args[1:])                                # 16 channels out
    assert not winograd.applies(x.cast(dtypes.float16), *args)
  assert not winograd.applies(x, *args)


def _direct_sums(x: np.ndarray, zero: int, w: np.ndarray, pads) -> np.ndarray:
  """conv(x - zero, w) in int64 by numpy: each output the sum over the 3x3 window of its channels' products."""
  (top, bottom), (left, right) = pads
  d = np.pad(x.astype(np.int64) - zero, ((0, 0), (0, 0), (top, bottom), (left, right)))
  windows = np.lib.stride_tricks.sliding_window_view(d, (3, 3), axis=(2, 3))       # (b, c, oh, ow, 3, 3)
  return np.einsum("bchwij,ocij->bohw", windows, w.astype(np.int64))


@pytest.mark.parametrize("xdtype, zero, wdtype, shape, pads", [
    (np.uint8, 131, np.int8, (1, 16, 16, 14, 14), ((1, 1), (1, 1))),
    (np.int8, -3, np.int8, (2, 16, 24, 15, 17), ((1, 1), (1, 1))),
    (np.uint8, 0, np.uint8, (1, 17, 16, 16, 16), ((0, 0), (0, 0))),
    (np.uint8, 255, np.int8, (1, 16, 18, 13, 13), ((2, 0), (0, 3)))])
def test_integer_tiles_give_the_direct_sums_exactly(xdtype, zero, wdtype, shape, pads):
  """8-bit activations minus their zero point by full-range 8-bit weights: the int32 result equals numpy's int64
  sums (odd sizes, batches, asymmetric and no padding, extreme zero points: |Bᵀ d B| up to 4 * 255)."""
  bs, cin, cout, h, w = shape
  info = np.iinfo(xdtype)
  x = RNG.integers(info.min, int(info.max) + 1, (bs, cin, h, w)).astype(xdtype)
  x[..., :4, :4] = info.max if zero <= 0 else info.min          # tiles of one extreme value
  wi = np.iinfo(wdtype)
  wt = RNG.integers(wi.min, int(wi.max) + 1, (cout, cin, 3, 3)).astype(wdtype)
  got = winograd.conv2d_integers(Tensor(x, "numpy"), zero, wt, pads).numpy()
  assert got.dtype == np.int32
  np.testing.assert_array_equal(got, _direct_sums(x, zero, wt, pads))


def test_quadrupled_weights_are_four_times_g_g_gt_in_int16():
  w = RNG.integers(-128, 128, (5, 3, 3, 3)).astype(np.int8)
  u = winograd.quadrupled_weights(w)
  assert u.dtype == np.int16 and np.abs(u).max() <= 9 * 128
  np.testing.assert_array_equal(u, 4 * winograd.transformed_weights(w.astype(np.float64)))


def test_integer_tiles_apply_to_8bit_convolutions_when_enabled_and_within_int32():
  x = Tensor(np.zeros((1, 32, 28, 28), np.uint8), "numpy")
  w = RNG.integers(-128, 128, (64, 32, 3, 3)).astype(np.int8)
  args = ((1, 1), [(1, 1), (1, 1)], (1, 1), 1)
  with winograd.enabled():
    assert winograd.applies(x.cast(dtypes.float32), w.shape, *args)
    assert not winograd.integers_apply(x, w, *args)                     # integer tiles not asked for
  assert not winograd.integers_apply(x, w, *args)                       # not enabled outside a trace
  with winograd.enabled(integers=True):
    assert winograd.integers_apply(x, w, *args)
    assert winograd.integers_apply(x.cast(dtypes.int8), w, *args)
    assert not winograd.integers_apply(x.cast(dtypes.int16), w, *args)  # 8-bit activations only
    assert not winograd.integers_apply(x, w.astype(np.float32), *args)  # integer weights only
    assert not winograd.integers_apply(x, w, (2, 2), *args[1:])         # the shapes of `applies`
    # weights all -128: the 16 positions' |4U| sum to (2 + 3 + 1 + 2)**2 * 128 = 8192 per input channel (the row
    # sums of 2G), 4 * 255 times that over 257 channels is below 2**31, over 258 not
    wide = np.full((32, 258, 3, 3), -128, np.int8)
    x_wide = Tensor(np.zeros((1, 258, 16, 16), np.uint8), "numpy")
    assert not winograd.integers_apply(x_wide, wide, *args)
    assert winograd.integers_apply(x_wide[:, :257], wide[:, :257], *args)


def _conv_model(path) -> str:
  """conv 3x3 (pads 1) -> relu -> conv 3x3 (no pads): two convolutions in Winograd's form (32 channels, even sides)."""
  w1 = numpy_helper.from_array((RNG.standard_normal((32, 32, 3, 3)) * 0.1).astype(np.float32), "w1")
  b1 = numpy_helper.from_array(RNG.standard_normal(32).astype(np.float32), "b1")
  w2 = numpy_helper.from_array((RNG.standard_normal((40, 32, 3, 3)) * 0.1).astype(np.float32), "w2")
  nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
           helper.make_node("Relu", ["c1"], ["r1"]),
           helper.make_node("Conv", ["r1", "w2"], ["y"])]
  graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 18, 18])],
                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 40, 16, 16])], [w1, b1, w2])
  onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
  return str(path)


def test_onnx_convolutions_compiled_for_c_in_winograd_form(tmp_path):
  from tgc.aot.compile import compile_model
  from tgc.runtimes.artifact_c import CArtifact
  model = _conv_model(tmp_path / "conv.onnx")
  x = RNG.standard_normal((1, 32, 18, 18)).astype(np.float32)
  want = ReferenceEvaluator(model).run(None, {"x": x})[0]
  reports = {}
  for target in ("c", "opencl"):
    reports[target] = compile_model(model, target, str(tmp_path / target))
  got = CArtifact(str(tmp_path / "c"), cache_dir=str(tmp_path / "libs")).run({"x": x})["y"]
  assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
  # the 16 products are one kernel per convolution beside the transforms' pieces; GPU targets keep the direct sum
  assert reports["c"].kernels >= 2 * 4 > reports["opencl"].kernels
