"""Integer inputs that index a table: the bound `tgc validate`'s random inputs stay under, found through nodes that
pass the values on; inputs that index nothing (or a computed table) have none."""
from __future__ import annotations
import numpy as np
from onnx import TensorProto, helper, numpy_helper

from tgc.frontend.onnx.index_inputs import index_bounds


def _model():
  rng = np.random.default_rng(0)
  inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
           for n, s in (("words", (30, 4)), ("types", (2, 4)), ("cols", (4, 3)))]
  nodes = [helper.make_node("Cast", ["tt"], ["tt32"], to=TensorProto.INT32),
           helper.make_node("Unsqueeze", ["tt32", "zero"], ["tt2"]),
           helper.make_node("Squeeze", ["tt2", "zero"], ["tt3"]),
           helper.make_node("Gather", ["words", "ids"], ["w"]), helper.make_node("Gather", ["types", "tt3"], ["t"]),
           helper.make_node("Gather", ["cols", "ids"], ["c"], axis=1),     # the smaller table counts: 3 columns
           helper.make_node("Add", ["w", "t"], ["wt"]), helper.make_node("Mul", ["n", "n"], ["nn"])]
  inits.append(numpy_helper.from_array(np.array([0], np.int64), "zero"))
  ints = [helper.make_tensor_value_info(n, TensorProto.INT64, [5]) for n in ("ids", "tt", "n")]
  outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("wt", "c")] + \
    [helper.make_tensor_value_info("nn", TensorProto.INT64, [5])]
  return helper.make_model(helper.make_graph(nodes, "g", ints, outs, inits),
                           opset_imports=[helper.make_opsetid("", 17)])


def test_index_bounds():
  assert index_bounds(_model()) == {"ids": 3, "tt": 2}
