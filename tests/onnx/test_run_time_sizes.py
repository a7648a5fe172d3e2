"""ONNX models whose inputs leave dims open (dim_params), compiled once with those dims as sizes known only at run
time (`--dim NAME=LO..HI`): the shape arithmetic exporters put in the graph (Shape, Gather, Concat, Range, Slice up
to a length) folds on size expressions, convolutions and pools slide over a run-time width, and the C artifact
matches onnx.reference at the smallest, a middle and the largest size. Dims without a range, ranges for no dim and
what cannot be done over a run-time size are one-line errors."""
import json
import subprocess
import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from tgc.aot import UserError, compile_model
from tgc.aot.cli import cli
from tgc.frontend.onnx import OnnxError, load_model
from tgc.frontend.onnx import shape_values
from tgc.ir import dtypes
from tgc.ir.sint import Variable
from tgc.aot.artifact import run_artifact
from tests.emit.dynamic_cases import run_main
from tests.aot.aot_helpers import ROOT

RNG = np.random.default_rng(3)


def _ints(name: str, values) -> onnx.TensorProto:
  return numpy_helper.from_array(np.asarray(values, np.int64), name)


def _floats(name: str, shape, scale: float = 0.3) -> onnx.TensorProto:
  return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)


def _save(tmp_path, name: str, nodes, inputs, outputs, inits) -> str:
  model = helper.make_model(helper.make_graph(nodes, name, inputs, outputs, inits),
                            opset_imports=[helper.make_opsetid("", 17)])
  onnx.checker.check_model(model)
  path = str(tmp_path / f"{name}.onnx")
  onnx.save(model, path)
  return path


def attention_model(tmp_path) -> str:
  """x (1, seq, 16): position table sliced to seq, Range positions through an embedding, heads split with a
  shape built from Shape/Gather/Concat, softmax over seq, merged back with the input's Shape."""
  x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "seq", 16])
  y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "seq", 16])
  nodes = [
    helper.make_node("Shape", ["x"], ["shape"]),
    helper.make_node("Gather", ["shape", "one"], ["seq"], axis=0),
    helper.make_node("Unsqueeze", ["seq", "zero_axis"], ["seq_1d"]),
    helper.make_node("Mul", ["seq_1d", "two"], ["seq2"]),                          # shape arithmetic on the size
    helper.make_node("Div", ["seq2", "two"], ["seq_again"]),
    helper.make_node("Concat", ["one_1d", "seq_again", "heads", "head_dim"], ["split_shape"], axis=0),
    helper.make_node("Slice", ["table", "zero_1d", "seq_1d", "one_1d"], ["positions"]),   # table[:, :seq]
    helper.make_node("Range", ["zero", "seq", "one"], ["ids"]),
    helper.make_node("Gather", ["embedding", "ids"], ["embedded"], axis=0),
    helper.make_node("Add", ["x", "positions"], ["x1"]),
    helper.make_node("Add", ["x1", "embedded"], ["x2"]),
    helper.make_node("MatMul", ["x2", "w"], ["q"]),
    helper.make_node("Reshape", ["q", "split_shape"], ["q4"]),
    helper.make_node("Transpose", ["q4"], ["qt"], perm=[0, 2, 1, 3]),
    helper.make_node("Transpose", ["q4"], ["kt"], perm=[0, 2, 3, 1]),
    helper.make_node("MatMul", ["qt", "kt"], ["scores"]),
    helper.make_node("Softmax", ["scores"], ["probs"], axis=-1),
    helper.make_node("MatMul", ["probs", "qt"], ["mixed"]),
    helper.make_node("Transpose", ["mixed"], ["merged"], perm=[0, 2, 1, 3]),
    helper.make_node("Reshape", ["merged", "shape"], ["y"]),
  ]
  inits = [_floats("w", (16, 16)), _floats("table", (1, 64, 16)), _floats("embedding", (64, 16)),
           _ints("one", 1), _ints("zero", 0), _ints("zero_axis", [0]), _ints("two", [2]), _ints("one_1d", [1]),
           _ints("zero_1d", [0]), _ints("heads", [2]), _ints("head_dim", [8])]
  return _save(tmp_path, "attention", nodes, [x], [y], inits)


def conv_model(tmp_path) -> str:
  """x (1, 3, 16, W): stride-1 and stride-2 convs, max and average pools, then a Flatten-like Reshape to
  (1, 8, -1) over the width that is left."""
  x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, "width"])
  y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, "steps"])
  nodes = [
    helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
    helper.make_node("Relu", ["c1"], ["r1"]),
    helper.make_node("Conv", ["r1", "w2"], ["c2"], strides=[2, 2], pads=[1, 1, 1, 1]),
    helper.make_node("MaxPool", ["c2"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
    helper.make_node("AveragePool", ["p1"], ["p2"], kernel_shape=[3, 1], strides=[1, 1], pads=[1, 0, 1, 0]),
    helper.make_node("Conv", ["p2", "w3"], ["c3"], dilations=[1, 2], pads=[0, 2, 0, 2], kernel_shape=[1, 3]),
    helper.make_node("Reshape", ["c3", "flat"], ["y"]),
  ]
  inits = [_floats("w1", (8, 3, 3, 3)), _floats("b1", (8,)), _floats("w2", (8, 8, 3, 3)),
           _floats("w3", (8, 8, 1, 3)), _ints("flat", [1, 8, -1])]
  return _save(tmp_path, "convs", nodes, [x], [y], inits)


def fpn_model(tmp_path) -> str:
  """A detector's feature pyramid over x (1, 3, H, W): two stride-2 convs down, a stride-2 ConvTranspose up added
  to the first conv's map (sizes agree only when H and W are multiples of 4), nearest Resize x2, sigmoid."""
  x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "H", "W"])
  y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, "H", "W"])
  nodes = [
    helper.make_node("Conv", ["x", "w1"], ["c1"], strides=[2, 2], pads=[1, 1, 1, 1]),
    helper.make_node("Relu", ["c1"], ["r1"]),
    helper.make_node("Conv", ["r1", "w2"], ["c2"], strides=[2, 2], pads=[1, 1, 1, 1]),
    helper.make_node("ConvTranspose", ["c2", "wt", "bt"], ["up"], strides=[2, 2]),
    helper.make_node("Add", ["up", "r1"], ["merged"]),
    helper.make_node("Resize", ["merged", "", "scales"], ["big"], mode="nearest"),
    helper.make_node("Sigmoid", ["big"], ["y"]),
  ]
  inits = [_floats("w1", (4, 3, 3, 3)), _floats("w2", (6, 4, 3, 3)), _floats("wt", (6, 4, 2, 2)), _floats("bt", (4,)),
           numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")]
  return _save(tmp_path, "fpn", nodes, [x], [y], inits)


def _check_at_sizes(out: str, model: str, name: str, shapes) -> None:
  reference = ReferenceEvaluator(model)
  for shape in shapes:
    x = RNG.standard_normal(shape).astype(np.float32)
    got = run_artifact(out, {name: x})
    want = dict(zip([o.name for o in onnx.load(model).graph.output], reference.run(None, {name: x})))
    for key, value in want.items():
      assert got[key].shape == value.shape
      np.testing.assert_allclose(got[key], value, rtol=1e-4, atol=1e-4, err_msg=f"{key} at {shape}")


@pytest.mark.parametrize("target", ["c", "opencl", pytest.param("webgpu", marks=pytest.mark.webgpu)])
def test_attention_of_any_length_matches_the_reference(tmp_path, target):
  model = attention_model(tmp_path)
  out = str(tmp_path / f"attention_{target}")
  report = compile_model(model, target, out, dims={"seq": (1, 64)})
  assert report.inputs == [("x", (1, "seq", 16), "float32")] and report.outputs == [("y", (1, "seq", 16), "float32")]
  manifest = json.loads((tmp_path / f"attention_{target}" / "manifest.json").read_text())
  assert manifest["dims"] == [{"name": "seq", "min": 1, "max": 64}]
  _check_at_sizes(out, model, "x", [(1, 1, 16), (1, 29, 16), (1, 64, 16)])


@pytest.mark.parametrize("target", ["c", "opencl", pytest.param("webgpu", marks=pytest.mark.webgpu)])
def test_convolutions_and_pools_over_a_run_time_width(tmp_path, target):
  model = conv_model(tmp_path)
  out = str(tmp_path / f"convs_{target}")
  compile_model(model, target, out, input_shapes={"x": (1, 3, 16, "W")}, dims={"W": (9, 120)})
  manifest = json.loads((tmp_path / f"convs_{target}" / "manifest.json").read_text())
  assert manifest["inputs"][0]["shape"] == [1, 3, 16, "W"]
  _check_at_sizes(out, model, "x", [(1, 3, 16, 9), (1, 3, 16, 64), (1, 3, 16, 120), (1, 3, 16, 31)])


@pytest.mark.parametrize("target", ["c", "opencl", pytest.param("webgpu", marks=pytest.mark.webgpu)])
def test_sizes_in_steps_of_a_multiple(tmp_path, target):
  """Sizes given as multiples (x=1,3,4*h,4*w): the pyramid's skip connection adds up at every size, the runners
  read h and w off the input's shape, and a height that is no multiple of 4 is an error naming the input."""
  model = fpn_model(tmp_path)
  out = str(tmp_path / f"fpn_{target}")
  report = compile_model(model, target, out, input_shapes={"x": (1, 3, "4*h", "w*4")}, dims={"h": (1, 12), "w": (2, 9)})
  assert report.inputs == [("x", (1, 3, "(h*4)", "(w*4)"), "float32")]
  _check_at_sizes(out, model, "x", [(1, 3, 4, 8), (1, 3, 20, 36), (1, 3, 48, 12), (1, 3, 48, 36)])
  with pytest.raises(UserError, match=r"input 'x': dimension 2 \(\(h\*4\)\) is 18, not a multiple of 4"):
    run_artifact(out, {"x": np.zeros((1, 3, 18, 12), np.float32)})
  with pytest.raises(UserError, match=r"dimension 3 \(\(w\*4\)\) is 4, outside the range 8..36 in steps of 4"):
    run_artifact(out, {"x": np.zeros((1, 3, 16, 4), np.float32)})


def test_main_c_reads_sizes_in_steps(tmp_path):
  model = fpn_model(tmp_path)
  out = tmp_path / "fpn_main"
  compile_model(model, "c", str(out), input_shapes={"x": (1, 3, "4*h", "4*w")}, dims={"h": (1, 12), "w": (2, 9)})
  subprocess.run(["make", "-s", "main"], cwd=out, check=True, capture_output=True)
  x = RNG.standard_normal((1, 3, 12, 20)).astype(np.float32)
  done = run_main(out, tmp_path, {"x": x})
  assert done.returncode == 0, done.stderr
  want = ReferenceEvaluator(model).run(None, {"x": x})[0]
  np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-4, atol=1e-4)
  bad = run_main(out, tmp_path, {"x": np.ones((1, 3, 12, 22), np.float32)})
  assert bad.returncode == 2 and "dimension 3 is 22, not a multiple of 4 (4*w)" in bad.stderr


def test_cli_dim_and_named_input_shape(tmp_path):
  model = conv_model(tmp_path)
  runner = CliRunner()
  done = runner.invoke(cli, ["compile", model, "-o", str(tmp_path / "cli"), "--input-shape", "x=1,3,16,W",
                             "--dim", "W=16..48"])
  assert done.exit_code == 0, done.output
  assert "x (1, 3, 16, W) float32" in done.output
  page = runner.invoke(cli, ["viz", str(tmp_path / "cli"), "-o", str(tmp_path / "cli.html")])
  assert page.exit_code == 0 and "rewrites recorded by rebuilding" in page.output, page.output   # dims recorded
  page = runner.invoke(cli, ["viz", model, "--input-shape", "x=1,3,16,W", "--dim", "W=16..48", "-o",
                             str(tmp_path / "model.html")])
  assert page.exit_code == 0 and '"W"' in (tmp_path / "model.html").read_text(), page.output
  bad = runner.invoke(cli, ["compile", model, "-o", str(tmp_path / "bad"), "--dim", "W=16-48"])
  assert bad.exit_code != 0 and "expected NAME=LOWEST..HIGHEST" in bad.output
  assert not (tmp_path / "bad").exists()
  steps = runner.invoke(cli, ["compile", model, "-o", str(tmp_path / "steps"), "--input-shape", "x=1,3,16,8*W",
                              "--dim", "W=2..6"])
  assert steps.exit_code == 0 and "x (1, 3, 16, (W*8)) float32" in steps.output, steps.output
  bad = runner.invoke(cli, ["compile", model, "-o", str(tmp_path / "bad"), "--input-shape", "x=1,3,16,8*W*2",
                            "--dim", "W=2..6"])
  assert bad.exit_code != 0 and "or a multiple of one (32*h), not '8*W*2'" in bad.output


def test_open_dims_without_a_range_and_ranges_for_no_dim_are_errors(tmp_path):
  model = attention_model(tmp_path)
  with pytest.raises(OnnxError, match=r"dimension 1 \(seq\) is unknown.*--dim seq=LOWEST..HIGHEST"):
    load_model(model)
  with pytest.raises(OnnxError, match="dims: no input has a dim named 'len'"):
    load_model(model, dims={"seq": (1, 8), "len": (1, 8)})
  with pytest.raises(OnnxError, match="names a size 'W' without a range"):
    load_model(conv_model(tmp_path), input_shapes={"x": (1, 3, 16, "W")})
  with pytest.raises(UserError, match="--dim applies to .onnx models only"):
    compile_model(f"{ROOT / 'examples' / 'encoder_any_length.py'}:build", "c", str(tmp_path / "t"), dims={"T": (1, 8)})


def test_what_a_run_time_size_cannot_do_is_refused_naming_the_node(tmp_path):
  x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 8, "W"])
  y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, "out"])
  model = _save(tmp_path, "ceil", [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2],
                                                    ceil_mode=1, name="pool")], [x], [y], [])
  with pytest.raises(OnnxError, match=r"node 'pool' \(MaxPool\): ceil_mode over a size known only at run time"):
    load_model(model, dims={"W": (4, 32)})
  up = _save(tmp_path, "up", [helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear", name="up")],
             [x], [y], [numpy_helper.from_array(np.array([1, 1, 0.5, 2], np.float32), "scales")])
  with pytest.raises(OnnxError, match=r"node 'up' \(Resize\): over a size known only at run time only nearest"):
    load_model(up, dims={"W": (4, 32)})
  sized = _save(tmp_path, "sized", [helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], name="to")], [x], [y],
                [_ints("sizes", [1, 2, 4, 16])])
  with pytest.raises(OnnxError, match=r"node 'to' \(Resize\): not supported over sizes known only at run time"):
    load_model(sized, dims={"W": (4, 32)})


@pytest.mark.parametrize("coord,nearest", [("asymmetric", "floor"), ("half_pixel", "round_prefer_floor")])
def test_nearest_upsampling_of_a_run_time_size(tmp_path, coord, nearest):
  x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, "W"])
  y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 12, "W4"])
  nodes = [helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest", coordinate_transformation_mode=coord,
                            nearest_mode=nearest)]
  model = _save(tmp_path, f"up_{coord}", nodes, [x], [y],
                [numpy_helper.from_array(np.array([1, 1, 2, 4], np.float32), "scales")])
  out = str(tmp_path / f"up_{coord}_c")
  compile_model(model, "c", out, dims={"W": (1, 40)})
  _check_at_sizes(out, model, "x", [(1, 2, 6, 1), (1, 2, 6, 17), (1, 2, 6, 40)])


def test_shape_values_fold_size_arithmetic():
  seq = Variable("seq", 1, 64)
  shape = shape_values.of_shape((1, seq, 16), "Shape", {})
  assert shape_values.is_shape_value(shape) and list(shape[0]) == [1, seq, 16]
  (doubled, dt), = shape_values.fold("Mul", {}, [shape, (np.array([2], np.int64), dtypes.int64)], 17)
  assert list(doubled) == [2, (seq * 2), 32] and dt == dtypes.int64
  (plain, _), = shape_values.fold("Gather", {"axis": 0}, [shape, (np.array([0, 2], np.int64), dtypes.int64)], 17)
  assert plain.dtype == np.int64 and plain.tolist() == [1, 16]            # settles to a plain array when known
  five = (np.array([5], np.int64), dtypes.int64)
  assert shape_values.fold("Equal", {}, [shape_values.of_shape((seq,), "Shape", {}), five], 17) is None  # undecided
  big = (np.array([100], np.int64), dtypes.int64)
  (never, _), = shape_values.fold("Equal", {}, [shape_values.of_shape((seq,), "Shape", {}), big], 17)
  assert never.tolist() == [False]
  assert shape_values.clamped_index(2**62, seq) is seq and shape_values.clamped_index(-1, seq) is not None
  assert shape_values.clamped_index(10, seq) is None                     # 10 may be past the end: not decided
