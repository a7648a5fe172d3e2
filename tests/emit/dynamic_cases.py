"""What the tests of artifacts with sizes known only at run time share (C, OpenCL, WebGPU): the models (the encoder
example over any length; a model of two sizes with reductions over one and sizes as expressions; one whose input
takes rows in steps of 8), random inputs,
the numpy reference, one artifact checked at several sizes, and the example program reading sizes off .npy files;
and an ONNX Loop whose number of steps, the rows of its scan output, each run decides."""
import subprocess
import textwrap
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from tgc.aot import models
from tgc.aot.reference import tensor_reference
from tgc.runtimes.artifact import ArtifactError
from tests.aot.aot_helpers import ROOT

ENCODER = str(ROOT / "examples" / "encoder_any_length.py") + ":build"
MODELS = textwrap.dedent("""
  import numpy as np
  from tgc import Tensor, Variable

  B, T = Variable("B", 1, 4), Variable("T", 3, 40)
  RNG = np.random.default_rng(5)
  W = Tensor(RNG.standard_normal((8, 6), dtype=np.float32))

  def two_sizes():
    def fn(x, mask):
      h = (x @ W).relu() * mask.reshape(mask.shape[0], mask.shape[1], 1)         # (B, T, 6)
      pooled = h.mean(axis=1) - h.max(axis=1) + h.var(axis=1)                    # reductions over T
      flat = h.pad(((0, 0), (0, 0), (1, 1))).reshape(h.shape[0], -1)            # (B, T*8): sizes as expressions
      return {"pooled": pooled, "flat": flat, "probs": h.softmax(1), "T": Tensor.size_value(h.shape[1])}
    return fn, {"x": Tensor.empty(B, T, 8), "mask": Tensor.empty(B, T)}

  def steps():
    H = Variable("h", 1, 6)                                                      # rows in steps of 8
    def fn(x): return {"pooled": x.reshape(x.shape[0], x.shape[1] // 8, 8, 4).mean(2), "twice": x * 2}
    return fn, {"x": Tensor.empty(2, 8 * H, 4)}

  def hidden_size():
    def fn(x): return x + Tensor.full((1, T), 1.0).sum()
    return fn, [Tensor.empty(2, 3)]
""")


def reference(spec: str, feeds: dict) -> dict:
  return tensor_reference(models.parse_model_spec(spec), feeds)


def two_feeds(rng, b: int, t: int) -> dict:
  """Random inputs of the two-size model for sizes B=b, T=t."""
  return {"x": rng.standard_normal((b, t, 8)).astype(np.float32),
          "mask": (rng.random((b, t)) > 0.3).astype(np.float32)}


def check_encoder(art, lengths=(1, 77, 256), seed: int = 0) -> None:
  """The encoder artifact `art` at each length against the reference on random tokens; a length out of range is an
  error naming the input and dimension."""
  rng = np.random.default_rng(seed)
  for t in lengths:
    x = rng.standard_normal((1, t, 64)).astype(np.float32)
    got = art.run({"tokens": x})["output_0"]
    assert got.shape == (1, t, 64)
    np.testing.assert_allclose(got, reference(ENCODER, {"tokens": x})["output_0"], rtol=1e-4, atol=1e-4)
  with pytest.raises(ArtifactError, match=r"input 'tokens': dimension 1 \(T\) is 257, outside the range 1..256"):
    art.run({"tokens": np.ones((1, 257, 64), np.float32)})


def check_two_sizes(art, spec: str, sizes=((1, 3), (2, 17), (4, 40)), seed: int = 1) -> None:
  """The two-size model's artifact at each (B, T) against the reference on random inputs."""
  rng = np.random.default_rng(seed)
  for b, t in sizes:
    feeds = two_feeds(rng, b, t)
    got, ref = art.run(feeds), reference(spec, feeds)
    assert got["flat"].shape == (b, t * 8) and float(got["T"]) == t
    for name in ref: np.testing.assert_allclose(got[name], ref[name], rtol=1e-4, atol=1e-4, err_msg=name)


def run_main(folder, tmp_path, feeds: dict, env=None) -> subprocess.CompletedProcess:
  """./main of an artifact folder on `feeds` saved as .npy files in tmp_path (outputs written there too)."""
  for name, value in feeds.items(): np.save(tmp_path / f"{name}.npy", value)
  args = [f"{n}={tmp_path / n}.npy" for n in feeds]
  return subprocess.run(["./main", "--out", str(tmp_path), *args], cwd=folder, capture_output=True, text=True, env=env)


def check_main(folder, spec: str, tmp_path) -> None:
  """The two-size model's example program: sizes read off its .npy inputs, outputs against the reference; a shape
  that does not fit and a size out of range exit with status 2 naming them."""
  subprocess.run(["make", "-s", "main"], cwd=folder, check=True, capture_output=True)
  feeds = two_feeds(np.random.default_rng(2), 3, 11)
  done = run_main(folder, tmp_path, feeds)
  assert done.returncode == 0, done.stderr
  ref = reference(spec, feeds)
  for name in ref:
    got = np.load(tmp_path / f"{name}.npy")
    assert got.shape == ref[name].shape
    np.testing.assert_allclose(got, ref[name], rtol=1e-4, atol=1e-4, err_msg=name)
  bad = run_main(folder, tmp_path, {**feeds, "mask": np.ones((3, 12), np.float32)})
  assert bad.returncode == 2 and "input 'mask'" in bad.stderr and "(3, 12)" in bad.stderr
  bad = run_main(folder, tmp_path, {**feeds, "x": np.ones((3, 41, 8), np.float32)})
  assert bad.returncode == 2 and "size T is 41 in the inputs' shapes, outside the range 3..40" in bad.stderr


def growing_loop(read_scan: bool = False):
  """A Loop of at most 8 steps (v = v * 1.5 + x) that stops once sum(v) reaches 40: its condition is computed on
  the device, so the number of steps, and the rows of its scan output of every v, depend on the inputs."""
  body = helper.make_graph(
    [helper.make_node("Mul", ["v_in", "grow"], ["vg"]), helper.make_node("Add", ["vg", "x"], ["v_out"]),
     helper.make_node("ReduceSum", ["v_out"], ["total"], keepdims=0),
     helper.make_node("Less", ["total", "limit"], ["cond_out"]), helper.make_node("Identity", ["v_out"], ["scan"])],
    "grow_step", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                  helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
                  helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [4])],
    [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
     helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [4]),
     helper.make_tensor_value_info("scan", TensorProto.FLOAT, [4])])
  inits = [numpy_helper.from_array(np.array(8, np.int64), "trips"), numpy_helper.from_array(np.array(True), "go"),
           numpy_helper.from_array(np.array(1.5, np.float32), "grow"),
           numpy_helper.from_array(np.array(40.0, np.float32), "limit")]
  nodes = [helper.make_node("Loop", ["trips", "go", "v0"], ["v", "vs"], body=body, name="grow")]
  outputs = [helper.make_tensor_value_info("v", TensorProto.FLOAT, [4])]
  if read_scan:
    nodes.append(helper.make_node("ReduceSum", ["vs"], ["vs_sum"], keepdims=0, name="sum_of_rows"))
    outputs.append(helper.make_tensor_value_info("vs_sum", TensorProto.FLOAT, []))
  else: outputs.append(helper.make_tensor_value_info("vs", TensorProto.FLOAT, [None, 4]))
  graph = helper.make_graph(nodes, "growing", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
                                               helper.make_tensor_value_info("v0", TensorProto.FLOAT, [4])],
                            outputs, inits)
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
