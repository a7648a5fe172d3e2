"""The official ONNX node conformance cases: every case on the reference device "numpy" (the imported graph on the
interpreter) and compiled to a "c" artifact, a stratified sample (every operator twice) compiled to "opencl" and
"webgpu" artifacts (conformance.run_case; artifacts run by their Python runtimes), and every operator once through
the command line on c ("c-cli": `tgc compile` and `tgc run` on .npy files). Every case passes except the known
failures in expected_failures.py, which must really fail (xfail strict). scripts/conformance.py runs all cases on
every device and writes docs/conformance.md."""
from __future__ import annotations
import os
import sys
import warnings

import numpy as np
import onnx
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conformance  # noqa: E402
from expected_failures import EXPECTED_FAILURES, TARGET_FAILURES  # noqa: E402

CASES = {c.name: c for c in conformance.cases()}
FULL_DEVICES = ("numpy", "c")
SAMPLED_DEVICES = ("opencl", "webgpu")
CLI_DEVICES = ("c-cli",)      # the first case of every operator, through tgc compile + tgc run
# cases the GPU targets always run besides their sample: a full run once found a bug there that the sample missed
# (RoiAlign's max mode: a work-group tile staged for a load that moves along no tile axis)
SAMPLED_ALSO = ("test_roialign_mode_max",)


def _params():
  samples = {1: conformance.stratified_sample(CASES.values(), 1), 2: conformance.stratified_sample(CASES.values())}
  out = []
  for device in FULL_DEVICES + SAMPLED_DEVICES + CLI_DEVICES:
    names = sorted(CASES) if device in FULL_DEVICES else list(samples[1 if device in CLI_DEVICES else 2])
    if device in SAMPLED_DEVICES: names += [n for n in SAMPLED_ALSO if n not in names]
    for name in names:
      known = EXPECTED_FAILURES.get(name) or TARGET_FAILURES.get(device, {}).get(name)
      marks = [pytest.mark.xfail(strict=True, reason=f"{known[0]}: {known[1]}")] if known else []
      out.append(pytest.param(device, name, marks=marks, id=f"{device}-{name}"))
  return out


def test_expected_failures_are_cases():
  listed = set(EXPECTED_FAILURES).union(*TARGET_FAILURES.values())
  unknown = sorted(listed - set(CASES))
  assert not unknown, f"expected_failures.py lists cases that do not exist: {unknown}"


@pytest.mark.parametrize("device,name", _params())
def test_node_case(device, name):
  if device != "numpy": _require(device)
  with warnings.catch_warnings(), np.errstate(all="ignore"):
    warnings.simplefilter("ignore")
    status, detail = conformance.run_case(CASES[name], device)
  assert status == "pass", f"{status}: {detail}"


def test_only_undefined_elements_are_left_out():
  """Cast float -> int4 leaves out exactly the inputs whose truncation does not fit; a wrong value among the
  compared ones still fails; other cases compare everything."""
  case = CASES["test_cast_FLOAT_to_INT4"]
  by_name, want, _ = conformance._case_data(case)
  x = by_name["input"]
  (mask,) = conformance.defined_elements(case, by_name)
  np.testing.assert_array_equal(mask, (np.trunc(x) >= -8) & (np.trunc(x) <= 7))
  assert 0 < mask.sum() < mask.size
  got = np.trunc(x).clip(-8, 7).astype(want[0].dtype)     # right where defined, anything elsewhere
  assert conformance.compare_outputs([got], want, defined=[mask])[0] == "pass"
  bad = got.copy()
  bad.reshape(-1)[np.flatnonzero(mask)[0]] += 1
  assert conformance.compare_outputs([bad], want, defined=[mask])[0] == "fail"
  relu = CASES["test_relu"]
  assert conformance.defined_elements(relu, conformance._case_data(relu)[0]) == [None]
  int_to_int = CASES["test_cast_INT4_to_INT8"]
  assert conformance.defined_elements(int_to_int, conformance._case_data(int_to_int)[0]) == [None]


def _require(device: str):
  from tgc.runtimes import get_runtime, RuntimeUnavailable
  try: get_runtime(device.removesuffix(conformance.CLI_SUFFIX))
  except RuntimeUnavailable as e: pytest.skip(str(e))


# ---------------------------------------------------------------- importer behaviour on small hand-built models
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from tgc.frontend.tensor import Tensor  # noqa: E402
from tgc.frontend.onnx import OnnxError, load_model  # noqa: E402


def _model(nodes, inputs, outputs, inits=(), opset=17):
  graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _info(name, shape, elem=TensorProto.FLOAT):
  return helper.make_tensor_value_info(name, elem, shape)


def _relu_model():
  return _model([helper.make_node("Relu", ["x"], ["y"], name="r")], [_info("x", ["N", 3])], [_info("y", ["N", 3])])


def test_symbolic_dims_must_be_pinned():
  with pytest.raises(OnnxError, match=r"input 'x': dimension 0 \(N\) is unknown"): load_model(_relu_model())
  g = load_model(_relu_model(), input_shapes={"x": (2, 3)})
  assert g.inputs == [("x", (2, 3), g.inputs[0][2])] and g.outputs[0][1] == (2, 3)
  with pytest.raises(OnnxError, match="unknown input 'z'"): load_model(_relu_model(), input_shapes={"z": (1, 3)})
  with pytest.raises(OnnxError, match="unknown input 'z'"): load_model(_relu_model(), consts={"z": np.ones(3)})
  with pytest.raises(OnnxError, match="declares"): load_model(_relu_model(), input_shapes={"x": (2, 4)})


@pytest.mark.parametrize("legacy", [-1, 0])
def test_legacy_dim_values_are_dynamic(legacy):
  """A dim_value of -1 or 0 (how paddle2onnx and older exporters say "dynamic") is pinned like a dim_param."""
  m = _model([helper.make_node("Relu", ["x"], ["y"])], [_info("x", [legacy, 3, "w"])], [_info("y", [legacy, 3, "w"])])
  with pytest.raises(OnnxError, match=rf"input 'x': dimension 0 \({legacy}\) is unknown .*--input-shape x="):
    load_model(m)
  g = load_model(m, input_shapes={"x": (2, 3, 5)})
  assert g.inputs[0][1] == (2, 3, 5) and g.outputs[0][1] == (2, 3, 5)
  x = np.random.default_rng(0).standard_normal((2, 3, 5)).astype(np.float32)
  np.testing.assert_array_equal(g(Tensor(x, device="numpy"))[0].numpy(), np.maximum(x, 0))
  with pytest.raises(OnnxError, match="declares"): load_model(m, input_shapes={"x": (2, 4, 5)})


def test_cycle_names_a_node():
  nodes = [helper.make_node("Relu", ["b"], ["a"], name="n1"), helper.make_node("Relu", ["a"], ["b"], name="n2"),
           helper.make_node("Relu", ["a"], ["y"], name="n3")]
  with pytest.raises(OnnxError, match=r"cycle through node 'n[12]'"):
    load_model(_model(nodes, [_info("x", [3])], [_info("y", [3])]))


def test_unsupported_ops_listed_at_once():
  nodes = [helper.make_node("FooOp", ["x"], ["a"], name="f1"), helper.make_node("BarOp", ["a"], ["b"], name="b1"),
           helper.make_node("FooOp", ["b"], ["y"], name="f2")]
  with pytest.raises(OnnxError) as info: load_model(_model(nodes, [_info("x", [3])], [_info("y", [3])]))
  msg = str(info.value)
  assert "FooOp (opset 17) at nodes 'f1', 'f2'" in msg and "BarOp (opset 17) at node 'b1'" in msg
  assert "\n" not in msg


def test_bad_files(tmp_path):
  data = _relu_model().SerializeToString()
  (tmp_path / "cut.onnx").write_bytes(data[:len(data) // 2])
  with pytest.raises(OnnxError, match="cannot parse ONNX model .*cut.onnx"): load_model(str(tmp_path / "cut.onnx"))
  with pytest.raises(OnnxError, match="cannot read ONNX model"): load_model(str(tmp_path / "missing.onnx"))
  bad = _model([helper.make_node("Relu", ["x"], ["y"], foo=1)], [_info("x", [3])], [_info("y", [3])])
  with pytest.raises(OnnxError, match="invalid ONNX model"): load_model(bad)


def test_external_data_and_weights(tmp_path):
  w = numpy_helper.from_array(np.arange(9, dtype=np.float32).reshape(3, 3), "w")
  m = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [_info("x", [2, 3])], [_info("y", [2, 3])], [w])
  path = str(tmp_path / "m.onnx")
  onnx.save_model(m, path, save_as_external_data=True, location="m.bin", size_threshold=0)
  g = load_model(path)
  assert list(g.weights) == ["w"] and [n for n, _, _ in g.inputs] == ["x"]
  x = np.ones((2, 3), np.float32)
  np.testing.assert_allclose(g(Tensor(x, device="numpy"))[0].numpy(), x @ g.weights["w"])
  first = g._device_consts[("numpy", "w")]
  g(Tensor(x, device="numpy"))
  assert g._device_consts[("numpy", "w")] is first          # weights are made once per device
  os.remove(str(tmp_path / "m.bin"))
  with pytest.raises(OnnxError, match="external data file 'm.bin'"): load_model(path)


def test_initializer_listed_as_input_is_a_weight():
  w = numpy_helper.from_array(np.full((3,), 2.0, np.float32), "w")
  m = _model([helper.make_node("Add", ["x", "w"], ["y"])], [_info("x", [3]), _info("w", [3])], [_info("y", [3])],
             [w], opset=8)
  m.ir_version = 3
  g = load_model(m)
  assert [n for n, _, _ in g.inputs] == ["x"]
  np.testing.assert_allclose(g(Tensor(np.ones(3, np.float32), device="numpy"))[0].numpy(), [3, 3, 3])


def test_shape_chain_is_folded_and_consts_pin_inputs():
  nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("ReduceProd", ["s"], ["n"], keepdims=1),
           helper.make_node("Reshape", ["x", "n"], ["flat"]), helper.make_node("Reshape", ["flat", "shape"], ["y"])]
  m = _model(nodes, [_info("x", [2, 3]), _info("shape", [2], TensorProto.INT64)], [_info("y", [3, 2])])
  with pytest.raises(OnnxError, match="must be a compile-time constant"): load_model(m)
  g = load_model(m, consts={"shape": np.array([3, 2], np.int64)})
  assert [n for n, _, _ in g.inputs] == ["x"] and g.outputs[0][1] == (3, 2)
  x = np.arange(6, dtype=np.float32).reshape(2, 3)
  np.testing.assert_array_equal(g(Tensor(x, device="numpy"))[0].numpy(), x.reshape(3, 2))
