"""The ONNX importer refuses invalid models with one line naming the node, the attribute or input and the bad value.

One small hand-built model per rule (frontend/onnx: `NodeContext.axis/axes/perm`, the conv/pool window checks of
`node_helpers.window_ints`, node_checks' schema type constraints and 0/1 flags), each with a valid counterpart that
differs only in the culprit: the counterpart must import, run on the numpy device and match onnx.reference on
seeded random inputs. The counterparts include what the spec allows and a careless check would refuse (negative
axes, Flatten's axis equal to the rank, Unsqueeze's axes counted on the output rank, negative Pad pads that crop)."""
from __future__ import annotations
import zlib
from typing import NamedTuple

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tgc.frontend.tensor import Tensor
from tgc.frontend.onnx import OnnxError, load_model

OPSET = 17
F, D, I32, I64 = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT32, TensorProto.INT64
_NP = {F: np.float32, D: np.float64, I32: np.int32, I64: np.int64}


class Rule(NamedTuple):
  """`build(bad)` makes the model: with bad=True it breaks the rule, else it is the valid counterpart. The error
  must contain every string of `expect`."""
  build: object
  expect: tuple


def _model(node, inputs: list[tuple[str, int, list]], inits: dict | None = None, opset: int = OPSET):
  """A one-node model. Its outputs are typed by ONNX shape inference; where inference fails (an invalid model,
  which the importer refuses before its outputs matter) they are declared like the first input."""
  ins = [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs]
  weights = [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()]
  probe = helper.make_model(helper.make_graph([node], "g", ins, [], weights),
                            opset_imports=[helper.make_opsetid("", opset)])
  try: inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(probe).graph.value_info}
  except Exception: inferred = {}
  outs = []
  for o in node.output:
    v = inferred.get(o)
    ok = v is not None and v.type.tensor_type.elem_type and v.type.tensor_type.HasField("shape")
    outs.append(v if ok else helper.make_tensor_value_info(o, inputs[0][1], inputs[0][2]))
  return helper.make_model(helper.make_graph([node], "g", ins, outs, weights),
                           opset_imports=[helper.make_opsetid("", opset)])


def _conv(bad_attr: dict, good_attr: dict):
  def build(bad):
    attrs = dict(kernel_shape=[3, 3], **(bad_attr if bad else good_attr))
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="Conv_3", **attrs)
    w = np.random.default_rng(1).standard_normal((2, 1, 3, 3)).astype(np.float32)
    return _model(node, [("x", F, [1, 1, 6, 6])], {"w": w})
  return build


def _unary(op: str, shape: list, attrs_bad: dict, attrs_good: dict, name: str, extra: dict | None = None,
           elem=F):
  def build(bad):
    inputs = ["x"] + list(extra or {})
    node = helper.make_node(op, inputs, ["y"], name=name, **(attrs_bad if bad else attrs_good))
    return _model(node, [("x", elem, shape)], extra)
  return build


def _const_input(op: str, shape: list, const_bad, const_good, name: str, **attrs):
  def build(bad):
    node = helper.make_node(op, ["x", "c"], ["y"], name=name, **attrs)
    return _model(node, [("x", F, shape)], {"c": np.asarray(const_bad if bad else const_good, np.int64)})
  return build


def _binary(op: str, bad_types: tuple, good_types: tuple, name: str):
  def build(bad):
    ta, tb = bad_types if bad else good_types
    node = helper.make_node(op, ["a", "b"], ["y"], name=name)
    return _model(node, [("a", ta, [2, 3]), ("b", tb, [3])])
  return build


RULES = {
  # conv and pool windows: pads >= 0, strides >= 1, one value per spatial axis
  "conv_negative_pads": Rule(_conv({"pads": [1, -1, 1, 1]}, {"pads": [1, 0, 1, 1]}),
                             ("'Conv_3'", "(Conv)", "pads", "-1")),
  "conv_zero_stride": Rule(_conv({"strides": [1, 0]}, {"strides": [1, 2]}), ("'Conv_3'", "strides", "0")),
  "conv_pads_length": Rule(_conv({"pads": [1, 1]}, {"pads": [1, 1, 1, 1]}), ("'Conv_3'", "pads [1, 1]", "4")),
  "maxpool_negative_pads": Rule(_unary("MaxPool", [1, 1, 5, 5], {"kernel_shape": [2, 2], "pads": [0, 0, -1, 0]},
                                       {"kernel_shape": [2, 2], "pads": [1, 1, 1, 1]}, "Pool_1"),
                                ("'Pool_1'", "(MaxPool)", "pads", "-1")),
  # axis attributes against the rank (negative axes count from the end)
  "split_axis": Rule(lambda bad: _model(helper.make_node("Split", ["x", "c"], ["y", "z"], name="Split_2",
                                                         axis=2 if bad else -1),
                                        [("x", F, [2, 4])], {"c": np.array([1, 3], np.int64)}),
                     ("'Split_2'", "(Split)", "axis 2", "-2..1")),
  "gather_axis": Rule(lambda bad: _model(helper.make_node("Gather", ["x", "i"], ["y"], name="Gather_5",
                                                          axis=-3 if bad else -2),
                                         [("x", F, [3, 4])], {"i": np.array([2, 0], np.int64)}),
                      ("'Gather_5'", "(Gather)", "axis -3", "-2..1")),
  "concat_axis": Rule(lambda bad: _model(helper.make_node("Concat", ["a", "b"], ["y"], name="Concat_0",
                                                          axis=2 if bad else -1),
                                         [("a", F, [2, 3]), ("b", F, [2, 1])]),
                      ("'Concat_0'", "(Concat)", "axis 2")),
  "softmax_axis": Rule(_unary("Softmax", [2, 3], {"axis": -3}, {"axis": -2}, "Softmax_9"),
                       ("'Softmax_9'", "(Softmax)", "axis -3")),
  "flatten_axis": Rule(_unary("Flatten", [2, 3], {"axis": 3}, {"axis": 2}, "Flatten_4"),
                       ("'Flatten_4'", "(Flatten)", "axis 3", "-2..2")),
  "unsqueeze_axes": Rule(_const_input("Unsqueeze", [2, 3], [3], [-1], "Unsqueeze_7"),
                         ("'Unsqueeze_7'", "(Unsqueeze)", "axes", "3", "-3..2")),
  "unsqueeze_repeated_axes": Rule(_const_input("Unsqueeze", [2, 3], [1, -3], [1, 2], "Unsqueeze_8"),
                                  ("'Unsqueeze_8'", "[1, -3]", "repeat")),
  "slice_repeated_axes": Rule(lambda bad: _model(
    helper.make_node("Slice", ["x", "s", "e", "a"], ["y"], name="Slice_6"), [("x", F, [4, 5])],
    {"s": np.array([0, 1], np.int64), "e": np.array([3, 4], np.int64),
     "a": np.array([0, -2] if bad else [0, -1], np.int64)}), ("'Slice_6'", "(Slice)", "[0, -2]", "repeat")),
  "reduce_axes": Rule(_const_input("ReduceSum", [2, 3, 4], [3], [-1], "ReduceSum_1"),
                      ("'ReduceSum_1'", "(ReduceSum)", "axes", "3", "-3..2")),
  "transpose_negative_perm": Rule(_unary("Transpose", [2, 3, 4], {"perm": [2, 0, -1]}, {"perm": [2, 0, 1]},
                                         "Transpose_3"),
                                  ("'Transpose_3'", "(Transpose)", "perm [2, 0, -1]", "0..2")),
  "transpose_repeated_perm": Rule(_unary("Transpose", [2, 3, 4], {"perm": [0, 0, 1]}, {"perm": [0, 2, 1]},
                                         "Transpose_3"),
                                  ("'Transpose_3'", "(Transpose)", "perm [0, 0, 1] is not a permutation of 0..2")),
  # 0/1 flags
  "reduce_keepdims_2": Rule(_unary("ReduceMax", [3, 4], {"axes": [1], "keepdims": 2}, {"axes": [1], "keepdims": 0},
                                   "ReduceMax_2"),
                            ("'ReduceMax_2'", "(ReduceMax)", "keepdims is 2", "0 or 1")),
  "gemm_transb_minus_1": Rule(lambda bad: _model(helper.make_node("Gemm", ["a", "b"], ["y"], name="Gemm_1",
                                                                  transB=-1 if bad else 1),
                                                 [("a", F, [2, 3]), ("b", F, [4, 3])]),
                              ("'Gemm_1'", "(Gemm)", "transB is -1")),
  # input element types against the schema's type constraints
  "mul_type_mismatch": Rule(_binary("Mul", (D, F), (D, D), "Mul_4"),
                            ("'Mul_4'", "(Mul)", "'b'", "float", "'a'", "double", "type T")),
  "add_type_mismatch_int": Rule(_binary("Add", (I64, I32), (I32, I32), "Add_2"),
                                ("'Add_2'", "(Add)", "int32", "int64", "type T")),
  "concat_bfloat16_float": Rule(lambda bad: _model(helper.make_node("Concat", ["a", "b"], ["y"], name="Concat_1",
                                                                    axis=0),
                                                   [("a", TensorProto.BFLOAT16 if bad else F, [2]), ("b", F, [3])]),
                                ("'Concat_1'", "(Concat)", "bfloat16", "float", "type T")),
  "sigmoid_int_input": Rule(_unary("Sigmoid", [2, 3], {}, {}, "Sigmoid_0", elem=I32), ("'Sigmoid_0'", "int32")),
  "reshape_float_shape": Rule(lambda bad: _model(helper.make_node("Reshape", ["x", "s"], ["y"], name="Reshape_1"),
                                                 [("x", F, [2, 3])],
                                                 {"s": np.array([3, 2], np.float32 if bad else np.int64)}),
                              ("'Reshape_1'", "(Reshape)", "'s'", "float", "int64")),
}

# the valid counterpart of a rule whose invalid model has non-float inputs runs on floats
_VALID_INPUT_TYPES = {"sigmoid_int_input": F}


def _load(model):
  shapes = {i.name: tuple(d.dim_value for d in i.type.tensor_type.shape.dim) for i in model.graph.input
            if i.name not in {t.name for t in model.graph.initializer}}
  return load_model(model, input_shapes=shapes)


@pytest.mark.parametrize("rule", sorted(RULES))
def test_invalid_model_is_refused(rule):
  with pytest.raises(OnnxError) as info:
    _load(RULES[rule].build(True))
  text = str(info.value)
  assert "\n" not in text, text
  for part in RULES[rule].expect: assert part in text, f"{part!r} not in: {text}"


@pytest.mark.parametrize("rule", sorted(RULES))
def test_valid_counterpart_matches_reference(rule):
  from onnx.reference import ReferenceEvaluator
  model = RULES[rule].build(False)
  for i in model.graph.input:
    if rule in _VALID_INPUT_TYPES: i.type.tensor_type.elem_type = _VALID_INPUT_TYPES[rule]
  rng = np.random.default_rng(zlib.crc32(rule.encode()))
  inits = {t.name for t in model.graph.initializer}
  feeds = {}
  for i in model.graph.input:
    if i.name in inits: continue
    shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
    dt = _NP[i.type.tensor_type.elem_type]
    feeds[i.name] = rng.integers(-9, 10, shape).astype(dt) if dt in (np.int32, np.int64) else \
      rng.standard_normal(shape).astype(dt)
  expected = ReferenceEvaluator(model).run(None, feeds)
  graph = _load(model)
  outs = graph(*[Tensor(feeds[name], device="numpy") for name, _, _ in graph.inputs])
  Tensor.realize_all(*outs)
  for out, want in zip(outs, expected):
    got = out.numpy()
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _numpy_pad(x: np.ndarray, pads: list[int]) -> np.ndarray:
  """ONNX Pad (constant 0) in numpy: positive pads add zeros, negative ones remove elements."""
  r = x.ndim
  x = np.pad(x, [(max(pads[a], 0), max(pads[a + r], 0)) for a in range(r)])
  return x[tuple(slice(-min(pads[a], 0), x.shape[a] + min(pads[a + r], 0)) for a in range(r))]


@pytest.mark.parametrize("pads", [[0, -1, 0, -2], [1, -1, 0, 2]], ids=["crop", "crop_and_pad"])
def test_negative_pad_pads_crop(pads):
  """Pad (opset 2+) allows negative pads: they remove elements. They must compile and match numpy (onnx.reference
  refuses negative pads)."""
  model = _model(helper.make_node("Pad", ["x", "p"], ["y"], name="Pad_0"), [("x", F, [3, 5])],
                 {"p": np.array(pads, np.int64)})
  x = np.random.default_rng(7).standard_normal((3, 5)).astype(np.float32)
  out = _load(model)(Tensor(x, device="numpy"))[0]
  Tensor.realize_all(out)
  np.testing.assert_array_equal(out.numpy(), _numpy_pad(x, pads))
