"""Models the way other tools write them, through `tgc compile` + `tgc validate` (onnx.reference) and `tgc run`
(against onnxruntime with its graph optimizations off): paddle2onnx (legacy -1 dims, opsets 11 and 12, BatchNorm
left unfused, Reshape with 0 dims, Clip with min/max inputs), tf2onnx (NHWC graphs with Transpose pairs around each
NCHW op, `name:0` tensor names, `unk__` batch dims, Squeeze/Unsqueeze with axes inputs), torch.onnx's dynamo
exporter (opset 18: Split with num_outputs, ReduceMean with axes input, LayerNormalization, erf Gelu, dotted
initializer names, `s0` dims; a real export when torch is installed) and onnxruntime.quantization (static QDQ with
per-channel weights, QOperator, and dynamic quantization with DynamicQuantizeLinear/MatMulInteger). The graphs are
built here with onnx.helper or by the exporters themselves; nothing is downloaded."""
from __future__ import annotations
import importlib.util
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from tgc.aot.cli import cli

RNG = np.random.default_rng(13)


def tgc(*args):
  result = CliRunner().invoke(cli, [str(a) for a in args])
  if result.exception is not None and not isinstance(result.exception, SystemExit): raise result.exception
  return result


def weight(name: str, *shape, scale: float = 0.3) -> onnx.TensorProto:
  return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)


def ints(name: str, values) -> onnx.TensorProto:
  return numpy_helper.from_array(np.array(values, np.int64), name)


def floats(name: str, values) -> onnx.TensorProto:
  return numpy_helper.from_array(np.array(values, np.float32), name)


def save(path: Path, nodes, inputs, outputs, inits, opset: int, ir_version: int | None = None, **extra) -> Path:
  graph = helper.make_graph(nodes, path.stem, inputs, outputs, inits)
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], **extra)
  if ir_version is not None: model.ir_version = ir_version
  onnx.checker.check_model(model)
  onnx.save(model, str(path))
  return path


def onnxruntime_outputs(path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (pip install onnxruntime)")
  options = ort.SessionOptions()
  options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
  session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
  return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


def compile_validate_run(model: Path, tmp_path: Path, feeds: dict[str, np.ndarray], *compile_args: str,
                         atol: float = 1e-4, rtol: float = 1e-4) -> dict[str, np.ndarray]:
  """tgc compile (exit 0), tgc validate against onnx.reference (exit 0), tgc run on `feeds` from .npy files; the
  outputs of the run, checked against onnxruntime's."""
  out = tmp_path / f"{model.stem}_art"
  result = tgc("compile", model, "-o", out, *compile_args)
  assert result.exit_code == 0, result.output
  result = tgc("validate", out, "--rtol", rtol, "--atol", atol)
  assert result.exit_code == 0, result.output
  args = []
  for k, (name, arr) in enumerate(feeds.items()):
    np.save(tmp_path / f"feed{k}.npy", arr)
    args += ["--input", f"{name}={tmp_path / f'feed{k}.npy'}"]
  result = tgc("run", out, *args, "-o", tmp_path / "out.npz")
  assert result.exit_code == 0, result.output
  with np.load(tmp_path / "out.npz") as npz: got = {k: npz[k] for k in npz.files}
  want = onnxruntime_outputs(model, feeds)
  assert list(got) == list(want)
  for name in want: np.testing.assert_allclose(got[name], want[name], rtol=rtol, atol=atol, err_msg=name)
  return got


def one_line_error(result, *words: str) -> str:
  assert result.exit_code == 2, (result.exit_code, result.output)
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and all(w in lines[0] for w in words), result.stderr
  return lines[0]


# ---------------------------------------------------------------- paddle2onnx
def paddle_classifier(path: Path, opset: int) -> Path:
  """A PaddleOCR-style text-direction classifier: input declared [-1, 3, ?, ?] (a -1 dim_value and unset dims),
  Conv + BatchNormalization + HardSigmoid*x (hard swish as paddle2onnx writes it for opset < 14), a depthwise conv
  with Clip(min, max inputs) as ReLU6, GlobalAveragePool, Reshape to [0, -1] and a Softmax head."""
  info = helper.make_tensor_value_info
  nodes = [
    helper.make_node("Conv", ["x", "conv1.w"], ["c1"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                     name="conv2d_0"),
    helper.make_node("BatchNormalization", ["c1", "bn.scale", "bn.bias", "bn.mean", "bn.var"], ["b1"],
                     epsilon=1e-5, name="batch_norm_0"),
    helper.make_node("HardSigmoid", ["b1"], ["hs"], alpha=1 / 6, beta=0.5, name="hard_sigmoid_0"),
    helper.make_node("Mul", ["b1", "hs"], ["a1"], name="elementwise_mul_0"),
    helper.make_node("Conv", ["a1", "dw.w", "dw.b"], ["c2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=8,
                     name="conv2d_1"),
    helper.make_node("Clip", ["c2", "zero", "six"], ["a2"], name="relu6_0"),
    helper.make_node("GlobalAveragePool", ["a2"], ["g"], name="pool2d_0"),
    helper.make_node("Reshape", ["g", "flat"], ["f"], name="reshape2_0"),
    helper.make_node("MatMul", ["f", "fc.w"], ["m"], name="matmul_0"),
    helper.make_node("Add", ["m", "fc.b"], ["logits"], name="elementwise_add_0"),
    helper.make_node("Softmax", ["logits"], ["save_infer_model/scale_0.tmp_1"], axis=1, name="softmax_0"),
  ]
  inits = [weight("conv1.w", 8, 3, 3, 3), floats("bn.scale", RNG.uniform(0.5, 1.5, 8)),
           floats("bn.bias", RNG.standard_normal(8) * 0.1), floats("bn.mean", RNG.standard_normal(8) * 0.1),
           floats("bn.var", RNG.uniform(0.5, 1.5, 8)), weight("dw.w", 8, 1, 3, 3), weight("dw.b", 8),
           floats("zero", 0.0), floats("six", 6.0), ints("flat", [0, -1]), weight("fc.w", 8, 2), weight("fc.b", 2)]
  x = info("x", TensorProto.FLOAT, [-1, 3, None, None])
  y = info("save_infer_model/scale_0.tmp_1", TensorProto.FLOAT, [-1, 2])
  return save(path, nodes, [x], [y], inits, opset, ir_version=7, producer_name="PaddlePaddle")


@pytest.mark.parametrize("opset", [11, 12])
def test_paddle2onnx_legacy_dims(tmp_path, opset):
  model = paddle_classifier(tmp_path / f"cls_{opset}.onnx", opset)
  one_line_error(tgc("compile", model, "-o", tmp_path / "none"), "input 'x'", "(-1)", "--input-shape x=")
  x = RNG.standard_normal((1, 3, 48, 192)).astype(np.float32)
  got = compile_validate_run(model, tmp_path, {"x": x}, "--input-shape", "x=1,3,48,192")
  probs = got["save_infer_model/scale_0.tmp_1"]
  assert probs.shape == (1, 2) and np.isclose(probs.sum(), 1, atol=1e-5)
  one_line_error(tgc("compile", model, "-o", tmp_path / "bad", "--input-shape", "x=1,4,48,192"), "input 'x'",
                 "declares (-1, 3, ?, ?)")


# ---------------------------------------------------------------- tf2onnx
def tf_cnn(path: Path) -> Path:
  """A Keras CNN as tf2onnx writes it: NHWC input `input_1:0` with an `unk__` batch dim, every NCHW op between a
  Transpose to NCHW and one back (pairs left in the graph), Unsqueeze/Squeeze with axes inputs, ReduceMean over the
  NHWC spatial axes, a dense layer as MatMul + Add, outputs through Identity named `Identity:0`."""
  to_nchw, to_nhwc = [0, 3, 1, 2], [0, 2, 3, 1]
  nodes = [
    helper.make_node("Transpose", ["input_1:0"], ["t0"], perm=to_nchw, name="model/conv2d/Conv2D__6"),
    helper.make_node("Conv", ["t0", "conv.w", "conv.b"], ["c0"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                     name="model/conv2d/Conv2D"),
    helper.make_node("Relu", ["c0"], ["r0"], name="model/conv2d/Relu"),
    helper.make_node("Transpose", ["r0"], ["h0"], perm=to_nhwc, name="model/conv2d/Relu__8"),
    helper.make_node("Transpose", ["h0"], ["t1"], perm=to_nchw, name="model/max_pooling2d/MaxPool__10"),
    helper.make_node("MaxPool", ["t1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], name="model/max_pooling2d"),
    helper.make_node("Transpose", ["p1"], ["h1"], perm=to_nhwc, name="model/max_pooling2d/MaxPool__12"),
    helper.make_node("Unsqueeze", ["h1", "axis1"], ["u"], name="model/expand_dims"),
    helper.make_node("Squeeze", ["u", "axis1"], ["s"], name="model/squeeze"),
    helper.make_node("ReduceMean", ["s"], ["gap"], axes=[1, 2], keepdims=0, name="model/global_average_pooling2d"),
    helper.make_node("MatMul", ["gap", "dense.w"], ["mm"], name="model/dense/MatMul"),
    helper.make_node("Add", ["mm", "dense.b"], ["logits"], name="model/dense/BiasAdd"),
    helper.make_node("Identity", ["logits"], ["Identity:0"], name="Identity"),
  ]
  inits = [weight("conv.w", 6, 3, 3, 3), weight("conv.b", 6), ints("axis1", [1]), weight("dense.w", 6, 4),
           weight("dense.b", 4)]
  info = helper.make_tensor_value_info
  return save(path, nodes, [info("input_1:0", TensorProto.FLOAT, ["unk__14", 16, 16, 3])],
              [info("Identity:0", TensorProto.FLOAT, ["unk__15", 4])], inits, 13, producer_name="tf2onnx")


def test_tf2onnx_nhwc_transpose_pairs(tmp_path):
  model = tf_cnn(tmp_path / "keras.onnx")
  x = RNG.standard_normal((2, 16, 16, 3)).astype(np.float32)
  got = compile_validate_run(model, tmp_path, {"input_1:0": x}, "--input-shape", "input_1:0=2,16,16,3")
  assert got["Identity:0"].shape == (2, 4)


# ---------------------------------------------------------------- torch.onnx (dynamo exporter)
def torch_block(path: Path) -> Path:
  """A transformer MLP block as torch.onnx.export(..., dynamo=True) writes it (opset 18, ir_version 10): a `s0`
  batch dim, dotted initializer names, node names like node_LayerNormalization_0, LayerNormalization, MatMul + Add
  linears, Gelu spelled with Erf, Split with num_outputs (GLU), ReduceMean with an axes input."""
  nodes = [
    helper.make_node("LayerNormalization", ["x", "norm.weight", "norm.bias"], ["layer_norm"], axis=-1, epsilon=1e-5,
                     name="node_LayerNormalization_0"),
    helper.make_node("MatMul", ["layer_norm", "fc1.weight_t"], ["matmul"], name="node_MatMul_1"),
    helper.make_node("Add", ["matmul", "fc1.bias"], ["linear"], name="node_Add_2"),
    helper.make_node("Split", ["linear"], ["getitem", "getitem_1"], axis=-1, num_outputs=2, name="node_Split_3"),
    helper.make_node("Div", ["getitem_1", "sqrt2"], ["div"], name="node_Div_4"),
    helper.make_node("Erf", ["div"], ["erf"], name="node_Erf_5"),
    helper.make_node("Add", ["erf", "one"], ["add"], name="node_Add_6"),
    helper.make_node("Mul", ["getitem_1", "add"], ["mul"], name="node_Mul_7"),
    helper.make_node("Mul", ["mul", "half"], ["gelu"], name="node_Mul_8"),
    helper.make_node("Mul", ["getitem", "gelu"], ["glu"], name="node_Mul_9"),
    helper.make_node("ReduceMean", ["glu", "axes"], ["mean"], keepdims=1, name="node_ReduceMean_10"),
    helper.make_node("Sub", ["glu", "mean"], ["sub"], name="node_Sub_11"),
  ]
  inits = [floats("norm.weight", RNG.uniform(0.5, 1.5, 32)), weight("norm.bias", 32), weight("fc1.weight_t", 32, 64),
           weight("fc1.bias", 64), floats("sqrt2", np.sqrt(2.0)), floats("one", 1.0), floats("half", 0.5),
           ints("axes", [-1])]
  info = helper.make_tensor_value_info
  return save(path, nodes, [info("x", TensorProto.FLOAT, ["s0", 10, 32])], [info("sub", TensorProto.FLOAT,
                                                                                   ["s0", 10, 32])],
              inits, 18, ir_version=10, producer_name="pytorch")


def test_torch_dynamo_style_graph(tmp_path):
  model = torch_block(tmp_path / "block.onnx")
  x = RNG.standard_normal((3, 10, 32)).astype(np.float32)
  got = compile_validate_run(model, tmp_path, {"x": x}, "--input-shape", "x=3,10,32")
  assert got["sub"].shape == (3, 10, 32)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                    reason="torch is not installed (optional: pip install torch to also test a real dynamo export)")
def test_torch_dynamo_export(tmp_path):
  import torch

  class Block(torch.nn.Module):
    def __init__(self):
      super().__init__()
      self.norm, self.fc1, self.fc2 = torch.nn.LayerNorm(32), torch.nn.Linear(32, 64), torch.nn.Linear(64, 16)

    def forward(self, x):
      return self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(x)))).softmax(-1)
  torch.manual_seed(0)
  x = torch.randn(2, 5, 32)
  path = tmp_path / "dynamo.onnx"
  torch.onnx.export(Block().eval(), (x,), str(path), dynamo=True, opset_version=18,
                    dynamic_shapes={"x": {0: torch.export.Dim("batch")}})
  model = onnx.load(str(path))
  assert model.opset_import[0].version >= 18
  name = model.graph.input[0].name
  assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param     # a dynamic batch dim
  compile_validate_run(path, tmp_path, {name: x.numpy()}, "--input-shape", f"{name}=2,5,32")


# ---------------------------------------------------------------- onnxruntime.quantization
def float_cnn(path: Path) -> Path:
  """The float model the quantizers start from: Conv + Relu, Conv, GlobalAveragePool, Flatten, MatMul + Add."""
  nodes = [
    helper.make_node("Conv", ["x", "c1.w", "c1.b"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="conv1"),
    helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
    helper.make_node("Conv", ["r1", "c2.w", "c2.b"], ["c2"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                     name="conv2"),
    helper.make_node("GlobalAveragePool", ["c2"], ["g"], name="gap"),
    helper.make_node("Flatten", ["g"], ["f"], axis=1, name="flatten"),
    helper.make_node("MatMul", ["f", "fc.w"], ["m"], name="fc"),
    helper.make_node("Add", ["m", "fc.b"], ["y"], name="fc_bias"),
  ]
  inits = [weight("c1.w", 8, 3, 3, 3), weight("c1.b", 8), weight("c2.w", 8, 8, 3, 3), weight("c2.b", 8),
           weight("fc.w", 8, 5), weight("fc.b", 5)]
  info = helper.make_tensor_value_info
  return save(path, nodes, [info("x", TensorProto.FLOAT, [1, 3, 12, 12])], [info("y", TensorProto.FLOAT, [1, 5])],
              inits, 17)


class RandomReader:
  """Calibration data for quantize_static: a few seeded random images."""

  def __init__(self, count: int = 4):
    rng = np.random.default_rng(5)
    self.batches = iter([{"x": rng.standard_normal((1, 3, 12, 12)).astype(np.float32)} for _ in range(count)])

  def get_next(self): return next(self.batches, None)


def quantization():
  return pytest.importorskip("onnxruntime.quantization", reason="onnxruntime is not installed (pip install "
                                                                "onnxruntime)")


def output_step(path: Path) -> float:
  """The quantization step of the model's output (the scale of its last QuantizeLinear or QLinear op), or 0."""
  model = onnx.load(str(path))
  inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
  scales = [float(np.max(inits[n.input[1]])) for n in model.graph.node if n.op_type == "QuantizeLinear"
            and n.input[1] in inits]
  return scales[-1] if scales else 0.0


@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
def test_onnxruntime_static_quantization(tmp_path, fmt):
  q = quantization()
  src = float_cnn(tmp_path / "float.onnx")
  dst = tmp_path / f"static_{fmt}.onnx"
  q.quantize_static(str(src), str(dst), RandomReader(), quant_format=getattr(q.QuantFormat, fmt), per_channel=True,
                    activation_type=q.QuantType.QUInt8, weight_type=q.QuantType.QInt8)
  ops = {n.op_type for n in onnx.load(str(dst)).graph.node}
  assert ({"QuantizeLinear", "DequantizeLinear"} <= ops) if fmt == "QDQ" else ("QLinearConv" in ops)
  if fmt == "QDQ":   # per-channel weights: a DequantizeLinear with one scale per output channel
    model = onnx.load(str(dst))
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    assert any(n.op_type == "DequantizeLinear" and inits.get(n.input[1], np.zeros(())).size == 8
               for n in model.graph.node)
  x = np.random.default_rng(6).standard_normal((1, 3, 12, 12)).astype(np.float32)
  step = output_step(dst)
  assert step > 0
  # onnxruntime and onnx.reference may round a value on a quantization boundary differently: one output step apart
  compile_validate_run(dst, tmp_path, {"x": x}, atol=step * 1.01, rtol=0)


def test_onnxruntime_dynamic_quantization(tmp_path):
  q = quantization()
  info = helper.make_tensor_value_info
  src = save(tmp_path / "mlp.onnx", [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
                                     helper.make_node("Relu", ["h"], ["r"], name="relu"),
                                     helper.make_node("MatMul", ["r", "w2"], ["y"], name="fc2")],
             [info("x", TensorProto.FLOAT, ["batch", 16])], [info("y", TensorProto.FLOAT, ["batch", 6])],
             [weight("w1", 16, 24), weight("w2", 24, 6)], 17)
  dst = tmp_path / "dynamic.onnx"
  q.quantize_dynamic(str(src), str(dst), weight_type=q.QuantType.QInt8)
  ops = {n.op_type for n in onnx.load(str(dst)).graph.node}
  assert {"DynamicQuantizeLinear", "MatMulInteger"} <= ops, ops
  x = np.random.default_rng(7).standard_normal((4, 16)).astype(np.float32)
  compile_validate_run(dst, tmp_path, {"x": x}, "--input-shape", "x=4,16", atol=1e-4, rtol=1e-4)


def _contrib_node(op: str, tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
  """A one-node com.microsoft model with uint8 tensors (scale 0.05, zero point 128 in, 0.04 / 120 out)."""
  info = helper.make_tensor_value_info
  q = lambda name, v: numpy_helper.from_array(np.array(v, np.uint8), name)   # noqa: E731
  params = [floats("s_in", 0.05), q("z_in", 128), floats("s_out", 0.04), q("z_out", 120)]
  rng = np.random.default_rng(8)
  feeds = {"a": rng.integers(0, 256, (2, 3, 4, 5)).astype(np.uint8)}
  inputs = [info("a", TensorProto.UINT8, [2, 3, 4, 5])]
  unary = ["a", "s_in", "z_in", "s_out", "z_out"]
  attrs: dict = {}
  if op in ("QLinearAdd", "QLinearMul"):
    feeds["b"] = rng.integers(0, 256, (3, 1, 5)).astype(np.uint8)
    inputs.append(info("b", TensorProto.UINT8, [3, 1, 5]))
    names = ["a", "s_in", "z_in", "b", "s_in", "z_in", "s_out", "z_out"]
  elif op == "QLinearConcat":
    feeds["b"] = rng.integers(0, 256, (2, 2, 4, 5)).astype(np.uint8)
    inputs.append(info("b", TensorProto.UINT8, [2, 2, 4, 5]))
    names, attrs = ["s_out", "z_out", "a", "s_in", "z_in", "b", "s_in", "z_in"], {"axis": 1}
  elif op == "QLinearLeakyRelu": names, attrs = unary, {"alpha": 0.2}
  elif op == "QLinearGlobalAveragePool_last": names, attrs = unary, {"channels_last": 1}
  else: names = unary
  node = helper.make_node(op.removesuffix("_last"), names, ["y"], domain="com.microsoft", **attrs)
  graph = helper.make_graph([node], "contrib", inputs, [onnx.ValueInfoProto(name="y")], params)
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
  path = tmp_path / "contrib.onnx"
  onnx.save(model, str(path))
  return path, feeds


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearConcat",
                                "QLinearGlobalAveragePool", "QLinearGlobalAveragePool_last"])
def test_onnxruntime_contrib_quantized_ops(tmp_path, op):
  """The com.microsoft ops of QOperator models against onnxruntime's own kernels: at most one quantization step
  apart (its fixed-point and table kernels may round a value on a step boundary the other way), mostly equal."""
  from tgc.aot.onnx_backend import TgcBackend
  path, feeds = _contrib_node(op, tmp_path)
  want = list(onnxruntime_outputs(path, feeds).values())[0]
  model = onnx.load(str(path))
  model.graph.output[0].type.CopyFrom(helper.make_tensor_type_proto(TensorProto.UINT8, list(want.shape)))
  with TgcBackend.prepare(model, "c") as rep: (got,) = rep.run(feeds)
  assert got.dtype == np.uint8 and got.shape == want.shape
  diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
  assert diff.max() <= 1 and (diff == 0).mean() > 0.9, (diff.max(), (diff == 0).mean())
