"""The `tgc` command line: help on every command, the whole flow (compile -> run -> validate -> bench -> inspect) on
the example CNN and a tiny MLP, exit codes (0 ok, 1 over tolerance, 2 user error as exactly one stderr line that
names the culprit, 3 internal error that says it is a bug), and a few real runs of the installed `tgc` script."""
from __future__ import annotations
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tgc.aot import reference, models

from aot_helpers import MLP, MNIST, tgc, user_error, write_toy_model


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
  return tmp_path_factory.mktemp("cli")


@pytest.fixture(scope="module")
def mnist(workdir) -> Path:
  out = workdir / "mnist"
  result = tgc("compile", MNIST, "--target", "c", "-o", out)
  assert result.exit_code == 0, result.output
  return out


@pytest.fixture(scope="module")
def toy(workdir) -> Path:
  return write_toy_model(workdir)


# ---------------------------------------------------------------- help
@pytest.mark.parametrize("command", ["", "compile", "run", "validate", "bench", "inspect"])
def test_help(command):
  result = tgc(*([command] if command else []), "--help")
  assert result.exit_code == 0 and "Usage:" in result.output
  if command in ("compile", "validate", "inspect"):
    assert "file.py:function" in result.output and "output_0" in result.output


# ---------------------------------------------------------------- the flow
def test_compile_prints_summary(mnist, workdir):
  result = tgc("compile", MNIST, "-o", workdir / "again")
  assert result.exit_code == 0
  out = result.stdout
  assert "kernels" in out and "arena" in out and "weights" in out and str(workdir / "again") in out
  tensors = json.loads((workdir / "again" / "manifest.json").read_text())["weights"]["tensors"]
  weights = sum(t["nbytes"] for t in tensors)
  assert f"{weights} bytes" in out


def test_run_writes_npz_matching_reference(mnist, workdir):
  x = np.random.default_rng(11).standard_normal((1, 1, 28, 28)).astype(np.float32)
  np.save(workdir / "x.npy", x)
  result = tgc("run", mnist, "--input", f"input_0={workdir / 'x.npy'}", "-o", workdir / "outs.npz")
  assert result.exit_code == 0, result.output
  with np.load(workdir / "outs.npz") as outs:
    assert outs.files == ["output_0"]
    got = outs["output_0"]
  ref = reference.tensor_reference(models.parse_model_spec(MNIST), {"input_0": x})["output_0"]
  np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_validate_bench_inspect(mnist):
  result = tgc("validate", mnist, "--seed", "7", "--model", MNIST)
  assert result.exit_code == 0, result.output
  assert "output_0" in result.stdout and "max abs err" in result.stdout and "OK" in result.stdout
  result = tgc("validate", mnist)   # the model recorded in the manifest, when the writer records it
  if "source" in json.loads((mnist / "manifest.json").read_text()): assert result.exit_code == 0, result.output
  else: user_error(result, "does not record its model", "--model")
  result = tgc("validate", mnist, "--model", MNIST, "--rtol", "1e-3", "--atol", "1e-3")
  assert result.exit_code == 0, result.output
  result = tgc("bench", mnist, "--runs", "5", "--warmup", "1")
  assert result.exit_code == 0, result.output
  for word in ("median", "p90", "arena", "weights", "code"): assert word in result.stdout
  result = tgc("inspect", mnist)
  assert result.exit_code == 0, result.output
  assert "global" in result.stdout and "arena" in result.stdout and "fc1.weight" in result.stdout


def test_inspect_model_writes_nothing(workdir):
  before = sorted(os.listdir(workdir))
  result = tgc("inspect", MLP)
  assert result.exit_code == 0, result.output
  assert "features" in result.stdout and "logits" in result.stdout and "probs" in result.stdout
  assert "nothing written" in result.stdout and sorted(os.listdir(workdir)) == before


def test_tiny_mlp_flow(workdir):
  out = workdir / "mlp"
  assert tgc("compile", MLP, "-t", "c", "-o", out, "--name", "mlp").exit_code == 0
  manifest = json.loads((out / "manifest.json").read_text())
  assert [o["name"] for o in manifest["outputs"]] == ["logits", "probs"]
  np.save(workdir / "f.npy", np.linspace(-1, 1, 32, dtype=np.float32).reshape(2, 16))
  result = tgc("run", out, "-i", f"features={workdir / 'f.npy'}", "-o", workdir / "mlp.npz")
  assert result.exit_code == 0, result.output
  with np.load(workdir / "mlp.npz") as outs:
    assert outs.files == ["logits", "probs"]
    np.testing.assert_allclose(outs["probs"].sum(-1), 1.0, rtol=1e-5)
  assert tgc("validate", out, "--model", MLP).exit_code == 0
  assert tgc("bench", out, "--runs", "3").exit_code == 0


def test_validate_over_tolerance_exits_1(toy, workdir):
  out = workdir / "toy"
  assert tgc("compile", f"{toy}:build", "-o", out).exit_code == 0
  other = write_toy_model(workdir, scale=1.25, name="toy_scaled.py")
  result = tgc("validate", out, "--model", f"{other}:build")
  assert result.exit_code == 1, result.output
  assert "FAIL" in result.stdout


# ---------------------------------------------------------------- user errors: exit 2, one line
def test_compile_errors(toy, workdir):
  user_error(tgc("compile", MLP, "--target", "vulkan", "-o", workdir / "e"), "target vulkan", "supported: c")
  user_error(tgc("compile", workdir / "missing.py:build", "-o", workdir / "e"), "not found", "missing.py")
  user_error(tgc("compile", f"{toy}:nope", "-o", workdir / "e"), "'nope'", "toy.py")
  user_error(tgc("compile", f"{toy}:broken", "-o", workdir / "e"), "broken", "boom in the model")
  user_error(tgc("compile", MLP), "--out")
  user_error(tgc("compile", MLP, "-o", workdir / "e", "--const", "x=missing.npy"), "--const", "missing.npy")
  assert not (workdir / "e").exists()
  plain = workdir / "plain"
  plain.mkdir(exist_ok=True)
  (plain / "keep.txt").write_text("mine")
  user_error(tgc("compile", MLP, "-o", plain), str(plain), "not a tgc artifact", "--force")
  assert (plain / "keep.txt").exists()


@pytest.mark.parametrize("command", ["run", "validate", "bench", "inspect"])
def test_not_an_artifact(command, workdir):
  plain = workdir / "plain2"
  plain.mkdir(exist_ok=True)
  user_error(tgc(command, plain), str(plain), "not a tgc artifact")
  user_error(tgc(command, workdir / "absent"), "absent")


def test_run_input_errors(mnist, workdir):
  good = np.zeros((1, 1, 28, 28), np.float32)
  np.save(workdir / "good.npy", good)
  np.save(workdir / "shape.npy", good[0])
  np.save(workdir / "dtype.npy", good.astype(np.float64))
  user_error(tgc("run", mnist, "--input", f"image={workdir / 'good.npy'}"), "unknown input 'image'", "input_0")
  user_error(tgc("run", mnist, "--input", f"input_0={workdir / 'shape.npy'}"), "'input_0'", "shape")
  user_error(tgc("run", mnist, "--input", f"input_0={workdir / 'dtype.npy'}"), "'input_0'", "float64", "float32")
  user_error(tgc("run", mnist, "--input", f"input_0={workdir / 'nofile.npy'}"), "nofile.npy")
  user_error(tgc("run", mnist), "missing input 'input_0'")
  user_error(tgc("run", mnist, "--input", "input_0"), "input_0", "name=file.npy")


def test_truncated_weights(mnist, workdir):
  copy = workdir / "truncated"
  shutil.copytree(mnist, copy)
  wfile = json.loads((copy / "manifest.json").read_text())["weights"]["file"]
  data = (copy / wfile).read_bytes()
  (copy / wfile).write_bytes(data[:100])
  for command in ("validate", "bench", "run"):
    args = ("--input", f"input_0={workdir / 'x.npy'}") if command == "run" else ()
    np.save(workdir / "x.npy", np.zeros((1, 1, 28, 28), np.float32))
    user_error(tgc(command, copy, *args), "weights file", wfile, "truncated")


def test_validate_needs_the_model(mnist, workdir, toy):
  user_error(tgc("validate", mnist, "--model", workdir / "gone.py:build"), "gone.py")
  result = tgc("validate", mnist, "--model", f"{toy}:build")
  user_error(result, "input")


# ---------------------------------------------------------------- internal errors: exit 3
def test_internal_error_says_bug(monkeypatch, workdir):
  from tgc.codegen import compiled
  import tgc.aot.compile as compile_step

  def explode(*args, **kwargs): raise ZeroDivisionError("planner divided by zero")
  monkeypatch.setattr(compile_step, "compile_schedule", explode)
  result = tgc("compile", MLP, "-o", workdir / "bug")
  assert result.exit_code == 3
  assert "bug in tgc" in result.stderr and "ZeroDivisionError" in result.stderr and "report" in result.stderr
  assert "Traceback" not in result.stderr and not (workdir / "bug").exists()
  assert compiled.compile_schedule is not explode


# ---------------------------------------------------------------- the installed script
def script(*args, env=None, cwd=None) -> subprocess.CompletedProcess:
  exe = shutil.which("tgc")
  cmd = [exe] if exe else [sys.executable, "-m", "tgc.aot.cli"]
  return subprocess.run(cmd + [str(a) for a in args], capture_output=True, text=True, timeout=600,
                        env={**os.environ, **(env or {})}, cwd=cwd)


def test_script_compile_twice_is_byte_identical(tmp_path):
  for i, seed in enumerate(("1", "2")):
    proc = script("compile", MNIST, "--target", "c", "-o", tmp_path / f"out{i}", env={"PYTHONHASHSEED": seed})
    assert proc.returncode == 0, proc.stderr
  a, b = tmp_path / "out0", tmp_path / "out1"
  assert sorted(os.listdir(a)) == sorted(os.listdir(b))
  for name in os.listdir(a): assert (a / name).read_bytes() == (b / name).read_bytes(), name
  proc = script("validate", a, "--model", MNIST)
  assert proc.returncode == 0, proc.stdout + proc.stderr


def test_script_errors_are_one_line(tmp_path):
  proc = script("compile", tmp_path / "nope.py:build", "-o", tmp_path / "o")
  assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "nope.py" in proc.stderr
  proc = script("bench", tmp_path)
  assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "not a tgc artifact" in proc.stderr
  assert script("--help").returncode == 0


# ---------------------------------------------------------------- ONNX models
def onnx_model(path: Path, extra_node: bool = False) -> Path:
  """x[batch, 8] -> relu(x @ fc.weight + fc.bias) * scale, scale a second graph input (for --const)."""
  import onnx
  from onnx import TensorProto, helper, numpy_helper
  rng = np.random.default_rng(0)
  inits = [numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "fc.weight"),
           numpy_helper.from_array(rng.standard_normal((4,)).astype(np.float32), "fc.bias")]
  nodes = [helper.make_node("MatMul", ["x", "fc.weight"], ["h"], name="mm"),
           helper.make_node("Add", ["h", "fc.bias"], ["h2"], name="add"),
           helper.make_node("Relu", ["h2"], ["r"], name="relu"),
           helper.make_node("Mul", ["r", "scale"], ["y"], name="scale")]
  opsets = [helper.make_opsetid("", 17)]
  if extra_node:
    nodes.append(helper.make_node("Frobnicate", ["y"], ["z"], name="frob", domain="com.example"))
    opsets.append(helper.make_opsetid("com.example", 1))
  inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8]),
            helper.make_tensor_value_info("scale", TensorProto.FLOAT, [4])]
  outputs = [helper.make_tensor_value_info("z" if extra_node else "y", TensorProto.FLOAT, ["batch", 4])]
  onnx.save(helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, inits), opset_imports=opsets), path)
  return path


@pytest.fixture(scope="module")
def onnx_file(workdir) -> Path:
  return onnx_model(workdir / "small.onnx")


def test_onnx_compile_run_validate(onnx_file, workdir):
  out = workdir / "onnx_out"
  user_error(tgc("compile", onnx_file, "-o", out), "'x'", "dimension")
  np.save(workdir / "scale.npy", np.array([1.0, -2.0, 0.5, 3.0], np.float32))
  result = tgc("compile", onnx_file, "-o", out, "--input-shape", "x=2,8", "--const", f"scale={workdir / 'scale.npy'}")
  assert result.exit_code == 0, result.output
  manifest = json.loads((out / "manifest.json").read_text())
  assert [i["name"] for i in manifest["inputs"]] == ["x"] and [o["name"] for o in manifest["outputs"]] == ["y"]
  assert {"fc.weight", "fc.bias"} <= {t["name"] for t in manifest["weights"]["tensors"]}
  x = np.random.default_rng(2).standard_normal((2, 8)).astype(np.float32)
  np.save(workdir / "ox.npy", x)
  assert tgc("run", out, "-i", f"x={workdir / 'ox.npy'}", "-o", workdir / "onnx.npz").exit_code == 0
  ref, engine = reference.onnx_reference(str(onnx_file), {"x": x}, {"consts": {"scale": str(workdir / "scale.npy")}})
  assert engine == "onnx.reference"
  with np.load(workdir / "onnx.npz") as outs: np.testing.assert_allclose(outs["y"], ref["y"], rtol=1e-5, atol=1e-5)
  if "source" not in manifest:   # without a recorded source the consts are unknown to the reference
    user_error(tgc("validate", out), "--model")
  else:
    result = tgc("validate", out)
    assert result.exit_code == 0 and "onnx" in result.stdout, result.output


def test_onnx_inspect_and_unsupported(onnx_file, workdir):
  result = tgc("inspect", onnx_file)
  assert result.exit_code == 0, result.output
  assert "MatMul" in result.stdout and "all supported" in result.stdout and "['batch', 8]" in result.stdout
  bad = onnx_model(workdir / "bad.onnx", extra_node=True)
  result = tgc("inspect", bad)
  assert result.exit_code == 0 and "unsupported: com.example:Frobnicate" in result.stdout
  user_error(tgc("compile", bad, "-o", workdir / "bad_out", "--input-shape", "x=1,8"), "Frobnicate")
  assert not (workdir / "bad_out").exists()
