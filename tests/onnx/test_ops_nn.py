"""The neural-network ONNX operators (the frontend/onnx handler families of NN_MODULES): hand-built models that
cover attributes the official node tests miss (checked against onnx.reference, or onnxruntime where the reference
ignores attributes), a sample of the node test cases on the compiled C device, and the known failures of
tests/onnx/expected_failures_nn.py. All node cases run on "numpy" in tests/onnx/test_conformance.py.

Run as a script for a pass/fail summary of every node case of these operators on one device:
    python tests/onnx/test_ops_nn.py [--device numpy|c] [-k substring]"""
from __future__ import annotations
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import helper, TensorProto

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conformance  # noqa: E402
from expected_failures_nn import NN_EXPECTED_FAILURES  # noqa: E402

from tgc.frontend.tensor import Tensor  # noqa: E402
from tests.emit.dynamic_cases import growing_loop  # noqa: E402
from tgc.frontend.onnx import OPS, load_model  # noqa: E402
from tgc.frontend.onnx import (ops_attention, ops_conv, ops_linalg, ops_normalization, ops_quantization,  # noqa: E402
                               ops_rnn, ops_signal, ops_spatial, ops_training)

NN_MODULES = (ops_conv, ops_linalg, ops_normalization, ops_attention, ops_rnn, ops_quantization, ops_signal,
              ops_spatial, ops_training)
NN_OPS = sorted(name.split(":")[-1] for name, fn in OPS.items()
                if fn.__module__ in {m.__name__ for m in NN_MODULES})


def _nn_cases() -> list:
  return [c for c in conformance.cases() if conformance.case_op(c) in NN_OPS]


def check_case(case, device: str) -> str | None:
  """None when the case passes, else "status: detail"."""
  status, detail = conformance.run_case(case, device)
  return None if status == "pass" else f"{status}: {detail}"


def _case(module: str, name: str):
  """One node test case, made by importing only the onnx module that defines it (which runs its exports; much
  faster than collecting every case, which tests/onnx/test_conformance.py does once)."""
  import importlib
  import warnings
  from onnx.backend.test.case import node
  with warnings.catch_warnings(), np.errstate(all="ignore"):
    warnings.simplefilter("ignore")
    importlib.import_module(f"onnx.backend.test.case.node.{module}")
  case = next((c for c in node._NodeTestCases if c.name == name), None)
  assert case is not None, f"{name} is not a node test case of onnx.backend.test.case.node.{module}"
  return case


@pytest.mark.parametrize("name", sorted(NN_EXPECTED_FAILURES))
def test_expected_failures_still_fail(name):
  assert name.startswith("test_training_dropout"), "add the module of new entries here"
  assert check_case(_case("dropout", name), "numpy") is not None, \
    f"{name} passes now: remove it from NN_EXPECTED_FAILURES"


# (onnx test module, case) run on the compiled C device
_C_SAMPLE = [("conv", "test_conv_with_strides_padding"), ("maxpool", "test_maxpool_with_argmax_2d_precomputed_pads"),
             ("averagepool", "test_averagepool_2d_ceil"), ("gemm", "test_gemm_all_attributes"),
             ("resize", "test_resize_upsample_scales_linear"), ("lstm", "test_lstm_with_peepholes"),
             ("topk", "test_top_k"), ("einsum", "test_einsum_batch_matmul"),
             ("instance_normalization", "test_instancenorm_example"),
             ("qlinearmatmul", "test_qlinearmatmul_2D_uint8_float32"), ("gridsample", "test_gridsample_bicubic"),
             ("dft", "test_dft"), ("convtranspose", "test_convtranspose_pads"),
             ("softmax_cross_entropy_loss", "test_sce_mean_weight_ii_3d_log_prob"),
             ("gru", "test_gru_with_initial_bias"), ("cumsum", "test_cumsum_2d_axis_1"),
             ("attention", "test_attention_4d_gqa_causal"), ("roialign", "test_roialign_mode_max"),
             ("quantizelinear", "test_quantizelinear_int4"), ("dequantizelinear", "test_dequantizelinear_e4m3fn"),
             ("deformconv", "test_deform_conv_with_mask_bias"), ("col2im", "test_col2im_strides"),
             ("resize", "test_resize_downsample_scales_cubic_antialias"),
             ("rotaryembedding", "test_rotary_embedding_interleaved"),
             ("layernormalization", "test_layer_normalization_4d_axis1"),
             ("causal_conv_with_state", "test_causal_conv_with_state_kernel_size_one")]


@pytest.mark.parametrize("module,name", _C_SAMPLE, ids=[n for _, n in _C_SAMPLE])
def test_node_case_c(module, name, c_runtime):
  reason = check_case(_case(module, name), "c")
  assert reason is None, reason


# ---------------------------------------------------------------- hand-built models vs onnx.reference
def _single(op: str, inputs: dict[str, np.ndarray], n_out: int = 1, opset: int = 21, **attrs):
  node = helper.make_node(op, list(inputs), [f"y{i}" for i in range(n_out)], **attrs)
  graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype),
                                                                         v.shape) for k, v in inputs.items()],
                            [helper.make_tensor_value_info(f"y{i}", TensorProto.UNDEFINED, None) for i in range(n_out)])
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _compare(model, inputs: dict[str, np.ndarray], consts=(), device="numpy", rtol=1e-4, atol=1e-5, ort=False):
  """Import `model` (the inputs named in `consts` pinned as constants), run it on `device` and compare every
  output with onnx.reference (or onnxruntime where the reference ignores attributes, as for RNNs)."""
  if ort:
    ort_rt = pytest.importorskip("onnxruntime")
    for o in model.graph.output: o.type.tensor_type.elem_type = TensorProto.FLOAT
    sess = ort_rt.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = sess.run(None, inputs)
  else:
    from onnx.reference import ReferenceEvaluator
    expected = ReferenceEvaluator(model).run(None, inputs)
  outputs = [helper.make_tensor_value_info(o.name, helper.np_dtype_to_tensor_dtype(e.dtype), e.shape)
             for o, e in zip(model.graph.output, expected)]
  del model.graph.output[:]
  model.graph.output.extend(outputs)
  graph = load_model(model, input_shapes={k: v.shape for k, v in inputs.items() if k not in consts},
                     consts={k: inputs[k] for k in consts})
  outs = graph(*[Tensor(inputs[name], device=device) for name, _, _ in graph.inputs])
  Tensor.realize_all(*outs)
  for o, e in zip(outs, expected):
    g = o.numpy()
    assert g.dtype == e.dtype and g.shape == e.shape, (g.dtype, e.dtype, g.shape, e.shape)
    np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)


_RNG = np.random.default_rng(0)


def _randn(*shape): return _RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_conv_auto_pad_strided_dilated(auto_pad):
  inputs = {"x": _randn(1, 4, 9, 8), "w": _randn(6, 2, 3, 3), "b": _randn(6)}
  _compare(_single("Conv", inputs, auto_pad=auto_pad, strides=[2, 3], dilations=[1, 2] if auto_pad == "VALID"
                   else [1, 1], group=2), inputs)


def test_conv_1d_and_3d():
  inputs = {"x": _randn(2, 3, 11), "w": _randn(4, 3, 3)}
  _compare(_single("Conv", inputs, pads=[1, 2], strides=[2]), inputs)
  inputs = {"x": _randn(1, 2, 5, 4, 6), "w": _randn(3, 2, 2, 3, 2)}
  _compare(_single("Conv", inputs, pads=[0, 1, 1, 1, 0, 0], dilations=[2, 1, 1]), inputs)


def test_conv_transpose_pads_output_padding_group():
  inputs = {"x": _randn(1, 4, 5, 6), "w": _randn(4, 3, 3, 2)}     # the reference gets groups wrong
  _compare(_single("ConvTranspose", inputs, strides=[2, 3], pads=[1, 0, 2, 1], output_padding=[1, 2], group=2,
                   dilations=[1, 2]), inputs, ort=True)
  inputs = {"x": _randn(2, 3, 4, 5), "w": _randn(3, 5, 3, 3)}
  _compare(_single("ConvTranspose", inputs, strides=[2, 2], output_shape=[10, 8], auto_pad="SAME_LOWER"), inputs)


def test_max_pool_indices_storage_order_and_ceil():
  inputs = {"x": _randn(2, 3, 7, 6)}
  _compare(_single("MaxPool", inputs, 2, opset=12, kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1],
                   ceil_mode=1, storage_order=1), inputs)


def test_average_pool_count_include_pad_dilated_ceil():
  inputs = {"x": _randn(1, 2, 9, 7)}
  for cip in (0, 1):
    _compare(_single("AveragePool", inputs, opset=19, kernel_shape=[3, 2], strides=[2, 2], pads=[1, 1, 1, 0],
                     dilations=[2, 1], ceil_mode=1, count_include_pad=cip), inputs)


def test_quantize_dequantize_blocked_and_per_axis():
  inputs = {"x": _randn(3, 8) * 10, "s": np.abs(_randn(3, 2)) + 0.1, "z": _RNG.integers(-5, 5, (3, 2)).astype(np.int8)}
  _compare(_single("QuantizeLinear", inputs, axis=1, block_size=4), inputs)
  inputs = {"x": _RNG.integers(0, 255, (2, 3, 4)).astype(np.uint8), "s": np.abs(_randn(3)) + 0.1,
            "z": _RNG.integers(0, 255, (3,)).astype(np.uint8)}
  _compare(_single("DequantizeLinear", inputs, axis=1), inputs)


def test_gru_lstm_activations_clip_sequence_lens():
  t, b, i, h = 4, 3, 2, 3
  lens = np.array([4, 2, 3], dtype=np.int32)
  inputs = {"x": _randn(t, b, i), "w": _randn(2, 3 * h, i), "r": _randn(2, 3 * h, h), "b": _randn(2, 6 * h),
            "lens": lens}
  _compare(_single("GRU", inputs, 2, opset=14, hidden_size=h, direction="bidirectional", linear_before_reset=1,
                   clip=1.5), inputs, ort=True)
  inputs = {"x": _randn(t, b, i), "w": _randn(1, 4 * h, i), "r": _randn(1, 4 * h, h)}
  _compare(_single("LSTM", inputs, 3, opset=14, hidden_size=h, direction="reverse",
                   activations=["HardSigmoid", "Tanh", "Softsign"], activation_alpha=[0.3],
                   activation_beta=[0.4]), inputs, ort=True)


def test_resize_cubic_antialias_and_axes():
  inputs = {"x": _randn(1, 2, 9, 7), "roi": np.zeros(0, np.float32), "scales": np.array([0.6, 1.7], np.float32)}
  _compare(_single("Resize", inputs, opset=19, mode="cubic", antialias=1, axes=[2, 3],
                   coordinate_transformation_mode="half_pixel"), inputs, ("roi", "scales"), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("mode,coord,scales", [("nearest", "half_pixel", [1, 1, 3, 0.5]),
                                               ("linear", "half_pixel", [1, 1, 3, 1.5]),
                                               ("linear", "pytorch_half_pixel", [1, 1, 0.5, 2]),
                                               ("cubic", "asymmetric", [1, 1, 2, 0.25])])
def test_resize_periodic_taps(mode, coord, scales):
  """Integer and simple rational scales take the shifted-view path; the result must equal the reference."""
  x = _randn(2, 3, 6, 8)
  inputs = {"x": x, "roi": np.zeros(0, np.float32), "scales": np.array(scales, np.float32)}
  _compare(_single("Resize", inputs, opset=19, mode=mode, coordinate_transformation_mode=coord), inputs,
           ("roi", "scales"), rtol=1e-4, atol=1e-5)
  q = {"x": (x * 40 + 100).astype(np.uint8), "roi": inputs["roi"], "scales": inputs["scales"]}
  if mode == "nearest":
    _compare(_single("Resize", q, opset=19, mode=mode, coordinate_transformation_mode=coord), q, ("roi", "scales"))


@pytest.mark.parametrize("device", ["numpy", "c"])
def test_resize_without_a_period_reads_its_taps_by_index(device, monkeypatch):
  """align_corners upsampling of 20 to 77 positions (DeepLabV3+'s decoder) has no short period: each output reads
  its 2 taps by index instead of multiplying by a dense (77, 20) table (10x the work). Equal to the reference."""
  from tgc.frontend.onnx import compose_nn

  def no_table(*args, **kw): raise AssertionError("dense resize table")

  monkeypatch.setattr(compose_nn, "apply_axis_table", no_table)
  inputs = {"x": _randn(1, 3, 20, 20), "roi": np.zeros(0, np.float32), "scales": np.zeros(0, np.float32),
            "sizes": np.array([1, 3, 77, 77], np.int64)}
  _compare(_single("Resize", inputs, opset=19, mode="linear", coordinate_transformation_mode="align_corners"),
           inputs, ("roi", "scales", "sizes"), device=device, rtol=1e-5, atol=1e-6)


def test_einsum_general():
  inputs = {"a": _randn(2, 3, 4, 4), "b": _randn(4, 5)}
  _compare(_single("Einsum", inputs, equation="...ii,ij->...j"), inputs)
  inputs = {"a": _randn(3, 4), "b": _randn(4, 5), "c": _randn(5)}
  _compare(_single("Einsum", inputs, equation="ij,jk,k"), inputs)


def test_topk_ties_and_smallest():
  x = np.array([[3, 1, 3, 2, 1, 3], [0, 0, 0, 1, 1, 1]], dtype=np.float32)
  inputs = {"x": x, "k": np.array([4], np.int64)}
  for largest in (0, 1):
    _compare(_single("TopK", inputs, 2, axis=1, largest=largest), inputs, ("k",))


def _summary(device: str, pattern: str = "") -> int:
  passed, failed = 0, []
  for case in _nn_cases():
    if pattern and pattern not in case.name: continue
    reason = check_case(case, device)
    if reason is None: passed += 1
    else: failed.append((case.name, reason))
  for name, reason in failed:
    mark = " (expected)" if name in NN_EXPECTED_FAILURES else ""
    print(f"FAIL {name}: {reason}{mark}")
  print(f"{device}: {passed} passed, {len(failed)} failed of {passed + len(failed)}")
  return 0 if all(n in NN_EXPECTED_FAILURES for n, _ in failed) else 1


if __name__ == "__main__":
  import argparse
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--device", default="numpy")
  parser.add_argument("-k", default="")
  args = parser.parse_args()
  sys.exit(_summary(args.device, args.k))


def test_dequantized_weights_stay_int8_in_the_artifact(tmp_path):
  """A QDQ weight (int8 initializer -> DequantizeLinear -> MatMul) is not folded into float32 weights: the artifact
  stores the int8 tensor (a quarter of the bytes) and dequantizes in its kernels; outputs match onnx.reference."""
  from onnx import numpy_helper
  from onnx.reference import ReferenceEvaluator
  from tgc.aot.onnx_backend import TgcBackend
  w = _RNG.integers(-128, 127, (256, 64)).astype(np.int8)
  scale = (np.abs(_randn(64)) * 0.01 + 0.001).astype(np.float32)
  graph = helper.make_graph(
    [helper.make_node("DequantizeLinear", ["w", "s"], ["wf"], axis=1), helper.make_node("MatMul", ["x", "wf"], ["y"])],
    "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 256])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 64])],
    [numpy_helper.from_array(w, "w"), numpy_helper.from_array(scale, "s")])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
  x = _randn(4, 256)
  with TgcBackend.prepare(model, "c") as rep:
    got = rep.run([x])[0]
    assert rep.last.report.weights_bytes < w.size * 2, "the int8 weight was stored as float32"
  np.testing.assert_allclose(got, ReferenceEvaluator(model).run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)


def test_recurrent_model_sizes_on_c():
  """A GRU as torch exports one (weights as initializers, linear_before_reset, bidirectional) with 128 inputs and
  hidden units, so its input projection over the time steps is a packed matmul, and an STFT as a strided Conv1d
  with 130 filters (a padded vector): compiled for C, they match onnxruntime, and the arena holds no copy of the
  weights per time step."""
  from onnx import numpy_helper
  from tgc.aot.onnx_backend import TgcBackend
  ort = pytest.importorskip("onnxruntime")
  t, i, h = 12, 128, 128
  inits = {"w": _randn(2, 3 * h, i) * 0.1, "r": _randn(2, 3 * h, h) * 0.1, "b": _randn(2, 6 * h) * 0.1,
           "basis": _randn(130, 1, 64) * 0.1}
  nodes = [helper.make_node("GRU", ["x", "w", "r", "b"], ["y", "yh"], hidden_size=h, direction="bidirectional",
                            linear_before_reset=1),
           helper.make_node("Conv", ["audio", "basis"], ["spec"], strides=[32])]
  graph = helper.make_graph(nodes, "rnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [t, 1, i]),
                                           helper.make_tensor_value_info("audio", TensorProto.FLOAT, [1, 1, 32 * 9])],
                            [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in
                             (("y", [t, 2, 1, h]), ("yh", [2, 1, h]), ("spec", [1, 130, 8]))],
                            [numpy_helper.from_array(v, k) for k, v in inits.items()])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
  feeds = {"x": _randn(t, 1, i), "audio": _randn(1, 1, 32 * 9)}
  expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
  with TgcBackend.prepare(model, "c") as rep:
    got = rep.run([feeds["x"], feeds["audio"]])
    assert rep.last.report.arena_bytes < t * inits["w"][0].nbytes, "the input projection copied W per time step"
  for g, e in zip(got, expected): np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


def test_loop_carrying_its_weights_on_c():
  """An RNN as tf2onnx writes a Keras LSTM: a Loop whose body gathers x[t], multiplies it by a weight the loop
  carries as state (passed through an Identity every step) and updates h. Compiled for C: it matches onnxruntime,
  the weight is stored once, and the input projection of all steps is one kernel."""
  from onnx import numpy_helper
  from tgc.aot.onnx_backend import TgcBackend
  ort = pytest.importorskip("onnxruntime")
  steps, f, h = 6, 32, 16
  body = helper.make_graph(
    [helper.make_node("Gather", ["x", "i"], ["xt"], axis=0),
     helper.make_node("MatMul", ["xt", "w_in"], ["xw"]), helper.make_node("MatMul", ["h_in", "u"], ["hu"]),
     helper.make_node("Add", ["xw", "hu"], ["pre"]), helper.make_node("Tanh", ["pre"], ["h_out"]),
     helper.make_node("Identity", ["w_in"], ["w_out"]), helper.make_node("Identity", ["cond"], ["cond_out"]),
     helper.make_node("Identity", ["h_out"], ["scan"])],
    "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
             helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
             helper.make_tensor_value_info("h_in", TensorProto.FLOAT, [1, h]),
             helper.make_tensor_value_info("w_in", TensorProto.FLOAT, [f, h])],
    [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
     helper.make_tensor_value_info("h_out", TensorProto.FLOAT, [1, h]),
     helper.make_tensor_value_info("w_out", TensorProto.FLOAT, [f, h]),
     helper.make_tensor_value_info("scan", TensorProto.FLOAT, [1, h])])
  inits = [numpy_helper.from_array(np.array(steps, np.int64), "trips"), numpy_helper.from_array(np.array(True), "go"),
           numpy_helper.from_array(np.zeros((1, h), np.float32), "h0"), numpy_helper.from_array(_randn(f, h), "w"),
           numpy_helper.from_array(_randn(h, h) * 0.3, "u")]
  graph = helper.make_graph(
    [helper.make_node("Loop", ["trips", "go", "h0", "w"], ["h_last", "w_last", "hs"], body=body)], "keras_rnn",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [steps, 1, f])],
    [helper.make_tensor_value_info("hs", TensorProto.FLOAT, [steps, 1, h])], inits)
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
  x = _randn(steps, 1, f)
  expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
  with TgcBackend.prepare(model, "c") as rep:
    got = rep.run([x])
    assert rep.last.report.weights_bytes < 2 * f * h * 4, "the loop's weight was stored once per step"
    manifest = json.loads((Path(rep.last.report.out_dir) / "manifest.json").read_text())
    tensors = manifest["weights"]["tensors"]
    w_index = next(i for i, t in enumerate(tensors) if t["name"] == "w")
    reads_w = [c for c in manifest["calls"] if {"kind": "weight", "index": w_index} in c["args"]]
    assert len(reads_w) == 1, "the input projection ran step by step"
  np.testing.assert_allclose(got[0], expected[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("target", ["c", "opencl", "webgpu"])
def test_loop_with_a_condition_computed_on_the_device(target):
  """The loop is unrolled to its trip count, each step kept only while the condition held: on random inputs that
  stop it after 1 to 8 steps, the last v and the scan output's rows equal onnx.reference's; the artifact's scan
  output is padded to 8 rows and the manifest names the output counting the rows a run filled, which the runner
  cuts it to."""
  from onnx.reference import ReferenceEvaluator
  from tgc.aot.onnx_backend import TgcBackend
  from tgc.runtimes import get_runtime, RuntimeUnavailable
  try: get_runtime(target)
  except RuntimeUnavailable as e: pytest.skip(str(e))
  model = growing_loop()
  ref = ReferenceEvaluator(model)
  rng = np.random.default_rng(7)
  lengths = set()
  with TgcBackend.prepare(model, target) as rep:
    outputs = json.loads((Path(rep.last.report.out_dir) / "manifest.json").read_text())["outputs"]
    assert [(o["name"], o["shape"], o.get("rows")) for o in outputs] == \
      [("v", [4], None), ("vs", [8, 4], "vs_rows"), ("vs_rows", [], None)]
    for scale in (0.05, 0.3, 1.0, 3.0, 12.0):
      x, v0 = (rng.uniform(0, scale, 4).astype(np.float32) for _ in range(2))
      got, want = rep.run([x, v0]), ref.run(None, {"x": x, "v0": v0})
      assert got[1].shape == want[1].shape
      for g, w in zip(got, want): np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
      lengths.add(len(want[1]))
  assert len(lengths) >= 3 and max(lengths) == 8 and min(lengths) < 8, lengths


def test_loop_of_a_device_condition_needs_a_trip_count_it_can_unroll():
  """A condition computed on the device unrolls the loop to its trip count: tf2onnx's while loops give M = 2**63 - 1
  (or none), refused at once with the loop's name and its trip count, before any step is built."""
  from onnx import numpy_helper
  from tgc.frontend.onnx import OnnxError
  model = growing_loop()
  trips = next(t for t in model.graph.initializer if t.name == "trips")
  trips.CopyFrom(numpy_helper.from_array(np.array(2 ** 63 - 1, np.int64), "trips"))
  with pytest.raises(OnnxError, match=r"'grow' \(Loop\): its condition is computed on the device, so it is unrolled "
                                      r"to its trip count \(M\), which must be known at compile time and at most "
                                      r"100000; it is 9223372036854775807"):
    load_model(model)
  model.graph.node[0].input[0] = ""
  with pytest.raises(OnnxError, match=r"'grow' \(Loop\): its condition is computed on the device.*; it has none"):
    load_model(model)


def test_loop_scan_output_of_a_device_condition_read_by_a_node_is_refused():
  """A scan output whose number of rows a run decides is padded to the trip count: a node reading it (a sum over
  the rows) would read the padding, so the import stops with an error naming that node and the value."""
  from tgc.frontend.onnx import OnnxError
  with pytest.raises(OnnxError, match=r"'sum_of_rows' \(ReduceSum\): input 'vs' is a Loop's scan output whose "
                                      r"length is decided at run time"):
    load_model(growing_loop(read_scan=True))


def test_loop_with_a_trip_count_input_names_it():
  """A Loop whose trip count is a graph input cannot be unrolled: the error names the node and the input and says how
  to pin it; pinned (`consts`), the same model imports and runs the given number of steps."""
  from tgc.frontend.onnx import OnnxError
  body = helper.make_graph(
    [helper.make_node("Identity", ["cond"], ["cond_out"]), helper.make_node("Add", ["v_in", "one"], ["v_out"])],
    "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
             helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
             helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [2])],
    [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
     helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [2])])
  graph = helper.make_graph(
    [helper.make_node("Constant", [], ["one"], value_float=1.0),
     helper.make_node("Constant", [], ["go"], value_int=1),
     helper.make_node("Cast", ["go"], ["go_b"], to=TensorProto.BOOL),
     helper.make_node("Loop", ["steps", "go_b", "v0"], ["v"], body=body, name="counter")], "counted",
    [helper.make_tensor_value_info("steps", TensorProto.INT64, []),
     helper.make_tensor_value_info("v0", TensorProto.FLOAT, [2])],
    [helper.make_tensor_value_info("v", TensorProto.FLOAT, [2])])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
  with pytest.raises(OnnxError, match=r"'counter' \(Loop\): the trip count M \('steps'\) must be .*--const"):
    load_model(model)
  g = load_model(model, consts={"steps": np.array(5, np.int64)})
  v0 = np.array([1.0, -2.0], np.float32)
  np.testing.assert_allclose(g(Tensor(v0, device="numpy"))[0].numpy(), v0 + 5)
