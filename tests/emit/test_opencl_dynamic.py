"""OpenCL artifacts with sizes known only at run time: one artifact runs at every size of its range (both kernel
variants: the "cpu" one PoCL picks and the "gpu" one with __local tiles) and matches the numpy reference on random
inputs at the smallest, a middle and the largest size; launch sizes follow the sizes (work-items past the end store
nothing: checked on Oclgrind), set_dims refuses sizes out of range, main.c reads the sizes off its .npy inputs."""
import ctypes
import json
import subprocess
import numpy as np
import pytest
from tgc.aot import compile_model
from tgc.aot.validate import validate_artifact
from tgc.runtimes.artifact import ArtifactError
from tgc.runtimes.artifact_opencl import OpenCLArtifact
from tests.emit.dynamic_cases import (ENCODER, MODELS, check_encoder, check_main, check_two_sizes, reference,
                                      run_main, two_feeds)
from tests.emit.test_opencl_artifact import cl_device, oclgrind_env  # noqa: F401 (fixtures)

ERR_DIMS = 16


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
  """The encoder and the two-size model of test_c_dynamic, compiled for opencl."""
  root = tmp_path_factory.mktemp("cldyn")
  (root / "dynamic_models.py").write_text(MODELS)
  out = {"enc": (ENCODER, root / "enc"), "two": (f"{root / 'dynamic_models.py'}:two_sizes", root / "two")}
  for spec, folder in out.values(): compile_model(spec, "opencl", str(folder))
  return out


@pytest.mark.parametrize("variant", ["cpu", "gpu"])
def test_encoder_of_any_length_matches_at_every_size(folders, cl_device, variant):
  spec, folder = folders["enc"]
  manifest = json.loads((folder / "manifest.json").read_text())
  assert manifest["dims"] == [{"name": "T", "min": 1, "max": 256}]
  assert any(isinstance(g, str) for k in manifest["kernels"] for g in k["global_size"])
  assert "const int dim_T" in (folder / "model.cl").read_text()
  flags = ("-O2", f'-DENCODER_ANY_LENGTH_KERNEL_VARIANT="{variant}"')
  with OpenCLArtifact(str(folder), cflags=flags) as art:
    assert art.variant == variant
    check_encoder(art, (1, 77, 256, 2))
    with pytest.raises(ArtifactError, match=r"input 'tokens': shape \(1, 5, 63\), expected \(1, 5, 64\)"):
      art.run({"tokens": np.ones((1, 5, 63), np.float32)})


def test_two_sizes_expressions_and_reductions(folders, cl_device):
  spec, folder = folders["two"]
  manifest = json.loads((folder / "manifest.json").read_text())
  assert [d["name"] for d in manifest["dims"]] == ["B", "T"]
  assert {o["name"]: o["shape"] for o in manifest["outputs"]}["flat"] == ["B", "(T*8)"]
  with OpenCLArtifact(str(folder)) as art: check_two_sizes(art, spec, ((1, 3), (2, 17), (4, 40), (3, 5)))


def test_set_dims_checks_the_range(folders, cl_device):
  folder = folders["two"][1]
  header = (folder / "model.h").read_text()
  assert "dynamic_models_set_dims(dynamic_models_ctx *ctx, const int32_t *dims);" in header
  assert "#define DYNAMIC_MODELS_NUM_DIMS 2" in header and f"DYNAMIC_MODELS_ERR_DIMS = {ERR_DIMS}," in header
  with OpenCLArtifact(str(folder)) as art:
    set_dims = art._fn("set_dims")
    assert set_dims(art._ctx, (ctypes.c_int32 * 2)(4, 40)) == 0
    assert set_dims(art._ctx, (ctypes.c_int32 * 2)(5, 40)) == ERR_DIMS
    assert set_dims(art._ctx, (ctypes.c_int32 * 2)(1, 2)) == ERR_DIMS
    assert "outside the range" in art.strerror(ERR_DIMS)


def test_validate_checks_smallest_middle_largest(folders, cl_device):
  report = validate_artifact(str(folders["enc"][1]))
  assert report.ok and [c.name for c in report.checks] == ["output_0 at T=1", "output_0 at T=128", "output_0 at T=256"]


def test_main_c_reads_the_sizes_off_its_input_files(folders, cl_device, tmp_path):
  spec, folder = folders["two"]
  check_main(folder, spec, tmp_path)


def test_work_items_past_the_end_stay_in_bounds_under_oclgrind(folders, cl_device, oclgrind_env, tmp_path):
  """The smallest sizes launch padded work-groups whose tail work-items must neither load nor store outside."""
  spec, folder = folders["two"]
  subprocess.run(["make", "-s", "main"], cwd=folder, check=True, capture_output=True)
  feeds = two_feeds(np.random.default_rng(3), 1, 3)
  done = run_main(folder, tmp_path, feeds, env=oclgrind_env)
  assert done.returncode == 0 and done.stdout.startswith("device: Oclgrind"), done.stdout + done.stderr
  assert "Invalid" not in done.stderr and "race" not in done.stderr.lower(), done.stderr
  ref = reference(spec, feeds)
  for name in ref: np.testing.assert_allclose(np.load(tmp_path / f"{name}.npy"), ref[name], rtol=1e-4, atol=1e-4)
