"""Winograd's F(2x2, 3x3) convolution (frontend/winograd.py): the same values as the direct convolution on random
inputs (batches, odd sizes, asymmetric and no padding), the weight transform against its definition, when it
applies, and an ONNX convolution compiled for the C target in that form against onnx.reference."""
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
