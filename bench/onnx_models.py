"""Real-architecture ONNX graphs built with onnx.helper from seeded random weights, for benchmarks:

- `mobilenet_v2()`: MobileNetV2 (width 1.0, the full layer table of Sandler et al. 2018, 1x3x224x224 input):
  a 3x3 stride-2 stem, 17 inverted residual blocks (1x1 expand conv, 3x3 depthwise conv with group = channels,
  1x1 linear project conv; residual Add where stride is 1 and channels match), a 1x1 conv to 1280 channels,
  GlobalAveragePool, Flatten and a Gemm classifier to 1000 logits. Every conv is followed by BatchNormalization
  (kept in the graph, not folded) and, except the project convs, Relu6 written as Clip(0, 6).
- `transformer_encoder()`: a BERT-style post-norm encoder (default 4 layers, d_model 256, 4 heads, FFN 1024,
  sequence 128, batch 1) on a [1, seq, d_model] float input: MatMul + Add for Q, K, V and the output projection,
  Reshape/Transpose into heads, scaled dot-product attention (MatMul, Mul by 1/sqrt(head dim), Softmax), residual
  Add, LayerNormalization (opset 17; or its ReduceMean/Sub/Pow/Sqrt/Div decomposition), FFN with Gelu written as
  x * 0.5 * (1 + Erf(x / sqrt 2)).
- `resnet18()`: ResNet-18 (torchvision's layout, BatchNormalization kept as nodes, 1x3x224x224 input).
- `mlp()`: 784-512-512-10 with Relu (Gemm with transB, as torch exports Linear), batch 1 or 64.
- `mnist_cnn()`: the example model of examples/mnist_cnn.py (conv 1->8 3x3, BatchNormalization, Relu, MaxPool,
  conv 8->16, Relu, MaxPool, Flatten, Gemm 784->64, Relu, Gemm 64->10, LogSoftmax) with its own seeded weights.

Weights are He-scaled normals (variance-preserving), so activations stay in a sane range through the depth."""
from __future__ import annotations
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
# MobileNetV2's inverted residual settings: expansion t, output channels c, repeats n, first stride s
MOBILENET_V2_BLOCKS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                       (6, 320, 1, 1))


class _GraphBuilder:
  """Collects nodes and initializers; names are made unique by a counter."""

  def __init__(self, seed: int):
    self.rng = np.random.default_rng(seed)
    self.nodes: list[onnx.NodeProto] = []
    self.inits: list[onnx.TensorProto] = []
    self.count = 0

  def name(self, stem: str) -> str:
    self.count += 1
    return f"{stem}_{self.count}"

  def const(self, stem: str, value: np.ndarray) -> str:
    name = self.name(stem)
    self.inits.append(numpy_helper.from_array(np.asarray(value), name))
    return name

  def normal(self, stem: str, shape: tuple[int, ...], std: float) -> str:
    return self.const(stem, (self.rng.standard_normal(shape) * std).astype(np.float32))

  def node(self, op: str, inputs: list[str], stem: str | None = None, **attrs) -> str:
    out = self.name(stem or op.lower())
    self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
    return out

  def model(self, name: str, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto]
            ) -> onnx.ModelProto:
    graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="tgc-bench")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


# ---------------------------------------------------------------- MobileNetV2
def _conv_bn(b: _GraphBuilder, x: str, cin: int, cout: int, k: int, stride: int, groups: int, relu6: bool,
             relu: bool = False) -> str:
  fan_in = (cin // groups) * k * k
  w = b.normal("conv_w", (cout, cin // groups, k, k), np.sqrt((2.0 if relu6 or relu else 1.0) / fan_in))
  y = b.node("Conv", [x, w], "conv", kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4, group=groups)
  scale = b.const("bn_scale", (1.0 + 0.1 * b.rng.standard_normal(cout)).astype(np.float32))
  bias = b.const("bn_bias", (0.05 * b.rng.standard_normal(cout)).astype(np.float32))
  mean = b.const("bn_mean", (0.05 * b.rng.standard_normal(cout)).astype(np.float32))
  var = b.const("bn_var", b.rng.uniform(0.5, 1.5, cout).astype(np.float32))
  y = b.node("BatchNormalization", [y, scale, bias, mean, var], "bn", epsilon=1e-5)
  if relu6: y = b.node("Clip", [y, b.const("zero", np.float32(0)), b.const("six", np.float32(6))], "relu6")
  if relu: y = b.node("Relu", [y], "relu")
  return y


# ---------------------------------------------------------------- ResNet-18
def resnet18(seed: int = 0, image: int = 224, classes: int = 1000) -> onnx.ModelProto:
  """ResNet-18 as torchvision defines it and torch.onnx exports it without folding: 7x7 stride-2 stem, max pool, four
  stages of two basic blocks (3x3 conv, BN, Relu, 3x3 conv, BN, residual Add, Relu; a 1x1 stride-2 conv + BN on the
  shortcut where the shape changes), global average pool, Gemm to `classes` (input 'image' [1, 3, image, image])."""
  b = _GraphBuilder(seed)
  x = _conv_bn(b, "image", 3, 64, 7, 2, 1, False, relu=True)
  x = b.node("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
  cin = 64
  for stage, cout in enumerate((64, 128, 256, 512)):
    for block in range(2):
      stride = 2 if stage > 0 and block == 0 else 1
      y = _conv_bn(b, x, cin, cout, 3, stride, 1, False, relu=True)
      y = _conv_bn(b, y, cout, cout, 3, 1, 1, False)
      shortcut = _conv_bn(b, x, cin, cout, 1, stride, 1, False) if stride != 1 or cin != cout else x
      x = b.node("Relu", [b.node("Add", [y, shortcut], "residual")], "relu")
      cin = cout
  x = b.node("Flatten", [b.node("GlobalAveragePool", [x], "pool")], "flatten", axis=1)
  w, bias = b.normal("fc_w", (classes, 512), np.sqrt(1.0 / 512)), b.normal("fc_b", (classes,), 0.05)
  b.nodes.append(helper.make_node("Gemm", [x, w, bias], ["logits"], name="classifier", transB=1))
  return b.model("resnet18", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, image, image])],
                 [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, classes])])


def mobilenet_v2(seed: int = 0, image: int = 224, classes: int = 1000,
                 blocks: tuple[tuple[int, int, int, int], ...] = MOBILENET_V2_BLOCKS) -> onnx.ModelProto:
  """MobileNetV2, width 1.0 (input 'image' [1, 3, image, image], output 'logits' [1, classes])."""
  b = _GraphBuilder(seed)
  x = _conv_bn(b, "image", 3, 32, 3, 2, 1, True)
  cin = 32
  for t, c, n, s in blocks:
    for i in range(n):
      stride, hidden = (s if i == 0 else 1), cin * t
      y = _conv_bn(b, x, cin, hidden, 1, 1, 1, True) if t != 1 else x
      y = _conv_bn(b, y, hidden, hidden, 3, stride, hidden, True)
      y = _conv_bn(b, y, hidden, c, 1, 1, 1, False)
      x = b.node("Add", [x, y], "residual") if stride == 1 and cin == c else y
      cin = c
  x = _conv_bn(b, x, cin, 1280, 1, 1, 1, True)
  x = b.node("GlobalAveragePool", [x], "pool")
  x = b.node("Flatten", [x], "flatten", axis=1)
  w = b.normal("fc_w", (classes, 1280), np.sqrt(1.0 / 1280))
  bias = b.normal("fc_b", (classes,), 0.05)
  b.nodes.append(helper.make_node("Gemm", [x, w, bias], ["logits"], name="classifier", transB=1))
  return b.model("mobilenet_v2", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, image, image])],
                 [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, classes])])


# ---------------------------------------------------------------- transformer encoder
def _linear(b: _GraphBuilder, x: str, din: int, dout: int, gain: float = 1.0) -> str:
  w = b.normal("linear_w", (din, dout), np.sqrt(gain / din))
  return b.node("Add", [b.node("MatMul", [x, w], "matmul"), b.normal("linear_b", (dout,), 0.02)], "linear")


def _layer_norm(b: _GraphBuilder, x: str, d: int, decomposed: bool) -> str:
  scale = b.const("ln_scale", (1.0 + 0.1 * b.rng.standard_normal(d)).astype(np.float32))
  bias = b.const("ln_bias", (0.05 * b.rng.standard_normal(d)).astype(np.float32))
  if not decomposed: return b.node("LayerNormalization", [x, scale, bias], "layernorm", axis=-1, epsilon=1e-5)
  centered = b.node("Sub", [x, b.node("ReduceMean", [x], "mean", axes=[-1])], "centered")
  var = b.node("ReduceMean", [b.node("Pow", [centered, b.const("two", np.float32(2))], "sq")], "var", axes=[-1])
  std = b.node("Sqrt", [b.node("Add", [var, b.const("eps", np.float32(1e-5))], "var_eps")], "std")
  return b.node("Add", [b.node("Mul", [b.node("Div", [centered, std], "normed"), scale], "scaled"), bias], "ln")


def _gelu_erf(b: _GraphBuilder, x: str) -> str:
  erf = b.node("Erf", [b.node("Div", [x, b.const("sqrt2", np.float32(np.sqrt(2.0)))], "gelu_div")], "gelu_erf")
  one_plus = b.node("Add", [erf, b.const("one", np.float32(1))], "gelu_add")
  return b.node("Mul", [b.node("Mul", [x, one_plus], "gelu_mul"), b.const("half", np.float32(0.5))], "gelu")


def _heads(b: _GraphBuilder, x: str, seq: int, heads: int, dh: int, perm: list[int]) -> str:
  shape = b.const("heads_shape", np.array([1, seq, heads, dh], np.int64))
  return b.node("Transpose", [b.node("Reshape", [x, shape], "split_heads")], "heads", perm=perm)


def transformer_encoder(seed: int = 0, layers: int = 4, d_model: int = 256, heads: int = 4, ffn: int = 1024,
                        seq: int = 128, decomposed_layernorm: bool = False) -> onnx.ModelProto:
  """A post-norm encoder stack (input 'tokens' [1, seq, d_model] embeddings, output 'hidden' of the same shape)."""
  if d_model % heads: raise ValueError(f"d_model {d_model} is not a multiple of heads {heads}")
  b = _GraphBuilder(seed)
  dh = d_model // heads
  x = "tokens"
  for _ in range(layers):
    q = _heads(b, _linear(b, x, d_model, d_model), seq, heads, dh, [0, 2, 1, 3])      # [1, h, seq, dh]
    k = _heads(b, _linear(b, x, d_model, d_model), seq, heads, dh, [0, 2, 3, 1])      # [1, h, dh, seq]
    v = _heads(b, _linear(b, x, d_model, d_model), seq, heads, dh, [0, 2, 1, 3])
    scores = b.node("Mul", [b.node("MatMul", [q, k], "qk"), b.const("scale", np.float32(1 / np.sqrt(dh)))], "scores")
    attn = b.node("MatMul", [b.node("Softmax", [scores], "softmax", axis=-1), v], "attn")
    merged = b.node("Transpose", [attn], "merge_heads", perm=[0, 2, 1, 3])
    merged = b.node("Reshape", [merged, b.const("model_shape", np.array([1, seq, d_model], np.int64))], "merged")
    x = _layer_norm(b, b.node("Add", [x, _linear(b, merged, d_model, d_model)], "attn_residual"), d_model,
                    decomposed_layernorm)
    hidden = _gelu_erf(b, _linear(b, x, d_model, ffn, gain=2.0))
    x = _layer_norm(b, b.node("Add", [x, _linear(b, hidden, ffn, d_model)], "ffn_residual"), d_model,
                    decomposed_layernorm)
  b.nodes.append(helper.make_node("Identity", [x], ["hidden"], name="output"))
  spec = [1, seq, d_model]
  return b.model("transformer_encoder", [helper.make_tensor_value_info("tokens", TensorProto.FLOAT, spec)],
                 [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, spec)])


# ---------------------------------------------------------------- MLP and the example CNN
def mlp(seed: int = 0, batch: int = 1, sizes: tuple[int, ...] = (784, 512, 512, 10)) -> onnx.ModelProto:
  """Linear layers as torch exports them (Gemm, weight [out, in], transB=1) with Relu between them."""
  b = _GraphBuilder(seed)
  x = "x"
  for i, (din, dout) in enumerate(zip(sizes, sizes[1:])):
    w, bias = b.normal("fc_w", (dout, din), np.sqrt(2.0 / din)), b.normal("fc_b", (dout,), 0.02)
    x = b.node("Gemm", [x, w, bias], "fc", transB=1)
    if i < len(sizes) - 2: x = b.node("Relu", [x], "relu")
  b.nodes.append(helper.make_node("Identity", [x], ["y"], name="output"))
  return b.model(f"mlp_b{batch}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, sizes[0]])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, sizes[-1]])])


def mnist_cnn(model) -> onnx.ModelProto:
  """The example CNN (an `examples/mnist_cnn.SmallCNN`) as an ONNX graph with the same weights."""
  from tgc.frontend.nn import get_state_dict
  sd = {k: v.numpy() for k, v in get_state_dict(model).items() if v.dtype.name == "float32"}
  b = _GraphBuilder(0)
  b.inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in sd.items()]
  x = b.node("Conv", ["x", "conv1.weight", "conv1.bias"], "conv1", pads=[1, 1, 1, 1])
  x = b.node("BatchNormalization", [x, "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var"], "bn1",
             epsilon=model.bn1.eps)
  x = b.node("MaxPool", [b.node("Relu", [x])], "pool1", kernel_shape=[2, 2], strides=[2, 2])
  x = b.node("Conv", [x, "conv2.weight", "conv2.bias"], "conv2", pads=[1, 1, 1, 1])
  x = b.node("MaxPool", [b.node("Relu", [x])], "pool2", kernel_shape=[2, 2], strides=[2, 2])
  x = b.node("Relu", [b.node("Gemm", [b.node("Flatten", [x]), "fc1.weight", "fc1.bias"], "fc1", transB=1)])
  x = b.node("LogSoftmax", [b.node("Gemm", [x, "fc2.weight", "fc2.bias"], "fc2", transB=1)], axis=-1)
  b.nodes.append(helper.make_node("Identity", [x], ["y"], name="output"))
  return b.model("mnist_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 28, 28])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])])


def random_feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
  """Seeded standard-normal float32 inputs for every graph input that is not an initializer."""
  rng = np.random.default_rng(seed)
  inits = {t.name for t in model.graph.initializer}
  feeds = {}
  for vi in model.graph.input:
    if vi.name in inits: continue
    shape = tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
    feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
  return feeds


if __name__ == "__main__":
  import onnxruntime as ort
  for m in (mobilenet_v2(), transformer_encoder(), transformer_encoder(decomposed_layernorm=True)):
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    out = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None,
                                                                                                  random_feeds(m))[0]
    print(m.graph.name, len(m.graph.node), "nodes", out.shape, f"std {out.std():.3f} max|.| {np.abs(out).max():.3f}")
