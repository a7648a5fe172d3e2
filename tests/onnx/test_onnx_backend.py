"""aot.onnx_backend: the ONNX backend API over the real compile pipeline and the C artifact runtime. Devices and
keywords, constants baked in now or from the first run, dynamic shapes, storage-only types at the boundary, errors,
and onnx's own BackendTest runner on a few node cases (tests/onnx/test_conformance.py runs every node case
through this backend)."""
from __future__ import annotations
import os
import sys
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conformance  # noqa: E402
from tgc.aot.errors import UserError  # noqa: E402
from tgc.aot.onnx_backend import TgcBackend, device_target  # noqa: E402

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
  m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)),
                        opset_imports=[helper.make_opsetid("", opset)])
  m.ir_version = 8
  return m


def _reshape_model() -> onnx.ModelProto:
  return _model([helper.make_node("Reshape", ["x", "shape"], ["y"])],
                [helper.make_tensor_value_info("x", F, [3, 4]),
                 helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
                [helper.make_tensor_value_info("y", F, ["a", "b"])])


def test_devices():
  assert device_target("CPU") == "c" and device_target("c") == "c" and device_target("OpenCL:0") == "opencl"
  assert TgcBackend.supports_device("CPU") and TgcBackend.supports_device("c")
  assert device_target("webgpu") == "webgpu" and not TgcBackend.supports_device("tpu")
  with pytest.raises(UserError, match="device 'tpu' is not supported"): TgcBackend.prepare(_reshape_model(), "tpu")


@pytest.mark.parametrize("device", ["opencl", "webgpu"])
def test_other_targets(device):
  """The same artifacts for the GPU-style targets (PoCL / wgpu on lavapipe here); skipped, naming what is missing,
  where the runtime cannot run. Ids contain the device name: tests/conftest.py runs webgpu ones apart."""
  from tgc.runtimes import RuntimeUnavailable
  if not TgcBackend.supports_device(device): pytest.skip(f"this build has no {device} target or artifact runtime")
  x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
  try:
    out = TgcBackend.run_node(helper.make_node("Reshape", ["x", "s"], ["y"]), [x, np.array([2, 6])], device=device,
                              consts=["s"])
  except RuntimeUnavailable as error: pytest.skip(str(error))
  np.testing.assert_array_equal(out[0], x.reshape(2, 6))
  case = next(c for c in conformance.cases() if c.name == "test_softmax_example")
  status, detail = conformance.run_case_compiled(case, device)
  assert status == "pass", f"{status}: {detail}"


def test_run_node_and_named_outputs():
  x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
  out = TgcBackend.run_node(helper.make_node("Relu", ["x"], ["y"]), [x])
  np.testing.assert_array_equal(out[0], np.maximum(x, 0))
  np.testing.assert_array_equal(out["y"], out.y)
  out = TgcBackend.run_node(helper.make_node("Add", ["a", "b"], ["s"]), [x, x[:1]], outputs_info=[(np.float32, (3, 4))])
  np.testing.assert_allclose(out[0], x + x[:1], rtol=1e-6)


def test_consts_baked_in_at_prepare():
  x = np.arange(12, dtype=np.float32).reshape(3, 4)
  with TgcBackend.prepare(_reshape_model(), "c", consts={"shape": np.array([2, 6])}) as rep:
    assert rep.artifact_dir and os.path.isfile(os.path.join(rep.artifact_dir, "manifest.json"))
    folder = rep.artifact_dir
    np.testing.assert_array_equal(rep.run([x, np.array([2, 6])])[0], x.reshape(2, 6))
    np.testing.assert_array_equal(rep.run([x])[0], x.reshape(2, 6))          # baked inputs may be left out
    np.testing.assert_array_equal(rep.run({"x": x})[0], x.reshape(2, 6))
    with pytest.raises(ValueError, match="compiled in as a constant"): rep.run([x, np.array([6, 2])])
  assert not os.path.exists(folder), "close() must remove the temporary artifact"


def test_const_inputs_compile_per_value():
  x = np.arange(12, dtype=np.float32).reshape(3, 4)
  with TgcBackend.prepare(_reshape_model(), "CPU", const_inputs=["shape"]) as rep:
    assert rep.artifact_dir is None
    assert rep.run([x, np.array([6, 2])])[0].shape == (6, 2)
    first = rep.artifact_dir
    assert rep.run([x, np.array([12, 1])])[0].shape == (12, 1)
    assert rep.run([x, np.array([6, 2])])[0].shape == (6, 2)
    assert rep.artifact_dir == first            # compiled once per distinct value


def test_dynamic_shapes_compile_per_shape():
  m = _model([helper.make_node("Sigmoid", ["x"], ["y"])], [helper.make_tensor_value_info("x", F, ["n", 3])],
             [helper.make_tensor_value_info("y", F, ["n", 3])])
  with TgcBackend.prepare(m) as rep:
    for n in (2, 5):
      x = np.linspace(-2, 2, 3 * n, dtype=np.float32).reshape(n, 3)
      np.testing.assert_allclose(rep.run([x])[0], 1 / (1 + np.exp(-x)), rtol=1e-5)
  with TgcBackend.prepare(m, input_shapes={"x": (4, 3)}) as rep: assert rep.artifact_dir


def test_storage_only_types_round_trip():
  ml_dtypes = pytest.importorskip("ml_dtypes")
  x = np.array([[-3.0, 2.0, 7.0, -8.0, 1.0]], np.float32)
  out = TgcBackend.run_node(helper.make_node("Cast", ["x"], ["y"], to=TensorProto.INT4), [x])[0]
  assert out.dtype == np.dtype(ml_dtypes.int4) and out.astype(np.int8).tolist() == [[-3, 2, 7, -8, 1]]
  out = TgcBackend.run_node(helper.make_node("Cast", ["x"], ["y"], to=F), [x.astype(ml_dtypes.int4)])[0]
  np.testing.assert_array_equal(out, x)
  b = np.array([[0.5, -1.25, 3.0]], ml_dtypes.bfloat16)
  out = TgcBackend.run_node(helper.make_node("Mul", ["a", "a"], ["y"]), [b])[0]
  assert out.dtype == b.dtype and out.astype(np.float32).tolist() == [[0.25, 1.5625, 9.0]]


def test_storage_only_weights():
  ml_dtypes = pytest.importorskip("ml_dtypes")
  c = numpy_helper.from_array(np.array([1.0, 3.0], ml_dtypes.bfloat16), "c")
  bf16 = TensorProto.BFLOAT16
  m = _model([helper.make_node("Add", ["x", "c"], ["y"])], [helper.make_tensor_value_info("x", bf16, [2])],
             [helper.make_tensor_value_info("y", bf16, [2])], [c], opset=21)
  out = TgcBackend.run_model(m, [np.array([0.5, 0.25], ml_dtypes.bfloat16)])[0]
  assert out.astype(np.float32).tolist() == [1.5, 3.25]


def test_errors_are_user_errors():
  bad = _model([helper.make_node("NoSuchOp", ["x"], ["y"])], [helper.make_tensor_value_info("x", F, [2])],
               [helper.make_tensor_value_info("y", F, [2])])
  with pytest.raises(UserError, match="unsupported ONNX operator: NoSuchOp"): TgcBackend.prepare(bad)
  assert not TgcBackend.is_compatible(bad) and TgcBackend.is_compatible(_reshape_model())
  with pytest.raises(UserError, match="cannot parse"): TgcBackend.prepare(b"not a model")
  with pytest.raises(UserError, match="unknown input 'nope'"): TgcBackend.prepare(_reshape_model(), consts={"nope": 1})
  with pytest.raises(TypeError, match="unknown keyword"): TgcBackend.prepare(_reshape_model(), beam=2)


def test_out_dir_keeps_the_artifact(tmp_path):
  out = tmp_path / "art"
  with TgcBackend.prepare(_reshape_model(), consts={"shape": np.array([4, 3])}, out_dir=str(out)) as rep:
    assert rep.artifact_dir == str(out)
  manifest = (out / "manifest.json").read_text()
  assert '"consts"' in manifest    # recorded like `tgc compile --const`


# ---------------------------------------------------------------- onnx's BackendTest runner
RUNNER_CASES = ("test_relu", "test_add_bcast", "test_reshape_reordered_all_dims", "test_slice", "test_softmax_axis_1",
                "test_conv_with_strides_padding", "test_reduce_sum_keepdims_example")


def test_onnx_backend_test_runner():
  """onnx.backend.test.BackendTest drives prepare(model, "CPU") + run(inputs) itself; shape-setting inputs are named
  per case through its test_kwargs (prepare's `const_inputs`)."""
  import unittest
  from onnx.backend.test import BackendTest
  by_name = {c.name: c for c in conformance.cases()}
  kwargs = {n: {"const_inputs": conformance.const_inputs(by_name[n].model)} for n in RUNNER_CASES if n in by_name}
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    runner = BackendTest(TgcBackend, __name__, test_kwargs=kwargs)
    for n in RUNNER_CASES: runner.include(rf"^{n}_cpu$")
    wanted = {f"{n}_cpu" for n in RUNNER_CASES}
    suite = unittest.TestSuite(cls(m) for cls in runner.test_cases.values()
                               for m in unittest.defaultTestLoader.getTestCaseNames(cls) if m in wanted)
    with open(os.devnull, "w") as sink: result = unittest.TextTestRunner(stream=sink, verbosity=0).run(suite)
  assert result.testsRun == len(RUNNER_CASES)
  problems = [f"{t.id()}: {e.strip().splitlines()[-1]}" for t, e in result.failures + result.errors]
  assert not problems and not result.skipped, problems or result.skipped
