"""Kernels traced to model nodes: every kernel of every target's source is headed by a comment naming the ONNX
nodes (or Tensor API call sites) it computes, hostile node names stay inside that comment, the manifest lists
them, call sites name their buffers, and kernel names say what the kernels compute, the same on every compile."""
from __future__ import annotations
import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tgc.aot import bench_artifact, compile_model, validate_artifact

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = {"conv": "conv */ #include <stdio.h>\nint evil;", "relu": "relu \\", "add": "add ??/",
           "mm": "</script>\"'\u2028mm", "pool": ""}     # the last is unnamed: Op->output stands for it
KERNEL_FILES = {"c": "model.c", "opencl": "model.cl", "cuda": "model.cu", "metal": "model.metal", "webgpu": "model.js"}


def _model(path: Path) -> None:
  rng = np.random.default_rng(0)
  w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "conv.w")
  fc = numpy_helper.from_array(rng.standard_normal((16, 5)).astype(np.float32), "fc/w */")
  shape = numpy_helper.from_array(np.array([1, 16], np.int64), "shape")
  nodes = [helper.make_node("Conv", ["x", "conv.w"], ["c"], name=HOSTILE["conv"], pads=[1, 1, 1, 1]),
           helper.make_node("Relu", ["c"], ["r"], name=HOSTILE["relu"]),
           helper.make_node("Add", ["r", "c"], ["a"], name=HOSTILE["add"]),
           helper.make_node("MaxPool", ["a"], ["p"], name=HOSTILE["pool"], kernel_shape=[4, 4], strides=[4, 4]),
           helper.make_node("Reshape", ["p", "shape"], ["f"], name="flatten"),
           helper.make_node("MatMul", ["f", "fc/w */"], ["y"], name=HOSTILE["mm"])]
  graph = helper.make_graph(nodes, "prov", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], [w, fc, shape])
  onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def _kernel_lines(text: str, target: str) -> list[str]:
  """The kernel source as lines (WebGPU: the WGSL lines of model.js's plan, one JSON string each)."""
  if target != "webgpu": return text.split("\n")
  return [json.loads(m) for m in re.findall(r'^\s*("(?:[^"\\]|\\.)*"),?$', text, re.M)]


@pytest.fixture(scope="module")
def onnx_model(tmp_path_factory) -> Path:
  path = tmp_path_factory.mktemp("prov") / "prov.onnx"
  _model(path)
  return path


@pytest.mark.parametrize("target", sorted(KERNEL_FILES))
def test_every_kernel_names_its_nodes(onnx_model, tmp_path, target):
  out = tmp_path / target
  compile_model(str(onnx_model), target, str(out))
  manifest = json.loads((out / "manifest.json").read_text())
  text = (out / KERNEL_FILES[target]).read_text()
  lines = _kernel_lines(text, target)
  # hostile names broke out of no comment: no line of the source starts with what followed a newline or a splice
  assert not any(line.startswith("int evil;") for line in text.split("\n"))
  assert all(not line.rstrip().endswith(("\\", "??/")) for line in lines if line.lstrip().startswith("//"))
  named = set()
  for k in manifest["kernels"]:
    assert k["nodes"], f"kernel {k['name']} names no node"
    named |= {n["name"] for n in k["nodes"]}
    head = next(i for i, line in enumerate(lines) if line.startswith(f"// {k['name']} computes:"))
    body = head
    while lines[body].startswith("//"): body += 1
    comment = " ".join(lines[head:body])
    while lines[body].startswith(("#", "@")): body += 1   # C: #if TG_SIMD (a vector variant); WGSL: @compute
    assert k["name"] in lines[body], f"the comment on line {head} does not head kernel {k['name']}"
    for n in k["nodes"]:
      # the name as the comment holds it: printable ASCII, '?' for other characters, no '*/' or '\'
      visible = re.sub(r"[^ -~]", "?", n["name"]).replace("*/", "*_/").replace("\\", "/").replace("??", "?_?")
      visible = visible.replace('"', "'")
      assert re.sub(r"\s+", " ", visible) in re.sub(r"\s*//\s*", " ", comment)
  # every node of the model (all depend on the input) is computed by some kernel
  assert named == {v for v in HOSTILE.values() if v} | {"MaxPool->p", "flatten"}


def test_call_sites_and_names(onnx_model, tmp_path):
  a, b = tmp_path / "a", tmp_path / "b"
  compile_model(str(onnx_model), "c", str(a))
  compile_model(str(onnx_model), "c", str(b))
  ma, mb = (json.loads((d / "manifest.json").read_text()) for d in (a, b))
  names = [k["name"] for k in ma["kernels"]]
  assert names == [k["name"] for k in mb["kernels"]]          # stable across compiles
  assert any(re.fullmatch(r"prov_k\d+_conv\w*", n) for n in names), names
  assert all(re.fullmatch(r"prov_k\d+(_[a-z0-9]+)*", n) for n in names), names
  src = (a / "model.c").read_text()
  # each call is preceded by the nodes it computes and its buffers, weights by their model names
  for n, call in enumerate(ma["calls"]):
    assert re.search(rf"// call {n}: .*\n(?:\s*//.*\n)*\s*{{\n\s*tg_args_{call['kernel']} g;", src), n
  comments = " ".join(re.sub(r"^\s*//\s*", "", line) for line in src.split("\n") if line.lstrip().startswith("//"))
  for label in ("weight 'conv.w'", "weight 'fc/w *_/'", "input 'x'", "output 'y'"): assert label in comments
  report = validate_artifact(str(a))
  assert report.ok


def test_tensor_api_nodes_are_call_sites(tmp_path):
  model = ROOT / "examples" / "mnist_cnn.py"
  compile_model(f"{model}:build", "c", str(tmp_path / "m"))
  manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
  source = model.read_text().split("\n")
  for k in manifest["kernels"]:
    assert k["nodes"]
    for n in k["nodes"]:
      file, line = n["name"].split(":")
      assert file == "mnist_cnn.py" and source[int(line) - 1].strip(), n
      assert n["op"].isidentifier()
  ops = {n["op"] for k in manifest["kernels"] for n in k["nodes"]}
  assert {"conv2d", "relu", "max_pool2d", "linear"} <= ops


def test_inspect_and_profile_show_nodes(onnx_model, tmp_path):
  out = tmp_path / "c"
  compile_model(str(onnx_model), "c", str(out))
  r = bench_artifact(str(out), runs=3, warmup=1, profile=True)
  assert r.profile and all(k.nodes for k in r.profile)
  assert any("flatten (Reshape)" in n for k in r.profile for n in k.nodes)
  # each kernel's fraction of this machine's measured roofline, and the flag for the slow ones
  assert all(0.0 < k.roofline <= 1.0 and k.slow == (k.roofline < 0.1) for k in r.profile)
