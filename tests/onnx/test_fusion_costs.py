"""Graphs that used to make pathological kernels, compiled for C and checked against onnx.reference on random
inputs, with the kernel structure that keeps them fast: a Concat of nearest Resizes read by a conv is computed
once, an embedding Gather is an indexed load, an int8 QDQ conv vectorizes through its quantizing epilogue, a conv
split in halves (an STFT) is one kernel."""
import json
import re
import numpy as np
import onnx
import pytest
from onnx import TensorProto as T, helper as h, numpy_helper as nh
from onnx.reference import ReferenceEvaluator
from tgc.aot.compile import compile_model
from tgc.runtimes.artifact_c import CArtifact

RNG = np.random.default_rng(0)


def weight(name, shape, scale=0.1):
  return nh.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)


def build(nodes, inputs, outputs, inits):
  graph = h.make_graph(nodes, "m", [h.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                       [h.make_tensor_value_info(n, T.FLOAT, s) for n, s in outputs], inits)
  return h.make_model(graph, opset_imports=[h.make_opsetid("", 21)])


def fpn():
  scales = [nh.from_array(np.array([1, 1, 2, 2], np.float32), "s2"), nh.from_array(np.array([1, 1, 4, 4], np.float32),
                                                                                      "s4")]
  nodes = [h.make_node("Resize", ["b", "", "s2"], ["rb"], mode="nearest"),
           h.make_node("Resize", ["c", "", "s4"], ["rc"], mode="nearest"),
           h.make_node("Concat", ["a", "rb", "rc"], ["cat"], axis=1),
           h.make_node("Conv", ["cat", "w"], ["y"], pads=[1, 1, 1, 1])]
  inputs = [("a", T.FLOAT, [1, 8, 16, 16]), ("b", T.FLOAT, [1, 8, 8, 8]), ("c", T.FLOAT, [1, 8, 4, 4])]
  return build(nodes, inputs, [("y", [1, 16, 16, 16])], scales + [weight("w", (16, 24, 3, 3))])


def embedding():
  nodes = [h.make_node("Gather", ["table", "ids"], ["e"], axis=0), h.make_node("Relu", ["e"], ["y"])]
  return build(nodes, [("ids", T.INT64, [2, 7])], [("y", [2, 7, 32])], [weight("table", (1000, 32), 1.0)])


def qdq_conv():
  inits = [nh.from_array(RNG.integers(-127, 127, (16, 16, 3, 3)).astype(np.int8), "wq"),
           nh.from_array((RNG.random(16) * 0.01 + 0.001).astype(np.float32), "ws"),
           nh.from_array(np.zeros(16, np.int8), "wz"), nh.from_array(np.array(0.05, np.float32), "xs"),
           nh.from_array(np.array(128, np.uint8), "xz"), nh.from_array(np.array(0.1, np.float32), "ys"),
           nh.from_array(np.array(128, np.uint8), "yz")]
  nodes = [h.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
           h.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
           h.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
           h.make_node("Conv", ["xd", "wd"], ["c"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["c"], ["r"]),
           h.make_node("QuantizeLinear", ["r", "ys", "yz"], ["rq"]),
           h.make_node("DequantizeLinear", ["rq", "ys", "yz"], ["y"])]
  return build(nodes, [("x", T.FLOAT, [1, 16, 12, 12])], [("y", [1, 16, 12, 12])], inits)


def stft():
  nodes = [h.make_node("Conv", ["x", "w"], ["s"], strides=[20]),
           h.make_node("Slice", ["s", "b0", "e0", "ax"], ["re"]), h.make_node("Slice", ["s", "b1", "e1", "ax"], ["im"]),
           h.make_node("Mul", ["re", "re"], ["re2"]), h.make_node("Mul", ["im", "im"], ["im2"]),
           h.make_node("Add", ["re2", "im2"], ["y"])]
  consts = [nh.from_array(np.array([v], np.int64), n) for n, v in (("b0", 0), ("e0", 16), ("b1", 16), ("e1", 32),
                                                                    ("ax", 1))]
  return build(nodes, [("x", T.FLOAT, [1, 1, 400])], [("y", [1, 16, 19])], consts + [weight("w", (32, 1, 40))])


def feeds(model):
  out = {}
  for vi in model.graph.input:
    shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    out[vi.name] = RNG.integers(-5, 1000, shape).astype(np.int64) if vi.type.tensor_type.elem_type == T.INT64 \
      else RNG.standard_normal(shape).astype(np.float32)
  return out


@pytest.mark.parametrize("name,build_model", [("fpn", fpn), ("embedding", embedding), ("qdq_conv", qdq_conv),
                                              ("stft", stft)])
def test_compiles_to_fast_kernels_with_reference_results(tmp_path, name, build_model):
  model = build_model()
  path = tmp_path / f"{name}.onnx"
  onnx.save(model, str(path))
  report = compile_model(str(path), "c", str(tmp_path / "out"))
  x = feeds(model)
  ref = ReferenceEvaluator(model).run(None, x)[0]
  with CArtifact(report.out_dir) as art: got = art.run(x)["y"]
  step = 0.1 if name == "qdq_conv" else 0.0      # one output quantization step where float rounding decides it
  np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 + step * 1.001)
  manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
  kernels = {k["name"]: k for k in manifest["kernels"]}
  ops = {n: re.sub(r"^.*_k\d+_", "", n) for n in kernels}       # what a kernel computes, by its name
  reducing = [k for n, k in kernels.items() if "conv" in ops[n]]
  if name == "fpn":     # the concatenation in kernels of its own (one per piece), the conv reading it vectorized
    assert len(kernels) == 4 and len(reducing) == 1 and all(any(o[0] == "VECTOR" for o in k["opts"]) for k in reducing)
  if name == "embedding":
    assert len(manifest["weights"]["tensors"]) == 1 and all(k["ops"] < 10 * 2 * 7 * 32 for k in kernels.values())
  if name == "qdq_conv":     # the conv vectorized through its QuantizeLinear epilogue
    assert all(any(o[0] == "VECTOR" for o in k["opts"]) for k in reducing)
  if name == "stft":
    assert sum(k["ops"] > 5000 for k in kernels.values()) == 1      # one conv kernel, an elementwise one


def test_an_lrn_between_convolutions_stores_contiguously_with_vector_square_roots(tmp_path):
  """An LRN between two convolutions (GoogLeNet's): its elementwise kernels read and write the channels-last image
  a convolution reads, their channels in vectors. The loop over the channels' vectors is innermost (whole cache lines
  one after another, not one vector per line per pass of an outer channel loop), x ** 0.75 is two vector square
  roots (sqrtf lane by lane kept each lane's errno: 16 scalar roots per vector), and the model matches onnxruntime
  (onnx.reference's LRN sums another window)."""
  ort = pytest.importorskip("onnxruntime")
  nodes = [h.make_node("Conv", ["x", "w0"], ["c"], pads=[1] * 4), h.make_node("Relu", ["c"], ["r"]),
           h.make_node("LRN", ["r"], ["n"], size=5, alpha=1e-3, beta=0.75, bias=1.0),
           h.make_node("Conv", ["n", "w1"], ["y"])]
  model = build(nodes, [("x", T.FLOAT, [1, 8, 20, 20])], [("y", [1, 8, 20, 20])],
                [weight("w0", (32, 8, 3, 3), 1.0), weight("w1", (8, 32, 1, 1), 1.0)])
  onnx.save(model, str(tmp_path / "lrn.onnx"))
  report = compile_model(str(tmp_path / "lrn.onnx"), "c", str(tmp_path / "out"), force=True)
  manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
  epilogues = [k["opts"] for k in manifest["kernels"] if k["name"].endswith("_relu_lrn")]
  # the channels' vectors (the first output loop) moved innermost past the two pixel loops
  assert epilogues and all(opts[0][0] == "VECTOR" and ["SWAP", 1, 2] in opts for opts in epilogues), epilogues
  source = (tmp_path / "out" / "model.c").read_text()
  assert re.search(r"tg_sqrt_f32x\d+\(", source) and not re.search(r"sqrtf\(alu", source)
  x = RNG.standard_normal((1, 8, 20, 20)).astype(np.float32)
  want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
  with CArtifact(report.out_dir) as art: got = art.run({"x": x})["y"]
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
