"""One-node models of onnxruntime's com.microsoft operators and onnxruntime's run of them (one thread, graph
optimizations off), for the tests that compare tgc's compiled operators (tests/onnx) and validate's numpy reference
for them (tests/aot) against its kernels."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

MS = "com.microsoft"


def one_node(op: str, inputs: list[str], feeds: dict[str, np.ndarray], inits: dict[str, np.ndarray],
             outputs: list[tuple[str, int, list[int]]], **attrs) -> onnx.ModelProto:
  """A one-node com.microsoft model: `feeds` are graph inputs, `inits` initializers; "" skips an input."""
  info = helper.make_tensor_value_info
  node = helper.make_node(op, inputs, [o[0] for o in outputs], domain=MS, name=f"{op.lower()}_node", **attrs)
  graph = helper.make_graph(
    [node], op, [info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)) for k, v in feeds.items()],
    [info(*o) for o in outputs], [numpy_helper.from_array(v, k) for k, v in inits.items()])
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])


def dynamic_quantize_lstm(x: np.ndarray, weights: tuple, recurrent: tuple, direction: str,
                          rng: np.random.Generator) -> onnx.ModelProto:
  """A one-node DynamicQuantizeLSTM of `x` [seq, batch, K]: `weights` and `recurrent` its 8-bit W [dirs, K, 4h] and R
  [dirs, h, 4h] each as (values, scales, zero points), a bias and initial states drawn from `rng`; outputs Y, Y_h
  and Y_c."""
  seq, batch, _ = x.shape
  (w, ws, wz), (r, rs, rz) = weights, recurrent
  dirs, h = r.shape[0], r.shape[1]
  inits = {"w": w, "r": r, "b": rng.standard_normal((dirs, 8 * h)).astype(np.float32) * 0.1,
           "h0": rng.standard_normal((dirs, batch, h)).astype(np.float32) * 0.5,
           "c0": rng.standard_normal((dirs, batch, h)).astype(np.float32) * 0.5,
           "ws": ws, "wz": wz, "rs": rs, "rz": rz}
  outputs = [("y", TensorProto.FLOAT, [seq, dirs, batch, h]), ("yh", TensorProto.FLOAT, [dirs, batch, h]),
             ("yc", TensorProto.FLOAT, [dirs, batch, h])]
  return one_node("DynamicQuantizeLSTM", ["x", "w", "r", "b", "", "h0", "c0", "", "ws", "wz", "rs", "rz"], {"x": x},
                  inits, outputs, hidden_size=h, direction=direction)


def ort_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
  ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (pip install onnxruntime): the "
                                                  "com.microsoft operators are compared against its kernels")
  options = ort.SessionOptions()
  options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
  options.intra_op_num_threads = 1
  session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
  return session.run(None, feeds)
