"""The standalone C artifact: files and manifest (schema, hashes), the 16-byte aligned safetensors file, pedantic
C99 builds (gcc, clang), `make` + main.c on .npy files and CArtifact against the numpy interpreter, several
contexts and models in one program, no allocation or file I/O while running, weights-file errors, aarch64 under
qemu, sanitizers, hostile names, determinism and embedded weights."""
from __future__ import annotations
import ctypes
import dataclasses
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from artifact_cases import (C_WARNINGS, HOSTILE_INPUTS, HOSTILE_OUTPUTS, HOSTILE_WEIGHTS, allocations_around_run,
                            assert_same_files, cnn_case, compare, copy, emit_folder, hostile_case, make, manifest_of,
                            mlp_case, require_aarch64, require_tool, run, run_main, two_io_case, write_inputs)
from tgc.emit import write_artifact
from tgc.emit.c_literals import c_string
from tgc.emit.manifest import load_schema, validate_manifest
from tgc.emit.weights import ALIGN, WeightSpec, build_weights_file
from tgc.ir import dtypes
from tgc.runtimes.artifact import ArtifactError
from tgc.runtimes.artifact_c import CArtifact

CASES = {"mlp": mlp_case, "cnn": cnn_case, "two_io": two_io_case, "hostile": hostile_case}


@pytest.fixture(scope="session")
def bundles(tmp_path_factory):
  """Artifact folders written once per test process (tests copy them before building inside)."""
  root = tmp_path_factory.mktemp("bundles")
  out = {}
  for name, case in CASES.items():
    out[name] = (case(), emit_folder(root, case()))
  out["mlp_embed"] = (mlp_case(), emit_folder(root, mlp_case(), embed=True))
  out["two_io_embed"] = (two_io_case(), emit_folder(root, two_io_case(), embed=True))
  out["hostile_embed"] = (hostile_case(), emit_folder(root, hostile_case(), embed=True))
  return out


@pytest.fixture(scope="session")
def references(bundles):
  return {name: case.reference() for name, (case, _) in bundles.items()}


# ---------------------------------------------------------------- files, manifest, weights

@pytest.mark.parametrize("name", ["mlp", "cnn", "mlp_embed", "hostile", "hostile_embed"])
def test_files_and_manifest(bundles, name):
  case, folder = bundles[name]
  embed = name.endswith("_embed")
  want = {"manifest.json", "model.h", "model.c", "main.c", "Makefile", "CMakeLists.txt", "weights.safetensors",
          "tgc_threads.h", "tgc_threads.c"}
  assert set(os.listdir(folder)) == want | ({"weights.S"} if embed else set())
  manifest = manifest_of(folder)
  validate_manifest(manifest)
  import jsonschema
  jsonschema.Draft202012Validator.check_schema(load_schema())
  jsonschema.validate(manifest, load_schema())
  assert set(manifest["files"]) == set(os.listdir(folder)) - {"manifest.json"}
  for fname, digest in manifest["files"].items():
    with open(os.path.join(folder, fname), "rb") as f: assert hashlib.sha256(f.read()).hexdigest() == digest, fname
  assert manifest["weights"]["sha256"] == manifest["files"]["weights.safetensors"]
  assert [t["name"] for t in manifest["inputs"]] == list(case.inputs)
  assert manifest["target"] == "c" and manifest["format_version"] == 3 and manifest["weights"]["embedded"] is embed
  assert [c["kernel"] for c in manifest["calls"]] and {c["kernel"] for c in manifest["calls"]} == \
    {k["name"] for k in manifest["kernels"]}
  with pytest.raises(ValueError, match="format_version"):
    validate_manifest({**manifest, "format_version": 99})


@pytest.mark.parametrize("name", ["mlp", "cnn", "two_io", "hostile"])
def test_safetensors_loads_and_is_aligned(bundles, name):
  from safetensors.numpy import load_file
  case, folder = bundles[name]
  path = os.path.join(folder, "weights.safetensors")
  loaded = load_file(path)
  manifest = manifest_of(folder)
  tensors = manifest["weights"]["tensors"]
  real = {t["name"] for t in tensors}
  assert real <= set(loaded) and all(k.startswith("__pad_") for k in set(loaded) - real)
  cm = case.compile()
  assert list(cm.weights) == [t["name"] for t in tensors]
  for t in tensors:
    assert t["offset"] % ALIGN == 0, t
    np.testing.assert_array_equal(loaded[t["name"]], cm.weights[t["name"]])
    assert loaded[t["name"]].dtype == np.dtype(t["dtype"]) and list(loaded[t["name"]].shape) == t["shape"]
  with open(path, "rb") as f: data = f.read()
  (n,) = struct.unpack("<Q", data[:8])
  header = json.loads(data[8:8 + n])
  assert (8 + n) % ALIGN == 0 and 8 + n == manifest["weights"]["header_bytes"]
  for key, entry in header.items():
    if key == "__metadata__": continue
    start, end = (8 + n + o for o in entry["data_offsets"])
    if key in real:
      assert start == next(t["offset"] for t in tensors if t["name"] == key)
    else:
      assert entry["dtype"] == "U8" and not any(data[start:end]) and end % ALIGN == 0, key
  if name == "hostile":
    assert "__pad_0" in real and any(k.startswith("__pad_") and k not in real for k in header)


def test_weights_writer_layout():
  from safetensors.numpy import load
  specs = [WeightSpec("f", "f", dtypes.float32, (3,), np.arange(3, dtype=np.float32)),
           WeightSpec("b", "b", dtypes.int8, (5,), np.arange(5, dtype=np.int8)),
           WeightSpec("d", "d", dtypes.float64, (2, 2), np.eye(2)),
           WeightSpec("h", "h", dtypes.float16, (1,), np.ones(1, np.float16)),
           WeightSpec("t", "t", dtypes.bool, (3,), np.array([True, False, True]))]
  wf = build_weights_file(specs)
  assert [t.offset % 16 for t in wf.tensors] == [0] * 5
  loaded = load(wf.data)
  for s in specs: np.testing.assert_array_equal(loaded[s.name], s.data)
  assert build_weights_file(specs).data == wf.data
  with pytest.raises(ValueError, match="duplicate weight name"): build_weights_file(specs + specs[:1])
  with pytest.raises(ValueError, match="reserved"):
    build_weights_file([WeightSpec("__metadata__", "m", dtypes.float32, (1,), np.ones(1, np.float32))])
  assert load(build_weights_file([]).data) == {}


def test_write_artifact_refuses_bad_folders(tmp_path):
  cm = mlp_case().compile()
  with pytest.raises(ValueError, match="does not exist"): write_artifact(cm, str(tmp_path / "missing"))
  (tmp_path / "full").mkdir()
  (tmp_path / "full" / "x").write_text("x")
  with pytest.raises(ValueError, match="not empty"): write_artifact(cm, str(tmp_path / "full"))
  cm.target = dataclasses.replace(cm.target, name="vulkan")
  with pytest.raises(ValueError, match="no target .vulkan."): write_artifact(cm, str(tmp_path))


# ---------------------------------------------------------------- C builds and runs

@pytest.mark.parametrize("compiler", ["gcc", "clang"])
@pytest.mark.parametrize("name", ["mlp", "cnn", "mlp_embed", "hostile_embed"])
def test_pedantic_c99(bundles, tmp_path, compiler, name):
  require_tool(compiler, compiler)
  folder = bundles[name][1]
  for src in ("model.c", "main.c"):
    run([compiler, *C_WARNINGS, "-O2", "-c", os.path.join(folder, src), "-o", str(tmp_path / f"{src}.o")])
  sections = [line.split() for line in run(["size", "-A", str(tmp_path / "model.c.o")]).stdout.splitlines()]
  writable = [s for s in sections if len(s) == 3 and s[0].startswith((".data", ".bss"))
              and not s[0].startswith(".data.rel.ro") and int(s[1]) > 0]
  assert not writable, f"model.c has writable data (mutable globals): {writable}"
  symbols = [line.split() for line in run(["nm", str(tmp_path / "model.c.o")]).stdout.splitlines()]
  assert not [s for s in symbols if len(s) == 3 and s[1] in "BCDG"], "model.c exports data"
  sym = manifest_of(folder)["target_info"]["api_prefix"]
  exported = sorted(s[2] for s in symbols if len(s) == 3 and s[1] == "T")
  assert exported and all(e.startswith(f"{sym}_") for e in exported), exported
  assert not any(e.startswith(f"{sym}_k") and e[len(sym) + 2:].isdigit() for e in exported), "kernels must be static"


@pytest.mark.parametrize("name", ["mlp", "cnn", "two_io"])
def test_make_and_main_match_reference(bundles, references, tmp_path, name):
  case, folder = bundles[name]
  folder = copy(folder, tmp_path)
  make(folder)
  got = run_main(folder, case.inputs)
  compare(got, references[name], case.rtol, case.atol)


def test_main_arguments_and_npy_errors(bundles, tmp_path):
  case, folder = bundles["two_io"]
  folder = copy(folder, tmp_path)
  make(folder)
  x, n = case.inputs["x"], case.inputs["n"]
  os.makedirs(os.path.join(folder, "out"))
  with open(os.path.join(folder, "xv2.npy"), "wb") as f: np.lib.format.write_array(f, x, version=(2, 0))
  np.save(os.path.join(folder, "n_in.npy"), n)
  run(["./main", "x=xv2.npy", "n=n_in.npy", "--out", "out"], cwd=folder)
  ref = case.reference()
  np.testing.assert_allclose(np.load(os.path.join(folder, "out", "output_0.npy")), ref["output_0"], rtol=1e-5)
  np.testing.assert_array_equal(np.load(os.path.join(folder, "out", "output_1.npy")), ref["output_1"])
  bad = {"wrong_dtype.npy": x.astype(np.float64), "wrong_shape.npy": x[:2], "fortran.npy": np.asfortranarray(x),
         "big.npy": x.astype(">f4")}
  messages = {"wrong_dtype.npy": "dtype '<f8', the model expects float32", "wrong_shape.npy": "shape (2, 5)",
              "fortran.npy": "Fortran order", "big.npy": "big-endian"}
  for fname, arr in bad.items():
    np.save(os.path.join(folder, fname), arr)
    r = run(["./main", f"x={fname}", "n=n_in.npy"], cwd=folder, check=False)
    assert r.returncode == 2 and "input 'x'" in r.stderr and messages[fname] in r.stderr, r.stderr
  r = run(["./main", "nope=x.npy"], cwd=folder, check=False)
  assert r.returncode == 2 and "does not name an input" in r.stderr
  r = run(["./main", "--weights", "missing.safetensors", "x=xv2.npy", "n=n_in.npy"], cwd=folder, check=False)
  assert r.returncode == 1 and "cannot open the weights file" in r.stderr


@pytest.mark.parametrize("name", ["mlp", "cnn", "two_io", "mlp_embed"])
def test_c_artifact_matches_reference(bundles, references, name):
  case, folder = bundles[name]
  with CArtifact(folder) as art:
    assert art.manifest["model"]["name"] == case.name
    compare(art.run(case.inputs), references[name], case.rtol, case.atol)
    times = art.time(case.inputs, runs=3, warmup=1)
    assert len(times) == 3 and all(t >= 0 for t in times)


def test_c_artifact_input_errors(bundles):
  case, folder = bundles["two_io"]
  x, n = case.inputs["x"], case.inputs["n"]
  with CArtifact(folder) as art:
    for bad, msg in [({"x": x}, "missing input 'n'"), ({"x": x, "n": n, "z": x}, "unknown input 'z'"),
                     ({"x": x.astype(np.float64), "n": n}, "input 'x': dtype float64, expected float32"),
                     ({"x": x, "n": n[:2]}, r"input 'n': shape \(2,\), expected \(3,\)")]:
      with pytest.raises(ValueError, match=msg): art.run(bad)
    np.testing.assert_array_equal(art.run({"n": n, "x": x[::1]})["output_1"], case.reference()["output_1"])
  with pytest.raises(ValueError, match="closed"): art.run(case.inputs)


def test_c_artifact_refuses_modified_or_missing(bundles, tmp_path):
  with pytest.raises(ArtifactError, match="no manifest.json"): CArtifact(str(tmp_path))
  folder = copy(bundles["mlp"][1], tmp_path)
  with open(os.path.join(folder, "model.c"), "a") as f: f.write("\n")
  with pytest.raises(ArtifactError, match="file .*model.c differs from the one compiled"): CArtifact(folder)


TWO_MODELS = r"""
#include "mlp/model.h"
#include "two_io/model.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static void *slurp(const char *path, size_t size) {
  unsigned char *raw = (unsigned char *)malloc(size + 16);
  unsigned char *p = raw + (16 - (uintptr_t)raw % 16) % 16;
  FILE *f = fopen(path, "rb");
  if (f == NULL || fread(p, 1, size, f) != size) { fprintf(stderr, "cannot read %s\n", path); exit(3); }
  fclose(f);
  return raw;
}
static void *aligned(void *raw) { return (unsigned char *)raw + (16 - (uintptr_t)raw % 16) % 16; }
static void dump(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (f == NULL || fwrite(p, 1, n, f) != n) exit(4);
  fclose(f);
}
#define CHECK(x) do { int s_ = (x); if (s_ != 0) { fprintf(stderr, "%s: %d\n", #x, s_); return 1; } } while (0)

int main(void) {
  mlp_ctx a, b;
  two_io_ctx c;
  void *x = slurp("mlp_x.bin", mlp_input_nbytes(0)), *tx = slurp("two_x.bin", 60), *tn = slurp("two_n.bin", 12);
  void *wraw = slurp("mlp/weights.safetensors", MLP_WEIGHTS_BYTES);
  void *arena_raw = malloc(MLP_ARENA_BYTES + 16);
  float out_a[8], out_b[8], y[3];
  int m[3];
  const void *in_mlp[1], *in_two[2];
  void *out_mlp_a[1], *out_mlp_b[1], *out_two[2];
  in_mlp[0] = aligned(x); in_two[0] = aligned(tx); in_two[1] = aligned(tn);
  out_mlp_a[0] = out_a; out_mlp_b[0] = out_b; out_two[0] = y; out_two[1] = m;
  if (mlp_ctx_size() != sizeof(mlp_ctx) || mlp_arena_bytes() != MLP_ARENA_BYTES) return 2;
  CHECK(mlp_init(&a, "mlp/weights.safetensors", NULL));
  CHECK(mlp_init_from_memory(&b, aligned(wraw), MLP_WEIGHTS_BYTES, aligned(arena_raw)));
  CHECK(two_io_init(&c, "two_io/weights.safetensors", NULL));
  CHECK(mlp_run(&a, in_mlp, out_mlp_a));
  CHECK(two_io_run(&c, in_two, out_two));
  CHECK(mlp_run(&b, in_mlp, out_mlp_b));
  CHECK(mlp_run(&a, in_mlp, out_mlp_a));
  dump("mlp_a.bin", out_a, sizeof(out_a));
  dump("mlp_b.bin", out_b, sizeof(out_b));
  dump("two_y.bin", y, sizeof(y));
  dump("two_m.bin", m, sizeof(m));
  mlp_free(&a); mlp_free(&b); two_io_free(&c);
  mlp_free(&a);
  if (mlp_run(&a, in_mlp, out_mlp_a) != MLP_ERR_NOT_READY) return 5;
  free(x); free(tx); free(tn); free(wraw); free(arena_raw);
  return 0;
}
"""


def test_two_contexts_and_two_models_in_one_program(bundles, references, tmp_path):
  mlp, two = bundles["mlp"], bundles["two_io"]
  shutil.copytree(mlp[1], tmp_path / "mlp")
  shutil.copytree(two[1], tmp_path / "two_io")
  (tmp_path / "prog.c").write_text(TWO_MODELS)
  mlp[0].inputs["x"].tofile(tmp_path / "mlp_x.bin")
  two[0].inputs["x"].tofile(tmp_path / "two_x.bin")
  two[0].inputs["n"].tofile(tmp_path / "two_n.bin")
  run(["cc", *C_WARNINGS, "-O2", "-I", str(tmp_path), "prog.c", "mlp/model.c", "two_io/model.c", "-o", "prog", "-lm"],
      cwd=tmp_path)
  run(["./prog"], cwd=tmp_path)
  a = np.fromfile(tmp_path / "mlp_a.bin", np.float32).reshape(2, 4)
  np.testing.assert_array_equal(a, np.fromfile(tmp_path / "mlp_b.bin", np.float32).reshape(2, 4))
  np.testing.assert_allclose(a, references["mlp"]["output_0"], rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(np.fromfile(tmp_path / "two_y.bin", np.float32), references["two_io"]["output_0"],
                             rtol=1e-5)
  np.testing.assert_array_equal(np.fromfile(tmp_path / "two_m.bin", np.int32), references["two_io"]["output_1"])


@pytest.mark.parametrize("name", ["cnn", "two_io"])
def test_no_allocation_or_file_io_in_run(bundles, tmp_path, name):
  folder = copy(bundles[name][1], tmp_path)
  sym = manifest_of(folder)["target_info"]["api_prefix"]
  assert all(t["nbytes"] <= 4096 * 8 for t in manifest_of(folder)["inputs"] + manifest_of(folder)["outputs"])
  status, before, after = allocations_around_run(folder, sym, "NULL", ["-lm"])
  assert status == 0
  assert before >= 2 and after == before + 2    # init: fopen + mallocs; free: 2 frees; run: nothing


def test_weights_file_errors(bundles, tmp_path):
  folder = copy(bundles["mlp"][1], tmp_path)
  art = CArtifact(folder)
  lib, sym = ctypes.CDLL(art.library_path), art.symbol
  init, verify, run_fn = getattr(lib, f"{sym}_init"), getattr(lib, f"{sym}_verify_weights"), getattr(lib, f"{sym}_run")
  from_memory = getattr(lib, f"{sym}_init_from_memory")
  init.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
  from_memory.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
  verify.argtypes = [ctypes.c_void_p]
  run_fn.argtypes = [ctypes.c_void_p] * 3
  free = getattr(lib, f"{sym}_free")
  free.argtypes = [ctypes.c_void_p]
  ctx = (ctypes.c_uint64 * 16)()
  good = Path(folder, "weights.safetensors").read_bytes()
  header = manifest_of(folder)["weights"]["header_bytes"]
  corrupt_header = bytearray(good)
  corrupt_header[20] ^= 0x01
  corrupt_data = bytearray(good)
  corrupt_data[header + 5] ^= 0x40
  variants = {"truncated": (good[:-3], 4, "truncated"), "long": (good + b"\0", 5, "longer than expected"),
              "header": (bytes(corrupt_header), 6, "header does not match"), "empty": (b"", 4, "truncated")}
  for label, (data, code, message) in variants.items():
    path = tmp_path / f"{label}.safetensors"
    path.write_bytes(data)
    assert init(ctx, str(path).encode(), None) == code, label
    assert not any(ctx), "a failed init leaves the context zeroed"
    with pytest.raises(ArtifactError, match=message): CArtifact(folder, weights_path=str(path))
  assert init(ctx, str(tmp_path / "missing").encode(), None) == 2
  with pytest.raises(ArtifactError, match="cannot open the weights file"):
    CArtifact(folder, weights_path=str(tmp_path / "missing"))
  path = tmp_path / "data.safetensors"
  path.write_bytes(bytes(corrupt_data))
  assert init(ctx, str(path).encode(), None) == 0 and verify(ctx) == 7
  free(ctx)
  with pytest.raises(ArtifactError, match="sha256 mismatch"): CArtifact(folder, weights_path=str(path))
  buf = np.zeros(len(good) + 32, np.uint8)
  start = -buf.ctypes.data % 16
  buf[start + 1:start + 1 + len(good)] = np.frombuffer(good, np.uint8)
  assert from_memory(ctx, buf.ctypes.data + start + 1, len(good), None) == 8
  buf[start:start + len(good)] = np.frombuffer(good, np.uint8)
  assert from_memory(ctx, buf.ctypes.data + start, len(good), None) == 0 and verify(ctx) == 0
  free(ctx)
  assert run_fn(ctx, None, None) == 1 and from_memory(None, None, 0, None) == 1 and init(ctx, None, None) == 1
  out = np.zeros(8, np.float32)
  outs = (ctypes.c_void_p * 1)(out.ctypes.data)
  x = np.zeros(16, np.float32)
  ins = (ctypes.c_void_p * 1)(x.ctypes.data)
  assert run_fn(ctx, ins, outs) == 10
  art.close()


# ---------------------------------------------------------------- aarch64, sanitizers

def test_aarch64_under_qemu_matches_x86(bundles, references, tmp_path):
  require_aarch64(tmp_path)
  for name in ("cnn", "two_io_embed"):
    case, folder = bundles[name]
    native = copy(folder, tmp_path, f"{name}_x86")
    make(native, "CFLAGS=-O2")
    want = run_main(native, case.inputs)
    cross = copy(folder, tmp_path, f"{name}_arm")
    make(cross, "CC=aarch64-linux-gnu-gcc", "AR=aarch64-linux-gnu-ar", "CFLAGS=-O2")
    with open(os.path.join(cross, "main"), "rb") as f: elf = f.read(20)
    assert elf[:4] == b"\x7fELF" and struct.unpack("<H", elf[18:20])[0] == 183    # EM_AARCH64
    got = run_main(cross, case.inputs, runner=("qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"))
    compare(got, want, rtol=1e-5, atol=1e-6)
    compare(got, references[name], case.rtol, case.atol)


@pytest.mark.parametrize("name", ["cnn", "two_io_embed", "hostile_embed"])
def test_sanitizers_report_nothing(bundles, references, tmp_path, name):
  case, folder = bundles[name]
  folder = copy(folder, tmp_path)
  flags = "-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all"
  make(folder, f"CFLAGS={flags}")
  env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0", UBSAN_OPTIONS="print_stacktrace=1")
  write_inputs(folder, case.inputs)
  r = run(["./main"], cwd=folder, env=env)
  assert "runtime error" not in r.stderr and "Sanitizer" not in r.stderr, r.stderr
  got = {s["name"]: np.load(os.path.join(folder, f"{s['symbol']}.npy")) for s in manifest_of(folder)["outputs"]}
  compare(got, references[name], case.rtol, case.atol)


# ---------------------------------------------------------------- names, determinism, embedding

def test_hostile_names(bundles, references, tmp_path):
  case, folder = bundles["hostile"]
  manifest = manifest_of(folder)
  assert [t["name"] for t in manifest["inputs"]] == list(HOSTILE_INPUTS)
  assert [t["name"] for t in manifest["outputs"]] == HOSTILE_OUTPUTS
  assert [t["name"] for t in manifest["weights"]["tensors"]] == HOSTILE_WEIGHTS
  symbols = [t["symbol"] for t in manifest["inputs"] + manifest["outputs"] + manifest["weights"]["tensors"]]
  assert len(set(symbols)) == len(symbols)
  assert manifest["model"]["name"] == case.name
  with CArtifact(folder) as art: compare(art.run(case.inputs), references["hostile"], case.rtol, case.atol)
  folder = copy(folder, tmp_path)
  make(folder)
  x, n = case.inputs.values()
  np.save(os.path.join(folder, "a.npy"), x)
  np.save(os.path.join(folder, "b.npy"), n)
  r = run(["./main", f"{HOSTILE_INPUTS[0]}=a.npy", "int=b.npy"], cwd=folder)
  assert "output 'main!'" in r.stdout
  outs = {s["name"]: np.load(os.path.join(folder, f"{s['symbol']}.npy")) for s in manifest["outputs"]}
  compare(outs, references["hostile"], case.rtol, case.atol)
  for fname in ("model.c", "model.h", "main.c", "Makefile"):
    source = Path(folder, fname).read_text(encoding="ascii")
    assert "??" not in source, fname
    outside_literals = re.sub(r'"(?:[^"\\\n]|\\.)*"', '""', source)
    assert "*/ name" not in outside_literals and "ird\\" not in outside_literals, fname
  assert c_string(HOSTILE_INPUTS[0]) in Path(folder, "model.c").read_text()


@pytest.mark.parametrize("text", ['plain', 'q"uote', "back\\slash", "tri??=graph??/", "new\nline\ttab\0nul",
                                  "\x017digit", "ünï©ødé ✓", "*/ %s %n"])
def test_c_string_escaping(tmp_path, text):
  src = tmp_path / "s.c"
  lit = c_string(text)
  src.write_text(f"#include <stdio.h>\nstatic const char s[] = {lit};\n"
                 f"int main(void) {{ fwrite(s, 1, sizeof(s) - 1, stdout); return 0; }}\n")
  run(["cc", *C_WARNINGS, str(src), "-o", str(tmp_path / "s")])
  out = subprocess.run([str(tmp_path / "s")], capture_output=True, check=True).stdout
  assert out == text.encode("utf-8")
  assert all(32 <= ord(c) < 127 for c in lit) and "??" not in lit


@pytest.mark.parametrize("embed", [False, True])
def test_deterministic(tmp_path, embed):
  assert_same_files(emit_folder(tmp_path, cnn_case(), embed, "a"), emit_folder(tmp_path, cnn_case(), embed, "b"))


def test_embedded_weights_need_no_file(bundles, references, tmp_path):
  case, folder = bundles["mlp_embed"]
  folder = copy(folder, tmp_path)
  make(folder)
  os.remove(os.path.join(folder, "weights.safetensors"))
  got = run_main(folder, case.inputs, args=("--weights", "/nonexistent"))
  compare(got, references["mlp_embed"], case.rtol, case.atol)
  header = Path(folder, "model.h").read_text()
  assert "mlp_init_embedded(mlp_ctx *ctx, void *arena);" in header
  for cc in ("gcc", "aarch64-linux-gnu-gcc"):
    if shutil.which(cc) is None: continue
    shutil.copy(os.path.join(bundles["mlp_embed"][1], "weights.safetensors"), folder)
    run([cc, "-c", "weights.S", "-o", f"weights_{cc}.o"], cwd=folder)
    syms = run(["nm", f"weights_{cc}.o"], cwd=folder).stdout
    assert "R mlp_weights_data" in syms and "R mlp_weights_size" in syms
