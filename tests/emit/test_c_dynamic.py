"""C artifacts with sizes known only at run time: one artifact, compiled once, runs at every size of its range and
matches the numpy reference at the smallest, a middle and the largest size; sizes out of range, shapes that do not
fit and targets without run-time sizes are clear errors."""
import ctypes
import subprocess
import json
import textwrap
import numpy as np
import pytest
from tgc.aot import UserError, compile_model
from tgc import Tensor, Variable
from tgc.aot.validate import validate_artifact
from tgc.aot.viz import viz
from tgc.aot import models
from tgc.aot.reference import tensor_reference
from tgc.runtimes.artifact import ArtifactError
from tgc.runtimes.artifact_c import CArtifact
from tests.aot.aot_helpers import ROOT

ENCODER = str(ROOT / "examples" / "encoder_any_length.py") + ":build"
MODELS = textwrap.dedent("""
  import numpy as np
  from tgc import Tensor, Variable

  B, T = Variable("B", 1, 4), Variable("T", 3, 40)
  RNG = np.random.default_rng(5)
  W = Tensor(RNG.standard_normal((8, 6), dtype=np.float32))

  def two_sizes():
    def fn(x, mask):
      h = (x @ W).relu() * mask.reshape(mask.shape[0], mask.shape[1], 1)         # (B, T, 6)
      pooled = h.mean(axis=1) - h.max(axis=1) + h.var(axis=1)                    # reductions over T
      flat = h.pad(((0, 0), (0, 0), (1, 1))).reshape(h.shape[0], -1)            # (B, T*8): sizes as expressions
      return {"pooled": pooled, "flat": flat, "probs": h.softmax(1), "T": Tensor.size_value(h.shape[1])}
    return fn, {"x": Tensor.empty(B, T, 8), "mask": Tensor.empty(B, T)}

  def hidden_size():
    def fn(x): return x + Tensor.full((1, T), 1.0).sum()
    return fn, [Tensor.empty(2, 3)]
""")


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
  path = tmp_path_factory.mktemp("dyn") / "dynamic_models.py"
  path.write_text(MODELS)
  return path


def _reference(spec: str, feeds: dict) -> dict:
  return tensor_reference(models.parse_model_spec(spec), feeds)


def test_encoder_of_any_length_matches_at_every_size(tmp_path):
  out = tmp_path / "enc"
  report = compile_model(ENCODER, "c", str(out))
  manifest = json.loads((out / "manifest.json").read_text())
  assert manifest["dims"] == [{"name": "T", "min": 1, "max": 256}]
  assert manifest["inputs"][0]["shape"] == [1, "T", 64] and manifest["outputs"][0]["shape"] == [1, "T", 64]
  rng = np.random.default_rng(0)
  with CArtifact(str(out)) as art:
    for t in (1, 77, 256):
      x = rng.standard_normal((1, t, 64)).astype(np.float32)
      got = art.run({"tokens": x})["output_0"]
      ref = _reference(ENCODER, {"tokens": x})["output_0"]
      assert got.shape == (1, t, 64)
      np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    with pytest.raises(ArtifactError, match=r"input 'tokens': dimension 1 \(T\) is 257, outside the range 1..256"):
      art.run({"tokens": np.ones((1, 257, 64), np.float32)})
    with pytest.raises(ArtifactError, match=r"input 'tokens': shape \(1, 5, 63\), expected \(1, 5, 64\)"):
      art.run({"tokens": np.ones((1, 5, 63), np.float32)})
  report = validate_artifact(str(out))
  assert report.ok and [c.name for c in report.checks] == ["output_0 at T=1", "output_0 at T=128", "output_0 at T=256"]


def test_two_sizes_expressions_and_reductions(model_file, tmp_path):
  spec = f"{model_file}:two_sizes"
  out = tmp_path / "two"
  compile_model(spec, "c", str(out))
  manifest = json.loads((out / "manifest.json").read_text())
  assert [d["name"] for d in manifest["dims"]] == ["B", "T"]
  assert {o["name"]: o["shape"] for o in manifest["outputs"]}["flat"] == ["B", "(T*8)"]
  rng = np.random.default_rng(1)
  with CArtifact(str(out)) as art:
    for b, t in ((1, 3), (2, 17), (4, 40)):
      feeds = {"x": rng.standard_normal((b, t, 8)).astype(np.float32),
               "mask": (rng.random((b, t)) > 0.3).astype(np.float32)}
      got, ref = art.run(feeds), _reference(spec, feeds)
      assert got["flat"].shape == (b, t * 8) and float(got["T"]) == t
      for name in ref: np.testing.assert_allclose(got[name], ref[name], rtol=1e-4, atol=1e-4, err_msg=name)


def test_set_dims_checks_the_range(model_file, tmp_path):
  out = tmp_path / "api"
  compile_model(f"{model_file}:two_sizes", "c", str(out))
  header = (out / "model.h").read_text()
  assert "dynamic_models_set_dims(dynamic_models_ctx *ctx, const int32_t *dims);" in header
  assert "#define DYNAMIC_MODELS_NUM_DIMS 2" in header
  with CArtifact(str(out)) as art:
    set_dims = art._fn("set_dims")
    assert set_dims(art._ctx, (ctypes.c_int32 * 2)(4, 40)) == 0
    assert set_dims(art._ctx, (ctypes.c_int32 * 2)(5, 40)) == 12 and set_dims(art._ctx, (ctypes.c_int32 * 2)(1, 2)) == 12
    assert "outside the range" in art.strerror(12)


def test_targets_without_run_time_sizes_and_hidden_sizes_are_refused(model_file, tmp_path):
  with pytest.raises(UserError, match=r"sizes known only at run time \(B, T\) are not supported for target cuda "
                                      r"yet \(c, opencl, webgpu support them\)"):
    compile_model(f"{model_file}:two_sizes", "cuda", str(tmp_path / "cl"))
  with pytest.raises(UserError, match="size T is no dim of any input"):
    compile_model(f"{model_file}:hidden_size", "c", str(tmp_path / "hidden"))
  assert not (tmp_path / "cl").exists() and not (tmp_path / "hidden").exists()


def test_loops_over_run_time_sizes_vectorize_with_masked_accesses(tmp_path):
  out = tmp_path / "enc"
  compile_model(ENCODER, "c", str(out))
  source = (out / "model.c").read_text()
  assert "tg_mload_f32x8(" in source and "const int dim_T" in source   # softmax over T: masked vector loads


def test_beam_eager_runs_and_viz(model_file, tmp_path):
  with pytest.raises(UserError, match="--beam: the model has sizes known only at run time"):
    compile_model(f"{model_file}:two_sizes", "c", str(tmp_path / "beam"), beam=1)
  x = Tensor.empty(2, Variable("T", 1, 8))
  with pytest.raises(ValueError, match=r"shape \(2, T\) has sizes known only at run time"): (x + 1).numpy()
  report = viz(f"{model_file}:two_sizes", str(tmp_path / "viz.html"))
  assert report.kernels > 0 and '"(T*8)"' in (tmp_path / "viz.html").read_text()


def test_main_c_reads_the_sizes_off_its_input_files(model_file, tmp_path):
  out = tmp_path / "main"
  spec = f"{model_file}:two_sizes"
  compile_model(spec, "c", str(out))
  subprocess.run(["make", "-s", "main"], cwd=out, check=True, capture_output=True)
  rng = np.random.default_rng(2)
  feeds = {"x": rng.standard_normal((3, 11, 8)).astype(np.float32), "mask": np.ones((3, 11), np.float32)}
  for name, value in feeds.items(): np.save(tmp_path / f"{name}.npy", value)
  args = [f"{n}={tmp_path / n}.npy" for n in feeds]
  done = subprocess.run(["./main", "--out", str(tmp_path), *args], cwd=out, capture_output=True, text=True)
  assert done.returncode == 0, done.stderr
  ref = _reference(spec, feeds)
  for name in ref:
    got = np.load(tmp_path / f"{name}.npy")
    assert got.shape == ref[name].shape
    np.testing.assert_allclose(got, ref[name], rtol=1e-4, atol=1e-4, err_msg=name)
  np.save(tmp_path / "mask.npy", np.ones((3, 12), np.float32))
  bad = subprocess.run(["./main", "--out", str(tmp_path), *args], cwd=out, capture_output=True, text=True)
  assert bad.returncode == 2 and "input 'mask'" in bad.stderr and "(3, 12)" in bad.stderr
  np.save(tmp_path / "x.npy", np.ones((3, 41, 8), np.float32))
  bad = subprocess.run(["./main", "--out", str(tmp_path), *args], cwd=out, capture_output=True, text=True)
  assert bad.returncode == 2 and "size T is 41 in the inputs' shapes, outside the range 3..40" in bad.stderr
