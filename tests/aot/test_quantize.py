"""`tgc compile --quantize int8 --calibration DIR` (`aot.quantize`): a small float CNN calibrated, quantized,
compiled and validated against its quantized model; the calibration layouts, the percentile ranges, and the
one-line errors that leave nothing written."""
from __future__ import annotations
import json
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.aot.aot_helpers import tgc, user_error, write_toy_model
from tgc.aot.quantize import RangeStats

RNG = np.random.default_rng(5)


def _cnn(path) -> str:
  """conv 3x3 -> relu -> conv 3x3 stride 2 -> relu -> global average pool -> gemm (transB): random weights."""
  def w(name, *shape, scale=0.3):
    return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)
  nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
           helper.make_node("Relu", ["c1"], ["r1"]),
           helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2], name="conv2"),
           helper.make_node("Relu", ["c2"], ["r2"]),
           helper.make_node("GlobalAveragePool", ["r2"], ["p"]),
           helper.make_node("Flatten", ["p"], ["f"]),
           helper.make_node("Gemm", ["f", "w3", "b3"], ["y"], transB=1, name="fc")]
  graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 12])],
                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
                            [w("w1", 8, 3, 3, 3), w("b1", 8), w("w2", 16, 8, 3, 3, scale=0.2), w("b2", 16),
                             w("w3", 10, 16), w("b3", 10)])
  onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
  return str(path)


@pytest.fixture
def cnn(tmp_path):
  model = _cnn(tmp_path / "cnn.onnx")
  cal = tmp_path / "cal"
  cal.mkdir()
  np.save(cal / "x.npy", RNG.standard_normal((6, 1, 3, 12, 12)).astype(np.float32))
  return model, cal


def test_compile_quantized_and_validate(tmp_path, cnn):
  model, cal = cnn
  out = tmp_path / "q"
  result = tgc("compile", model, "-o", out, "--quantize", "int8", "--calibration", cal)
  assert result.exit_code == 0, result.output
  assert "quantized     int8 weights in 3 nodes, 3 activations uint8 (minmax, 6 calibration samples" \
         in result.output
  line = next(t for t in result.output.splitlines() if t.strip().startswith("y "))
  relative, cosine = float(line.split()[2].rstrip("%")) / 100, float(line.split()[3])
  assert relative < 0.03 and cosine > 0.999
  source = json.loads((out / "manifest.json").read_text())["source"]
  assert sorted(source["quantize"]["ranges"]) == ["f", "r1", "x"] and source["quantize"]["samples"] == 6
  assert len(source["quantize"]["means"]["r1"]) == 8
  result = tgc("validate", out)
  assert result.exit_code == 0 and "onnx.reference" in result.output and "quantized to int8" in result.output, \
      result.output
  again = tmp_path / "q2"
  assert tgc("compile", model, "-o", again, "--quantize", "int8", "--calibration", cal).exit_code == 0
  for name in ("model.c", "weights.safetensors", "manifest.json"):      # deterministic
    text = (again / name).read_bytes().replace(str(again).encode(), str(out).encode())
    assert text == (out / name).read_bytes(), name


def test_subfolder_layout_and_percentile(tmp_path, cnn):
  model, _ = cnn
  cal = tmp_path / "samples"
  for i in range(3):
    (cal / f"s{i}").mkdir(parents=True)
    np.save(cal / f"s{i}" / "x.npy", RNG.standard_normal((1, 3, 12, 12)).astype(np.float32))
  out = tmp_path / "q"
  result = tgc("compile", model, "-o", out, "--quantize", "int8", "--calibration", cal, "--calibration-method",
               "percentile", "--percentile", "99")
  assert result.exit_code == 0, result.output
  info = json.loads((out / "manifest.json").read_text())["source"]["quantize"]
  assert info["method"] == "percentile" and info["percentile"] == 99 and info["samples"] == 3
  xs = np.sort(np.concatenate([np.load(cal / f"s{i}" / "x.npy").ravel() for i in range(3)]))
  k = int(xs.size * 0.01) + 1                                   # nearest rank
  assert info["ranges"]["x"] == [float(xs[k - 1]), float(xs[-k])]
  assert tgc("validate", out).exit_code == 0


def test_keep_float_nodes_and_activations(tmp_path, cnn):
  """--keep-float conv2 --keep-float f: conv2's weights stay float (and its input r1 is quantized for no node
  then), the Gemm reads a float f; the manifest records the names and validate rebuilds the same model."""
  model, cal = cnn
  out = tmp_path / "q"
  result = tgc("compile", model, "-o", out, "--quantize", "int8", "--calibration", cal, "--keep-float", "conv2",
               "--keep-float", "f")
  assert result.exit_code == 0, result.output
  assert "int8 weights in 2 nodes, 1 activations uint8" in result.output and "kept float    conv2, f" in result.output
  info = json.loads((out / "manifest.json").read_text())["source"]["quantize"]
  assert info["keep_float"] == ["conv2", "f"] and sorted(info["ranges"]) == ["x"]
  from safetensors.numpy import load_file
  weights = load_file(str(out / "weights.safetensors"))
  assert any(v.dtype == np.int8 for v in weights.values())
  assert any(v.dtype == np.float32 and v.size == 16 * 8 * 9 for v in weights.values())     # conv2 float
  result = tgc("validate", out)
  assert result.exit_code == 0 and "quantized to int8" in result.output, result.output


@pytest.mark.parametrize("keep, words", [("conv9", ["'conv9'", "no quantizable node", "conv1"]),
                                         ("conv1,conv2,fc", ["every quantizable node"])])
def test_keep_float_errors(tmp_path, cnn, keep, words):
  model, cal = cnn
  out = tmp_path / "q"
  user_error(tgc("compile", model, "-o", out, "--quantize", "int8", "--calibration", cal, "--keep-float", keep),
             "--keep-float", *words)
  assert not out.exists()
  user_error(tgc("compile", model, "-o", out, "--keep-float", "conv1"), "--keep-float", "--quantize")


def test_range_stats_percentile():
  values = RNG.standard_normal((4, 10000)).astype(np.float32)
  stats = RangeStats(99.9, values.size)
  for v in values: stats.add(v)
  flat = np.sort(values.ravel())
  k = int(values.size * 0.001) + 1
  assert stats.range() == (float(flat[k - 1]), float(flat[-k]))
  full = RangeStats(100.0, values.size)
  for v in values: full.add(v)
  assert full.range() == (float(flat[0]), float(flat[-1]))


@pytest.mark.parametrize("case", ["no_calibration", "empty", "tensor_api", "gpu", "missing", "shape",
                                  "calibration_alone", "method"])
def test_errors_leave_nothing(tmp_path, cnn, case):
  model, cal = cnn
  out = tmp_path / "q"
  empty = tmp_path / "empty"
  empty.mkdir()
  wrong = tmp_path / "wrong"
  wrong.mkdir()
  np.save(wrong / ("x.npy" if case == "shape" else "other.npy"), np.ones((1, 3, 5, 5), np.float32))
  args, words = {
      "no_calibration": ([model, "--quantize", "int8"], ["--calibration"]),
      "empty": ([model, "--quantize", "int8", "--calibration", empty], ["no .npy", str(empty)]),
      "tensor_api": ([f"{write_toy_model(tmp_path)}:build", "--quantize", "int8", "--calibration", cal],
                     [".onnx models only"]),
      "gpu": ([model, "--quantize", "int8", "--calibration", cal, "--target", "opencl"], ["target opencl"]),
      "missing": ([model, "--quantize", "int8", "--calibration", wrong], ["x.npy", "is missing"]),
      "shape": ([model, "--quantize", "int8", "--calibration", wrong], ["x.npy", "[1, 3, 5, 5]", "[1, 3, 12, 12]"]),
      "calibration_alone": ([model, "--calibration", cal], ["--quantize"]),
      "method": ([model, "--quantize", "int8", "--calibration", cal, "--calibration-method", "entropy"],
                 ["entropy", "minmax"]),
  }[case]
  user_error(tgc("compile", *args, "-o", out), *words)
  assert not out.exists()
  assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
