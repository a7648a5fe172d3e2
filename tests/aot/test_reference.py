"""The independent references of `tgc validate` (aot/reference.py): where onnx.reference departs from the ONNX
specification its operator is replaced, and a Loop whose scan output a run fills in part validates against it."""
from __future__ import annotations
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tgc.aot import reference
from tgc.aot.compile import compile_model
from tgc.aot.validate import validate_artifact


def _power_loop(path, trips: int, limit: float) -> None:
  """v = normalize(A v) for at most `trips` steps, until the Rayleigh quotient reaches `limit` (a condition computed
  on the device): scan outputs of a scalar (the quotient) and of a 2x2 matrix (v's first four values) per step."""
  body = helper.make_graph(
    [helper.make_node("MatMul", ["A", "v_in"], ["av"]), helper.make_node("ReduceL2", ["av"], ["norm"], keepdims=1),
     helper.make_node("Div", ["av", "norm"], ["v_out"]), helper.make_node("Mul", ["v_in", "av"], ["va"]),
     helper.make_node("ReduceSum", ["va"], ["rq"], keepdims=0), helper.make_node("Less", ["rq", "limit"], ["go"]),
     helper.make_node("Slice", ["v_out", "zero", "four"], ["head"]),
     helper.make_node("Reshape", ["head", "square"], ["corner"])],
    "step", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
             helper.make_tensor_value_info("c", TensorProto.BOOL, []),
             helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [16, 1])],
    [helper.make_tensor_value_info("go", TensorProto.BOOL, []),
     helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [16, 1]),
     helper.make_tensor_value_info("rq", TensorProto.FLOAT, []),
     helper.make_tensor_value_info("corner", TensorProto.FLOAT, [2, 2])])
  inits = [numpy_helper.from_array(np.array(trips, np.int64), "trips"), numpy_helper.from_array(np.array(True), "on"),
           numpy_helper.from_array(np.array(limit, np.float32), "limit"),
           numpy_helper.from_array(np.array([0], np.int64), "zero"),
           numpy_helper.from_array(np.array([4], np.int64), "four"),
           numpy_helper.from_array(np.array([2, 2], np.int64), "square")]
  graph = helper.make_graph(
    [helper.make_node("Loop", ["trips", "on", "v0"], ["v", "rqs", "corners"], body=body)], "power",
    [helper.make_tensor_value_info("A", TensorProto.FLOAT, [16, 16]),
     helper.make_tensor_value_info("v0", TensorProto.FLOAT, [16, 1])],
    [helper.make_tensor_value_info("v", TensorProto.FLOAT, [16, 1]),
     helper.make_tensor_value_info("rqs", TensorProto.FLOAT, [None]),
     helper.make_tensor_value_info("corners", TensorProto.FLOAT, [None, 2, 2])], inits)
  onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_loop_scan_outputs_are_stacked_on_a_new_axis(tmp_path):
  """onnx.reference joins a Loop's scan outputs with np.vstack ([steps, 1] for a scalar per step, the rows of a
  matrix per step concatenated); the reference tgc validates against stacks them as the specification says."""
  path = tmp_path / "power.onnx"
  _power_loop(path, 3, 1e9)
  rng = np.random.default_rng(0)
  a, v = rng.standard_normal((16, 16)).astype(np.float32), rng.standard_normal((16, 1)).astype(np.float32)
  got, engine = reference.onnx_reference(str(path), {"A": a, "v0": v}, {})
  assert engine == "onnx.reference"
  rqs, corners = [], []
  for _ in range(3):
    av = a @ v
    rqs.append(float((v * av).sum()))
    v = av / np.sqrt((av * av).sum())
    corners.append(v[:4, 0].reshape(2, 2))
  assert got["rqs"].shape == (3,) and got["corners"].shape == (3, 2, 2)
  np.testing.assert_allclose(got["rqs"], rqs, rtol=1e-4)
  np.testing.assert_allclose(got["corners"], corners, rtol=1e-4, atol=1e-6)


def test_a_loop_stopped_by_the_device_validates(tmp_path):
  """Compiled for C, the loop runs until its condition (computed on the device) is false: its scan outputs are padded
  to the trip count and cut by the run's row count; `tgc validate` compares them, and the last v, with the reference
  (the row count is no output of the model: it is checked through the rows it cuts)."""
  path = tmp_path / "power.onnx"
  _power_loop(path, 12, 2.0)
  out = tmp_path / "art"
  compile_model(str(path), "c", str(out))
  report = validate_artifact(str(out))
  assert report.ok, report.checks
  assert [c.name for c in report.checks] == ["v", "rqs", "corners"]
  steps = report.checks[1].shape[0]
  assert 1 < steps < 12 and report.checks[2].shape == (steps, 2, 2), report.checks    # it stopped before 12
