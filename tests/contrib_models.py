"""One-node models of onnxruntime's com.microsoft operators and onnxruntime's run of them (one thread, graph
optimizations off), for the tests that compare tgc's compiled operators (tests/onnx) and validate's numpy reference
for them (tests/aot) against its kernels."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

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


def ort_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
  ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (pip install onnxruntime): the "
                                                  "com.microsoft operators are compared against its kernels")
  options = ort.SessionOptions()
  options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
  options.intra_op_num_threads = 1
  session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
  return session.run(None, feeds)
