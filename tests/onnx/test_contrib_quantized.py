"""onnxruntime's com.microsoft integer matrix operators (QGemm, DynamicQuantizeMatMul, MatMulIntegerToFloat,
DynamicQuantizeLSTM) and QLinearSoftmax compiled for the C target and run against onnxruntime's own kernels (one
thread, graph optimizations off) on random non-zero data: integer outputs equal (QLinearSoftmax: at most one step
apart), float outputs to a tight tolerance. Also an LSTM
model quantized by onnxruntime.quantization.quantize_dynamic, which writes DynamicQuantizeLSTM."""
from __future__ import annotations
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from contrib_models import MS, dynamic_quantize_lstm, one_node, ort_run
from tgc.aot.compile import compile_model
from tgc.aot.onnx_backend import TgcBackend

RNG = np.random.default_rng(21)


def tgc_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
  with TgcBackend.prepare(model, "c") as rep: return list(rep.run(feeds))


def compare(model: onnx.ModelProto, feeds: dict[str, np.ndarray], rtol: float = 1e-5, atol: float = 1e-5) -> None:
  want = ort_run(model, feeds)
  got = tgc_run(model, feeds)
  assert len(got) == len(want)
  for g, w in zip(got, want):
    assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
    if np.issubdtype(w.dtype, np.integer): np.testing.assert_array_equal(g, w)
    else: np.testing.assert_allclose(g, w, rtol=rtol, atol=atol * float(np.abs(w).max()))


def u8(*shape): return RNG.integers(1, 256, shape).astype(np.uint8)
def i8(*shape): return RNG.integers(-127, 128, shape).astype(np.int8)
def f32(value): return np.array(value, np.float32)


# ---------------------------------------------------------------- QGemm
@pytest.mark.parametrize("case", ["requant_per_column", "float_out", "int8_requant"])
def test_qgemm(case):
  m, k, n = 5, 24, 7
  signed = case == "int8_requant"
  a = i8(m, k) if signed else u8(k, m) if case == "float_out" else u8(m, k)
  a_zp = np.array(3 if signed else 120, np.int8 if signed else np.uint8)
  inits = {"a_scale": f32(0.02), "a_zp": a_zp, "b": i8(n, k) if case != "float_out" else i8(k, n),
           "c": RNG.integers(-2000, 2000, n).astype(np.int32)}
  if case == "requant_per_column":
    inits |= {"b_scale": RNG.uniform(0.002, 0.01, n).astype(np.float32), "b_zp": np.zeros(n, np.int8)}
  else: inits |= {"b_scale": f32(0.004), "b_zp": np.array(0 if signed else 2, np.int8)}
  names = ["a", "a_scale", "a_zp", "b", "b_scale", "b_zp", "c"]
  if case == "float_out":
    model = one_node("QGemm", names, {"a": a}, inits, [("y", TensorProto.FLOAT, [m, n])], transA=1, alpha=0.5)
  else:
    y_zp = np.array(-5 if signed else 128, np.int8 if signed else np.uint8)
    inits |= {"y_scale": f32(0.05), "y_zp": y_zp}
    model = one_node("QGemm", names + ["y_scale", "y_zp"], {"a": a}, inits,
                     [("y", TensorProto.INT8 if signed else TensorProto.UINT8, [m, n])], transB=1)
  compare(model, {"a": a})


# ---------------------------------------------------------------- MatMul with a float result
@pytest.mark.parametrize("per_column", [False, True])
def test_dynamic_quantize_matmul(per_column):
  k, n = 32, 12
  a = RNG.standard_normal((2, 3, k)).astype(np.float32)
  a[0, 0, 0] = 2.5                                     # an asymmetric range: a non-trivial zero point
  scale = RNG.uniform(0.002, 0.01, n).astype(np.float32) if per_column else f32(0.006)
  zp = np.full(scale.shape, 0, np.int8)
  inits = {"b": i8(k, n), "b_scale": scale, "b_zp": zp, "bias": RNG.standard_normal(n).astype(np.float32)}
  model = one_node("DynamicQuantizeMatMul", ["a", "b", "b_scale", "b_zp", "bias"], {"a": a}, inits,
                   [("y", TensorProto.FLOAT, [2, 3, n])])
  compare(model, {"a": a})


def test_matmul_integer_to_float():
  k, n = 20, 9
  a = u8(4, k)
  inits = {"b": u8(k, n), "a_scale": f32(0.03), "b_scale": RNG.uniform(0.002, 0.01, n).astype(np.float32),
           "a_zp": np.array(128, np.uint8), "b_zp": np.full(n, 100, np.uint8),
           "bias": RNG.standard_normal(n).astype(np.float32)}
  model = one_node("MatMulIntegerToFloat", ["a", "b", "a_scale", "b_scale", "a_zp", "b_zp", "bias"], {"a": a}, inits,
                   [("y", TensorProto.FLOAT, [4, n])])
  compare(model, {"a": a})


@pytest.mark.parametrize("a_zp", [np.array(131, np.uint8), np.arange(120, 124).astype(np.uint8)])
def test_matmul_integer_of_int8_weights(a_zp):
  """MatMulInteger of uint8 activations (zero point a run-time input: one value or one per row) and int8 weights
  without a zero point, the form dynamic quantization writes: summed on the 8-bit values, the zero point applied to
  the weights' column sums. Against numpy's int64 product (onnxruntime and onnx.reference take one zero point only)."""
  k, n = 36, 20
  a, b = u8(4, k), i8(k, n)
  info = helper.make_tensor_value_info
  node = helper.make_node("MatMulInteger", ["a", "b", "a_zp"], ["y"], name="mmi")
  graph = helper.make_graph([node], "mmi", [info("a", TensorProto.UINT8, [4, k]),
                                            info("a_zp", TensorProto.UINT8, list(a_zp.shape))],
                            [info("y", TensorProto.INT32, [4, n])], [numpy_helper.from_array(b, "b")])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
  want = (a.astype(np.int64) - a_zp.astype(np.int64).reshape(-1, 1)) @ b.astype(np.int64)
  np.testing.assert_array_equal(tgc_run(model, {"a": a, "a_zp": a_zp})[0], want.astype(np.int32))


def test_matmul_integer_to_float_of_int8_weights():
  k, n = 20, 9
  a = u8(4, k)
  inits = {"b": i8(k, n), "a_scale": f32(0.03), "b_scale": RNG.uniform(0.002, 0.01, n).astype(np.float32),
           "a_zp": np.array(128, np.uint8), "b_zp": np.zeros(n, np.int8)}
  model = one_node("MatMulIntegerToFloat", ["a", "b", "a_scale", "b_scale", "a_zp", "b_zp"], {"a": a}, inits,
                   [("y", TensorProto.FLOAT, [4, n])])
  compare(model, {"a": a})


# ---------------------------------------------------------------- DynamicQuantizeLSTM
def quantized_lstm_weights(w: np.ndarray, per_column: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """ONNX LSTM weights [dirs, 4h, K] as DynamicQuantizeLSTM's [dirs, K, 4h] int8 with symmetric scales."""
  wt = np.ascontiguousarray(w.transpose(0, 2, 1))
  amax = np.abs(wt).max(axis=1) if per_column else np.abs(wt).max(axis=(1, 2))[:, None]
  scale = (amax / 127.0).astype(np.float32)
  q = np.clip(np.round(wt / scale[:, None, :]), -127, 127).astype(np.int8)
  return q, scale if per_column else scale.reshape(-1), np.zeros(scale.shape if per_column else len(w), np.int8)


@pytest.mark.parametrize("direction,per_column", [("forward", False), ("bidirectional", True), ("reverse", True)])
def test_dynamic_quantize_lstm(direction, per_column):
  seq, batch, k, h = 6, 2, 10, 8
  dirs = 2 if direction == "bidirectional" else 1
  x = RNG.standard_normal((seq, batch, k)).astype(np.float32)
  weights = quantized_lstm_weights(RNG.standard_normal((dirs, 4 * h, k)).astype(np.float32) * 0.4, per_column)
  recurrent = quantized_lstm_weights(RNG.standard_normal((dirs, 4 * h, h)).astype(np.float32) * 0.4, per_column)
  model = dynamic_quantize_lstm(x, weights, recurrent, direction, RNG)
  compare(model, {"x": x}, rtol=1e-4, atol=1e-4)


def test_dynamic_quantize_lstm_reads_the_hidden_state_in_8_bits(tmp_path: Path):
  """The hidden state quantized at each step is stored as uint8, so the recurrent product multiplies 8-bit values
  (the CPU's dot-product instructions) rather than int32 copies of them."""
  seq, batch, k, h = 4, 1, 16, 32
  w, ws, wz = quantized_lstm_weights(RNG.standard_normal((1, 4 * h, k)).astype(np.float32) * 0.4, True)
  r, rs, rz = quantized_lstm_weights(RNG.standard_normal((1, 4 * h, h)).astype(np.float32) * 0.4, True)
  model = one_node("DynamicQuantizeLSTM", ["x", "w", "r", "", "", "", "", "", "ws", "wz", "rs", "rz"],
                   {"x": RNG.standard_normal((seq, batch, k)).astype(np.float32)},
                   {"w": w, "r": r, "ws": ws, "wz": wz, "rs": rs, "rz": rz},
                   [("yh", TensorProto.FLOAT, [1, batch, h])], hidden_size=h)
  onnx.save(model, str(tmp_path / "lstm.onnx"))
  report = compile_model(str(tmp_path / "lstm.onnx"), "c", str(tmp_path / "out"))
  manifest = json.loads((Path(report.out_dir) / "manifest.json").read_text())
  arena = manifest["arena_buffers"]
  step_reads = [a for c in manifest["calls"] for a in c["args"][1:] if a["kind"] == "arena"]
  assert any(arena[a["index"]]["dtype"] == "uint8" and arena[a["index"]]["shape"] == [batch, h] for a in step_reads)
  assert not any(arena[a["index"]]["dtype"] == "int32" and arena[a["index"]]["shape"] == [batch, h]
                 for a in step_reads)


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_dynamic_quantize_lstm_sequence_lens(direction):
  """Sequences of different lengths: X quantized over the steps up to the longest one (the padding after it holds
  large values that must not count), each step's hidden state over the sequences still running."""
  seq, batch, k, h = 6, 3, 5, 8
  dirs = 2 if direction == "bidirectional" else 1
  x = RNG.standard_normal((seq, batch, k)).astype(np.float32)
  x[5] = 9.0
  w, ws, wz = quantized_lstm_weights(RNG.standard_normal((dirs, 4 * h, k)).astype(np.float32) * 0.4, True)
  r, rs, rz = quantized_lstm_weights(RNG.standard_normal((dirs, 4 * h, h)).astype(np.float32) * 0.4, True)
  inits = {"w": w, "r": r, "b": RNG.standard_normal((dirs, 8 * h)).astype(np.float32) * 0.1,
           "lens": np.array([2, 5, 3], np.int32), "ws": ws, "wz": wz, "rs": rs, "rz": rz}
  outputs = [("y", TensorProto.FLOAT, [seq, dirs, batch, h]), ("yh", TensorProto.FLOAT, [dirs, batch, h])]
  model = one_node("DynamicQuantizeLSTM", ["x", "w", "r", "b", "lens", "", "", "", "ws", "wz", "rs", "rz"], {"x": x},
                   inits, outputs, hidden_size=h, direction=direction)
  compare(model, {"x": x}, rtol=1e-4, atol=1e-4)


def test_unsupported_zero_points_name_the_node():
  from tgc.frontend.onnx import OnnxError, load_model
  h, k = 4, 3
  w, ws, _ = quantized_lstm_weights(RNG.standard_normal((1, 4 * h, k)).astype(np.float32), True)
  r, rs, rz = quantized_lstm_weights(RNG.standard_normal((1, 4 * h, h)).astype(np.float32), True)
  wz = np.arange(4 * h, dtype=np.int8).reshape(1, -1)           # zero points that differ between columns
  model = one_node("DynamicQuantizeLSTM", ["x", "w", "r", "", "", "", "", "", "ws", "wz", "rs", "rz"],
                   {"x": np.zeros((2, 1, k), np.float32)}, {"w": w, "r": r, "ws": ws, "wz": wz, "rs": rs, "rz": rz},
                   [("y", TensorProto.FLOAT, [2, 1, 1, h])], hidden_size=h)
  with pytest.raises(OnnxError, match="dynamicquantizelstm_node.*W_zero_point differs"):
    load_model(model)()


def test_quantize_dynamic_lstm_model(tmp_path: Path):
  """An embedding + LSTM + projection model through onnxruntime.quantization.quantize_dynamic: the LSTM becomes
  DynamicQuantizeLSTM, the projection DynamicQuantizeLinear + MatMulInteger."""
  q = pytest.importorskip("onnxruntime.quantization", reason="onnxruntime is not installed (pip install "
                                                             "onnxruntime): it writes the quantized model")
  seq, batch, k, h = 7, 1, 16, 12
  info = helper.make_tensor_value_info
  w = lambda name, *shape: numpy_helper.from_array((RNG.standard_normal(shape) * 0.3).astype(np.float32), name)  # noqa
  nodes = [helper.make_node("LSTM", ["x", "W", "R", "B"], ["y", "yh", "yc"], hidden_size=h, name="lstm"),
           helper.make_node("Squeeze", ["y", "axis"], ["ys"], name="squeeze"),
           helper.make_node("MatMul", ["ys", "P"], ["logits"], name="proj")]
  graph = helper.make_graph(nodes, "lstm", [info("x", TensorProto.FLOAT, [seq, batch, k])],
                            [info("logits", TensorProto.FLOAT, [seq, batch, 20]),
                             info("yh", TensorProto.FLOAT, [1, batch, h])],
                            [w("W", 1, 4 * h, k), w("R", 1, 4 * h, h), w("B", 1, 8 * h),
                             numpy_helper.from_array(np.array([1], np.int64), "axis"), w("P", h, 20)])
  src, dst = tmp_path / "lstm.onnx", tmp_path / "lstm_dynq.onnx"
  onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(src))
  q.quantize_dynamic(str(src), str(dst), weight_type=q.QuantType.QInt8)
  model = onnx.load(str(dst))
  assert "DynamicQuantizeLSTM" in {n.op_type for n in model.graph.node}
  x = RNG.standard_normal((seq, batch, k)).astype(np.float32)
  compare(model, {"x": x}, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- QLinearSoftmax
@pytest.mark.parametrize("opset,axis,signed", [(13, -1, False), (13, 1, True), (12, 1, False), (12, None, False)])
def test_qlinear_softmax(opset, axis, signed):
  """onnxruntime's table-driven kernel: at most one step apart (its float sum runs in another order), mostly equal.
  Without an axis attribute the axis is -1 whatever the opset (the contrib schema's default)."""
  x = i8(2, 5, 16) if signed else u8(2, 5, 16)
  zp = np.array(-128 if signed else 0, np.int8 if signed else np.uint8)
  inits = {"x_scale": f32(0.08), "x_zp": np.array(1 if signed else 130, zp.dtype), "y_scale": f32(1 / 256),
           "y_zp": zp}
  model = one_node("QLinearSoftmax", ["x", "x_scale", "x_zp", "y_scale", "y_zp"], {"x": x}, inits,
                   [("y", TensorProto.INT8 if signed else TensorProto.UINT8, [2, 5, 16])], opset=opset,
                   **({} if axis is None else {"axis": axis}))
  (want,), (got,) = ort_run(model, {"x": x}), tgc_run(model, {"x": x})
  assert got.dtype == want.dtype and got.shape == want.shape
  diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
  assert diff.max() <= 1 and (diff == 0).mean() > 0.98, (diff.max(), (diff == 0).mean())


@pytest.mark.parametrize("channels_last", [0, 1])
def test_qlinear_average_pool(channels_last):
  """Dequantize, average, quantize: at most one step from onnxruntime's kernel, mostly equal."""
  shape = [1, 7, 9, 3] if channels_last else [1, 3, 7, 9]
  x = u8(*shape)
  inits = {"x_scale": f32(0.05), "x_zp": np.array(128, np.uint8), "y_scale": f32(0.03), "y_zp": np.array(120, np.uint8)}
  out = [1, 4, 4, 3] if channels_last else [1, 3, 4, 4]
  model = one_node("QLinearAveragePool", ["x", "x_scale", "x_zp", "y_scale", "y_zp"], {"x": x}, inits,
                   [("y", TensorProto.UINT8, out)], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 1, 1],
                   count_include_pad=0, channels_last=channels_last)
  (want,), (got,) = ort_run(model, {"x": x}), tgc_run(model, {"x": x})
  assert got.dtype == want.dtype and got.shape == want.shape
  diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
  assert diff.max() <= 1 and (diff == 0).mean() > 0.9, (diff.max(), (diff == 0).mean())


@pytest.mark.parametrize("zp_type", [np.int8, np.uint16, np.int16])
def test_contrib_quantize_dequantize(zp_type):
  """com.microsoft QuantizeLinear (per-axis) then DequantizeLinear: the ONNX operators, equal to onnxruntime's."""
  x = (RNG.standard_normal((2, 4, 5)) * 40).astype(np.float32)
  info = np.iinfo(zp_type)
  inits = {"scale": RNG.uniform(0.05, 0.3, 4).astype(np.float32),
           "zp": RNG.integers(max(info.min, -20), min(info.max, 20) + 1, 4).astype(zp_type)}
  graph_inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 5])]
  elem = helper.np_dtype_to_tensor_dtype(np.dtype(zp_type))
  nodes = [helper.make_node("QuantizeLinear", ["x", "scale", "zp"], ["q"], domain=MS, name="q", axis=1),
           helper.make_node("DequantizeLinear", ["q", "scale", "zp"], ["y"], domain=MS, name="dq", axis=1)]
  outputs = [helper.make_tensor_value_info("q", elem, [2, 4, 5]),
             helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 5])]
  graph = helper.make_graph(nodes, "qdq", graph_inputs, outputs,
                            [numpy_helper.from_array(v, k) for k, v in inits.items()])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
  compare(model, {"x": x}, rtol=0, atol=0)


def test_qlinear_where():
  """Each branch requantized to the output's scale and zero point: at most one step from onnxruntime, mostly equal."""
  x, y = u8(3, 8), u8(1, 8)
  cond = RNG.integers(0, 2, (3, 1)).astype(bool)
  inits = {"xs": f32(0.05), "xz": np.array(128, np.uint8), "ys": f32(0.02), "yz": np.array(90, np.uint8),
           "zs": f32(0.04), "zz": np.array(110, np.uint8)}
  feeds = {"c": cond, "x": x, "y": y}
  model = one_node("QLinearWhere", ["c", "x", "xs", "xz", "y", "ys", "yz", "zs", "zz"], feeds, inits,
                   [("z", TensorProto.UINT8, [3, 8])])
  (want,), (got,) = ort_run(model, feeds), tgc_run(model, feeds)
  assert got.dtype == want.dtype and got.shape == want.shape
  diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
  assert diff.max() <= 1 and (diff == 0).mean() > 0.9, (diff.max(), (diff == 0).mean())
