"""The numpy implementations of the com.microsoft operators that `tgc validate`'s reference runs
(aot/reference_contrib.py): each one-node model evaluated by onnx.reference with them and by onnxruntime's own kernels
(one thread, graph optimizations off; exact integer products on a CPU with AVX-512 VNNI) on seeded random non-zero
data: quantized outputs at most one step apart (mostly equal), float outputs to a tight tolerance. Also the exact
integer product where saturating pairs of products to int16 (onnxruntime on AVX2) would not be, and that
`onnx_reference` runs such models on onnx.reference rather than onnxruntime."""
from __future__ import annotations
import zlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from contrib_models import MS, dynamic_quantize_lstm, one_node, ort_run
from tgc.aot import reference
from tgc.aot.reference_contrib import OPERATORS

RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _seeded(request):
  """Each test draws its data from a generator seeded by its own name, whatever runs before it."""
  global RNG
  RNG = np.random.default_rng(zlib.crc32(request.node.name.encode()))


def ref_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
  return ReferenceEvaluator(model, new_ops=OPERATORS).run(None, feeds)


def compare(model: onnx.ModelProto, feeds: dict[str, np.ndarray], rtol: float = 1e-5, atol: float = 1e-5,
            equal: float = 0.9) -> None:
  """Quantized outputs: at most one step apart and at least `equal` of them equal; float outputs within rtol and
  atol times the largest magnitude."""
  want, got = ort_run(model, feeds), ref_run(model, feeds)
  assert len(got) == len(want)
  for g, w in zip(got, want):
    g = np.asarray(g)
    assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
    if np.issubdtype(w.dtype, np.integer):
      diff = np.abs(g.astype(np.int64) - w.astype(np.int64))
      assert diff.max() <= 1 and (diff == 0).mean() >= equal, (diff.max(), (diff == 0).mean())
    else:
      np.testing.assert_allclose(g, w, rtol=rtol, atol=atol * float(np.abs(w).max()))


def q8(signed: bool, *shape) -> np.ndarray:
  """Random 8-bit values, never 0."""
  v = RNG.integers(1, 128, shape) * RNG.choice([-1, 1], shape) if signed else RNG.integers(1, 256, shape)
  return v.astype(np.int8 if signed else np.uint8)


def zp(signed: bool, value: int) -> np.ndarray:
  return np.array(value - 128 if signed else value, np.int8 if signed else np.uint8)


def f32(value) -> np.ndarray: return np.array(value, np.float32)


def elem(signed: bool) -> int: return TensorProto.INT8 if signed else TensorProto.UINT8


# ---------------------------------------------------------------- elementwise
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("signed", [False, True])
def test_qlinear_binary(op, signed):
  """Broadcast [3, 5, 7] with [5, 1]; the output's scale fits the operation's range."""
  a, b = q8(signed, 3, 5, 7), q8(signed, 5, 1)
  inits = {"as": f32(0.031), "az": zp(signed, 131), "bs": f32(0.017), "bz": zp(signed, 119),
           "cs": f32(0.045 if op == "QLinearAdd" else 0.06), "cz": zp(signed, 125)}
  model = one_node(op, ["a", "as", "az", "b", "bs", "bz", "cs", "cz"], {"a": a, "b": b}, inits,
                   [("c", elem(signed), [3, 5, 7])])
  compare(model, {"a": a, "b": b})


@pytest.mark.parametrize("signed", [False, True])
def test_qlinear_where(signed):
  x, y = q8(signed, 3, 9), q8(signed, 1, 9)
  cond = RNG.integers(0, 2, (3, 1)).astype(bool)
  inits = {"xs": f32(0.05), "xz": zp(signed, 128), "ys": f32(0.02), "yz": zp(signed, 90), "zs": f32(0.04),
           "zz": zp(signed, 110)}
  feeds = {"c": cond, "x": x, "y": y}
  model = one_node("QLinearWhere", ["c", "x", "xs", "xz", "y", "ys", "yz", "zs", "zz"], feeds, inits,
                   [("z", elem(signed), [3, 9])])
  compare(model, feeds)


@pytest.mark.parametrize("signed", [False, True])
def test_qlinear_sigmoid(signed):
  x = q8(signed, 4, 33)
  inits = {"xs": f32(0.045), "xz": zp(signed, 133), "ys": f32(1 / 255), "yz": zp(signed, 0)}
  model = one_node("QLinearSigmoid", ["x", "xs", "xz", "ys", "yz"], {"x": x}, inits, [("y", elem(signed), [4, 33])])
  compare(model, {"x": x})


@pytest.mark.parametrize("signed,alpha", [(False, None), (True, 0.23)])
def test_qlinear_leaky_relu(signed, alpha):
  x = q8(signed, 5, 17)
  inits = {"xs": f32(0.045), "xz": zp(signed, 127), "ys": f32(0.03), "yz": zp(signed, 100)}
  attrs = {} if alpha is None else {"alpha": alpha}
  model = one_node("QLinearLeakyRelu", ["x", "xs", "xz", "ys", "yz"], {"x": x}, inits, [("y", elem(signed), [5, 17])],
                   **attrs)
  compare(model, {"x": x})


# ---------------------------------------------------------------- pooling, concatenation, softmax
@pytest.mark.parametrize("signed,channels_last", [(False, 0), (True, 1), (False, 1)])
def test_qlinear_global_average_pool(signed, channels_last):
  shape, out = ([2, 7, 9, 5], [2, 1, 1, 5]) if channels_last else ([2, 5, 7, 9], [2, 5, 1, 1])
  x = q8(signed, *shape)
  inits = {"xs": f32(0.05), "xz": zp(signed, 128), "ys": f32(0.013), "yz": zp(signed, 120)}
  model = one_node("QLinearGlobalAveragePool", ["x", "xs", "xz", "ys", "yz"], {"x": x}, inits,
                   [("y", elem(signed), out)], channels_last=channels_last)
  compare(model, {"x": x})


@pytest.mark.parametrize("signed,channels_last,attrs,out", [
  (False, 0, {"pads": [1, 0, 1, 1], "strides": [2, 2]}, [4, 4]),
  (True, 1, {"pads": [1, 0, 1, 1], "strides": [2, 2], "count_include_pad": 1}, [4, 4]),
  (False, 1, {"strides": [2, 2], "ceil_mode": 1}, [3, 4]),
  (True, 0, {"pads": [1, 1, 1, 1], "strides": [2, 3], "ceil_mode": 1}, [4, 4]),
  (False, 0, {"auto_pad": "SAME_UPPER", "strides": [1, 2], "kernel_shape": [2, 3]}, [7, 5]),
  (True, 1, {"auto_pad": "SAME_LOWER", "strides": [1, 2], "kernel_shape": [2, 3]}, [7, 5])])
def test_qlinear_average_pool(signed, channels_last, attrs, out):
  """3x3 windows (or 2x3) over 7x9 images: pads counted or not, ceil_mode's partial windows, SAME_UPPER and
  SAME_LOWER with an odd total pad."""
  shape = [2, 7, 9, 3] if channels_last else [2, 3, 7, 9]
  out_shape = [2, *out, 3] if channels_last else [2, 3, *out]
  x = q8(signed, *shape)
  inits = {"xs": f32(0.05), "xz": zp(signed, 128), "ys": f32(0.03), "yz": zp(signed, 120)}
  model = one_node("QLinearAveragePool", ["x", "xs", "xz", "ys", "yz"], {"x": x}, inits,
                   [("y", elem(signed), out_shape)], channels_last=channels_last, **({"kernel_shape": [3, 3]} | attrs))
  compare(model, {"x": x})


@pytest.mark.parametrize("channels_last", [0, 1])
def test_qlinear_average_pool_counts_pads_not_what_ceil_mode_adds(channels_last):
  """count_include_pad=1 with ceil_mode's partial windows: the specification's DequantizeLinear, AveragePool,
  QuantizeLinear (onnxruntime's float kernels, as onnx.reference: the divisor counts the pads but not the positions
  beyond them; onnxruntime's QLinearAveragePool kernel divides by the whole kernel there)."""
  x = q8(False, 2, 3, 7, 9)
  scales = {"xs": f32(0.05), "xz": zp(False, 128), "ys": f32(0.03), "yz": zp(False, 120)}
  attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 3], "ceil_mode": 1, "count_include_pad": 1}
  info = helper.make_tensor_value_info
  nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["v"]),
           helper.make_node("AveragePool", ["v"], ["p"], **attrs),
           helper.make_node("QuantizeLinear", ["p", "ys", "yz"], ["y"])]
  graph = helper.make_graph(nodes, "pool", [info("x", TensorProto.UINT8, [2, 3, 7, 9])],
                            [info("y", TensorProto.UINT8, [2, 3, 4, 4])],
                            [numpy_helper.from_array(v, k) for k, v in scales.items()])
  (want,) = ort_run(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]), {"x": x})
  xl = np.ascontiguousarray(x.transpose(0, 2, 3, 1)) if channels_last else x
  model = one_node("QLinearAveragePool", ["x", "xs", "xz", "ys", "yz"], {"x": xl}, scales,
                   [("y", TensorProto.UINT8, [2, 4, 4, 3] if channels_last else [2, 3, 4, 4])],
                   channels_last=channels_last, **attrs)
  (got,) = ref_run(model, {"x": xl})
  got = got.transpose(0, 3, 1, 2) if channels_last else got
  diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
  assert diff.max() <= 1 and (diff == 0).mean() >= 0.9, (diff.max(), (diff == 0).mean())
  assert want[..., -1].max() != 0 and not np.array_equal(got[..., -1], x[..., -1])


@pytest.mark.parametrize("signed,axis", [(False, 1), (True, -1)])
def test_qlinear_concat(signed, axis):
  """Three inputs of different scales and zero points (one with the output's: copied as it is)."""
  shapes = [[2, 3, 5], [2, 4, 5], [2, 1, 5]] if axis == 1 else [[2, 3, 5], [2, 3, 2], [2, 3, 7]]
  feeds = {f"x{i}": q8(signed, *s) for i, s in enumerate(shapes)}
  inits = {"ys": f32(0.04), "yz": zp(signed, 128), "s0": f32(0.03), "z0": zp(signed, 100), "s1": f32(0.04),
           "z1": zp(signed, 128), "s2": f32(0.055), "z2": zp(signed, 140)}
  out = list(shapes[0])
  out[axis] = sum(s[axis] for s in shapes)
  model = one_node("QLinearConcat", ["ys", "yz", "x0", "s0", "z0", "x1", "s1", "z1", "x2", "s2", "z2"], feeds, inits,
                   [("y", elem(signed), out)], axis=axis)
  compare(model, feeds)


@pytest.mark.parametrize("opset,axis,signed", [(13, -1, False), (13, 1, True), (12, 1, False), (12, None, True)])
def test_qlinear_softmax(opset, axis, signed):
  """Softmax over one axis (13 on) or over the dims from axis on (before 13); axis defaults to -1 (the schema's
  default, onnxruntime's kernel too, although Softmax before 13 defaults to 1). onnxruntime's kernel
  computes with a table of float32 exponentials and wraps, not saturates, an int8 result of 128: the scales keep the
  outputs below 1."""
  x = q8(signed, 2, 5, 17)
  inits = {"xs": f32(0.02 if signed else 0.05), "xz": zp(signed, 130), "ys": f32(1 / 256), "yz": zp(signed, 0)}
  attrs = {"opset": opset} if axis is None else {"opset": opset, "axis": axis}
  model = one_node("QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"], {"x": x}, inits,
                   [("y", elem(signed), [2, 5, 17])], **attrs)
  compare(model, {"x": x}, equal=0.97)


# ---------------------------------------------------------------- integer matrix products
@pytest.mark.parametrize("case", ["float_out", "requant_per_column", "int8_requant"])
def test_qgemm(case):
  """QGemm: transA with alpha and a float result; per-column B scales and zero points requantized to uint8; int8 A,
  transB and an int8 result. With the int32 C in each."""
  m, k, n = 5, 27, 11
  signed = case == "int8_requant"
  a = q8(signed, k, m) if case == "float_out" else q8(signed, m, k)
  b = q8(True, n, k) if case != "float_out" else q8(True, k, n)
  inits = {"as": f32(0.02), "az": zp(signed, 121), "b": b, "c": RNG.integers(-3000, 3000, n).astype(np.int32)}
  if case == "requant_per_column":
    inits |= {"bs": RNG.uniform(0.002, 0.01, n).astype(np.float32), "bz": RNG.integers(-3, 4, n).astype(np.int8)}
  else: inits |= {"bs": f32(0.004), "bz": np.array(2, np.int8)}
  names = ["a", "as", "az", "b", "bs", "bz", "c"]
  if case == "float_out":
    model = one_node("QGemm", names, {"a": a}, inits, [("y", TensorProto.FLOAT, [m, n])], transA=1, alpha=0.5)
  else:
    inits |= {"ys": f32(0.05 if signed else 0.15), "yz": zp(signed, 128 if signed else 131)}
    model = one_node("QGemm", names + ["ys", "yz"], {"a": a}, inits, [("y", elem(signed), [m, n])],
                     transB=int(case != "float_out"))
  compare(model, {"a": a})


@pytest.mark.parametrize("per_column,b_signed,bias", [(False, True, True), (True, True, False), (True, False, True)])
def test_dynamic_quantize_matmul(per_column, b_signed, bias):
  """A float [2, 3, K] quantized at run time (an asymmetric range: a non-trivial zero point) times 8-bit B."""
  k, n = 33, 13
  a = RNG.standard_normal((2, 3, k)).astype(np.float32)
  a[0, 0, 0] = 2.7
  scale = RNG.uniform(0.002, 0.01, n).astype(np.float32) if per_column else f32(0.006)
  zero = RNG.integers(-4, 5, scale.shape) + (0 if b_signed else 128)
  inits = {"b": q8(b_signed, k, n), "bs": scale, "bz": zero.astype(np.int8 if b_signed else np.uint8)}
  names = ["a", "b", "bs", "bz"]
  if bias: inits, names = inits | {"bias": RNG.standard_normal(n).astype(np.float32)}, names + ["bias"]
  model = one_node("DynamicQuantizeMatMul", names, {"a": a}, inits, [("y", TensorProto.FLOAT, [2, 3, n])])
  compare(model, {"a": a})


@pytest.mark.parametrize("a_signed,b_signed,per_column", [(False, True, True), (True, True, False),
                                                          (False, False, True)])
def test_matmul_integer_to_float(a_signed, b_signed, per_column):
  k, n = 21, 9
  a = q8(a_signed, 2, 4, k)
  scale = RNG.uniform(0.002, 0.01, n).astype(np.float32) if per_column else f32(0.007)
  zero = RNG.integers(-4, 5, scale.shape) + (0 if b_signed else 128)
  inits = {"b": q8(b_signed, k, n), "as": f32(0.03), "bs": scale, "az": zp(a_signed, 125),
           "bz": zero.astype(np.int8 if b_signed else np.uint8), "bias": RNG.standard_normal(n).astype(np.float32)}
  model = one_node("MatMulIntegerToFloat", ["a", "b", "as", "bs", "az", "bz", "bias"], {"a": a}, inits,
                   [("y", TensorProto.FLOAT, [2, 4, n])])
  compare(model, {"a": a})


def lstm_weights(dirs: int, k: int, h: int, per_column: bool, signed: bool = True) -> tuple:
  """DynamicQuantizeLSTM's [dirs, K, 4h] 8-bit weights, their scales and zero points."""
  q = q8(signed, dirs, k, 4 * h)
  shape = (dirs, 4 * h) if per_column else (dirs,)
  scale = RNG.uniform(0.002, 0.006, shape).astype(np.float32)
  zero = np.full(shape, 0 if signed else 128, np.int8 if signed else np.uint8)
  return q, scale, zero


@pytest.mark.parametrize("direction,per_column,signed", [("forward", False, True), ("bidirectional", True, True),
                                                         ("reverse", True, False)])
def test_dynamic_quantize_lstm(direction, per_column, signed):
  """Gates i, o, f, c; initial states; the hidden state quantized at every step."""
  seq, batch, k, h = 7, 3, 11, 9
  dirs = 2 if direction == "bidirectional" else 1
  x = RNG.standard_normal((seq, batch, k)).astype(np.float32)
  model = dynamic_quantize_lstm(x, lstm_weights(dirs, k, h, per_column, signed),
                                lstm_weights(dirs, h, h, per_column, signed), direction, RNG)
  compare(model, {"x": x}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_dynamic_quantize_lstm_sequence_lens(direction):
  """Sequences of different lengths: X quantized over the steps up to the longest one (the step after it holds large
  values that must not count), each step's hidden state over the sequences that ran the step before."""
  seq, batch, k, h = 6, 3, 5, 8
  dirs = 2 if direction == "bidirectional" else 1
  x = RNG.standard_normal((seq, batch, k)).astype(np.float32)
  x[5] = 9.0
  w, ws, wz = lstm_weights(dirs, k, h, True)
  r, rs, rz = lstm_weights(dirs, h, h, True)
  inits = {"w": w, "r": r, "b": RNG.standard_normal((dirs, 8 * h)).astype(np.float32) * 0.1,
           "lens": np.array([2, 5, 3], np.int32), "ws": ws, "wz": wz, "rs": rs, "rz": rz}
  outputs = [("y", TensorProto.FLOAT, [seq, dirs, batch, h]), ("yh", TensorProto.FLOAT, [dirs, batch, h]),
             ("yc", TensorProto.FLOAT, [dirs, batch, h])]
  model = one_node("DynamicQuantizeLSTM", ["x", "w", "r", "b", "lens", "", "", "", "ws", "wz", "rs", "rz"], {"x": x},
                   inits, outputs, hidden_size=h, direction=direction)
  compare(model, {"x": x}, rtol=1e-4, atol=1e-4)


def test_dynamic_quantize_lstm_peepholes_and_activations():
  """Peepholes (i, o, f), other activations with their alpha and beta, and only Y_h as an output."""
  seq, batch, k, h = 5, 2, 7, 6
  x = RNG.standard_normal((seq, batch, k)).astype(np.float32)
  w, ws, wz = lstm_weights(1, k, h, True)
  r, rs, rz = lstm_weights(1, h, h, False)
  inits = {"w": w, "r": r, "p": RNG.standard_normal((1, 3 * h)).astype(np.float32) * 0.3,
           "ws": ws, "wz": wz, "rs": rs, "rz": rz}
  model = one_node("DynamicQuantizeLSTM", ["x", "w", "r", "", "", "", "", "p", "ws", "wz", "rs", "rz"], {"x": x},
                   inits, [("yh", TensorProto.FLOAT, [1, batch, h])], hidden_size=h,
                   activations=["HardSigmoid", "ScaledTanh", "Softsign"], activation_alpha=[0.3, 0.9],
                   activation_beta=[0.45, 1.1])
  compare(model, {"x": x}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("attrs", [{"clip": 0.7}, {"input_forget": 1}])
def test_dynamic_quantize_lstm_clip_and_input_forget(attrs):
  """Gate inputs clipped to [-clip, clip]; input_forget couples the forget gate to the input gate (f = 1 - i)."""
  seq, batch, k, h = 6, 3, 5, 8
  x = RNG.standard_normal((seq, batch, k)).astype(np.float32)
  w, ws, wz = lstm_weights(1, k, h, True)
  r, rs, rz = lstm_weights(1, h, h, True)
  inits = {"w": w, "r": r, "b": RNG.standard_normal((1, 8 * h)).astype(np.float32) * 0.1, "ws": ws, "wz": wz,
           "rs": rs, "rz": rz}
  outputs = [("y", TensorProto.FLOAT, [seq, 1, batch, h]), ("yh", TensorProto.FLOAT, [1, batch, h]),
             ("yc", TensorProto.FLOAT, [1, batch, h])]
  model = one_node("DynamicQuantizeLSTM", ["x", "w", "r", "b", "", "", "", "", "ws", "wz", "rs", "rz"], {"x": x},
                   inits, outputs, hidden_size=h, **attrs)
  compare(model, {"x": x}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("zp_type", [np.uint8, np.int8, np.uint16, np.int16])
def test_contrib_quantize_dequantize(zp_type):
  """com.microsoft QuantizeLinear (per axis) then DequantizeLinear: the ONNX operators."""
  x = (RNG.standard_normal((2, 4, 5)) * 40).astype(np.float32)
  info = np.iinfo(zp_type)
  inits = {"scale": RNG.uniform(0.05, 0.3, 4).astype(np.float32),
           "zp": RNG.integers(max(info.min, -20), min(info.max, 20) + 1, 4).astype(zp_type)}
  elem_type = helper.np_dtype_to_tensor_dtype(np.dtype(zp_type))
  nodes = [helper.make_node("QuantizeLinear", ["x", "scale", "zp"], ["q"], domain=MS, name="q", axis=1),
           helper.make_node("DequantizeLinear", ["q", "scale", "zp"], ["y"], domain=MS, name="dq", axis=1)]
  graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 5])],
                            [helper.make_tensor_value_info("q", elem_type, [2, 4, 5]),
                             helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 5])],
                            [numpy_helper.from_array(v, k) for k, v in inits.items()])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
  compare(model, {"x": x}, rtol=0, atol=0, equal=1.0)


# ---------------------------------------------------------------- exactness and the hook
def saturated_pairs(aq: np.ndarray, b: np.ndarray) -> np.ndarray:
  """uint8 x int8 products as vpmaddubsw adds them: adjacent pairs summed and saturated to int16, then summed."""
  products = aq.astype(np.int64)[:, :, None] * b.astype(np.int64)[None, :, :]
  pairs = np.clip(products[:, 0::2] + products[:, 1::2], -32768, 32767)
  return pairs.sum(axis=1)


def test_dynamic_quantize_matmul_is_exact_where_pairs_saturate():
  """Activations near the top of the uint8 range times int8 weights of 127 and -128: the reference equals the
  specification's formula computed in float64 (DynamicQuantizeLinear, then the integer product times the scales),
  where adding saturated pairs of products would be far off."""
  m, k, n = 3, 64, 6
  a = RNG.uniform(0.93, 1.0, (m, k)).astype(np.float32)
  a[0, 0] = 1.0
  b = np.where(RNG.integers(0, 2, (k, n)) == 1, 127, -128).astype(np.int8)
  b[:, 0], b[:, 1] = 127, -128
  b[0::2, 2], b[1::2, 2] = 127, -128
  b_scale = f32(0.0125)
  model = one_node("DynamicQuantizeMatMul", ["a", "b", "bs"], {"a": a}, {"b": b, "bs": b_scale},
                   [("y", TensorProto.FLOAT, [m, n])])
  (got,) = ref_run(model, {"a": a})

  scale = np.float32(np.float32(a.max()) / np.float32(255.0))      # the range is [0, max]: zero point 0
  aq = np.clip(np.rint(a / scale), 0, 255)
  assert aq.min() >= 230
  want = (aq.astype(np.float64) @ b.astype(np.float64)) * float(scale) * float(b_scale)
  np.testing.assert_allclose(got, want, rtol=1e-6)
  saturated = saturated_pairs(aq, b) * float(scale) * float(b_scale)
  assert np.abs(saturated - want).max() > 0.05 * np.abs(want).max()     # saturation would matter here


def test_contrib_models_run_on_onnx_reference(tmp_path, monkeypatch):
  """`onnx_reference` runs a model of com.microsoft operators on onnx.reference with these implementations, never on
  onnxruntime."""
  def no_onnxruntime(*args, **kwargs): raise AssertionError("onnxruntime was asked")
  monkeypatch.setattr(reference, "_onnxruntime_run", no_onnxruntime)
  k, n = 16, 5
  a = RNG.standard_normal((4, k)).astype(np.float32)
  inits = {"b": q8(True, k, n), "bs": RNG.uniform(0.002, 0.01, n).astype(np.float32)}
  path = tmp_path / "dqmm.onnx"
  onnx.save(one_node("DynamicQuantizeMatMul", ["a", "b", "bs"], {"a": a}, inits, [("y", TensorProto.FLOAT, [4, n])]),
            str(path))
  got, engine = reference.onnx_reference(str(path), {"a": a}, {})
  assert engine == "onnx.reference"
  scale = np.float32((np.float32(a.max()) - np.float32(a.min())) / np.float32(255.0))
  zero = np.clip(np.rint(-np.float32(a.min()) / scale), 0, 255)
  aq = np.clip(np.rint(a / scale) + zero, 0, 255) - zero
  want = (aq @ inits["b"].astype(np.float64)) * (scale * inits["bs"]).astype(np.float64)
  np.testing.assert_allclose(got["y"], want, rtol=1e-5, atol=1e-6)
