"""The AOT pipeline as a library: compile_model writes a complete artifact or nothing, names inputs, outputs and
weights as the model does, is deterministic, refuses to overwrite folders that are not artifacts; run, validate
and bench work on the artifact itself and every bad input is a UserError naming the culprit."""
from __future__ import annotations
import json
import os
from pathlib import Path

import numpy as np
import pytest

from tgc.aot import compile_model, UserError
import tgc.aot.compile as compile_step
from tgc.aot import artifact, reference, models, validate
from tgc.aot.bench import bench_artifact
from tgc.runtimes.artifact import is_artifact

from aot_helpers import MLP, MNIST, write_toy_model


def tree(folder: str) -> dict[str, bytes]:
  out = {}
  for base, _, files in os.walk(folder):
    for f in files:
      p = os.path.join(base, f)
      out[os.path.relpath(p, folder)] = Path(p).read_bytes()
  return out


def leftovers(parent: Path) -> list[str]:
  return [p for p in os.listdir(parent) if ".tgc-" in p]


@pytest.fixture(scope="module")
def mnist_artifact(tmp_path_factory) -> str:
  out = tmp_path_factory.mktemp("mnist") / "out"
  compile_model(MNIST, "c", str(out))
  return str(out)


def test_compile_report_and_manifest(mnist_artifact):
  manifest = json.loads(Path(mnist_artifact, "manifest.json").read_text())
  assert manifest["target"] == "c"
  assert manifest["model"]["name"] == "mnist_cnn"
  assert [i["name"] for i in manifest["inputs"]] == ["input_0"]
  assert [o["name"] for o in manifest["outputs"]] == ["output_0"]
  names = [t["name"] for t in manifest["weights"]["tensors"]]
  assert "fc1.weight" in names and "conv1.bias" in names     # state-dict names kept
  # BatchNorm's running statistics are folded at trace time into one scale and one shift (weight_N)
  assert "bn1.running_mean" not in names and sum(n.startswith("weight_") for n in names) == 2
  assert manifest["arena_bytes"] > 0


def test_report_counts(tmp_path):
  report = compile_model(MLP, "c", str(tmp_path / "mlp"), name="My MLP")
  assert report.name == "my_mlp"
  assert report.kernels >= 2 and report.calls >= report.kernels
  assert report.weights == 4 and report.weights_bytes == (32 * 16 + 32 + 4 * 32 + 4) * 4
  assert [i[0] for i in report.inputs] == ["features"]
  assert [o[0] for o in report.outputs] == ["logits", "probs"]
  assert "manifest.json" in report.files
  assert report.out_dir == str((tmp_path / "mlp").resolve())


def test_weight_names_from_closures_and_folding(tmp_path):
  model = write_toy_model(tmp_path)
  names = lambda out: [t["name"] for t in json.loads((out / "manifest.json").read_text())["weights"]["tensors"]]  # noqa
  compile_model(f"{model}:build", "c", str(tmp_path / "a"))
  assert sorted(names(tmp_path / "a")) == ["bias", "w"]
  compile_model(f"{model}:folded", "c", str(tmp_path / "b"))
  assert names(tmp_path / "b") == ["weight_0"]


def test_compile_is_deterministic(tmp_path):
  compile_model(MNIST, "c", str(tmp_path / "one"))
  compile_model(MNIST, "c", str(tmp_path / "two"))
  one, two = tree(str(tmp_path / "one")), tree(str(tmp_path / "two"))
  assert sorted(one) == sorted(two)
  for name in one: assert one[name] == two[name], f"{name} differs between two compiles"


def test_failing_model_leaves_nothing(tmp_path):
  model = write_toy_model(tmp_path)
  for fn, words in (("broken", "boom in the model"), ("broken_fn", "fn exploded"), ("not_a_pair", "(fn, inputs)")):
    with pytest.raises(UserError, match=None) as info:
      compile_model(f"{model}:{fn}", "c", str(tmp_path / "out"))
    assert words in str(info.value) and fn in str(info.value)
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


def test_failing_writer_keeps_the_old_artifact(tmp_path, monkeypatch):
  out = tmp_path / "out"
  compile_model(MLP, "c", str(out))
  before = tree(str(out))
  from tgc import emit

  def bad_writer(cm, folder, embed_weights=False):
    Path(folder, "model.c").write_text("half")
    raise RuntimeError("disk full")
  monkeypatch.setattr(emit, "write_artifact", bad_writer)
  with pytest.raises(RuntimeError, match="disk full"):
    compile_model(MNIST, "c", str(out))
  assert tree(str(out)) == before and leftovers(tmp_path) == []


def test_output_folder_rules(tmp_path):
  plain = tmp_path / "plain"
  plain.mkdir()
  (plain / "notes.txt").write_text("mine")
  with pytest.raises(UserError, match="not a tgc artifact.*--force"):
    compile_model(MLP, "c", str(plain))
  assert (plain / "notes.txt").read_text() == "mine"
  compile_model(MLP, "c", str(plain), force=True)
  assert not (plain / "notes.txt").exists() and is_artifact(str(plain))
  compile_model(MNIST, "c", str(plain))                    # an artifact is replaced without force
  assert json.loads((plain / "manifest.json").read_text())["model"]["name"] == "mnist_cnn"
  empty = tmp_path / "empty"
  empty.mkdir()
  compile_model(MLP, "c", str(empty))                      # an empty folder is fine
  assert is_artifact(str(empty))
  assert leftovers(tmp_path) == []


def test_unknown_target_and_bad_specs(tmp_path):
  with pytest.raises(UserError, match="target vulkan is not supported yet; supported: c"):
    compile_model(MLP, "vulkan", str(tmp_path / "x"))
  with pytest.raises(UserError, match="model file not found: .*nope.py"):
    compile_model(str(tmp_path / "nope.py") + ":build", "c", str(tmp_path / "x"))
  with pytest.raises(UserError, match="no function 'missing'.*functions there: build"):
    compile_model(MLP.replace(":build", ":missing"), "c", str(tmp_path / "x"))
  with pytest.raises(UserError, match="names no function"):
    compile_model(MLP.replace(":build", ""), "c", str(tmp_path / "x"))
  with pytest.raises(UserError, match="--input-shape applies to .onnx"):
    compile_model(MLP, "c", str(tmp_path / "x"), input_shapes={"x": (1,)})
  assert not (tmp_path / "x").exists()


def test_run_matches_numpy_reference(mnist_artifact):
  art = artifact.open_artifact(mnist_artifact)
  feeds = artifact.random_inputs(art, seed=5)
  got = artifact.run_artifact(mnist_artifact, feeds)
  ref = reference.tensor_reference(models.parse_model_spec(MNIST), feeds)
  assert list(got) == ["output_0"]
  np.testing.assert_allclose(got["output_0"], ref["output_0"], rtol=1e-4, atol=1e-4)


def test_input_checks(mnist_artifact):
  x = np.ones((1, 1, 28, 28), np.float32)
  with pytest.raises(UserError, match="unknown input 'image'.*'input_0'"):
    artifact.run_artifact(mnist_artifact, {"image": x})
  with pytest.raises(UserError, match="missing input 'input_0'"):
    artifact.run_artifact(mnist_artifact, {})
  with pytest.raises(UserError, match=r"input 'input_0' has shape \[1, 28, 28\]; the model takes \[1, 1, 28, 28\]"):
    artifact.run_artifact(mnist_artifact, {"input_0": x[0]})
  with pytest.raises(UserError, match="input 'input_0' has dtype float64; the model takes float32"):
    artifact.run_artifact(mnist_artifact, {"input_0": x.astype(np.float64)})


def test_validate_and_bench(mnist_artifact):
  report = validate.validate_artifact(mnist_artifact, model=MNIST, seed=3)
  assert report.ok and report.reference == "numpy interpreter"
  assert [c.name for c in report.checks] == ["output_0"] and report.checks[0].max_abs < 1e-4
  bench = bench_artifact(mnist_artifact, runs=5, warmup=1)
  assert bench.runs == 5 and 0 < bench.median_s <= bench.p90_s
  manifest = json.loads(Path(mnist_artifact, "manifest.json").read_text())
  assert bench.weights_bytes == sum(t["nbytes"] for t in manifest["weights"]["tensors"])
  assert bench.code_bytes > 1000 and bench.arena_bytes > 0


def test_validate_int_inputs_and_dict_names(tmp_path):
  model = write_toy_model(tmp_path)
  compile_model(f"{model}:ints", "c", str(tmp_path / "out"))
  report = validate.validate_artifact(str(tmp_path / "out"), model=f"{model}:ints")
  assert report.ok, report.checks
  feeds = artifact.random_inputs(artifact.open_artifact(str(tmp_path / "out")), 0)
  assert feeds["idx"].dtype == np.int32 and 0 <= feeds["idx"].min() and feeds["idx"].max() < 4
  assert np.all(feeds["x"] != 0)


def test_validate_detects_a_different_model(tmp_path):
  compile_model(f"{write_toy_model(tmp_path)}:build", "c", str(tmp_path / "out"))
  other = write_toy_model(tmp_path, scale=1.5, name="other.py")
  report = validate.validate_artifact(str(tmp_path / "out"), model=f"{other}:build")
  assert not report.ok and report.checks[0].max_abs > 1e-3


def test_model_file_changed_since_compile(tmp_path):
  model = write_toy_model(tmp_path)
  compile_model(f"{model}:build", "c", str(tmp_path / "out"))
  if artifact.open_artifact(str(tmp_path / "out")).source is None:
    pytest.skip("this artifact writer does not record the model source in the manifest")
  model.write_text(model.read_text() + "\n# edited\n")
  with pytest.raises(UserError, match="changed since the artifact was compiled"):
    validate.validate_artifact(str(tmp_path / "out"))


def test_artifact_folder_checks(tmp_path, mnist_artifact):
  with pytest.raises(UserError, match="artifact folder not found"):
    artifact.open_artifact(str(tmp_path / "none"))
  (tmp_path / "plain").mkdir()
  with pytest.raises(UserError, match="is not a tgc artifact"):
    artifact.open_artifact(str(tmp_path / "plain"))
  import shutil
  copy = tmp_path / "copy"
  shutil.copytree(mnist_artifact, copy)
  manifest = json.loads((copy / "manifest.json").read_text())
  weights = copy / manifest["weights"]["file"]
  data = weights.read_bytes()
  weights.write_bytes(data[:len(data) // 2])
  with pytest.raises(UserError, match=f"weights file .*{manifest['weights']['file']} is truncated"):
    validate.validate_artifact(str(copy), model=MNIST)
  weights.write_bytes(data[:-4] + b"\x00\x00\x80\x7f")
  with pytest.raises(UserError, match="sha256 mismatch"):
    artifact.run_artifact(str(copy), {"input_0": np.ones((1, 1, 28, 28), np.float32)})


def test_embedded_weights_run(tmp_path, mnist_artifact):
  out = tmp_path / "embedded"
  compile_model(MNIST, "c", str(out), embed_weights=True)
  assert json.loads((out / "manifest.json").read_text())["weights"]["embedded"] is True
  x = {"input_0": np.random.default_rng(1).standard_normal((1, 1, 28, 28)).astype(np.float32)}
  np.testing.assert_array_equal(artifact.run_artifact(str(out), x)["output_0"],
                                artifact.run_artifact(mnist_artifact, x)["output_0"])


def test_progress_on_long_compiles(tmp_path, monkeypatch, capsys):
  monkeypatch.setattr(compile_step, "PROGRESS_AFTER_S", 0.0)
  compile_model(MLP, "c", str(tmp_path / "out"))
  err = capsys.readouterr().err
  assert "tiny_mlp: lowering kernel 1/5" in err and "5 kernels lowered" in err


def test_runtimes_read_the_manifest_format_emit_writes():
  from tgc.emit import manifest
  from tgc.runtimes import artifact as runtime_artifact
  assert runtime_artifact.FORMAT_VERSION == manifest.FORMAT_VERSION

def _onnx_weights_model(path) -> None:
  """x @ w1 + b through an Identity of b, then a Loop that carries w2 as loop state (as tf2onnx's LSTMs do) and
  multiplies by it twice; w3 goes through a Transpose (folded at import: no initializer holds those values)."""
  from onnx import TensorProto, helper, numpy_helper
  rng = np.random.default_rng(0)
  inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
           for n, s in (("w1", (4, 6)), ("bias", (6,)), ("w2", (6, 6)), ("w3", (5, 6)))]
  inits += [numpy_helper.from_array(np.array(2, np.int64), "trips"), numpy_helper.from_array(np.array(True), "go")]
  body = helper.make_graph(
    [helper.make_node("Identity", ["c_in"], ["c_out"]), helper.make_node("Identity", ["w_in"], ["w_out"]),
     helper.make_node("MatMul", ["h_in", "w_in"], ["h_out"])], "body",
    [helper.make_tensor_value_info("i", TensorProto.INT64, []),
     helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
     helper.make_tensor_value_info("w_in", TensorProto.FLOAT, [6, 6]),
     helper.make_tensor_value_info("h_in", TensorProto.FLOAT, [3, 6])],
    [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
     helper.make_tensor_value_info("w_out", TensorProto.FLOAT, [6, 6]),
     helper.make_tensor_value_info("h_out", TensorProto.FLOAT, [3, 6])])
  nodes = [helper.make_node("MatMul", ["x", "w1"], ["xw"]), helper.make_node("Identity", ["bias"], ["b2"]),
           helper.make_node("Add", ["xw", "b2"], ["h0"]),
           helper.make_node("Loop", ["trips", "go", "w2", "h0"], ["w_last", "h"], body=body),
           helper.make_node("Transpose", ["w3"], ["w3t"], perm=[1, 0]), helper.make_node("MatMul", ["h", "w3t"], ["y"])]
  graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5])], inits)
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
  with open(path, "wb") as f: f.write(model.SerializeToString())


def test_onnx_weight_names_follow_the_values(tmp_path):
  path = tmp_path / "m.onnx"
  _onnx_weights_model(path)
  compile_model(str(path), "c", str(tmp_path / "out"))
  manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
  names = sorted(t["name"] for t in manifest["weights"]["tensors"])
  assert names == ["bias", "w1", "w2", "weight_0"]
  assert validate.validate_artifact(str(tmp_path / "out")).ok


def test_validate_keeps_indices_within_their_table(tmp_path):
  """An int64 input that selects rows of a 2-row table (BERT's token types): validate's random values stay 0 or 1,
  so the model is compared where ONNX defines it (values up to 3 would index past the table)."""
  from onnx import TensorProto, helper, numpy_helper
  table = numpy_helper.from_array(np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32), "types")
  graph = helper.make_graph([helper.make_node("Gather", ["types", "tt"], ["y"])], "g",
                            [helper.make_tensor_value_info("tt", TensorProto.INT64, [1, 16])],
                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 4])], [table])
  path = tmp_path / "types.onnx"
  path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
  compile_model(str(path), "c", str(tmp_path / "out"))
  assert validate.validate_artifact(str(tmp_path / "out")).ok


def test_validate_holds_a_quantized_onnx_model_to_the_quantized_tolerance(tmp_path):
  """An int8 QDQ model as a quantizer writes it (QuantizeLinear inside): tgc sums the exact integer products, the
  reference float ones, so a value on a rounding boundary may go either way; validate uses QUANTIZED_TOLERANCE."""
  import onnx
  from onnx import TensorProto, helper, numpy_helper
  rng = np.random.default_rng(0)
  w = rng.integers(-127, 128, (8, 4, 3, 3)).astype(np.int8)
  inits = [numpy_helper.from_array(np.float32(0.02), "xs"), numpy_helper.from_array(np.uint8(128), "xz"),
           numpy_helper.from_array(w, "wq"), numpy_helper.from_array(np.full(8, 0.01, np.float32), "ws"),
           numpy_helper.from_array(np.zeros(8, np.int8), "wz"), numpy_helper.from_array(np.float32(0.05), "ys"),
           numpy_helper.from_array(np.uint8(128), "yz")]
  nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
           helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
           helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
           helper.make_node("Conv", ["xd", "wd"], ["c"], pads=[1, 1, 1, 1]),
           helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["yq"]),
           helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
  graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 10, 10])],
                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 10, 10])], inits)
  path = tmp_path / "qdq.onnx"
  onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
  compile_model(str(path), "c", str(tmp_path / "out"))
  report = validate.validate_artifact(str(tmp_path / "out"))
  assert report.ok, report.checks
  assert report.checks[0].rtol == validate.QUANTIZED_TOLERANCE
