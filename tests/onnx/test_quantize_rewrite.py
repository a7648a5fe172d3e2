"""The int8 rewrite of a float ONNX model (`frontend.onnx.quantize`): which nodes it quantizes, per-channel weight
scales, activation scales and zero points, the bias correction, determinism, and the quantized model run by
onnx.reference against the float model."""
from __future__ import annotations
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from tgc.frontend.onnx import quantize as q

RNG = np.random.default_rng(11)


def _w(name: str, *shape: int, scale: float = 0.3) -> onnx.TensorProto:
  return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)


def _model(opset: int = 19) -> onnx.ModelProto:
  """Conv -> Relu -> Flatten -> Gemm(transB) -> MatMul (through an Identity) -> Gemm -> MatMul with a computed B."""
  nodes = [helper.make_node("Conv", ["x", "wc", "bc"], ["c"], pads=[1, 1, 1, 1], name="conv"),
           helper.make_node("Relu", ["c"], ["r"]),
           helper.make_node("Flatten", ["r"], ["f"]),
           helper.make_node("Gemm", ["f", "wg", "bg"], ["g"], transB=1, name="gemm_t"),
           helper.make_node("Identity", ["wm"], ["wm_id"]),
           helper.make_node("MatMul", ["g", "wm_id"], ["m"], name="matmul"),
           helper.make_node("Gemm", ["m", "wg2"], ["h"], name="gemm"),
           helper.make_node("Transpose", ["h"], ["ht"]),
           helper.make_node("MatMul", ["h", "ht"], ["y"], name="matmul_activations")]
  inits = [_w("wc", 4, 2, 3, 3), _w("bc", 4), _w("wg", 6, 4 * 5 * 5), _w("bg", 6), _w("wm", 6, 5), _w("wg2", 5, 3)]
  graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2, 5, 5])],
                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])], inits)
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _inits(model: onnx.ModelProto) -> dict[str, np.ndarray]:
  return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def test_quantizable_nodes_and_axes():
  sites = q.quantizable(_model())
  assert [(s.node, s.weight, s.axis, s.activation) for s in sites] == [
      ("conv", "wc", 0, "x"), ("gemm_t", "wg", 0, "f"), ("matmul", "wm", 1, "g"), ("gemm", "wg2", 1, "m")]
  assert sites[2].via == "wm_id"
  assert q.activations(_model()) == ["x", "f", "g", "m"]


def test_weights_int8_per_output_channel():
  model = _model()
  out = q.quantize_model(model, {})
  inits, float_inits = _inits(out), _inits(model)
  for site in q.quantizable(model):
    w = float_inits[site.weight]
    qw, scale = inits[f"{site.weight}_quantized"], inits[f"{site.weight}_scale"]
    other = tuple(a for a in range(w.ndim) if a != site.axis)
    assert qw.dtype == np.int8 and scale.dtype == np.float32
    np.testing.assert_allclose(scale, np.abs(w).max(axis=other) / 127, rtol=1e-6)
    shape = tuple(-1 if a == site.axis else 1 for a in range(w.ndim))
    assert np.abs(qw.astype(np.float32) * scale.reshape(shape) - w).max() <= scale.max() / 2 * (1 + 1e-6)
    assert np.abs(qw).max() == 127 and not np.any(inits[f"{site.weight}_zero_point"])
    assert site.weight not in inits       # the float weight is gone (the Identity reading it too)
  assert "Identity" not in {n.op_type for n in out.graph.node}


def test_activation_params():
  scale, zero = q.activation_params(0.5, 2.0)          # widened to hold 0
  assert zero == 0 and scale == np.float32(2.0 / 255)
  scale, zero = q.activation_params(-1.0, 3.0)
  assert int(zero) == 64 and np.isclose(scale, 4.0 / 255)
  assert abs(-1.0 / scale + int(zero) - round(-1.0 / scale + int(zero))) < 0.5
  assert q.activation_params(0.0, 0.0) == (1.0, 0)
  with pytest.raises(q.QuantizeError): q.activation_params(float("nan"), 1.0)


def test_quantized_model_runs_close_to_float_and_is_deterministic():
  model = _model()
  x = RNG.standard_normal((2, 2, 5, 5)).astype(np.float32)
  ref = ReferenceEvaluator(model)
  values = {n: ref.run([n], {"x": x})[0] for n in ("f", "g", "m")}
  ranges = {"x": (float(x.min()), float(x.max())), **{n: (float(v.min()), float(v.max())) for n, v in values.items()}}
  out = q.quantize_model(model, ranges)
  assert out.SerializeToString() == q.quantize_model(model, ranges).SerializeToString()
  ops = [n.op_type for n in out.graph.node]
  assert ops.count("QuantizeLinear") == 4 and ops.count("DequantizeLinear") == 8
  want, got = ref.run(None, {"x": x})[0], ReferenceEvaluator(out).run(None, {"x": x})[0]
  assert np.abs(got - want).max() <= 0.05 * np.abs(want).max()


def test_activations_only_keeps_the_float_weights():
  """weights=False: the same activation pairs, every weight the float initializer (no DequantizeLinear reads one)."""
  model = _model()
  x = RNG.standard_normal((2, 2, 5, 5)).astype(np.float32)
  f = ReferenceEvaluator(model).run(["f"], {"x": x})[0]
  ranges = {"x": (float(x.min()), float(x.max())), "f": (float(f.min()), float(f.max()))}
  out = q.quantize_model(model, ranges, weights=False)
  floats, inits = _inits(model), _inits(out)
  for site in q.quantizable(model): np.testing.assert_array_equal(inits[site.weight], floats[site.weight])
  assert not any(name.endswith("_quantized") and value.dtype == np.int8 for name, value in inits.items())
  ops = [n.op_type for n in out.graph.node]
  assert ops.count("QuantizeLinear") == 2 and ops.count("DequantizeLinear") == 2
  want, got = ReferenceEvaluator(model).run(None, {"x": x})[0], ReferenceEvaluator(out).run(None, {"x": x})[0]
  assert 0 < np.abs(got - want).max() <= 0.05 * np.abs(want).max()


def test_bias_correction_restores_the_mean_output():
  """On an input equal to the calibrated mean everywhere, the corrected int8 weights give the float output."""
  model = _model()
  mean_x = RNG.standard_normal(2)
  x = np.broadcast_to(mean_x.reshape(1, 2, 1, 1), (2, 2, 5, 5)).astype(np.float32)
  conv_only = [q.quantizable(model)[0]]
  plain = q.quantize_model(model, {}, conv_only)
  fixed = q.quantize_model(model, {}, conv_only, means={"x": mean_x.astype(np.float32)})
  run = lambda m: ReferenceEvaluator(m).run(["c"], {"x": x})[0][:, :, 2, 2]   # noqa: E731 (interior: no padding)
  want = run(model)
  assert np.abs(run(fixed) - want).max() < 1e-5 < np.abs(run(plain) - want).max()


def test_matmul_bias_correction_adds_an_add():
  model = _model()
  site = q.quantizable(model)[2]
  out = q.quantize_model(model, {}, [site], means={"g": np.ones(6)})
  adds = [n for n in out.graph.node if n.op_type == "Add"]
  assert len(adds) == 1 and adds[0].output[0] == "m"


def test_old_opset_and_nothing_to_quantize_refused():
  with pytest.raises(q.QuantizeError, match="opset 12"): q.quantize_model(_model(12), {})
  graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
  with pytest.raises(q.QuantizeError, match="no Conv"):
    q.quantize_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), {})


def test_with_outputs_adds_typed_outputs():
  out = q.with_outputs(_model(), ["x", "f", "g"])
  names = [o.name for o in out.graph.output]
  assert names == ["y", "f", "g"]
  onnx.checker.check_model(out)


def test_max_pool_reads_its_input_quantized_alike():
  """conv -> relu -> maxpool -> conv: the maxpool's input gets the quantization of its output (same values)."""
  nodes = [helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1, 1, 1, 1], name="conv1"),
           helper.make_node("Relu", ["c"], ["r"]),
           helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
           helper.make_node("Conv", ["p", "w2"], ["y"], name="conv2")]
  graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 6])],
                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 3, 3])],
                            [_w("w1", 4, 2, 3, 3), _w("w2", 3, 4, 1, 1)])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
  x = RNG.standard_normal((1, 2, 6, 6)).astype(np.float32)
  p = ReferenceEvaluator(model).run(["p"], {"x": x})[0]
  out = q.quantize_model(model, {"x": (float(x.min()), float(x.max())), "p": (0.0, float(p.max()))})
  pool = next(n for n in out.graph.node if n.op_type == "MaxPool")
  assert pool.input[0] == "r_dequantized"
  got = ReferenceEvaluator(out).run(["p", "p_dequantized"], {"x": x})
  np.testing.assert_array_equal(got[0], got[1])      # the pooled values are on the grid already
