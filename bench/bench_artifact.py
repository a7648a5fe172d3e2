"""Artifact benchmark: the example CNN as a C artifact (--cpu native, built -O3 -march=native) against the same
model in onnxruntime (one thread) and in numpy (the interpreter device), as latency ratios in one run; plus
`tgc compile` wall time for the example and for a ResNet-class model (the resnet50 model shipped in the onnx wheel).
Run: python bench/bench_artifact.py [--runs 50]. Prints a markdown table."""
from __future__ import annotations
import argparse
import os
import statistics
import sys
import tempfile
import time
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import helper, numpy_helper, TensorProto  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "mnist_cnn.py") + ":build"


def example_as_onnx(model) -> onnx.ModelProto:
  """The example CNN written out as an ONNX graph with the same weights (for onnxruntime)."""
  from tgc.frontend.nn import get_state_dict
  sd = {k: v.numpy() for k, v in get_state_dict(model).items()}
  bn = model.bn1
  inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in sd.items() if v.dtype == np.float32]
  nodes = [
    helper.make_node("Conv", ["x", "conv1.weight", "conv1.bias"], ["c1"], pads=[1, 1, 1, 1]),
    helper.make_node("BatchNormalization", ["c1", "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var"],
                     ["b1"], epsilon=bn.eps),
    helper.make_node("Relu", ["b1"], ["r1"]),
    helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
    helper.make_node("Conv", ["p1", "conv2.weight", "conv2.bias"], ["c2"], pads=[1, 1, 1, 1]),
    helper.make_node("Relu", ["c2"], ["r2"]),
    helper.make_node("MaxPool", ["r2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2]),
    helper.make_node("Flatten", ["p2"], ["f"]),
    helper.make_node("Gemm", ["f", "fc1.weight", "fc1.bias"], ["g1"], transB=1),
    helper.make_node("Relu", ["g1"], ["r3"]),
    helper.make_node("Gemm", ["r3", "fc2.weight", "fc2.bias"], ["g2"], transB=1),
    helper.make_node("LogSoftmax", ["g2"], ["y"], axis=-1),
  ]
  graph = helper.make_graph(nodes, "mnist_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 28, 28])],
                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def timed(fn, runs: int, warmup: int = 5) -> float:
  """Median seconds of `runs` calls of `fn()` after `warmup` untimed calls."""
  from tgc.runtimes.artifact import time_runs
  return statistics.median(time_runs(fn, runs, warmup))


def main():
  ap = argparse.ArgumentParser(description=__doc__)
  ap.add_argument("--runs", type=int, default=50)
  ap.add_argument("--skip-resnet", action="store_true")
  args = ap.parse_args()
  import onnxruntime as ort
  from tgc.aot.compile import compile_model
  from tgc.runtimes.artifact_c import CArtifact
  from tgc.frontend import Tensor
  from examples.mnist_cnn import build
  out = tempfile.mkdtemp(prefix="tgc-bench-")
  st = time.perf_counter()
  compile_model(EXAMPLE, "c", os.path.join(out, "cnn"), cpu="native")
  compile_s = time.perf_counter() - st
  art = CArtifact(os.path.join(out, "cnn"), cflags=("-O3", "-march=native"))
  x = np.random.default_rng(0).standard_normal((1, 1, 28, 28), dtype=np.float32)
  name = art.manifest["inputs"][0]["name"]
  t_tgc = timed(lambda: art.run({name: x}), args.runs)
  from tgc.ir.config import config
  config.device = "numpy"     # the same model, built with the same seeds, on the numpy interpreter
  Tensor.manual_seed(0)
  model, _ = build("numpy")
  so = ort.SessionOptions()
  so.intra_op_num_threads, so.inter_op_num_threads = 1, 1
  sess = ort.InferenceSession(example_as_onnx(model).SerializeToString(), so, providers=["CPUExecutionProvider"])
  ref = sess.run(None, {"x": x})[0]
  got = art.run({name: x})[art.manifest["outputs"][0]["name"]]
  err = float(np.abs(ref - got).max())
  t_ort = timed(lambda: sess.run(None, {"x": x}), args.runs)
  t_np = timed(lambda: model(Tensor(x, device="numpy")).numpy(), max(5, args.runs // 5), warmup=1)
  print("| model | tgc C artifact | onnxruntime 1 thread | numpy | tgc / ort | tgc / numpy | max abs diff vs ort |")
  print("|---|---|---|---|---|---|---|")
  print(f"| example CNN (1x1x28x28) | {t_tgc * 1e3:.3f} ms | {t_ort * 1e3:.3f} ms | {t_np * 1e3:.3f} ms | "
        f"{t_tgc / t_ort:.2f} | {t_tgc / t_np:.2f} | {err:.1e} |")
  print(f"\n`tgc compile` wall time: example CNN {compile_s:.1f} s", end="")
  if not args.skip_resnet:
    path = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_resnet50.onnx")
    st = time.perf_counter()
    compile_model(path, "c", os.path.join(out, "resnet50"), cpu="native")
    print(f", resnet50 (light, ONNX) {time.perf_counter() - st:.1f} s")
  print()


if __name__ == "__main__":
  main()
