"""The standalone CUDA artifact: files and manifest (schema, hashes, kernels of model.cu against the manifest),
model.cu compiled by NVRTC for sm_80 and sm_90 (its host part left out), the host library and main.c compiled and
linked by nvcc with warnings as errors (no GPU needed; ./main then reports the missing driver in one line, or runs
and matches the numpy interpreter where a GPU exists), weights errors found before any device is touched, model
names that cannot inject code, determinism, the manifest's launch plan run on the CPU through the CUDA shim
(tests/cuda_cpu.py) against the numpy interpreter, CUDAArtifact (one clear line without a GPU, the reference with
one) and `tgc compile --target cuda`."""
from __future__ import annotations
import json
import os
import re
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

import cpu_kernels
import cuda_cpu
from artifact_cases import (C_WARNINGS, HOSTILE_INPUTS, ModelCase, ROOT, assert_same_files,
                            check_params_are_read_as_data, check_write_refusals, checked_manifest, cnn_case, compare,
                            compare_f16, copy, emit_cases, emit_folder, half_case, hostile_case, manifest_of,
                            mlp_case, odd_case, require_tool, run, softmax_case, tgc, two_io_case)
from tgc.codegen.target import Target
from tgc.emit import write_artifact
from tgc.emit.cuda import cuda_sources
from tgc.runtimes import RuntimeUnavailable, get_runtime
from tgc.runtimes import cuda as cuda_rt
from tgc.runtimes.artifact import ArtifactError, checked_weights
from tgc.runtimes.artifact_cuda import CUDAArtifact, launch_plan

BUNDLE_FILES = {"manifest.json", "model.cu", "model.h", "main.c", "Makefile", "CMakeLists.txt",
                "weights.safetensors"}
ARCHS = ["sm_80", "sm_90"]
NVCC_STRICT = "-O3 -Xcompiler -Wall,-Wextra -Werror all-warnings"   # the Makefile suppresses 1046 (literals)
needs_nvrtc = pytest.mark.skipif(cuda_rt.nvrtc is None, reason="NVRTC is not installed (pip install cuda-python "
                                 "nvidia-cuda-nvrtc nvidia-cuda-runtime, or the tgc[cuda] extra)")


def nvcc() -> str:
  path = shutil.which("nvcc") or ("/usr/local/bin/nvcc" if os.path.exists("/usr/local/bin/nvcc") else None)
  if path is None: pytest.skip("nvcc not found: install the CUDA toolkit (nvcc) to build the CUDA host library")
  return path


def gpu_or_skip():
  try:
    return get_runtime("cuda")
  except RuntimeUnavailable as error:
    pytest.skip(f"no NVIDIA GPU/driver to run on: {error}")


# ---------------------------------------------------------------- models

CASES = {"mlp": mlp_case, "cnn": cnn_case, "two_io": two_io_case, "hostile": hostile_case, "softmax": softmax_case,
         "half": half_case, "odd": odd_case}


def emit(root, case: ModelCase, sub: str) -> str: return emit_folder(root, case, sub=sub, target="cuda")


@pytest.fixture(scope="session")
def bundles(tmp_path_factory):
  return emit_cases(tmp_path_factory.mktemp("cuda_bundles"), CASES, "cuda")


def make(folder: str) -> None:
  run(["make", "-s", f"NVCC={nvcc()}", f"NVCCFLAGS={NVCC_STRICT}", f"CFLAGS=-O2 {' '.join(C_WARNINGS[1:])}"],
      cwd=folder)


@pytest.fixture(scope="session")
def built_hostile(bundles, tmp_path_factory):
  """The hostile-names bundle built once with make (strict warnings)."""
  folder = copy(bundles["hostile"][1], tmp_path_factory.mktemp("cuda_built"))
  make(folder)
  return folder


def save_inputs(folder: str, inputs: dict[str, np.ndarray]) -> None:
  for spec in manifest_of(folder)["inputs"]:
    np.save(os.path.join(folder, f"{spec['symbol']}.npy"), inputs[spec["name"]])


# ---------------------------------------------------------------- files and manifest

@pytest.mark.parametrize("name", ["mlp", "cnn", "hostile", "half"])
def test_files_and_manifest(bundles, name):
  case, folder = bundles[name]
  manifest = checked_manifest(folder, BUNDLE_FILES, "cuda", case)
  info = manifest["target_info"]
  assert info["source"] == info["kernel_source"] == "model.cu" and info["cuda_api"] == "runtime"
  assert info["api_prefix"] == manifest["model"]["symbol"] and info["default_arch"] == "sm_80"
  cu = Path(folder, "model.cu").read_text()
  kernels = re.findall(r'extern "C" __global__ void __launch_bounds__\((\d+)\) (\w+)\(', cu)
  assert [k[1] for k in kernels] == [k["name"] for k in manifest["kernels"]]
  for (threads, _), k in zip(kernels, manifest["kernels"]):
    assert int(threads) == np.prod(k["local_size"]) <= 1024
    assert all(g % s == 0 for g, s in zip(k["global_size"], k["local_size"]))
    assert [a["index"] for a in k["args"] if a["mutable"]] == [0], k
  assert cu.count("<<<") == len(manifest["calls"])        # one launch statement per call, in model.cu's host part
  launches = re.findall(r"^  (\w+)<<<", cu, re.M)
  assert launches == [c["kernel"] for c in manifest["calls"]]
  assert ("#include <cuda_fp16.h>" in cu) == (name == "half") == (info["headers"] == ["cuda_fp16.h"])


def test_launch_plan_resolves_every_argument(bundles):
  manifest = manifest_of(bundles["cnn"][1])
  plan = launch_plan(manifest)
  assert [p.kernel for p in plan] == [c["kernel"] for c in manifest["calls"]]
  regions = {a.region for p in plan for a in p.args}
  assert regions == {"weights", "arena", "input", "output"}
  for p in plan:
    for a in p.args:
      size = {"weights": manifest["weights"]["nbytes"], "arena": manifest["arena_bytes"]}.get(a.region)
      if size is not None: assert a.offset + a.nbytes <= size and a.offset % 16 == 0
  broken = json.loads(json.dumps(manifest))
  broken["calls"][0]["args"] = broken["calls"][0]["args"][:1]
  with pytest.raises(ArtifactError, match="has no argument"): launch_plan(broken)


def test_hostile_names_stay_in_literals(bundles):
  folder = bundles["hostile"][1]
  assert [t["name"] for t in manifest_of(folder)["inputs"]] == list(HOSTILE_INPUTS)
  for fname in ("model.cu", "model.h", "main.c", "Makefile"):
    source = Path(folder, fname).read_text(encoding="ascii")
    assert "??" not in source, fname
    outside = re.sub(r'"(?:[^"\\\n]|\\.)*"', '""', source)
    assert "*/ name" not in outside and "ird\\" not in outside, fname


def test_deterministic(tmp_path):
  assert_same_files(emit(tmp_path, cnn_case(), "a"), emit(tmp_path, cnn_case(), "b"))


def test_writer_refusals(tmp_path):
  cm = mlp_case().compile("cuda")
  check_write_refusals(cm, tmp_path, cuda_sources)
  check_params_are_read_as_data(cm, cuda_sources)


# ---------------------------------------------------------------- compiling: NVRTC and nvcc, no GPU needed

@needs_nvrtc
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", ["mlp", "cnn", "softmax", "hostile", "half", "odd"])
def test_model_cu_compiles_with_nvrtc(bundles, arch, name):
  """NVRTC compiles model.cu as shipped (the host library is left out under __CUDACC_RTC__) for sm_80 and sm_90,
  and every kernel of the manifest is an entry of the module."""
  folder = bundles[name][1]
  source = Path(folder, "model.cu").read_text()
  assert cuda_rt.compile_only(source, name, arch)[:4] == b"\x7fELF"
  ptx = cuda_rt.compile_only(source, name, arch.replace("sm_", "compute_"))
  entries = re.findall(rb"\.entry (\w+)\(", ptx)
  assert sorted(e.decode() for e in entries) == sorted(k["name"] for k in manifest_of(folder)["kernels"])


def test_cmake_builds_and_links(bundles, tmp_path):
  """CMakeLists.txt: nvcc builds the static library tgc::<name> (linking CUDA::cudart) and the example program."""
  require_tool("cmake", "cmake")
  folder = copy(bundles["cnn"][1], tmp_path)
  build = os.path.join(folder, "build")
  run(["cmake", "-S", folder, "-B", build, f"-DCMAKE_CUDA_COMPILER={nvcc()}"])
  run(["cmake", "--build", build, "-j", "2"])
  assert os.access(os.path.join(build, "main"), os.X_OK)
  symbols = run(["nm", "-g", "--defined-only", os.path.join(build, "libtgc_cnn.a")]).stdout.split()
  assert "cnn_run" in symbols and "cnn_init" in symbols
  flags = (Path(build) / "CMakeFiles" / "tgc_cnn.dir" / "flags.make").read_text()
  assert "arch=compute_80,code=[compute_80,sm_80]" in flags, flags


@pytest.mark.parametrize("name", ["mlp", "cnn", "half"])
def test_nvcc_builds_and_links(bundles, tmp_path, name):
  """make: nvcc compiles model.cu (host warnings as errors), cc compiles main.c (C99, -pedantic -Werror), nvcc links
  them against cudart. Running ./main needs a GPU: without one it must say so in one line and exit 1."""
  case, folder = bundles[name]
  folder = copy(folder, tmp_path)
  make(folder)
  assert os.access(os.path.join(folder, "main"), os.X_OK)
  symbols = run(["nm", "-g", "--defined-only", os.path.join(folder, "model.o")]).stdout.split()
  sym = manifest_of(folder)["target_info"]["api_prefix"]
  for fn in ("init", "init_from_memory", "run", "run_device", "free", "verify_weights", "strerror"):
    assert f"{sym}_{fn}" in symbols, fn
  save_inputs(folder, case.inputs)
  r = run(["./main"], cwd=folder, check=False)
  if r.returncode == 1 and "no NVIDIA GPU or CUDA driver" in r.stderr:
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: device: "), r.stderr
    pytest.skip(f"built and linked; running ./main needs an NVIDIA GPU and driver ({r.stderr.strip()})")
  assert r.returncode == 0, r.stdout + r.stderr
  outs = {s["name"]: np.load(os.path.join(folder, f"{s['symbol']}.npy")) for s in manifest_of(folder)["outputs"]}
  compare(outs, case.reference(), case.rtol, case.atol)


def test_main_weights_errors_before_any_device(built_hostile, tmp_path):
  """init checks the weights file (open, size, header) before it touches CUDA, so these run on any machine."""
  folder = copy(built_hostile, tmp_path)
  case = hostile_case()
  save_inputs(folder, case.inputs)
  good = Path(folder, "weights.safetensors").read_bytes()
  bad_header = bytearray(good)
  bad_header[20] ^= 0x01
  variants = {"missing.safetensors": (None, "cannot open the weights file"),
              "short.safetensors": (good[:-3], "truncated"), "long.safetensors": (good + b"\0", "longer than expected"),
              "header.safetensors": (bytes(bad_header), "header does not match")}
  for fname, (data, message) in variants.items():
    if data is not None: Path(folder, fname).write_bytes(data)
    r = run(["./main", "--weights", fname], cwd=folder, check=False)
    assert r.returncode == 1 and message in r.stderr and r.stderr.startswith(f"error: {fname}: "), r.stderr
  r = run(["./main", "--device", "x"], cwd=folder, check=False)
  assert r.returncode == 2 and "--device 'x'" in r.stderr
  r = run(["./main", f"{HOSTILE_INPUTS[0]}=nope.npy"], cwd=folder, check=False)
  assert r.returncode == 2 and "nope.npy" in r.stderr
  r = run(["./main", "--help"], cwd=folder)
  assert "we\"ird" in r.stderr and "(symbol " in r.stderr


def test_header_compiles_as_plain_c(bundles, tmp_path):
  """model.h needs no CUDA header: a C99 program using the API compiles with -pedantic -Werror."""
  folder = bundles["two_io"][1]
  sym = manifest_of(folder)["target_info"]["api_prefix"]
  prog = tmp_path / "use.c"
  prog.write_text(f'#include "model.h"\nint main(void) {{\n  {sym}_ctx ctx;\n  {sym}_free(&ctx);\n'
                  f'  return (int){sym}_input_count() + (int)sizeof(ctx) * 0;\n}}\n')
  run(["cc", *C_WARNINGS, "-I", folder, "-c", str(prog), "-o", str(tmp_path / "use.o")])


# ---------------------------------------------------------------- the launch plan on the CPU, through the CUDA shim

def run_plan_on_cpu(folder: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """Execute the artifact as CUDAArtifact does (launch_plan over one weights buffer, one arena, a buffer per input
  and output), with every block of every launch run on the CPU."""
  manifest = manifest_of(folder)
  source = Path(folder, "model.cu").read_text()
  # model.cu's kernels without its host part, one library for all
  lib = cuda_cpu.build_model_for_cpu("#define TGC_KERNELS_ONLY 1\n" + source,
                                     {k["name"]: len(k["args"]) for k in manifest["kernels"]})
  weights = np.frombuffer(bytearray(checked_weights(folder, manifest)), np.uint8)
  arena = np.full(max(manifest["arena_bytes"], 1), 0xAB, np.uint8)     # garbage: nothing may rely on zeros
  ins = [np.ascontiguousarray(inputs[t["name"]]).reshape(-1).view(np.uint8).copy() for t in manifest["inputs"]]
  outs = [np.full(t["nbytes"], 0xAB, np.uint8) for t in manifest["outputs"]]
  regions = {"weights": [weights], "arena": [arena], "input": ins, "output": outs}
  functions = dict(re.findall(r'void __launch_bounds__\(\d+\) (\w+)\((.*?)\n}\n', source, re.S))
  for launch in launch_plan(manifest):
    arrays = [regions[a.region][a.index][a.offset:a.offset + a.nbytes] for a in launch.args]
    cpu_kernels.launch(lib, launch.kernel, arrays, cpu_kernels.groups(launch.global_size, launch.local_size),
                       launch.local_size, "__syncthreads" in functions[launch.kernel])
  return {t["name"]: o.view(np.dtype(t["dtype"])).reshape(t["shape"]) for t, o in zip(manifest["outputs"], outs)}


@pytest.mark.parametrize("name", ["cnn", "softmax", "two_io", "half", "odd"])
def test_launch_plan_computes_right_on_cpu(bundles, name):
  cpu_kernels.skip_without_cpu_compiler()
  case, folder = bundles[name]
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)
    compare(run_plan_on_cpu(folder, case.inputs), case.reference(), case.rtol, case.atol)


def test_f16_artifact(tmp_path):
  """--precision f16: model.cu computes in __half (cuda_fp16.h), NVRTC compiles it, and the launch plan run on the CPU
  gives outputs within the f16 tolerance."""
  case = cnn_case()
  folder = emit_folder(tmp_path, case, sub="cnn_f16", target=Target.make("cuda", precision="f16"))
  source = Path(folder, "model.cu").read_text()
  assert "#include <cuda_fp16.h>" in source and re.search(r"\b__half \w+ = ", source)
  assert manifest_of(folder)["target_info"]["precision"] == "f16"
  if cuda_rt.nvrtc is not None: assert cuda_rt.compile_only(source, "cnn", "sm_80")[:4] == b"\x7fELF"
  cpu_kernels.skip_without_cpu_compiler()
  compare_f16(run_plan_on_cpu(folder, case.inputs), case.reference())


def test_cpu_plan_run_catches_a_wrong_plan(bundles, tmp_path):
  """The CPU run compares for real: the cnn bundle with its last launch moved first (it then reads intermediates
  nothing has written yet) fails."""
  cpu_kernels.skip_without_cpu_compiler()
  case, folder = bundles["cnn"]
  folder = copy(folder, tmp_path)
  manifest = manifest_of(folder)
  assert len(manifest["calls"]) >= 2
  manifest["calls"] = manifest["calls"][-1:] + manifest["calls"][:-1]
  Path(folder, "manifest.json").write_text(json.dumps(manifest))
  with pytest.raises(AssertionError):
    compare(run_plan_on_cpu(folder, case.inputs), case.reference(), case.rtol, case.atol)


# ---------------------------------------------------------------- CUDAArtifact and the command line

def test_cuda_artifact_checks_the_folder_first(bundles, tmp_path):
  """A modified or foreign folder and bad weights are reported before any GPU is needed."""
  with pytest.raises(ArtifactError, match="no manifest.json"): CUDAArtifact(str(tmp_path))
  folder = copy(bundles["mlp"][1], tmp_path)
  with open(os.path.join(folder, "model.cu"), "a") as f: f.write("\n")
  with pytest.raises(ArtifactError, match="file .*model.cu differs from the one compiled"): CUDAArtifact(folder)
  good = Path(bundles["mlp"][1], "weights.safetensors").read_bytes()
  header = manifest_of(bundles["mlp"][1])["weights"]["header_bytes"]
  bad_data = bytearray(good)
  bad_data[header + 5] ^= 0x40
  for label, data, message in [("short", good[:-3], "truncated"), ("long", good + b"\0", "longer than expected"),
                               ("data", bytes(bad_data), "sha256 mismatch")]:
    path = tmp_path / f"{label}.safetensors"
    path.write_bytes(data)
    with pytest.raises(ArtifactError, match=message): CUDAArtifact(bundles["mlp"][1], weights_path=str(path))
  c_folder = tmp_path / "c_bundle"
  c_folder.mkdir()
  write_artifact(mlp_case().compile(), str(c_folder))
  with pytest.raises(ArtifactError, match="not a CUDA artifact"): CUDAArtifact(str(c_folder))


def test_cuda_artifact_without_gpu_is_one_clear_line(bundles):
  try:
    get_runtime("cuda")
  except RuntimeUnavailable:
    with pytest.raises(RuntimeUnavailable) as info: CUDAArtifact(bundles["mlp"][1])
    message = str(info.value)
    assert "\n" not in message and "needs an NVIDIA GPU and driver" in message
    return
  pytest.skip("an NVIDIA GPU is present: CUDAArtifact runs (test_cuda_artifact_matches_reference)")


@pytest.mark.parametrize("name", ["mlp", "cnn", "softmax", "two_io", "half", "odd"])
def test_cuda_artifact_matches_reference(bundles, name):
  gpu_or_skip()
  case, folder = bundles[name]
  with CUDAArtifact(folder) as art:
    compare(art.run(case.inputs), case.reference(), case.rtol, case.atol)
    compare(art.run(case.inputs), case.reference(), case.rtol, case.atol)
    times = art.time(case.inputs, runs=3, warmup=1)
    assert len(times) == 3 and all(t >= 0 for t in times)


def test_cli_compile_and_run(tmp_path):
  model, out = str(ROOT / "examples" / "tiny_mlp.py") + ":build", tmp_path / "mlp"
  result = tgc("compile", model, "--target", "cuda", "-o", out)
  assert result.exit_code == 0, result.output
  assert (out / "model.cu").is_file() and manifest_of(str(out))["target"] == "cuda"
  result = tgc("inspect", out)
  assert result.exit_code == 0 and "target cuda" in result.stdout, result.output
  result = tgc("validate", out, "--seed", "3")
  try:
    get_runtime("cuda")
  except RuntimeUnavailable:
    assert result.exit_code == 2 and "needs an NVIDIA GPU and driver" in result.stderr, result.output
    assert result.stderr.count("\n") == 1
    return
  assert result.exit_code == 0 and "OK" in result.stdout, result.output
