"""The standalone Metal artifact, checked on Linux: files and manifest (schema, hashes, the launch plan), every kernel
of model.metal through clang++ with the `metal_stdlib` shim, the whole model run on the CPU through the shim by
`MetalArtifact` (the plan model.m's tables hold: threadgroups, binding indices, weight and arena offsets) against
the numpy interpreter, model.m's tables equal to that plan, the Objective-C loader syntax-checked with ARC against
the Foundation/Metal header shim (which rejects misspelled selectors and wrong types), main.c as pedantic C99, the
Makefile's commands, hostile names, determinism, weights errors, and `tgc compile/run/validate` on a machine
without Metal. Apple's compilers, model.m at run time and Metal GPUs are exercised only on macOS (the last tests)."""
from __future__ import annotations
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import metal_check
from cpu_kernels import cpu_compiler, skip_without_cpu_compiler
from artifact_cases import (C_WARNINGS, HOSTILE_INPUTS, ModelCase, ROOT, assert_same_files,
                            check_params_are_read_as_data, check_write_refusals, checked_manifest, cnn_case, compare,
                            compare_f16, copy, emit_cases, emit_folder, half_case, hostile_case, manifest_of,
                            mlp_case, odd_case, require_tool, run, softmax_case, tgc, two_io_case)
from tgc.codegen.target import Target
from tgc.emit import write_artifact
from tgc.emit.metal import metal_sources
from tgc.runtimes.artifact import ArtifactError
from tgc.runtimes.artifact_metal import MetalArtifact
from tgc.runtimes.base import RuntimeUnavailable

BUNDLE_FILES = {"manifest.json", "model.metal", "model.h", "model.m", "main.c", "Makefile", "weights.safetensors"}
KIND_NAMES = {"TG_INPUT": "input", "TG_OUTPUT": "output", "TG_WEIGHT": "weight", "TG_ARENA": "arena"}

needs_clang = pytest.mark.skipif(metal_check.clang() is None or metal_check.objc_clang() is None,
                                 reason="clang/clang++ not installed (apt-get install clang)")


# ---------------------------------------------------------------- models

CASES = {"mlp": mlp_case, "cnn": cnn_case, "two_io": two_io_case, "hostile": hostile_case, "softmax": softmax_case,
         "half": half_case, "odd": odd_case}


def emit(root, case: ModelCase, sub: str) -> str: return emit_folder(root, case, sub=sub, target="metal")


@pytest.fixture(scope="session")
def bundles(tmp_path_factory):
  """Artifact folders written once per test process (tests copy them before changing anything)."""
  return emit_cases(tmp_path_factory.mktemp("metal_bundles"), CASES, "metal")


def table(source: str, name: str) -> list[str]:
  """The rows of the C table `name` in generated model.m."""
  body = re.search(rf"^static const \w+ (?:\*const )?{name}\[\] = \{{\n(.*?)\n\}};", source, re.S | re.M)
  assert body is not None, name
  return [row.strip() for row in body.group(1).splitlines() if not row.lstrip().startswith("//")]


# ---------------------------------------------------------------- files and manifest

@pytest.mark.parametrize("name", ["mlp", "cnn", "softmax", "hostile"])
def test_files_and_manifest(bundles, name):
  case, folder = bundles[name]
  manifest = checked_manifest(folder, BUNDLE_FILES, "metal", case)
  info = manifest["target_info"]
  assert info["kernel_source"] == "model.metal" and info["source"] == "model.m" and info["objc_arc"] is True
  assert info["frameworks"] == ["Metal", "Foundation"] and info["fast_math"] is False
  metal = Path(folder, "model.metal").read_text()
  assert metal.count("#include <metal_stdlib>") == 1 and metal.count("using namespace metal;") == 1
  assert re.findall(r"^kernel void (\w+)\(", metal, re.M) == [k["name"] for k in manifest["kernels"]]
  kernels = {k["name"]: k for k in manifest["kernels"]}
  assert [launch["kernel"] for launch in info["launches"]] == [c["kernel"] for c in manifest["calls"]]
  for launch, call in zip(info["launches"], manifest["calls"]):
    k = kernels[launch["kernel"]]
    assert launch["threads"] == k["local_size"]
    assert [g * t for g, t in zip(launch["threadgroups"], launch["threads"])] == k["global_size"]
    assert [b["binding"] for b in launch["buffers"]] == [a["index"] for a in k["args"]]
    for b in launch["buffers"]:
      assert call["args"][b["binding"]] == {"kind": b["kind"], "index": b["index"]}


@needs_clang
@pytest.mark.parametrize("name", ["mlp", "cnn", "softmax", "half", "hostile"])
def test_every_kernel_passes_the_shim(bundles, name):
  folder = bundles[name][1]
  metal = Path(folder, "model.metal").read_text()
  errors = metal_check.syntax_errors(metal)
  assert errors == "", f"{name}:\n{errors}"
  if name == "softmax": assert "threadgroup_barrier(mem_flags::mem_threadgroup);" in metal
  if name == "half": assert "half" in metal


def test_model_m_tables_are_the_manifest_plan(bundles):
  """model.m's launch, buffer, kernel and weight tables hold the plan MetalArtifact runs (manifest.json)."""
  for name in ("cnn", "hostile", "two_io"):
    folder = bundles[name][1]
    manifest, source = manifest_of(folder), Path(folder, "model.m").read_text()
    kernels = [k["name"] for k in manifest["kernels"]]
    assert [json.loads(row.rstrip(",")) for row in table(source, "tg_kernels")] == kernels
    calls = [tuple(map(int, re.findall(r"\d+", row))) for row in table(source, "tg_calls")]
    args = [re.match(r"\{(\d+), (TG_\w+), (\d+), (\d+)\},$", row).groups() for row in table(source, "tg_args")]
    plan = manifest["target_info"]["launches"]
    assert len(calls) == len(plan)
    for (kernel, nargs, args_at, *dims), launch in zip(calls, plan):
      assert kernels[kernel] == launch["kernel"] and dims == launch["threadgroups"] + launch["threads"]
      got = [{"binding": int(b), "kind": KIND_NAMES[k], "index": int(i), "offset": int(o)}
             for b, k, i, o in args[args_at:args_at + nargs]]
      assert got == launch["buffers"]
    weights = Path(folder, "weights.safetensors").read_bytes()
    rows = [re.match(r"\{(\d+), (\d+), 0x([0-9a-f]{8})UL\},", row).groups() for row in table(source, "tg_weights")]
    tensors = manifest["weights"]["tensors"]
    assert [(int(o), int(n)) for o, n, _ in rows] == [(t["offset"], t["nbytes"]) for t in tensors]
    import zlib
    for offset, nbytes, crc in rows:
      assert zlib.crc32(weights[int(offset):int(offset) + int(nbytes)]) == int(crc, 16)


# ---------------------------------------------------------------- the whole model on the CPU through the shim

@needs_clang
def test_f16_artifact_on_cpu(tmp_path):
  """--precision f16: the kernels compute in half, the whole model run through the shim is within the f16
  tolerance."""
  skip_without_cpu_compiler()
  case = cnn_case()
  folder = emit_folder(tmp_path, case, sub="cnn_f16", target=Target.make("metal", precision="f16"))
  assert re.search(r"\bhalf \w+ = ", Path(folder, "model.metal").read_text())
  with MetalArtifact(folder, backend=metal_check.CPUBackend()) as art:
    compare_f16(art.run(case.inputs), case.reference())


@needs_clang
@pytest.mark.parametrize("name", ["mlp", "cnn", "two_io", "softmax", "half", "odd"])
def test_artifact_on_cpu_matches_reference(bundles, name):
  skip_without_cpu_compiler()
  case, folder = bundles[name]
  backend = metal_check.CPUBackend()
  with MetalArtifact(folder, backend=backend) as art:
    want = case.reference()
    compare(art.run(case.inputs), want, case.rtol, case.atol)
    compare(art.run(case.inputs), want, case.rtol, case.atol)      # a second run reuses the buffers and arena
    assert backend.launched == 2 * [c["kernel"] for c in art.manifest["calls"]]
    times = art.time(case.inputs, runs=2, warmup=1)
    assert len(times) == 2 and all(t >= 0 for t in times)


@needs_clang
def test_cpu_run_catches_a_wrong_kernel_or_offset(bundles, tmp_path):
  """Controls: the comparison above fails on a real bug. A kernel whose accumulation subtracts, and a plan whose
  arena offsets move one intermediate onto another's bytes, both give wrong outputs."""
  skip_without_cpu_compiler()
  case, folder = bundles["cnn"]
  want = case.reference()
  wrong = copy(folder, tmp_path, "wrong_kernel")
  metal = Path(wrong, "model.metal").read_text()
  first = re.search(r"(acc\d+) = \(\1\+", metal)
  assert first is not None, "no accumulation to break"
  metal = metal.replace(first.group(0), f"{first.group(1)} = ({first.group(1)}-", 1)
  Path(wrong, "model.metal").write_text(metal)
  manifest = manifest_of(wrong)
  manifest["files"]["model.metal"] = hashlib.sha256(metal.encode()).hexdigest()
  Path(wrong, "manifest.json").write_text(json.dumps(manifest))
  with MetalArtifact(wrong, backend=metal_check.CPUBackend()) as art:
    with pytest.raises(AssertionError): compare(art.run(case.inputs), want, case.rtol, case.atol)
  moved = copy(folder, tmp_path, "moved")
  manifest = manifest_of(moved)
  slots = {s["index"]: s for s in manifest["arena_buffers"]}
  # a launch writes an intermediate onto the bytes of one it reads that a later launch reads again
  plan = manifest["target_info"]["launches"]
  later = [{b["index"] for l in plan[i + 1:] for b in l["buffers"][1:] if b["kind"] == "arena"}
           for i in range(len(plan))]
  launch, read = next((l, b["index"]) for i, l in enumerate(plan) if l["buffers"][0]["kind"] == "arena"
                      for b in l["buffers"][1:] if b["kind"] == "arena" and b["index"] in later[i])
  written = launch["buffers"][0]["index"]
  assert slots[read]["offset"] != slots[written]["offset"]
  slots[written]["offset"] = slots[read]["offset"]
  for l in manifest["target_info"]["launches"]:
    for b in l["buffers"]:
      if b["kind"] == "arena" and b["index"] == written: b["offset"] = slots[read]["offset"]
  Path(moved, "manifest.json").write_text(json.dumps(manifest))
  with MetalArtifact(moved, backend=metal_check.CPUBackend()) as art:
    with pytest.raises(AssertionError): compare(art.run(case.inputs), want, case.rtol, case.atol)


def test_plan_checks(bundles, tmp_path):
  """A launch plan that disagrees with the manifest is refused before anything runs."""
  folder = copy(bundles["mlp"][1], tmp_path)
  good = manifest_of(folder)
  edits = {"kernel": lambda p: p[0].update(kernel="other"), "offset": lambda p: p[0]["buffers"][-1].update(offset=3),
           "kind": lambda p: p[0]["buffers"][0].update(kind="global"), "missing": lambda p: p.pop()}
  for label, edit in edits.items():
    manifest = json.loads(json.dumps(good))
    edit(manifest["target_info"]["launches"])
    Path(folder, "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="target_info.launches"):
      MetalArtifact(folder, backend=metal_check.CPUBackend())


def test_weights_and_input_errors(bundles, tmp_path):
  case, folder = bundles["two_io"]
  good = Path(folder, "weights.safetensors").read_bytes()
  bad = bytearray(good)
  bad[manifest_of(folder)["weights"]["header_bytes"] + 5] ^= 0x40
  variants = {"truncated": (good[:-3], "truncated"), "long": (good + b"\0", "longer than expected"),
              "data": (bytes(bad), "does not match this model")}
  for label, (data, message) in variants.items():
    path = tmp_path / f"{label}.safetensors"
    path.write_bytes(data)
    with pytest.raises(ArtifactError, match=message):
      MetalArtifact(folder, weights_path=str(path), backend=metal_check.CPUBackend())
  with pytest.raises(ArtifactError, match="cannot open the weights file"):
    MetalArtifact(folder, weights_path=str(tmp_path / "missing"), backend=metal_check.CPUBackend())
  modified = copy(folder, tmp_path)
  with open(os.path.join(modified, "model.metal"), "a") as f: f.write("\n")
  with pytest.raises(ArtifactError, match="file .*model.metal differs from the one compiled"):
    MetalArtifact(modified, backend=metal_check.CPUBackend())
  with pytest.raises(ArtifactError, match="not a Metal artifact"):
    c_folder = tmp_path / "c_bundle"
    c_folder.mkdir()
    write_artifact(mlp_case().compile(), str(c_folder))
    MetalArtifact(str(c_folder), backend=metal_check.CPUBackend())
  if cpu_compiler() is None: return
  x, n = case.inputs["x"], case.inputs["n"]
  with MetalArtifact(folder, backend=metal_check.CPUBackend()) as art:
    for bad_inputs, msg in [({"x": x}, "missing input 'n'"), ({"x": x, "n": n, "z": x}, "unknown input 'z'"),
                            ({"x": x.astype(np.float64), "n": n}, "input 'x': dtype float64, expected float32")]:
      with pytest.raises(ValueError, match=msg): art.run(bad_inputs)
  with pytest.raises(ValueError, match="closed"): art.run(case.inputs)


# ---------------------------------------------------------------- the Objective-C loader and the C example

@needs_clang
@pytest.mark.parametrize("name", ["mlp", "cnn", "two_io", "hostile"])
def test_loader_passes_the_objc_shim(bundles, name):
  errors = metal_check.objc_errors(os.path.join(bundles[name][1], "model.m"))
  assert errors == "", errors


BAD_LOADERS = [
  ("misspelled selector", ("threadsPerThreadgroup:MTLSizeMake", "threadsPerThreadGroup:MTLSizeMake"),
   "dispatchThreadgroups:threadsPerThreadGroup:"),
  ("unknown method", ("[encoder endEncoding];", "[encoder endEncodng];"), "endEncodng"),
  ("wrong argument type", ("dispatchThreadgroups:MTLSizeMake(call->groups[0], call->groups[1], call->groups[2])",
                           "dispatchThreadgroups:call->groups[0]"), "incompatible type 'MTLSize'"),
  ("wrong protocol", ("id<MTLCommandBuffer> commands = [queue commandBuffer];",
                      "id<MTLBuffer> commands = [queue commandBuffer];"), "incompatible type"),
  ("cast without bridge", ("return (__bridge_retained void *)object;", "return (void *)object;"), "bridged cast"),
  ("unknown property", ("options.fastMathEnabled = NO;", "options.fastMath = NO;"), "property 'fastMath' not found"),
  ("method of another protocol", ("[commands waitUntilCompleted];", "[encoder waitUntilCompleted];"),
   "waitUntilCompleted"),
]


@needs_clang
@pytest.mark.parametrize("what,edit,message", BAD_LOADERS, ids=[b[0] for b in BAD_LOADERS])
def test_objc_shim_rejects_bad_loaders(bundles, tmp_path, what, edit, message):
  folder = copy(bundles["mlp"][1], tmp_path)
  old, new = edit
  source = Path(folder, "model.m").read_text()
  assert source.count(old) == 1, old
  Path(folder, "model.m").write_text(source.replace(old, new))
  errors = metal_check.objc_errors(os.path.join(folder, "model.m"))
  assert "error" in errors, f"{what}: accepted"
  assert message in errors, errors


@pytest.mark.parametrize("compiler", ["gcc", "clang"])
def test_main_and_header_are_pedantic_c99(bundles, tmp_path, compiler):
  """main.c and model.h are plain C: pedantic C99 (and model.h C++) with every warning an error."""
  require_tool(compiler, compiler)
  for name in ("mlp", "hostile"):
    folder = bundles[name][1]
    run([compiler, *C_WARNINGS, "-fsyntax-only", "-I", folder, os.path.join(folder, "main.c")])
    header = tmp_path / f"{name}.cpp"
    header.write_text('#include "model.h"\nint main() { return (int)sizeof(struct ' +
                      manifest_of(folder)["target_info"]["api_prefix"] + '_ctx) > 0 ? 0 : 1; }\n')
    cxx = "g++" if compiler == "gcc" else "clang++"
    if shutil.which(cxx): run([cxx, "-std=c++11", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", "-I", folder,
                               str(header)])


def test_makefile_commands(bundles, tmp_path):
  require_tool("make", "make")
  folder = copy(bundles["mlp"][1], tmp_path)
  out = "\n".join(" ".join(line.split()) for line in run(["make", "-n"], cwd=folder).stdout.splitlines())
  assert "xcrun -sdk macosx metal -O2 -fno-fast-math -c model.metal -o model.air" in out
  assert "xcrun -sdk macosx metallib model.air -o model.metallib" in out
  assert "clang -x objective-c -fobjc-arc -O2 -c model.m -o model.o" in out
  assert "clang -std=c99 -O2 -c main.c -o main.o" in out
  assert "-o main main.o libmodel.a -framework Metal -framework Foundation" in out
  assert "metallib" not in run(["make", "-n", "main"], cwd=folder).stdout


def test_hostile_names_stay_in_literals(bundles):
  folder = bundles["hostile"][1]
  manifest = manifest_of(folder)
  assert [t["name"] for t in manifest["inputs"]] == list(HOSTILE_INPUTS)
  for fname in BUNDLE_FILES - {"manifest.json", "weights.safetensors"}:
    source = Path(folder, fname).read_text(encoding="ascii")
    assert "??" not in source, fname
    outside = re.sub(r'"(?:[^"\\\n]|\\.)*"', '""', source)
    outside = re.sub(r"//[^\n]*", "//", outside)     # comments hold names only as comment_safe text
    assert "*/ name" not in outside and "ird\\" not in outside and "main!" not in outside, fname
  for t in manifest["inputs"] + manifest["outputs"] + manifest["weights"]["tensors"]:
    assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", t["symbol"]), t["symbol"]


def test_deterministic(tmp_path):
  assert_same_files(emit(tmp_path, cnn_case(), "a"), emit(tmp_path, cnn_case(), "b"))


def test_writer_refusals(tmp_path):
  cm = mlp_case().compile("metal")
  check_write_refusals(cm, tmp_path, metal_sources)
  check_params_are_read_as_data(cm, metal_sources)


# ---------------------------------------------------------------- the tgc command line

def test_cli_compile_and_run_without_metal(tmp_path):
  """`tgc compile --target metal` works anywhere; run/validate/bench need macOS and say so in one line (exit 2)."""
  model, out = str(ROOT / "examples" / "tiny_mlp.py") + ":build", tmp_path / "mlp"
  result = tgc("compile", model, "--target", "metal", "-o", out)
  assert result.exit_code == 0 and "for metal" in result.stdout, result.output
  assert manifest_of(str(out))["target"] == "metal" and (out / "model.m").is_file()
  result = tgc("inspect", out)
  assert result.exit_code == 0 and "target metal" in result.stdout, result.output
  if sys.platform == "darwin": return
  np.save(tmp_path / "x.npy", np.ones((2, 16), np.float32))
  for args in (("run", out, "--input", f"features={tmp_path / 'x.npy'}", "-o", tmp_path / "o.npz"),
               ("validate", out), ("bench", out, "--runs", "1")):
    result = tgc(*args)
    assert result.exit_code == 2, (args, result.output)
    assert result.stderr.strip().count("\n") == 0 and "needs macOS" in result.stderr, result.stderr
  result = tgc("compile", model, "--target", "metal", "--embed-weights", "-o", tmp_path / "embedded")
  assert result.exit_code == 2 and "--embed-weights is not supported for target" in result.stderr
  assert not (tmp_path / "embedded").exists()


def test_runtime_unavailable_off_macos(bundles):
  if sys.platform == "darwin": pytest.skip("on macOS the Metal artifact can run")
  with pytest.raises(RuntimeUnavailable, match="needs macOS"): MetalArtifact(bundles["mlp"][1])


# ---------------------------------------------------------------- macOS only: Apple's compilers, model.m, the GPU

@pytest.fixture(scope="module")
def metal_backend():
  from tgc.runtimes.artifact_metal import MetalBackend
  try:
    return MetalBackend()
  except RuntimeUnavailable as error:
    pytest.skip(str(error))


@pytest.mark.parametrize("name", ["mlp", "cnn", "two_io", "softmax", "half", "odd"])
def test_artifact_on_metal_matches_reference(bundles, metal_backend, name):
  case, folder = bundles[name]
  with MetalArtifact(folder, backend=metal_backend) as art:
    compare(art.run(case.inputs), case.reference(), case.rtol, case.atol)


def test_make_and_main_on_macos(bundles, metal_backend, tmp_path):
  """Apple's metal compiler, clang -fobjc-arc and the example program on the real device."""
  require_tool("xcrun", "Xcode")
  case, folder = bundles["two_io"]
  folder = copy(folder, tmp_path)
  run(["make", "-s"], cwd=folder)
  manifest = manifest_of(folder)
  for spec in manifest["inputs"]: np.save(os.path.join(folder, f"{spec['symbol']}.npy"), case.inputs[spec["name"]])
  result = run(["./main"], cwd=folder)
  assert "kernels: model.metallib" in result.stdout
  outs = {s["name"]: np.load(os.path.join(folder, f"{s['symbol']}.npy")) for s in manifest["outputs"]}
  compare(outs, case.reference(), case.rtol, case.atol)
  os.unlink(os.path.join(folder, "model.metallib"))
  assert "compiled at init" in run(["./main"], cwd=folder).stdout
  r = subprocess.run(["./main", "--weights", "missing.safetensors"], cwd=folder, capture_output=True, text=True)
  assert r.returncode == 1 and "cannot open the weights file" in r.stderr
