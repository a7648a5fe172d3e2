"""What users give and get at an artifact's boundary, through `tgc run` / `validate` / `bench` and the C example
program main.c: storage-only types (bfloat16, float8, float4e2m1, int4/uint4, int2/uint2) as float32 / int8 / uint8
values in .npy files (converted as ONNX Cast does, integers range-checked) or as raw bit patterns, outputs written
as values with the manifest's npy_dtype; and 0-d inputs and outputs. Expected values come from ml_dtypes (what ONNX's
reference uses) and numpy, not from tgc's own converters."""
from __future__ import annotations
import os
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from aot_helpers import tgc, user_error

C_WARNINGS = ("-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror")
# tgc dtype -> (ONNX type, ml_dtypes type, .npy value dtype, raw storage dtype)
TYPES = {
  "bfloat16": (TensorProto.BFLOAT16, ml_dtypes.bfloat16, np.float32, np.uint16),
  "float8e4m3fn": (TensorProto.FLOAT8E4M3FN, ml_dtypes.float8_e4m3fn, np.float32, np.uint8),
  "float8e4m3fnuz": (TensorProto.FLOAT8E4M3FNUZ, ml_dtypes.float8_e4m3fnuz, np.float32, np.uint8),
  "float8e5m2": (TensorProto.FLOAT8E5M2, ml_dtypes.float8_e5m2, np.float32, np.uint8),
  "float8e5m2fnuz": (TensorProto.FLOAT8E5M2FNUZ, ml_dtypes.float8_e5m2fnuz, np.float32, np.uint8),
  "float4e2m1": (TensorProto.FLOAT4E2M1, ml_dtypes.float4_e2m1fn, np.float32, np.uint8),
  "int4": (TensorProto.INT4, ml_dtypes.int4, np.int8, np.uint8),
  "uint4": (TensorProto.UINT4, ml_dtypes.uint4, np.uint8, np.uint8),
  "int2": (TensorProto.INT2, ml_dtypes.int2, np.int8, np.uint8),
  "uint2": (TensorProto.UINT2, ml_dtypes.uint2, np.uint8, np.uint8),
}
FLOATS = [t for t in TYPES if TYPES[t][2] == np.float32]


def float_inputs(ml_type, n: int = 61) -> np.ndarray:
  """Every kind of float32 value for a small float type: its own values and the midpoints between them (ties to
  even), beyond its range, subnormals, zeros of both signs, infinities and NaN; then random normal values."""
  info = ml_dtypes.finfo(ml_type)
  big, tiny = float(info.max), float(info.smallest_subnormal)
  special = [0.0, -0.0, 1.0, -1.5, big, -big, big * 1.1, -big * 4, tiny, tiny / 2, tiny * 1.5, -tiny * 0.75,
             1.0 + float(info.eps) / 2, 1.0 + float(info.eps) * 1.5, 3e38, np.inf, -np.inf, np.nan]
  rng = np.random.default_rng(1)
  with np.errstate(over="ignore"):
    return np.concatenate([special, rng.standard_normal(n - len(special)) * 3]).astype(np.float32)


def int_inputs(name: str) -> np.ndarray:
  info = ml_dtypes.iinfo(TYPES[name][1])
  return np.resize(np.arange(int(info.min), int(info.max) + 1), 61).astype(TYPES[name][2])


def expected_values(name: str, x: np.ndarray) -> np.ndarray:
  """x stored in `name` and read back as values: ONNX Cast with saturate=1 (ml_dtypes for the rounding, clamped
  to the largest finite value first; bfloat16 does not saturate) or the integers themselves."""
  ml = TYPES[name][1]
  if name not in FLOATS: return x
  if name != "bfloat16":
    big = np.float32(ml_dtypes.finfo(ml).max)
    x = np.where(np.isnan(x), x, np.clip(x, -big, big))
  return x.astype(ml).astype(np.float32)


def storage_model(path: Path) -> None:
  """One input per storage-only type (61 elements: sub-byte types end mid-byte), each returned as it is and cast to
  float32."""
  nodes, ins, outs = [], [], []
  for name, (onnx_type, *_) in TYPES.items():
    ins.append(helper.make_tensor_value_info(f"x_{name}", onnx_type, [61]))
    nodes += [helper.make_node("Identity", [f"x_{name}"], [f"same_{name}"]),
              helper.make_node("Cast", [f"x_{name}"], [f"f32_{name}"], to=TensorProto.FLOAT)]
    outs += [helper.make_tensor_value_info(f"same_{name}", onnx_type, [61]),
             helper.make_tensor_value_info(f"f32_{name}", TensorProto.FLOAT, [61])]
  model = helper.make_model(helper.make_graph(nodes, "storage", ins, outs),
                            opset_imports=[helper.make_opsetid("", 25)])
  onnx.save(model, str(path))


@pytest.fixture(scope="module")
def storage_artifact(tmp_path_factory) -> Path:
  root = tmp_path_factory.mktemp("storage")
  storage_model(root / "storage.onnx")
  result = tgc("compile", root / "storage.onnx", "-o", root / "art")
  assert result.exit_code == 0, result.output
  return root


def input_values() -> dict[str, np.ndarray]:
  return {f"x_{n}": float_inputs(TYPES[n][1]) if n in FLOATS else int_inputs(n) for n in TYPES}


def check_outputs(get, what: str) -> None:
  """Every output of the storage model (`get(name)` -> array) holds the expected values as float32/int8/uint8."""
  for name, x in input_values().items():
    t = name[2:]
    want = expected_values(t, x)
    same, f32 = get(f"same_{t}"), get(f"f32_{t}")
    assert same.dtype == np.dtype(TYPES[t][2]) and f32.dtype == np.float32, (what, t, same.dtype, f32.dtype)
    np.testing.assert_array_equal(same, want, err_msg=f"{what}: same_{t}")
    np.testing.assert_array_equal(f32, want.astype(np.float32), err_msg=f"{what}: f32_{t}")


def test_manifest_says_what_npy_files_hold(storage_artifact):
  import json
  manifest = json.loads((storage_artifact / "art" / "manifest.json").read_text())
  for spec in manifest["inputs"] + manifest["outputs"]:
    t = spec["tgc_dtype"]
    assert spec["npy_dtype"] == (np.dtype(TYPES[t][2]).name if t in TYPES else spec["dtype"]), spec


def test_cli_run_takes_and_gives_values(storage_artifact):
  root = storage_artifact
  args = []
  for name, x in input_values().items():
    np.save(root / f"{name}.npy", x)
    args += ["--input", f"{name}={root / f'{name}.npy'}"]
  result = tgc("run", root / "art", *args, "-o", root / "out.npz")
  assert result.exit_code == 0, result.output
  with np.load(root / "out.npz") as out: check_outputs(lambda n: out[n], "tgc run")


def test_cli_run_takes_raw_bit_patterns(storage_artifact):
  """The bit patterns of each type (one element per element, in the manifest's dtype) give the same outputs as
  its values."""
  root = storage_artifact
  args = []
  for name, x in input_values().items():
    t = name[2:]
    ml, raw = TYPES[t][1], TYPES[t][3]
    stored = expected_values(t, x).astype(ml) if t in FLOATS else x.astype(ml)
    bits = stored.view(np.uint16 if raw == np.uint16 else np.uint8) & ((1 << ml_dtypes.finfo(ml).bits) - 1
                                                                        if t in FLOATS else (1 << int(t[-1])) - 1)
    np.save(root / f"{name}_raw.npy", bits.astype(raw))
    args += ["--input", f"{name}={root / f'{name}_raw.npy'}"]
  result = tgc("run", root / "art", *args, "-o", root / "raw.npz")
  assert result.exit_code == 0, result.output
  with np.load(root / "raw.npz") as out: check_outputs(lambda n: out[n], "tgc run (bit patterns)")


def test_cli_input_errors(storage_artifact):
  root = storage_artifact
  values = input_values()
  for name, x in values.items(): np.save(root / f"{name}.npy", x)
  base = [a for name in values if name not in ("x_int4", "x_bfloat16", "x_uint2")
          for a in ("--input", f"{name}={root / f'{name}.npy'}")]
  good = {n: f"{n}={root / f'{n}.npy'}" for n in ("x_int4", "x_bfloat16", "x_uint2")}

  def run_with(name: str, arr: np.ndarray):
    np.save(root / "bad.npy", arr)
    others = [a for n, v in good.items() if n != name for a in ("--input", v)]
    return tgc("run", root / "art", *base, *others, "--input", f"{name}={root / 'bad.npy'}")
  user_error(run_with("x_int4", np.full(61, 9, np.int8)), "input 'x_int4'", "do not fit int4 (-8..7)", "9")
  user_error(run_with("x_int4", np.full(61, 16, np.uint8)), "input 'x_int4'", "bit patterns do not fit int4 (0..15)")
  user_error(run_with("x_uint2", np.full(61, 4, np.uint8)), "input 'x_uint2'", "uint2 (0..3)")
  user_error(run_with("x_bfloat16", np.zeros(61, np.float64)), "input 'x_bfloat16'", "float64",
             "give float32 values or uint16 bit patterns")
  user_error(run_with("x_bfloat16", np.zeros(60, np.float32)), "input 'x_bfloat16'", "shape [60]")


def test_validate_and_bench_storage_types(storage_artifact):
  result = tgc("validate", storage_artifact / "art")
  assert result.exit_code == 0, result.output
  assert result.output.count(" ok") == 2 * len(TYPES)
  result = tgc("bench", storage_artifact / "art", "--runs", "3", "--warmup", "1")
  assert result.exit_code == 0, result.output


def build_main(folder: Path, tmp_path: Path) -> Path:
  cc = os.environ.get("CC") or "cc"
  exe = tmp_path / "main"
  sources = [str(folder / f) for f in ("main.c", "model.c", "tgc_threads.c")]
  subprocess.run([cc, *C_WARNINGS, "-O1", "-pthread", *sources, "-o", str(exe), "-lm"],
                 check=True, capture_output=True, text=True)
  return exe


def run_main(exe: Path, folder: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
  return subprocess.run([str(exe), "--weights", str(folder / "weights.safetensors"), *args], cwd=cwd,
                        capture_output=True, text=True, timeout=120)


def test_main_c_takes_and_gives_values(storage_artifact, tmp_path):
  folder = storage_artifact / "art"
  exe = build_main(folder, tmp_path)
  args = []
  for name, x in input_values().items():
    np.save(tmp_path / f"{name}.npy", x)
    args.append(f"{name}={tmp_path / f'{name}.npy'}")
  (tmp_path / "out").mkdir()
  result = run_main(exe, folder, args + ["--out", str(tmp_path / "out")], tmp_path)
  assert result.returncode == 0, result.stderr
  assert "output 'same_bfloat16' float32 (61,)" in result.stdout and "output 'same_int4' int8 (61,)" in result.stdout
  check_outputs(lambda n: np.load(tmp_path / "out" / f"{n}.npy"), "main.c")
  # raw bit patterns are accepted as well
  bits = expected_values("float8e4m3fn", input_values()["x_float8e4m3fn"]).astype(ml_dtypes.float8_e4m3fn)
  np.save(tmp_path / "raw.npy", bits.view(np.uint8))
  result = run_main(exe, folder, args + ["x_float8e4m3fn=raw.npy", "--out", str(tmp_path / "out")], tmp_path)
  assert result.returncode == 0, result.stderr
  check_outputs(lambda n: np.load(tmp_path / "out" / f"{n}.npy"), "main.c (bit patterns)")
  for arr, words in ((np.full(61, -9, np.int8), ("input 'x_int4'", "holds -9 at element 0", "int4 (-8..7)")),
                     (np.zeros(61, np.float64), ("input 'x_int4'", "'<f8'", "int8 ('<i1')", "uint8 ('<u1')"))):
    np.save(tmp_path / "bad.npy", arr)
    result = run_main(exe, folder, args + ["x_int4=bad.npy"], tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and all(w in lines[0] for w in words), result.stderr


# ---------------------------------------------------------------- 0-d inputs and outputs
def scalar_model(path: Path) -> None:
  """test_pow_bcast_scalar's shape: y has shape (); plus a 0-d output."""
  nodes = [helper.make_node("Pow", ["x", "y"], ["z"]), helper.make_node("ReduceSum", ["z"], ["s"], keepdims=0)]
  info = helper.make_tensor_value_info
  ins = [info("x", TensorProto.FLOAT, [3]), info("y", TensorProto.FLOAT, [])]
  outs = [info("z", TensorProto.FLOAT, [3]), info("s", TensorProto.FLOAT, [])]
  graph = helper.make_graph(nodes, "scalar", ins, outs)
  onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_zero_dim_inputs_and_outputs(tmp_path):
  scalar_model(tmp_path / "scalar.onnx")
  assert tgc("compile", tmp_path / "scalar.onnx", "-o", tmp_path / "art").exit_code == 0
  x, y = np.array([1.5, 2.0, 3.0], np.float32), np.array(2.5, np.float32)
  np.save(tmp_path / "x.npy", x)
  np.save(tmp_path / "y.npy", y)
  result = tgc("run", tmp_path / "art", "--input", f"x={tmp_path / 'x.npy'}", "--input", f"y={tmp_path / 'y.npy'}",
               "-o", tmp_path / "out.npz")
  assert result.exit_code == 0, result.output
  with np.load(tmp_path / "out.npz") as out:
    np.testing.assert_allclose(out["z"], x ** y, rtol=1e-6)
    assert out["s"].shape == () and np.isclose(out["s"], (x ** y).sum(), rtol=1e-6)
  user_error(tgc("run", tmp_path / "art", "--input", f"x={tmp_path / 'x.npy'}", "--input",
                 f"y={tmp_path / 'x.npy'}"), "input 'y'", "shape [3]", "takes []")
  result = tgc("validate", tmp_path / "art")
  assert result.exit_code == 0 and result.output.count(" ok") == 2, result.output
  assert tgc("bench", tmp_path / "art", "--runs", "2", "--warmup", "0").exit_code == 0
  exe = build_main(tmp_path / "art", tmp_path)
  (tmp_path / "o").mkdir()
  result = run_main(exe, tmp_path / "art", ["x=x.npy", "y=y.npy", "--out", "o"], tmp_path)
  assert result.returncode == 0, result.stderr
  np.testing.assert_allclose(np.load(tmp_path / "o" / "z.npy"), x ** y, rtol=1e-6)
  s = np.load(tmp_path / "o" / "s.npy")
  assert s.shape == () and np.isclose(s, (x ** y).sum(), rtol=1e-6)
  result = run_main(exe, tmp_path / "art", ["x=x.npy", "y=x.npy"], tmp_path)
  assert result.returncode == 2 and "input 'y'" in result.stderr and "the model expects ()" in result.stderr
