"""C artifacts with sizes known only at run time: one artifact, compiled once, runs at every size of its range and
matches the numpy reference at the smallest, a middle and the largest size; sizes out of range, shapes that do not
fit and targets without run-time sizes are clear errors."""
import ctypes
import json
import numpy as np
import pytest
from tgc.aot import UserError, compile_model
from tgc import Tensor, Variable
from tgc.aot.validate import validate_artifact
from tgc.aot.viz import viz
from tgc.runtimes.artifact import ArtifactError
from tgc.runtimes.artifact_c import CArtifact
from tgc.runtimes.dims import evaluate_size
from tests.emit.dynamic_cases import ENCODER, MODELS, check_encoder, check_main, check_two_sizes

@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
  path = tmp_path_factory.mktemp("dyn") / "dynamic_models.py"
  path.write_text(MODELS)
  return path


def test_encoder_of_any_length_matches_at_every_size(tmp_path):
  out = tmp_path / "enc"
  report = compile_model(ENCODER, "c", str(out))
  manifest = json.loads((out / "manifest.json").read_text())
  assert manifest["dims"] == [{"name": "T", "min": 1, "max": 256}]
  assert manifest["inputs"][0]["shape"] == [1, "T", 64] and manifest["outputs"][0]["shape"] == [1, "T", 64]
  with CArtifact(str(out)) as art:
    check_encoder(art)
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
  with CArtifact(str(out)) as art: check_two_sizes(art, spec)


def test_set_dims_checks_the_range(model_file, tmp_path):
  out = tmp_path / "api"
  compile_model(f"{model_file}:two_sizes", "c", str(out))
  header = (out / "model.h").read_text()
  assert "dynamic_models_set_dims(dynamic_models_ctx *ctx, const int32_t *dims);" in header
  assert "#define DYNAMIC_MODELS_NUM_DIMS 2" in header
  with CArtifact(str(out)) as art:
    set_dims = art._fn("set_dims")
    assert set_dims(art._ctx, (ctypes.c_int32 * 2)(4, 40)) == 0
    assert set_dims(art._ctx, (ctypes.c_int32 * 2)(5, 40)) == 12
    assert set_dims(art._ctx, (ctypes.c_int32 * 2)(1, 2)) == 12
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
  check_main(out, spec, tmp_path)


def test_small_sizes_run_a_variant_without_the_register_block(tmp_path):
  """Kernels register-blocked over T (sized for the middle of 1..256) get a variant without that block for small T,
  binding the same buffers and weights; the artifact matches the reference on both sides of the switch."""
  out = tmp_path / "enc"
  compile_model(ENCODER, "c", str(out))
  manifest = json.loads((out / "manifest.json").read_text())
  small = {k["name"]: k["small_sizes"] for k in manifest["kernels"] if "small_sizes" in k}
  assert small, "no kernel of the encoder has a variant for small T"
  source = (out / "model.c").read_text()
  edges = set()
  for name, variant in small.items():
    assert variant["name"] == f"{name}_small" and f"void {name}_small(" in source
    assert len(variant["opts"]) < len(next(k for k in manifest["kernels"] if k["name"] == name)["opts"])
    size, _, block = variant["when"].partition("<=")
    runs_small = [evaluate_size(size, {"T": t}) <= int(block) for t in range(1, 257)]
    assert runs_small[0] and not runs_small[-1]
    edges.add(runs_small.index(False))      # the largest T of the variant (T = index + 1 is the first without)
  with CArtifact(str(out)) as art: check_encoder(art, lengths=tuple(sorted({1, 2} | edges | {e + 1 for e in edges})))
