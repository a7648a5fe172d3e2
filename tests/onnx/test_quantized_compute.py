"""QDQ models computed on their 8-bit values (frontend/onnx/quantized_compute.py): a hand-built QDQ network (uint8
activations with a zero point, per-channel int8 conv weights, per-tensor int8 Gemm weights, padding, a residual add,
a max pooling)
compiled for each target and run on random inputs against onnx.reference within one output quantization step; the
artifact keeps its weights and activations 8-bit and dequantizes no weight at run time. QLinearConv sums in float32
exactly where its weights bound the sums (or as integer dot products where the CPU level has them), bit-exact against
onnx.reference on every path."""
from __future__ import annotations
import json
import re
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from tgc.aot.compile import compile_model
from tgc.aot.artifact import runner_class
from tgc.codegen.target import cpu_level, host_cpu
from tests.codegen.test_dot import runs_here

RNG = np.random.default_rng(21)
OUT_SCALE = 0.05
C = 48          # channels


def _const(name: str, arr: np.ndarray) -> onnx.TensorProto: return numpy_helper.from_array(arr, name)


def _qdq(nodes: list, inits: list, x: str, name: str, scale: float, zero: int) -> str:
  """x -> QuantizeLinear(uint8) -> DequantizeLinear; the dequantized name."""
  inits += [_const(f"{name}.s", np.array(scale, np.float32)), _const(f"{name}.z", np.array(zero, np.uint8))]
  nodes += [helper.make_node("QuantizeLinear", [x, f"{name}.s", f"{name}.z"], [f"{name}.q"], name=f"{name}_Q"),
            helper.make_node("DequantizeLinear", [f"{name}.q", f"{name}.s", f"{name}.z"], [f"{name}.dq"],
                             name=f"{name}_DQ")]
  return f"{name}.dq"


def _weight(nodes: list, inits: list, name: str, shape: tuple, per_channel: bool, axis: int = 0) -> str:
  """int8 weights, symmetric (zero point 0), one scale or one per channel along `axis`; the dequantized name."""
  q = RNG.integers(-127, 128, shape).astype(np.int8)
  scale = (RNG.uniform(0.002, 0.01, shape[axis]) if per_channel else np.array(0.005)).astype(np.float32)
  inits += [_const(f"{name}.q", q), _const(f"{name}.s", scale), _const(f"{name}.z", np.zeros(scale.shape, np.int8))]
  nodes.append(helper.make_node("DequantizeLinear", [f"{name}.q", f"{name}.s", f"{name}.z"], [f"{name}.dq"],
                                axis=axis, name=f"{name}_DQ"))
  return f"{name}.dq"


def qdq_model() -> onnx.ModelProto:
  nodes: list = []
  inits: list = []
  x = _qdq(nodes, inits, "x", "in", 0.03, 128)
  w1 = _weight(nodes, inits, "w1", (C, 3, 3, 3), per_channel=True)
  inits.append(_const("b1", RNG.standard_normal(C).astype(np.float32) * 0.1))
  nodes += [helper.make_node("Conv", [x, w1, "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
            helper.make_node("Relu", ["c1"], ["r1"], name="relu1")]
  r1 = _qdq(nodes, inits, "r1", "a1", 0.05, 0)
  w2 = _weight(nodes, inits, "w2", (C, C, 3, 3), per_channel=True)
  nodes.append(helper.make_node("Conv", [r1, w2], ["c2"], pads=[1, 1, 1, 1], name="conv2"))
  c2 = _qdq(nodes, inits, "c2", "a2", 0.2, 100)
  nodes.append(helper.make_node("Add", [c2, r1], ["s"], name="residual"))
  s = _qdq(nodes, inits, "s", "a3", 0.2, 90)
  nodes.append(helper.make_node("MaxPool", [s], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                name="pool"))
  p = _qdq(nodes, inits, "p", "a5", 0.2, 90)
  nodes += [helper.make_node("GlobalAveragePool", [p], ["g"], name="gap"),
            helper.make_node("Flatten", ["g"], ["f"], name="flatten")]
  f = _qdq(nodes, inits, "f", "a4", 0.02, 60)
  w3 = _weight(nodes, inits, "w3", (10, C), per_channel=False)
  inits.append(_const("b3", RNG.standard_normal(10).astype(np.float32) * 0.1))
  nodes.append(helper.make_node("Gemm", [f, w3, "b3"], ["logits"], transB=1, name="fc"))
  y = _qdq(nodes, inits, "logits", "out", OUT_SCALE, 128)
  nodes.append(helper.make_node("Identity", [y], ["y"], name="output"))
  info = helper.make_tensor_value_info
  graph = helper.make_graph(nodes, "qdq_net", [info("x", TensorProto.FLOAT, [1, 3, 10, 10])],
                            [info("y", TensorProto.FLOAT, [1, 10])], inits)
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
  onnx.checker.check_model(model)
  return model


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
  path = tmp_path_factory.mktemp("qdq") / "qdq_net.onnx"
  onnx.save(qdq_model(), str(path))
  return path


@pytest.mark.parametrize("target, cpu", [("c", None), ("c", "x86-64-v4+vnni"), ("opencl", None), ("webgpu", None)],
                         ids=["c", "c-vnni", "opencl", "webgpu"])
def test_qdq_network_matches_reference(model_path, tmp_path, target, cpu):
  """c-vnni: the convolutions as VNNI dot products whose activation words are single loads (zero points 128, 0,
  100; padded taps read as the zero point)."""
  if cpu is not None and host_cpu().dot != "vnni": pytest.skip(f"this machine does not run {cpu} code")
  report = compile_model(str(model_path), target, str(tmp_path / target), force=True, cpu=cpu)
  if cpu is not None:
    with open(f"{report.out_dir}/model.c") as f: source = f.read()
    assert "_mm512_dpbusd_epi32" in source and "tg_u8x4u *" in source
  ref = ReferenceEvaluator(str(model_path))
  with runner_class(target)(report.out_dir) as runner:
    for seed in range(3):
      x = np.random.default_rng(seed).uniform(-3, 3, (1, 3, 10, 10)).astype(np.float32)
      want = ref.run(None, {"x": x})[0]
      got = runner.run({"x": x})["y"]
      # the float reference may round a value on a quantization boundary the other way: one output step apart
      np.testing.assert_allclose(got, want, rtol=0, atol=OUT_SCALE * 1.01)
      assert np.count_nonzero(got != want) <= want.size // 4, (got, want)


def test_qdq_network_stays_8bit(model_path, tmp_path):
  report = compile_model(str(model_path), "c", str(tmp_path / "c"), force=True)
  with open(f"{report.out_dir}/manifest.json") as f: manifest = json.load(f)
  weights = {t["name"]: t for t in manifest["weights"]["tensors"]}
  # the conv and Gemm weights are stored as int8, not dequantized to float at compile time, the first conv's
  # 1296 weights included (small dequantized weights were folded to float before: no dot-product instructions)
  assert sum(t["nbytes"] for t in weights.values() if t["dtype"] == "int8") >= C * C * 9 + C * 27 + 10 * C
  assert not any(t["dtype"] == "float32" and t["nbytes"] >= 4 * C * 27 for t in weights.values())
  # no weight is dequantized at run time by a kernel of its own; the conv and pooling kernels read 8-bit buffers
  ops = {k["name"]: {n["op"] for n in k["nodes"]} for k in manifest["kernels"]}
  for c in manifest["calls"]:
    assert ops[c["kernel"]] != {"DequantizeLinear"} or all(a["kind"] != "weight" for a in c["args"]), c
  eight_bit = {b["index"] for b in manifest["arena_buffers"] if b["dtype"] in ("uint8", "int8")}
  conv_calls = [c for c in manifest["calls"] if {"conv1", "conv2", "pool"} & set(c["nodes"])]
  # where the CPU level has integer dot products, conv1 (3 channels) is two: its image stored as 8-bit rows, then
  # the convolution over them (`_rows_conv`)
  assert len(conv_calls) == 3 + bool(cpu_level("portable").dot)
  assert conv_calls and all(any(a["kind"] == "arena" and a["index"] in eight_bit for a in c["args"][1:])
                            for c in conv_calls)
  with open(f"{report.out_dir}/model.c") as f: source = f.read()
  # int8 weights and uint8 activations move as SIMD vectors, converted on load
  assert "__builtin_convertvector" in source and "tg_i8x" in source


def test_a_large_qdq_matmul_keeps_its_weights_8bit(tmp_path):
  """A transformer's projection (uint8 activations, per-column int8 weights of 256 x 192: big enough to be packed in
  panels of 16 columns): the panels are packed from the 8-bit weights at compile time, not from a float copy that a
  kernel converts every run, so the product reads int8 weights (as dot products where the CPU level has them) and
  matches onnx.reference within one output step."""
  nodes: list = []
  inits: list = []
  x = _qdq(nodes, inits, "x", "in", 0.03, 128)
  w = _weight(nodes, inits, "w", (256, 192), per_channel=True, axis=1)
  nodes.append(helper.make_node("MatMul", [x, w], ["m"], name="proj"))
  y = _qdq(nodes, inits, "m", "out", OUT_SCALE * 4, 128)
  nodes.append(helper.make_node("Identity", [y], ["y"], name="output"))
  info = helper.make_tensor_value_info
  graph = helper.make_graph(nodes, "qdq_matmul", [info("x", TensorProto.FLOAT, [1, 32, 256])],
                            [info("y", TensorProto.FLOAT, [1, 32, 192])], inits)
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
  path = str(tmp_path / "qdq_matmul.onnx")
  onnx.save(model, path)
  report = compile_model(path, "c", str(tmp_path / "c"), force=True)
  with open(f"{report.out_dir}/manifest.json") as f: manifest = json.load(f)
  assert [t["dtype"] for t in manifest["weights"]["tensors"] if t["nbytes"] >= 256 * 192] == ["int8"]
  product = [k for k in manifest["kernels"] if "proj" in {n["name"] for n in k["nodes"]}]
  assert len(product) == 1 and "int8" in {a["dtype"] for a in product[0]["args"]}, product
  assert len(manifest["kernels"]) <= 3, [k["name"] for k in manifest["kernels"]]   # quantize, product, output
  x = np.random.default_rng(0).uniform(-3, 3, (1, 32, 256)).astype(np.float32)
  want = ReferenceEvaluator(model).run(None, {"x": x})[0]
  with runner_class("c")(report.out_dir) as runner: got = runner.run({"x": x})["y"]
  np.testing.assert_allclose(got, want, rtol=0, atol=OUT_SCALE * 4 * 1.01)


@pytest.mark.parametrize("out_scale, out_zero", [(0.2, 90), (0.2, 91), (0.3, 90)], ids=["same", "zero", "scale"])
def test_requantizing_a_pooled_tensor_with_its_parameters_is_its_integers(tmp_path, out_scale, out_zero):
  """DequantizeLinear -> MaxPool -> QuantizeLinear with the input's scale and zero point: the pooled 8-bit values
  themselves (a pooling kernel of bytes, nothing rounded or clipped), exactly as the reference; with another scale
  or zero point the values are quantized again."""
  inits = [_const("s", np.array(0.2, np.float32)), _const("z", np.array(90, np.uint8)),
           _const("os", np.array(out_scale, np.float32)), _const("oz", np.array(out_zero, np.uint8))]
  nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["d"], name="dq"),
           helper.make_node("MaxPool", ["d"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                            name="pool"),
           helper.make_node("QuantizeLinear", ["p", "os", "oz"], ["y"], name="q")]
  info = helper.make_tensor_value_info
  graph = helper.make_graph(nodes, "pool_q", [info("x", TensorProto.UINT8, [1, 8, 9, 9])],
                            [info("y", TensorProto.UINT8, [1, 8, 5, 5])], inits)
  path = tmp_path / "pool_q.onnx"
  onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]), str(path))
  report = compile_model(str(path), "c", str(tmp_path / "c"), force=True)
  with open(f"{report.out_dir}/manifest.json") as f: manifest = json.load(f)
  nodes_of = [{n["name"] for n in k["nodes"]} for k in manifest["kernels"]]
  assert ({"pool"} in nodes_of) == ((out_scale, out_zero) == (0.2, 90)), nodes_of
  ref = ReferenceEvaluator(str(path))
  with runner_class("c")(report.out_dir) as runner:
    x = np.random.default_rng(5).integers(0, 256, (1, 8, 9, 9)).astype(np.uint8)
    np.testing.assert_array_equal(runner.run({"x": x})["y"], ref.run(None, {"x": x})[0])


def qlinear_conv_model(cin: int, weight_max: int, kernel: int = 3, size: int = 8, stride: int = 1,
                       pads: tuple = (1, 1, 1, 1)) -> onnx.ModelProto:
  """One QLinearConv (uint8 in with zero point 131, int8 weights up to `weight_max`, int32 bias, uint8 out)."""
  w = RNG.integers(-weight_max, weight_max + 1, (32, cin, kernel, kernel)).astype(np.int8)
  inits = [_const("xs", np.array(0.02, np.float32)), _const("xz", np.array(131, np.uint8)), _const("w", w),
           _const("ws", RNG.uniform(0.001, 0.003, 32).astype(np.float32)), _const("wz", np.zeros(32, np.int8)),
           _const("ys", np.array(0.05, np.float32)), _const("yz", np.array(7, np.uint8)),
           _const("b", RNG.integers(-3000, 3000, 32).astype(np.int32))]
  node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"], pads=list(pads),
                          strides=[stride] * 2, name="qconv")
  info = helper.make_tensor_value_info
  out = [(size + pads[a] + pads[a + 2] - kernel) // stride + 1 for a in range(2)]
  graph = helper.make_graph([node], "qlinear_conv", [info("x", TensorProto.UINT8, [1, cin, size, size])],
                            [info("y", TensorProto.UINT8, [1, 32] + out)], inits)
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


@pytest.mark.parametrize("cin, weight_max, exact_in_float", [(64, 20, True), (2048, 127, False)])
def test_qlinear_conv_is_bit_exact(tmp_path, cin, weight_max, exact_in_float):
  """QLinearConv sums its products in float32 when the weights bound every partial sum below 2**24 (then equal to the
  int32 sum bit for bit), in int32 otherwise; the uint8 outputs equal onnx.reference's either way."""
  path = tmp_path / "qconv.onnx"
  onnx.save(qlinear_conv_model(cin, weight_max), str(path))
  report = compile_model(str(path), "c", str(tmp_path / "c"), force=True)
  with open(f"{report.out_dir}/model.c") as f: source = f.read()
  # the accumulators: float32 vectors when exact in float, int32 vectors otherwise; where the default CPU level has
  # integer dot products (x86-64-v3: four uint8 x int8 in two pmaddwd), the sums of the 8-bit values are those, into
  # int32 accumulators
  dot = cpu_level("portable").dot == "madd4"
  assert bool(re.search(r"tg_f32x\d+ acc", source)) == (exact_in_float and not dot)
  assert bool(re.search(r"tg_i32x\d+ acc", source)) == (not exact_in_float or dot)
  assert ("tg_dot4_mm256(" in source) == (exact_in_float and dot)
  # exact in float: the zero point 131 is taken outside the reduction (the padding reads 131, each output channel's
  # weight sum times 131 is subtracted after), so no sum of the weights (a dot product of 0x01010101 words) is in it
  assert "16843009u" not in source
  ref = ReferenceEvaluator(str(path))
  with runner_class("c")(report.out_dir) as runner:
    for seed in range(2):
      x = np.random.default_rng(seed).integers(0, 256, (1, cin, 8, 8)).astype(np.uint8)
      np.testing.assert_array_equal(runner.run({"x": x})["y"], ref.run(None, {"x": x})[0])


@pytest.mark.parametrize("level", ["x86-64-v3", "x86-64-v4+vnni"])
@pytest.mark.parametrize("cin, kernel, size, stride, pads", [(3, 7, 20, 2, (3, 3, 3, 3)), (2, 3, 9, 1, (1, 0, 2, 1))],
                         ids=["rgb-7x7-stride2", "2ch-3x3-asymmetric"])
def test_image_convolution_reads_rows(tmp_path, level, cin, kernel, size, stride, pads):
  """An 8-bit convolution over 3 (or 2) channels: the padded image stored as rows of bytes (a kernel of its own,
  padded on the right where the zero taps past KW*C read), the convolution reading four consecutive bytes of a row
  per dot product (one 32-bit load) instead of bytes C apart; its uint8 outputs equal onnx.reference's."""
  if not runs_here(level): pytest.skip(f"this machine does not run {level} code")
  path = tmp_path / "qconv.onnx"
  onnx.save(qlinear_conv_model(cin, 20, kernel, size, stride, pads), str(path))
  report = compile_model(str(path), "c", str(tmp_path / "c"), force=True, cpu=level)
  with open(f"{report.out_dir}/manifest.json") as f: manifest = json.load(f)
  assert len(manifest["calls"]) == 2
  with open(f"{report.out_dir}/model.c") as f: source = f.read()
  assert "tg_u8x4u *" in source and ("tg_dot4_mm" in source or "_dpbusd_epi32(" in source)
  ref = ReferenceEvaluator(str(path))
  with runner_class("c")(report.out_dir) as runner:
    for seed in range(2):
      x = np.random.default_rng(seed).integers(0, 256, (1, cin, size, size)).astype(np.uint8)
      np.testing.assert_array_equal(runner.run({"x": x})["y"], ref.run(None, {"x": x})[0])


def conv_integer_model(cin: int, size: int) -> onnx.ModelProto:
  """One ConvInteger (uint8 in with zero point 131, full-range int8 weights, pads 1, int32 out)."""
  w = RNG.integers(-128, 128, (32, cin, 3, 3)).astype(np.int8)
  node = helper.make_node("ConvInteger", ["x", "w", "xz"], ["y"], pads=[1, 1, 1, 1], name="convint")
  info = helper.make_tensor_value_info
  graph = helper.make_graph([node], "conv_integer", [info("x", TensorProto.UINT8, [1, cin, size, size])],
                            [info("y", TensorProto.INT32, [1, 32, size, size])],
                            [_const("w", w), _const("xz", np.array(131, np.uint8))])
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def qdq_conv_model(cin: int, size: int) -> onnx.ModelProto:
  """QuantizeLinear -> DequantizeLinear -> Conv (per-channel int8 weights, bias, pads 1) -> QuantizeLinear ->
  DequantizeLinear, as onnxruntime.quantization writes a convolution."""
  nodes: list = []
  inits: list = []
  x = _qdq(nodes, inits, "x", "in", 0.03, 128)
  w = _weight(nodes, inits, "w", (32, cin, 3, 3), per_channel=True)
  inits.append(_const("b", RNG.standard_normal(32).astype(np.float32)))
  nodes.append(helper.make_node("Conv", [x, w, "b"], ["c"], pads=[1, 1, 1, 1], name="conv"))
  y = _qdq(nodes, inits, "c", "out", OUT_SCALE * 20, 120)
  nodes.append(helper.make_node("Identity", [y], ["y"], name="output"))
  info = helper.make_tensor_value_info
  graph = helper.make_graph(nodes, "qdq_conv", [info("x", TensorProto.FLOAT, [1, cin, size, size])],
                            [info("y", TensorProto.FLOAT, [1, 32, size, size])], inits)
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


@pytest.mark.parametrize("level, tiles", [("x86-64-v3", True), ("x86-64-v4+vnni", False)], ids=["v3", "vnni"])
@pytest.mark.parametrize("op", ["QLinearConv", "ConvInteger", "QDQ"])
def test_8bit_3x3_convolutions_without_vnni_take_integer_winograd_tiles(tmp_path, op, level, tiles):
  """A 3x3 convolution of 32 uint8 channels (zero point 131 or 128, 16x16, padded) by full-range int8 weights:
  without VNNI (x86-64-v3: two pmaddwd per four bytes) in Winograd's integer form (frontend/winograd.py: int16 tiles
  and weights summed by pmaddwd, stored beside the int8 ones), with VNNI directly; QLinearConv's uint8 and
  ConvInteger's int32 outputs equal onnx.reference's exactly, the QDQ one within one output step."""
  model = {"QLinearConv": lambda: qlinear_conv_model(32, 127, size=16),
           "ConvInteger": lambda: conv_integer_model(32, 16), "QDQ": lambda: qdq_conv_model(32, 16)}[op]()
  path = tmp_path / "conv.onnx"
  onnx.save(model, str(path))
  report = compile_model(str(path), "c", str(tmp_path / "c"), force=True, cpu=level)
  with open(f"{report.out_dir}/manifest.json") as f: manifest = json.load(f)
  with open(f"{report.out_dir}/model.c") as f: source = f.read()
  int16_weights = [t for t in manifest["weights"]["tensors"] if t["dtype"] == "int16"]
  assert bool(int16_weights) == tiles and (len(manifest["calls"]) > 4) == tiles
  assert ("_mm256_madd_epi16(" in source) == tiles
  if tiles: assert sum(t["nbytes"] for t in int16_weights) == 16 * 32 * 32 * 2      # 4U of each tap position
  if not runs_here(level): pytest.skip(f"this machine does not run {level} code")
  ref = ReferenceEvaluator(str(path))
  name = model.graph.input[0].name
  with runner_class("c")(report.out_dir) as runner:
    for seed in range(2):
      rng = np.random.default_rng(seed)
      x = rng.uniform(-3, 3, (1, 32, 16, 16)).astype(np.float32) if op == "QDQ" else \
        rng.integers(0, 256, (1, 32, 16, 16)).astype(np.uint8)
      got, want = runner.run({name: x})["y"], ref.run(None, {name: x})[0]
      if op != "QDQ": np.testing.assert_array_equal(got, want)
      else:
        np.testing.assert_allclose(got, want, rtol=0, atol=OUT_SCALE * 20 * 1.01)
        assert np.count_nonzero(got != want) <= want.size // 100, np.count_nonzero(got != want)
