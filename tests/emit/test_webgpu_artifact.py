"""The standalone WebGPU artifact: files, manifest (schema, hashes) and the plan inside model.js (the kernels' WGSL
byte for byte, whole-buffer slots, launch sizes), WebGPUArtifact on wgpu (lavapipe) against the numpy interpreter
for an MLP, a small CNN, softmax, 8-bit integer, float16 (odd lengths), int64 and 0-d models, weights and input errors,
determinism, `tgc compile --target webgpu` + validate/run/bench/inspect, model.js under node (syntax, float16
helpers, weights checks, the missing-WebGPU error) and the real loader in headless Chromium (SwiftShader WebGPU)
driven by Playwright: given and seeded inputs, concurrent runs, errors, and the demo page without WebGPU."""
from __future__ import annotations
import dataclasses
import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

import headless_chromium as chromium
from headless_chromium import (PAGE_TIMEOUT_MS, PLAIN_OUTPUTS, demo_outputs, from_plain, open_demo, outputs_from,
                               plain_inputs)
from artifact_cases import (ROOT, ModelCase, assert_same_files, check_cli_round_trip, check_write_refusals, cnn_case,
                            convnet_case, emit_cases, emit_folder, hostile_case, manifest_of, mlp_case, odd_case, run,
                            softmax_case, tgc)
from wgsl_source import declared_bindings, reported_bindings
from tgc.aot.artifact import artifact_runtime, open_artifact
from tgc.aot.validate import F16_TOLERANCE
from tgc.codegen.target import Target
from tgc.emit import write_artifact
from tgc.emit import npm
from tgc.emit import webgpu as emit_webgpu
from tgc.emit.manifest import validate_manifest
from tgc.emit.webgpu import DEFAULT_LIMITS, webgpu_sources
from tgc.frontend import Tensor
from tgc.ir import dtypes
from tgc.runtimes import RuntimeUnavailable, get_runtime
from tgc.runtimes import artifact_webgpu
from tgc.runtimes.artifact import ArtifactError
from tgc.runtimes.artifact_webgpu import WebGPUArtifact, read_plan

BUNDLE_FILES = {"manifest.json", "model.js", "model.d.ts", "index.html", "weights.safetensors", "package.json"}
HOSTILE_INPUTS = ('we"ird\\ */ </script> name\n%s \u00fc', "int")


# ---------------------------------------------------------------- models

def build_small_ints(device: str):
  """uint8 and int8 inputs of odd length; uint8, int8 (wrapping), int32 and bool outputs (packed stores)."""
  k = Tensor(np.arange(7, dtype=np.int8) - 3, device=device)

  def forward(x, y):
    return x + 5, y * k, x.cast(dtypes.int32) * 3 - y.cast(dtypes.int32), x > 100
  return forward


def build_half(device: str):
  """float16 input, weight and outputs, all of odd lengths."""
  w = Tensor(np.random.default_rng(4).standard_normal((7, 3)).astype(np.float16), device=device)
  return lambda x: ((x @ w).relu(), x * 2 + 1)


def build_int64(device: str):
  """int64 input, weight and output (32-bit words on the device) next to float32 -> int32 argmax."""
  w = Tensor(np.array([1, -2, 3, -4, 5], dtype=np.int64), device=device)
  return lambda x, v: (x * 3 + w, v.argmax(-1))


def build_scalar(device: str):
  """A 0-d input (a TypedArray of length 1 in model.js) and a 0-d output (shape [])."""
  return lambda x, v: (v * x, (v * v).sum() + x)


def scalar_case() -> ModelCase:
  rng = np.random.default_rng(9)
  return ModelCase("scalar", build_scalar, {"x": np.array(1.75, np.float32),
                                            "v": rng.standard_normal((3,)).astype(np.float32)})


def ints_case() -> ModelCase:
  rng = np.random.default_rng(6)
  return ModelCase("ints", build_small_ints, {"x": rng.integers(0, 256, (3, 7)).astype(np.uint8),
                                              "y": rng.integers(-128, 128, (3, 7)).astype(np.int8)}, rtol=0, atol=0)


def half_case() -> ModelCase:
  x = np.random.default_rng(7).standard_normal((5, 7)).astype(np.float16)
  return ModelCase("half", build_half, {"x": x}, rtol=1e-2, atol=1e-2)


def int64_case() -> ModelCase:
  rng = np.random.default_rng(8)
  return ModelCase("int64", build_int64, {"x": rng.integers(-50, 50, (5,)).astype(np.int64),
                                          "v": rng.standard_normal((3, 9)).astype(np.float32)}, rtol=0, atol=0)


CASES = {"mlp": mlp_case, "cnn": cnn_case, "softmax": softmax_case, "ints": ints_case, "half": half_case,
         "int64": int64_case, "scalar": scalar_case,
         "hostile": lambda: hostile_case(HOSTILE_INPUTS, 'hostile "model" */ -->'), "odd": odd_case,
         "convnet": convnet_case}
RUN_CASES = ["mlp", "cnn", "softmax", "ints", "half", "int64", "scalar", "hostile", "odd"]


def with_inputs(case: ModelCase, inputs: dict[str, np.ndarray]) -> ModelCase:
  return dataclasses.replace(case, inputs=inputs)


def compare(got: dict[str, np.ndarray], want: dict[str, np.ndarray], case: ModelCase) -> None:
  assert list(got) == list(want)
  for name in want:
    assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape, name
    np.testing.assert_allclose(got[name].astype(np.float64), want[name].astype(np.float64), rtol=case.rtol,
                               atol=case.atol, err_msg=name)


def plan_of(folder: str) -> dict:
  with open(os.path.join(folder, "model.js"), encoding="utf-8") as f: return read_plan(f.read())


@pytest.fixture(scope="session")
def bundles(tmp_path_factory):
  """Artifact folders (one per case, under one root that the browser tests serve), written once per process."""
  return emit_cases(tmp_path_factory.mktemp("webgpu_bundles"), CASES, "webgpu")


@pytest.fixture(scope="session")
def references(bundles):
  return {name: case.reference() for name, (case, _) in bundles.items()}


@pytest.fixture(scope="session")
def wgpu_runtime():
  """The wgpu runtime; skips naming what is missing (the wgpu package, a Vulkan adapter)."""
  try:
    return get_runtime("webgpu")
  except RuntimeUnavailable as error:
    pytest.skip(str(error))


# ---------------------------------------------------------------- files, manifest, plan

@pytest.mark.parametrize("name", list(CASES))
def test_files_manifest_and_plan(bundles, name):
  case, folder = bundles[name]
  assert set(os.listdir(folder)) == BUNDLE_FILES
  manifest = manifest_of(folder)
  validate_manifest(manifest)
  assert manifest["target"] == "webgpu" and manifest["model"]["name"] == case.name
  assert set(manifest["files"]) == BUNDLE_FILES - {"manifest.json"}
  for file, digest in manifest["files"].items():
    assert hashlib.sha256(Path(folder, file).read_bytes()).hexdigest() == digest, file
  info = manifest["target_info"]
  assert info["module"] == "model.js" and info["types"] == "model.d.ts" and info["demo"] == "index.html"
  assert info["renderer"] == "webgpu+narrow_int64+narrow_f64"
  plan = plan_of(folder)
  # kernel variants: the main ("gpu") one first; a "cpu" one (no workgroup tiles) exactly when some kernel differs,
  # and then the main one is for hardware adapters only; the "cpu" one names its quick companion when some kernel
  # has a quick form, which differs from the kernel's "cpu" one
  variants = plan["variants"]
  assert info["variants"] == variants and [v["features"] for v in variants] == [[]] * len(variants)
  assert variants[0]["name"] == "gpu" and variants[-1]["adapters"] == "any"
  differing = [k for k in plan["kernels"] if "cpu" in k.get("variants", {})]
  assert [v["name"] for v in variants] == (["gpu", "cpu"] if differing else ["gpu"])
  assert variants[0]["adapters"] == ("hardware" if differing else "any")
  quick = [k for k in plan["kernels"] if "cpu-quick" in k.get("variants", {})]
  assert variants[-1].get("quick") == ("cpu-quick" if quick else None)
  for k in plan["kernels"]:
    assert set(k.get("variants", {})) <= {"cpu", "cpu-quick"}
    for name, lines in k.get("variants", {}).items():
      assert lines != k["wgsl"] and lines != (k["variants"].get("cpu") if name == "cpu-quick" else None)
  assert [t["name"] for t in plan["inputs"]] == [t["name"] for t in manifest["inputs"]]
  assert [t["name"] for t in plan["outputs"]] == [t["name"] for t in manifest["outputs"]]
  assert plan["weightsBytes"] == manifest["weights"]["nbytes"]
  assert plan["weightsSha256"] == manifest["weights"]["sha256"]
  data = Path(folder, "weights.safetensors").read_bytes()
  size = plan["weightsBlockBytes"]
  assert size % 16 == 0 and size >= manifest["weights"]["header_bytes"]
  assert plan["weightsBlocks"] == [hashlib.sha256(data[i:i + size]).hexdigest() for i in range(0, len(data), size)]
  assert plan["weightsParts"] == [{"file": "weights.safetensors", "bytes": len(data)}]
  # what a page downloads: model.js (the WGSL inside it) and the weights
  sizes = info["download_bytes"]
  assert sizes["js"] == os.path.getsize(Path(folder, "model.js")) and sizes["weights"] == len(data)
  assert sizes["total"] == sizes["js"] + sizes["weights"]
  wgsl = sum(len("\n".join(w).encode()) for k in plan["kernels"] for w in [k["wgsl"], *k.get("variants", {}).values()])
  assert 0 < sizes["wgsl_cpu"] <= sizes["wgsl"] == wgsl < sizes["js"]
  package = json.loads(Path(folder, "package.json").read_text())
  assert package["name"] == npm.check_package_name(npm.default_package_name(case.name))
  assert package["version"] == "1.0.0" and case.name in package["description"]
  assert package["exports"]["."] == {"types": "./model.d.ts", "default": "./model.js"}
  assert package["exports"]["./weights.safetensors"] == "./weights.safetensors" and package["type"] == "module"
  assert set(package["files"]) == BUNDLE_FILES - {"package.json"}
  assert info["npm_package"] == {"name": package["name"], "version": "1.0.0"}
  header = Path(folder, "weights.safetensors").read_bytes()[:manifest["weights"]["header_bytes"]]
  assert header[8:].decode("ascii") == plan["header"]
  assert [w["offset"] for w in plan["weights"]] == [t["offset"] for t in manifest["weights"]["tensors"]]
  # the kernels' WGSL is the compiled source, byte for byte, with the bindings it declares
  cm = case.compile("webgpu")
  assert [k["name"] for k in plan["kernels"]] == list(cm.kernels)
  for k in plan["kernels"]:
    src = cm.kernels[k["name"]].src
    assert "\n".join(k["wgsl"]) == src.rstrip("\n")
    assert [b + [e] for b, (*_, e) in zip(k["bindings"], declared_bindings(src))] == declared_bindings(src) \
      == reported_bindings(cm.kernels[k["name"]])
    assert k["workgroupSize"] == list(cm.kernels[k["name"]].local_size)
  assert len(plan["calls"]) == len(manifest["calls"]) == len(cm.calls)
  for call, c in zip(plan["calls"], cm.calls):
    k = cm.kernels[c.kernel]
    assert plan["kernels"][call["kernel"]]["name"] == c.kernel
    assert call["workgroups"] == [g // s for g, s in zip(k.global_size, k.local_size)]
  assert set(plan["limits"]) == set(DEFAULT_LIMITS)
  assert plan["limits"]["maxStorageBuffersPerShaderStage"] == max(len(k["bindings"]) for k in plan["kernels"])
  assert plan["limits"]["maxComputeWorkgroupsPerDimension"] == max(n for c in plan["calls"] for n in c["workgroups"])
  assert plan["requestLimits"] == {}          # small models need nothing beyond the defaults every device has
  assert info["limits_needed"] == plan["limits"] and info["limits_requested"] == {}


def test_whole_buffer_plan(bundles):
  """One GPUBuffer per slot: no call binds a buffer twice when one binding is writable, slots are shared by
  intermediates of disjoint lifetimes, and sizes are multiples of 16 that hold each tensor."""
  for name, (_, folder) in bundles.items():
    plan, manifest = plan_of(folder), manifest_of(folder)
    slots = [b for b in plan["buffers"] if b["label"].startswith("slot ")]
    assert len(slots) <= len(manifest["arena_buffers"]), name
    assert [b["size"] for b in slots] == manifest["target_info"]["slot_buffers"]
    assert all(b["size"] % 16 == 0 and b["size"] >= 16 for b in plan["buffers"])    # array<vec4<...>> bindings
    for t in plan["inputs"] + plan["outputs"] + plan["weights"]:
      narrow = 2 if t["dtype"] in ("int64", "uint64") else 1
      assert plan["buffers"][t["buffer"]]["size"] >= t["nbytes"] // narrow
    for call in plan["calls"]:
      bindings = plan["kernels"][call["kernel"]]["bindings"]
      for i, (_, read_only, _) in enumerate(bindings):
        for j in range(i + 1, len(bindings)):
          if call["args"][i] == call["args"][j]: assert read_only and bindings[j][1], (name, call)
      written = [a for a, b in zip(call["args"], bindings) if not b[1]]
      assert set(call["clear"]) <= set(written)
  cnn = plan_of(bundles["cnn"][1])
  cnn_slots = sum(b["label"].startswith("slot ") for b in cnn["buffers"])
  assert cnn_slots < len(manifest_of(bundles["cnn"][1])["arena_buffers"])     # slots are shared


def test_packed_outputs_are_cleared(bundles):
  """Sub-32-bit outputs are stored with atomicOr, so their calls clear them first."""
  for name in ("ints", "half"):
    plan = plan_of(bundles[name][1])
    outputs = {t["buffer"] for t in plan["outputs"] if t["dtype"] in ("uint8", "int8", "bool", "float16")}
    cleared = {b for c in plan["calls"] for b in c["clear"]}
    assert outputs and outputs <= cleared, name


def test_types_and_demo_page(bundles):
  _, folder = bundles["int64"]
  dts = Path(folder, "model.d.ts").read_text()
  assert '"x": BigInt64Array;' in dts and '"v": Float32Array;' in dts
  assert '"output_0": { data: BigInt64Array; shape: number[] };' in dts and '"output_1": { data: Int32Array' in dts
  assert 'export type InputName = "x" | "v";' in dts and "export declare function load(" in dts
  half = Path(bundles["half"][1], "model.d.ts").read_text()
  assert '"x": Uint16Array;' in half
  page = Path(folder, "index.html").read_text()
  assert 'import { load, inputs as SPECS, dtypeArrays, toFloat16Bits, fromFloat16Bits } from "./model.js";' in page
  assert "window.tgcResult = { outputs, ms, runs, variant: model.variant }" in page


def test_hostile_names_stay_in_strings(bundles):
  _, folder = bundles["hostile"]
  js, dts, page = (Path(folder, f).read_text() for f in ("model.js", "model.d.ts", "index.html"))
  for text in (js, dts, page): assert text.isascii()
  for text in (js, page): assert "</script>" not in text.replace("</script>\n</body>", "")
  assert json.dumps(HOSTILE_INPUTS[0]).replace("</", "<\\/") in js and json.dumps(HOSTILE_INPUTS[0]) in dts
  assert "hostile &quot;model&quot; */ --&gt;" in page
  assert [t["name"] for t in plan_of(folder)["inputs"]] == list(HOSTILE_INPUTS)


def test_deterministic(tmp_path):
  a, b = (emit_folder(tmp_path, cnn_case(), sub=sub, target="webgpu") for sub in ("a", "b"))
  assert_same_files(a, b)


def test_writer_refusals(tmp_path):
  cm = mlp_case().compile("webgpu")
  check_write_refusals(cm, tmp_path, webgpu_sources)


def test_int64_weights_must_fit_in_32_bits():
  big = Tensor(np.array([1, 2 ** 40], dtype=np.int64), device="c")
  case = ModelCase("big", lambda device: (lambda x: x + big), {"x": np.zeros(2, np.int64)})
  with pytest.raises(ValueError, match=r"webgpu: weight 'w0' \(int64\) holds values outside the 32-bit range"):
    webgpu_sources(case.compile("webgpu"))


def test_plan_markers_agree():
  assert (emit_webgpu.PLAN_BEGIN, emit_webgpu.PLAN_END) == (artifact_webgpu.PLAN_BEGIN, artifact_webgpu.PLAN_END)
  assert emit_webgpu.PLAN_FORMAT == artifact_webgpu.PLAN_FORMAT


# ---------------------------------------------------------------- WebGPUArtifact (wgpu)

@pytest.mark.parametrize("name", RUN_CASES)
def test_webgpu_artifact_matches_reference(bundles, references, wgpu_runtime, name):
  case, folder = bundles[name]
  with WebGPUArtifact(folder) as art:
    got = art.run(case.inputs)
    compare(got, references[name], case)
    again = art.run(case.inputs)        # buffers are reused: a second run gives the same result
    for k in got: np.testing.assert_array_equal(got[k], again[k])


def test_webgpu_artifact_other_inputs(bundles, wgpu_runtime):
  case, folder = bundles["cnn"]
  with WebGPUArtifact(folder) as art:
    for seed in (11, 12):
      inputs = {"image": np.random.default_rng(seed).standard_normal((1, 3, 8, 8), dtype=np.float32)}
      compare(art.run(inputs), with_inputs(case, inputs).reference(), case)


def test_webgpu_artifact_kernel_variants(bundles, references, wgpu_runtime):
  """The cnn bundle has a kernel variant without workgroup tiles ("cpu"): the runner picks what model.js would
  (lavapipe is a software adapter: "cpu"), and each variant, forced, computes the same outputs."""
  case, folder = bundles["cnn"]
  assert [v["name"] for v in plan_of(folder)["variants"]] == ["gpu", "cpu"]
  with WebGPUArtifact(folder) as art: assert art.variant == ("cpu" if wgpu_runtime.software else "gpu")
  for variant in ("gpu", "cpu"):
    with WebGPUArtifact(folder, variant=variant) as art:
      assert art.variant == variant
      compare(art.run(case.inputs), references["cnn"], case)
  with pytest.raises(ArtifactError, match="no kernel variant 'tiled'; the model has gpu, cpu"):
    WebGPUArtifact(folder, variant="tiled")


def test_webgpu_artifact_quick_kernels(bundles, references, wgpu_runtime):
  """The convnet's register-blocked convolutions have quick forms (the blocks as loops: one accumulator where the
  blocked kernel has several), which model.js runs while the blocked ones compile; forced, they compute the same
  outputs."""
  case, folder = bundles["convnet"]
  plan = plan_of(folder)
  assert plan["variants"][-1] == {"name": "cpu", "features": [], "adapters": "any", "quick": "cpu-quick"}
  for k in plan["kernels"]:
    accumulators = {v: sum(line.lstrip().startswith("var acc") for line in k["variants"][v])
                    for v in ("cpu", "cpu-quick")}
    assert accumulators["cpu-quick"] == 1 < accumulators["cpu"], k["name"]
  with WebGPUArtifact(folder, variant="cpu-quick") as art:
    assert art.variant == "cpu-quick"
    compare(art.run(case.inputs), references["convnet"], case)


@pytest.fixture(scope="session")
def f16_cnn(tmp_path_factory):
  """The cnn compiled with --precision f16: kernel variants gpu-f16, cpu-f16 (shader-f16), then gpu, cpu."""
  case = cnn_case()
  return case, emit_folder(tmp_path_factory.mktemp("f16"), case, sub="cnn_f16",
                           target=Target.make("webgpu", precision="f16"))


def test_f16_artifact_runs_f16_or_falls_back(f16_cnn, references, wgpu_runtime):
  """lavapipe has shader-f16: the runner picks cpu-f16, within the f16 tolerance and not float32-exact; the float32
  fallback (forced: what an adapter without shader-f16 runs) matches as float32 does."""
  case, folder = f16_cnn
  plan = plan_of(folder)
  assert [(v["name"], v["features"]) for v in plan["variants"]] == [
    ("gpu-f16", ["shader-f16"]), ("cpu-f16", ["shader-f16"]), ("gpu", []), ("cpu", [])]
  assert manifest_of(folder)["target_info"]["precision"] == "f16"
  want = references["cnn"]
  if "shader-f16" in wgpu_runtime.features:
    with WebGPUArtifact(folder) as art:
      assert art.variant == ("cpu-f16" if wgpu_runtime.software else "gpu-f16")
      got = art.run(case.inputs)
    for name in want:
      scale = np.abs(want[name]).max()
      diff = np.abs(got[name].astype(np.float64) - want[name])
      assert (diff <= F16_TOLERANCE * (np.abs(want[name]) + scale)).all(), name
      assert diff.max() > 1e-6 * scale, f"{name}: no float16 rounding at all"
  with WebGPUArtifact(folder, variant="cpu") as art: compare(art.run(case.inputs), want, case)


def test_cli_precision_f16(wgpu_runtime, tmp_path):
  """`tgc compile --precision f16`: refused for c (one line, exit 2); for webgpu `tgc validate` holds the artifact
  to the f16 tolerance (passes) and, given float32-sized tolerances, finds its half-precision rounding (exit 1)
  where the float32 artifact passes them."""
  model = str(ROOT / "examples" / "mnist_cnn.py") + ":build"
  result = tgc("compile", model, "--target", "c", "--precision", "f16", "-o", tmp_path / "c")
  assert result.exit_code == 2 and "--precision f16 applies to GPU targets" in result.stderr
  assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "c").exists()
  if "shader-f16" not in wgpu_runtime.features: pytest.skip(f"{wgpu_runtime.device_name} has no shader-f16")
  for precision in ("f32", "f16"):
    out = tmp_path / precision
    assert tgc("compile", model, "--target", "webgpu", "--precision", precision, "-o", out).exit_code == 0
    result = tgc("validate", out)
    assert result.exit_code == 0 and "OK" in result.stdout, result.output
    strict = tgc("validate", out, "--rtol", "1e-5", "--atol", "1e-6")
    assert strict.exit_code == (1 if precision == "f16" else 0), strict.output


def test_webgpu_artifact_time(bundles, wgpu_runtime):
  case, folder = bundles["mlp"]
  with WebGPUArtifact(folder) as art:
    times = art.time(case.inputs, runs=3, warmup=1)
  assert len(times) == 3 and all(t > 0 for t in times)


def test_webgpu_artifact_input_errors(bundles, wgpu_runtime):
  case, folder = bundles["int64"]
  art = WebGPUArtifact(folder)
  x, v = case.inputs["x"], case.inputs["v"]
  with pytest.raises(ArtifactError, match="missing input 'v'"): art.run({"x": x})
  with pytest.raises(ArtifactError, match="unknown input 'z'"): art.run({"x": x, "v": v, "z": x})
  with pytest.raises(ArtifactError, match="input 'x': dtype int32, expected int64"): art.run({"x": x.astype(np.int32),
                                                                                             "v": v})
  with pytest.raises(ArtifactError, match=r"input 'v': shape \(9, 3\)"): art.run({"x": x, "v": v.reshape(9, 3)})
  big = x.copy()
  big[3] = 2 ** 31
  with pytest.raises(ArtifactError, match="input 'x': value 2147483648 at flat index 3 does not fit in 32 bits"):
    art.run({"x": big, "v": v})
  art.close()
  with pytest.raises(ArtifactError, match="closed"): art.run(case.inputs)


def test_webgpu_artifact_refuses_modified_or_foreign(bundles, wgpu_runtime, tmp_path):
  _, folder = bundles["mlp"]
  copy = tmp_path / "mlp"
  shutil.copytree(folder, copy)
  weights = (copy / "weights.safetensors").read_bytes()
  (copy / "weights.safetensors").write_bytes(weights[:-5])
  with pytest.raises(ArtifactError, match="has 1195 bytes, the model expects 1200"): WebGPUArtifact(str(copy))
  (copy / "weights.safetensors").write_bytes(weights[:100])
  with pytest.raises(ArtifactError, match="truncated"): WebGPUArtifact(str(copy))
  flipped = bytearray(weights)
  flipped[-1] ^= 1
  (copy / "weights.safetensors").write_bytes(bytes(flipped))
  with pytest.raises(ArtifactError, match="sha256 differs"): WebGPUArtifact(str(copy))
  shutil.copy(Path(bundles["cnn"][1], "weights.safetensors"), copy / "weights.safetensors")
  with pytest.raises(ArtifactError, match="header differs"): WebGPUArtifact(str(copy))
  (copy / "weights.safetensors").write_bytes(weights)
  js = (copy / "model.js").read_text()
  (copy / "model.js").write_text(js.replace("pass.end();", "pass.end(); "))
  with pytest.raises(ArtifactError, match=r"file .*model.js differs from the one compiled \(sha256 mismatch"):
    WebGPUArtifact(str(copy))
  with pytest.raises(ArtifactError, match="is not a WebGPU artifact"):
    WebGPUArtifact(str(_c_bundle(tmp_path)))


def _c_bundle(tmp_path) -> Path:
  folder = tmp_path / "c_bundle"
  folder.mkdir()
  write_artifact(mlp_case().compile(), str(folder))
  return folder


def test_webgpu_artifact_needs_the_limits(bundles, wgpu_runtime, tmp_path):
  """A plan that needs more than the device grants is refused naming the limit."""
  _, folder = bundles["mlp"]
  copy = tmp_path / "mlp"
  shutil.copytree(folder, copy)
  js = re.sub(r'"maxStorageBuffersPerShaderStage": \d+', '"maxStorageBuffersPerShaderStage": 99',
              (copy / "model.js").read_text())
  (copy / "model.js").write_text(js)
  manifest = manifest_of(str(copy))
  manifest["files"]["model.js"] = hashlib.sha256(js.encode()).hexdigest()
  (copy / "manifest.json").write_text(json.dumps(manifest))
  with pytest.raises(RuntimeUnavailable, match="maxStorageBuffersPerShaderStage = 8; the model 'mlp' needs 99"):
    WebGPUArtifact(str(copy))


# ---------------------------------------------------------------- the tgc command line

def test_cli_compile_validate_run_bench_inspect(wgpu_runtime, tmp_path):
  check_cli_round_trip("webgpu", tmp_path, ["model.js", "index.html"])


def test_cli_validate_checks_the_quick_kernels_too(wgpu_runtime, tmp_path):
  """`tgc validate` of an artifact whose kernels have quick forms on this (software) device runs those as well, as
  model.js runs them first, and reports their outputs beside the blocked ones'."""
  import onnx
  from onnx import TensorProto, helper, numpy_helper
  w = numpy_helper.from_array(np.random.default_rng(8).standard_normal((16, 8, 3, 3)).astype(np.float32), "w")
  graph = helper.make_graph(
    [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])], "conv",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 32, 32])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 32, 32])], [w])
  model = tmp_path / "conv.onnx"
  onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
  assert tgc("compile", model, "--target", "webgpu", "-o", tmp_path / "out").exit_code == 0
  assert plan_of(str(tmp_path / "out"))["variants"][-1].get("quick") == "cpu-quick"
  result = tgc("validate", tmp_path / "out")
  assert result.exit_code == 0, result.output
  if wgpu_runtime.software: assert re.search(r"^  y \(cpu-quick kernels\) .* ok$", result.output, re.M), result.output


def test_cli_npm_name_and_download_sizes(tmp_path):
  """--npm-name/--npm-version name the package (a name npm refuses is a one-line user error, nothing written);
  `tgc inspect` reports the bytes a page downloads and the package."""
  model, out = str(ROOT / "examples" / "tiny_mlp.py") + ":build", tmp_path / "mlp"
  for option, value, why in (("--npm-name", "Tiny MLP", "npm names are lower case"),
                             ("--npm-name", "_tiny", "may not start with a dot or an underscore"),
                             ("--npm-name", "a/b", "only lower-case letters"),
                             ("--npm-version", "1.0", "is not a semantic version")):
    result = tgc("compile", model, "--target", "webgpu", "-o", out, option, value)
    assert result.exit_code == 2 and why in result.output and len(result.output.strip().splitlines()) == 1, \
      result.output
    assert not out.exists()
  assert "not supported for target c" in tgc("compile", model, "--target", "c", "-o", out, "--npm-name", "x").output
  result = tgc("compile", model, "--target", "webgpu", "-o", out, "--npm-name", "@acme/tiny-mlp", "--npm-version",
               "0.3.1-rc.1")
  assert result.exit_code == 0, result.output
  package = json.loads((out / "package.json").read_text())
  assert (package["name"], package["version"]) == ("@acme/tiny-mlp", "0.3.1-rc.1")
  sizes = manifest_of(str(out))["target_info"]["download_bytes"]
  text = tgc("inspect", out).output
  assert f"a page downloads {sizes['total']} bytes" in text and f"model.js {sizes['js']} bytes" in text
  assert "npm package: @acme/tiny-mlp 0.3.1-rc.1" in text


def _onnx_model(path: Path, kind: str = "int64") -> str:
  import onnx
  from onnx import TensorProto as T, helper
  if kind == "double":
    nodes = [helper.make_node("Mul", ["x", "x"], ["y"])]
    ins, outs, inits = [helper.make_tensor_value_info("x", T.DOUBLE, [4])], \
        [helper.make_tensor_value_info("y", T.DOUBLE, [4])], []
  elif kind == "bitcast":
    nodes = [helper.make_node("BitCast", ["x"], ["y"], to=T.INT64)]
    ins, outs, inits = [helper.make_tensor_value_info("x", T.DOUBLE, [4])], \
        [helper.make_tensor_value_info("y", T.INT64, [4])], []
  else:
    nodes = [helper.make_node("Add", ["x", "c"], ["s"]), helper.make_node("ArgMax", ["v"], ["am"], axis=1, keepdims=0)]
    ins = [helper.make_tensor_value_info("x", T.INT64, [2, 3]), helper.make_tensor_value_info("v", T.FLOAT, [2, 5])]
    outs = [helper.make_tensor_value_info("s", T.INT64, [2, 3]), helper.make_tensor_value_info("am", T.INT64, [2])]
    inits = [helper.make_tensor("c", T.INT64, [3], [1, -7, 100])]
  graph = helper.make_graph(nodes, "g", ins, outs, inits)
  opset = 26 if kind == "bitcast" else 17
  onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), str(path))
  return str(path)


def test_cli_onnx_int64_and_float64(wgpu_runtime, tmp_path):
  """ONNX int64 tensors run as 32-bit words (BEAM searches the same narrowed kernels) and validate exactly; float64
  tensors run as float32 and validate within float32 tolerances; a bitcast of 64-bit words is refused in one line."""
  from click.testing import CliRunner
  from tgc.aot.cli import cli
  model = _onnx_model(tmp_path / "i64.onnx")
  result = CliRunner().invoke(cli, ["compile", model, "-t", "webgpu", "--beam", "2", "-o", str(tmp_path / "i64")])
  assert result.exit_code == 0, result.output
  result = CliRunner().invoke(cli, ["validate", str(tmp_path / "i64")])
  assert result.exit_code == 0 and "OK" in result.stdout, result.output
  model = _onnx_model(tmp_path / "f64.onnx", "double")
  result = CliRunner().invoke(cli, ["compile", model, "-t", "webgpu", "-o", str(tmp_path / "f64")])
  assert result.exit_code == 0, result.output
  assert "float32" in json.loads((tmp_path / "f64" / "manifest.json").read_text())["target_info"]["float64"]
  result = CliRunner().invoke(cli, ["validate", str(tmp_path / "f64")])
  assert result.exit_code == 0 and "OK" in result.stdout, result.output
  model = _onnx_model(tmp_path / "bitcast.onnx", "bitcast")
  result = CliRunner().invoke(cli, ["compile", model, "-t", "webgpu", "-o", str(tmp_path / "bc")])
  assert result.exit_code == 2, result.output
  assert "cannot compile for webgpu" in result.stderr and "WGSL has no 64-bit types" in result.stderr
  assert not (tmp_path / "bc").exists()


# ---------------------------------------------------------------- model.js under node (no WebGPU there)

@pytest.fixture(scope="session")
def node():
  path = shutil.which("node")
  if path is None: pytest.skip("node not found: install the Debian package nodejs")
  return path


def node_eval(node: str, folder: str, body: str) -> str:
  """Run an ES module snippet with `m` = the bundle's model.js (copied as .mjs) and `weights` = its bytes."""
  module = Path(folder, "model.mjs")
  if not module.exists(): shutil.copy(Path(folder, "model.js"), module)
  script = (f"import * as m from {json.dumps(module.as_uri())};\nimport {{ readFileSync }} from 'node:fs';\n"
            f"const weights = new Uint8Array(readFileSync({json.dumps(str(Path(folder, 'weights.safetensors')))}));\n"
            f"{body}\n")
  return run([node, "--input-type=module", "-e", script]).stdout


def test_model_js_syntax(bundles, node, tmp_path):
  for name, (_, folder) in bundles.items():
    shutil.copy(Path(folder, "model.js"), tmp_path / f"{name}.mjs")
    run([node, "--check", str(tmp_path / f"{name}.mjs")])


def test_model_js_without_webgpu(bundles, node, tmp_path):
  folder = shutil.copytree(bundles["mlp"][1], tmp_path / "mlp")
  out = node_eval(node, str(folder), "try { await m.load(weights); } catch (e) { console.log(e.message); }")
  assert out.strip() == ('tgc model "mlp": WebGPU is not available: navigator.gpu is missing (use a browser with '
                         'WebGPU enabled, on https or localhost, or pass {device})')
  out = node_eval(node, str(folder), "console.log(JSON.stringify([m.name, m.inputs, m.outputs]));")
  assert json.loads(out) == ["mlp", [{"name": "x", "shape": [2, 8], "dtype": "float32"}],
                             [{"name": "output_0", "shape": [2, 4], "dtype": "float32"}]]


FAKE_DEVICE = """
const fake = (limits = {}) => ({ features: new Set(), limits: { maxStorageBuffersPerShaderStage: 8, ...limits },
  lost: new Promise(() => {}), destroy() {} });
const attempt = async (w, device = fake()) => {
  try { await m.load(w, { device }); return "loaded"; } catch (e) { return e.message; }
};
"""


def test_model_js_weights_and_device_checks(bundles, node, tmp_path):
  """load() checks the weights (size, header, sha256) and a given device's limits before touching the device."""
  folder = shutil.copytree(bundles["mlp"][1], tmp_path / "mlp")
  cnn_weights = json.dumps(str(Path(bundles["cnn"][1], "weights.safetensors")))
  body = FAKE_DEVICE + f"""
const flipped = weights.slice(); flipped[flipped.length - 1] ^= 1;
const results = [
  await attempt(weights.subarray(0, 5)),
  await attempt(weights.subarray(0, 100)),
  await attempt(weights.subarray(0, weights.length - 4)),
  await attempt(flipped),
  await attempt(new Uint8Array(readFileSync({cnn_weights}))),
  await attempt(weights, fake({{ maxStorageBuffersPerShaderStage: 2 }})),
  await attempt(42),
];
console.log(JSON.stringify(results));
"""
  results = json.loads(node_eval(node, str(folder), body))
  prefix = 'tgc model "mlp": '
  assert results[0] == prefix + "the weights file is truncated (5 bytes)"
  assert results[1] == prefix + "the weights file is truncated (100 bytes)"
  assert results[2] == prefix + "the weights file is truncated (1196 of 1200 bytes)"
  assert results[3].startswith(prefix + "the weights file does not belong to this model: its sha256 differs from the "
                                        "compiled one's (bytes 0 to 1200: ")
  assert results[4].startswith(prefix + "the weights file does not belong to this model: ")
  need = plan_of(str(folder))["limits"]["maxStorageBuffersPerShaderStage"]
  assert results[5] == prefix + f"the given GPUDevice allows maxStorageBuffersPerShaderStage = 2; the model needs " \
                                f"{need}"
  assert results[6] == prefix + "the weights must be a URL, a string, an ArrayBuffer or a typed array, not number"


def test_model_js_sha256_without_webcrypto(bundles, node, tmp_path):
  """Without crypto.subtle (a page served over plain http) model.js hashes the weights in JS: a flipped bit is
  still refused, the right file passes the check (and only then fails on the fake device), and the JS SHA-256
  agrees with hashlib on lengths around its block boundaries."""
  folder = shutil.copytree(bundles["mlp"][1], tmp_path / "mlp")
  body = FAKE_DEVICE + """
Object.defineProperty(globalThis, "crypto", { value: undefined, configurable: true });
const flipped = weights.slice(); flipped[700] ^= 4;
console.log(JSON.stringify([await attempt(flipped), await attempt(weights)]));
"""
  bad, good = json.loads(node_eval(node, str(folder), body))
  assert bad.startswith('tgc model "mlp": the weights file does not belong to this model: its sha256 differs')
  plan = plan_of(str(folder))
  assert plan["weightsBlocks"] == [hashlib.sha256(Path(folder, "weights.safetensors").read_bytes()).hexdigest()]
  assert "sha256" not in good and "weights" not in good, good
  source = Path(folder, "model.js").read_text()
  device_section = "// " + "-" * 64 + " the device"
  sha_class = source[source.index("const SHA_K"):source.index(device_section)]
  lengths = [0, 1, 55, 56, 63, 64, 65, 119, 120, 1000, 70000]
  script = sha_class + f"""
const out = [];
for (const n of {lengths}) {{
  const data = new Uint8Array(n).map((_, i) => (i * 131 + 7) & 255);
  for (const piece of [1, 63, 4096]) {{
    const h = new Sha256();
    for (let i = 0; i < n; i += piece) h.update(data.subarray(i, i + piece));
    out.push(h.hex());
  }}
}}
console.log(JSON.stringify(out));
"""
  got = json.loads(run([node, "--input-type=module", "-e", script]).stdout)
  want = [hashlib.sha256(bytes((i * 131 + 7) & 255 for i in range(n))).hexdigest() for n in lengths for _ in range(3)]
  assert got == want


def test_model_js_float16_helpers(bundles, node, tmp_path):
  folder = shutil.copytree(bundles["half"][1], tmp_path / "half")
  rng = np.random.default_rng(0)
  values = np.concatenate([rng.standard_normal(300) * 10.0 ** rng.integers(-9, 6, 300), [0.0, -0.0, 65504.0, 65520.0,
                           1e9, -1e9, 6e-8, 2.9e-8, 3.0e-8, np.inf, -np.inf, 1 / 3]]).astype(np.float32)
  bits = list(range(0, 65536, 7)) + [0x7c00, 0xfc00, 0x0001, 0x03ff, 0x8001]
  listed = [float(v) if np.isfinite(v) else ("Infinity" if v > 0 else "-Infinity") for v in values]
  body = (f"const values = {json.dumps(listed)};\n"
          f"const bits = {json.dumps(bits)};\n"
          "console.log(JSON.stringify([values.map((v) => m.toFloat16Bits(Number(v))),\n"
          "  bits.map((h) => { const v = m.fromFloat16Bits(h); return Number.isFinite(v) ? v : String(v); })]));")
  to_bits, from_bits = json.loads(node_eval(node, str(folder), body))
  with np.errstate(over="ignore"): assert to_bits == values.astype(np.float16).view(np.uint16).tolist()
  want = np.array(bits, np.uint16).view(np.float16).astype(np.float64)
  got = np.array([float(v) if not isinstance(v, str) else float(v.replace("Infinity", "inf")) for v in from_bits])
  np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
  np.testing.assert_array_equal(got[~np.isnan(got)], want[~np.isnan(want)])


USE_TYPES = """
import { load, Outputs, Model } from "./model";
async function main(): Promise<void> {
  const m: Model = await load("weights.safetensors", { quick: true, waitForPipelines: false });
  const out: Outputs = await m.run({ x: new BigInt64Array(5), v: new Float32Array(27) });
  const readyMs: number = await m.ready;
  const pipelinesMs: number | undefined = m.loadTimings.pipelinesMs;
  const a: BigInt64Array = out.output_0.data;
  const b: Int32Array = out["output_1"].data;
  const shape: number[] = out.output_0.shape;
  const optimizedMs: number = await m.optimized;
  const quick: number = m.loadTimings.quickKernels;
  await m.dispose();
  console.log(a, b, shape, optimizedMs, quick, readyMs, pipelinesMs);
}
main();
"""


def test_model_d_ts_with_tsc(bundles, tmp_path):
  """model.d.ts type-checks a correct use under --strict and rejects a wrong input type and a missing input."""
  tsc = os.environ.get("TGC_TSC") or shutil.which("tsc")
  if tsc is None: pytest.skip("tsc not found: npm install -g typescript (or set TGC_TSC)")
  shutil.copy(Path(bundles["int64"][1], "model.d.ts"), tmp_path / "model.d.ts")
  (tmp_path / "use.ts").write_text(USE_TYPES)
  flags = ["--noEmit", "--strict", "--target", "es2022", "--moduleResolution", "node"]
  run([tsc, *flags, "use.ts"], cwd=tmp_path)
  missing = "main();\nload().then((m) => m.run({ x: new BigInt64Array(5) }));"
  bad = USE_TYPES.replace("x: new BigInt64Array(5), ", "x: new Float32Array(5), ").replace("main();", missing)
  (tmp_path / "bad.ts").write_text(bad)
  result = run([tsc, *flags, "bad.ts"], cwd=tmp_path, check=False)
  assert result.returncode != 0
  assert "bad.ts(5," in result.stdout and "not assignable to type 'BigInt64Array" in result.stdout
  assert "Property '\"v\"' is missing" in result.stdout


# ---------------------------------------------------------------- headless Chromium (SwiftShader WebGPU)

@pytest.fixture(scope="session")
def server(bundles, f16_cnn):
  """The bundles' root folder (and the f16 bundle's under /f16) over http://127.0.0.1:<free port> (a secure
  context), from a thread."""
  with chromium.serve({"/": os.path.dirname(next(iter(bundles.values()))[1]),
                       "/f16": os.path.dirname(f16_cnn[1])}) as url:
    yield url


@pytest.fixture(scope="session")
def playwright_instance():
  reason = chromium.missing_browser()
  if reason: pytest.skip(reason)
  with chromium.playwright_session() as instance:
    yield instance


@pytest.fixture(scope="session")
def browser(playwright_instance, server):
  """Chromium with WebGPU (a fresh profile); skips when it offers no WebGPU adapter."""
  context, profile = chromium.launch(playwright_instance)
  if not chromium.has_webgpu_adapter(context, f"{server}/mlp/index.html?autorun=0"):
    chromium.close(context, profile)
    pytest.skip("Chromium offers no WebGPU adapter (SwiftShader or a Vulkan driver is needed)")
  yield context
  chromium.close(context, profile)


@pytest.mark.parametrize("name", RUN_CASES)
def test_browser_given_inputs(bundles, references, browser, server, name):
  case, folder = bundles[name]
  page = open_demo(browser, f"{server}/{name}/index.html?runs=2", plain_inputs(case.inputs))
  try:
    got = outputs_from(page.evaluate(f"() => ({PLAIN_OUTPUTS})(window.tgcResult.outputs)"), manifest_of(folder))
    compare(got, references[name], case)
    assert page.evaluate("() => window.tgcResult.ms > 0 && window.tgcResult.runs === 2")
    assert "ms per run (median of 2)" in page.inner_text("#timing")
    first = list(got)[0]
    assert first in page.inner_text("#outputs")
  finally:
    page.close()


def test_browser_kernel_variants(bundles, references, browser, server):
  """SwiftShader is a fallback adapter: the demo page runs the "cpu" kernel variant (no workgroup tiles), and
  load(weights, {variant: "gpu"}) runs the tiled kernels, which give the same outputs."""
  case, folder = bundles["cnn"]
  page = open_demo(browser, f"{server}/cnn/index.html?runs=1", plain_inputs(case.inputs))
  try:
    assert page.evaluate("() => window.tgcResult.variant") == "cpu"
    assert "kernel variant cpu" in page.inner_text("#status")
    result = page.evaluate(f"""async () => {{
      const m = await import("./model.js");
      const model = await m.load(undefined, {{variant: "gpu"}});
      const out = await model.run(window.tgcInputs);
      const variant = model.variant;
      await model.dispose();
      return {{variant, outputs: ({PLAIN_OUTPUTS})(out)}};
    }}""")
    assert result["variant"] == "gpu"
    compare(outputs_from(result["outputs"], manifest_of(folder)), references["cnn"], case)
  finally:
    page.close()


def test_browser_quick_kernels_then_optimized(bundles, references, browser, server):
  """On SwiftShader, load() requests the convnet's quick kernels and resolves once the weights are on the device; the
  first run takes each pipeline as it is compiled, `ready` resolves once all are (loadTimings.pipelinesMs set then),
  `optimized` once the blocked ones replaced them (after that run), and both runs give the reference's outputs.
  {quick: false, waitForPipelines: true} resolves with the blocked ones compiled."""
  case, folder = bundles["convnet"]
  page = open_demo(browser, f"{server}/convnet/index.html?runs=1", plain_inputs(case.inputs))
  try:
    result = page.evaluate(f"""async () => {{
      const m = await import("./model.js");
      const model = await m.load();
      const quick = model.loadTimings.quickKernels;
      const first = await model.run(window.tgcInputs);
      const readyMs = await model.ready;
      const timings = model.loadTimings;
      const optimizedMs = await model.optimized;
      const again = await model.run(window.tgcInputs);
      await model.dispose();
      const blocked = await m.load(undefined, {{quick: false, waitForPipelines: true}});
      const none = blocked.loadTimings.quickKernels;
      const compiledAtLoad = [blocked.loadTimings.pipelinesMs, blocked.loadTimings.totalMs];
      const direct = await blocked.run(window.tgcInputs);
      await blocked.dispose();
      const plain = {PLAIN_OUTPUTS};
      return {{quick, none, readyMs, optimizedMs, pipelinesMs: timings.pipelinesMs, frozen: Object.isFrozen(timings),
               compiledAtLoad, outputs: [plain(first), plain(again), plain(direct)]}};
    }}""")
    assert result["quick"] == 2 and result["none"] == 0 and result["optimizedMs"] > 0
    assert result["readyMs"] > 0 and result["pipelinesMs"] > 0 and result["frozen"]
    pipelines_ms, total_ms = result["compiledAtLoad"]
    assert total_ms >= pipelines_ms > 0
    for outputs in result["outputs"]: compare(outputs_from(outputs, manifest_of(folder)), references["convnet"], case)
  finally:
    page.close()


BROKEN_PIPELINE_JS = """async (options) => {
  const m = await import("./broken/model.js");
  let model;
  try {
    model = await m.load("./broken/weights.safetensors", options);
  } catch (e) {
    return {load: e.message};
  }
  const ready = model.ready.then(() => "ready", (e) => e.message);
  const run = await model.run(Object.fromEntries(model.inputs.map((t) => [t.name, new Float32Array(
    t.shape.reduce((a, b) => a * b, 1))]))).then(() => "ran", (e) => e.message);
  await model.dispose();
  return {run, ready: await ready};
}"""


def test_browser_kernel_that_does_not_compile(bundles, browser, tmp_path):
  """A kernel whose pipeline does not compile (its layout made not to fit its WGSL): load() resolves (the pipelines
  compile during the first run), and the first run and `ready` fail naming it; with waitForPipelines the load does."""
  _, folder = bundles["convnet"]
  broken = tmp_path / "broken"
  shutil.copytree(folder, broken)
  js = (broken / "model.js").read_text(encoding="utf-8")
  plan = read_plan(js)
  last = plan["kernels"][-1]
  written = [b for b in last["bindings"] if not b[1]]
  assert written, last["bindings"]
  written[0][1] = True            # the layout says read-only where the kernel writes
  text = "const PLAN = " + json.dumps(plan) + ";"
  begin, end = js.index(emit_webgpu.PLAN_BEGIN + "\n"), js.index("\n" + emit_webgpu.PLAN_END)
  (broken / "model.js").write_text(js[:begin + len(emit_webgpu.PLAN_BEGIN) + 1] + text + js[end:], encoding="utf-8")
  (tmp_path / "blank.html").write_text("<!doctype html><title>blank</title>")
  with chromium.serve(str(tmp_path)) as url:
    page = browser.new_page()
    try:
      page.goto(f"{url}/blank.html")
      lazy = page.evaluate(BROKEN_PIPELINE_JS, {})
      waited = page.evaluate(BROKEN_PIPELINE_JS, {"waitForPipelines": True})
    finally:
      page.close()
  message = f'kernel {last["name"]} does not compile on this device'
  assert message in lazy["run"] and message in lazy["ready"], lazy
  assert lazy["run"].startswith('tgc model "convnet": kernel'), lazy
  assert message in waited["load"], waited


def test_browser_f16_artifact_falls_back_to_float32(f16_cnn, references, browser, server):
  """SwiftShader has no shader-f16: model.js picks the float32 variant for software adapters ("cpu"), reports it,
  and its outputs match as float32's do; asking for the f16 variant is refused, naming the missing feature."""
  case, folder = f16_cnn
  page = open_demo(browser, f"{server}/f16/cnn_f16/index.html?runs=1", plain_inputs(case.inputs))
  try:
    assert page.evaluate("() => window.tgcResult.variant") == "cpu"
    assert not page.evaluate("async () => (await navigator.gpu.requestAdapter()).features.has('shader-f16')")
    got = outputs_from(page.evaluate(f"() => ({PLAIN_OUTPUTS})(window.tgcResult.outputs)"), manifest_of(folder))
    compare(got, references["cnn"], case)
    refused = page.evaluate("""async () => {
      const m = await import("./model.js");
      try { await m.load(undefined, {variant: "cpu-f16"}); return "loaded"; } catch (e) { return e.message; }
    }""")
    assert refused.endswith('lacks the WebGPU feature "shader-f16" the kernel variant cpu-f16 needs'), refused
  finally:
    page.close()


def test_browser_run_has_no_per_run_setup(bundles, references, browser, server):
  """A run after load(): no buffer, pipeline, bind group or shader module is made; one command encoder, one submit;
  the dispatches share compute passes (a new one only where a packed output is cleared first)."""
  case, folder = bundles["cnn"]
  page = open_demo(browser, f"{server}/cnn/index.html?runs=1", plain_inputs(case.inputs))
  try:
    counts = page.evaluate("""async () => {
      const model = window.tgc.model, device = model.device, counts = {};
      const spy = (obj, name) => {
        const original = obj[name];
        obj[name] = function (...args) { counts[name] = (counts[name] || 0) + 1; return original.apply(this, args); };
      };
      for (const name of ["createBuffer", "createBindGroup", "createComputePipeline", "createComputePipelineAsync",
                          "createShaderModule", "createCommandEncoder"]) spy(device, name);
      spy(device.queue, "submit");
      spy(GPUCommandEncoder.prototype, "beginComputePass");
      await model.run(window.tgcInputs);
      return counts;
    }""")
    calls = plan_of(folder)["calls"]
    passes = 1 + sum(1 for c in calls[1:] if c["clear"])
    assert counts == {"createCommandEncoder": 1, "submit": 1, "beginComputePass": passes}, counts
  finally:
    page.close()


def test_browser_seeded_inputs(bundles, browser, server):
  case, folder = bundles["cnn"]
  manifest = manifest_of(folder)
  page = open_demo(browser, f"{server}/cnn/index.html?seed=5&runs=1")
  try:
    used = page.evaluate("() => Object.fromEntries(Object.entries(window.tgcInputs).map(([k, v]) => "
                         "[k, window.tgc.plain(v)]))")
    again = page.evaluate("() => Object.fromEntries(Object.entries(window.tgc.randomInputs(5)).map(([k, v]) => "
                          "[k, window.tgc.plain(v)]))")
    assert used == again
    inputs = {t["name"]: from_plain(used[t["name"]], t["shape"], t["dtype"]) for t in manifest["inputs"]}
    assert np.abs(inputs["image"]).max() <= 1 and np.unique(inputs["image"]).size > 100
    got = outputs_from(page.evaluate(f"() => ({PLAIN_OUTPUTS})(window.tgcResult.outputs)"), manifest)
    compare(got, with_inputs(case, inputs).reference(), case)
    assert "random (seed 5)" in page.inner_text("#inputs")
  finally:
    page.close()


def test_browser_concurrent_runs(bundles, browser, server):
  """Four run() calls at once through Promise.all: each gets its own inputs' outputs."""
  case, folder = bundles["cnn"]
  manifest = manifest_of(folder)
  page = open_demo(browser, f"{server}/cnn/index.html?runs=1")
  try:
    result = page.evaluate(f"""async () => {{
      const feeds = [1, 2, 3, 4].map((s) => window.tgc.randomInputs(s));
      const outs = await Promise.all(feeds.map((f) => window.tgc.model.run(f)));
      return outs.map((o, i) => ({{inputs: window.tgc.plain(feeds[i].image), outputs: ({PLAIN_OUTPUTS})(o)}}));
    }}""")
    assert len(result) == 4
    seen = set()
    for r in result:
      image = from_plain(r["inputs"], (1, 3, 8, 8), "float32")
      got = outputs_from(r["outputs"], manifest)
      compare(got, with_inputs(case, {"image": image}).reference(), case)
      seen.add(got["logits"].tobytes())
    assert len(seen) == 4
  finally:
    page.close()


def test_browser_errors(bundles, browser, server):
  """run() rejects bad inputs naming them (and queued runs go on); load() rejects foreign weights."""
  page = open_demo(browser, f"{server}/int64/index.html?runs=1")
  try:
    messages = page.evaluate("""async () => {
      const model = window.tgc.model;
      const good = window.tgc.randomInputs(0);
      const attempt = async (feeds) => {
        try { await model.run(feeds); return "ran"; } catch (e) { return e.message; }
      };
      const big = BigInt64Array.from(good.x); big[2] = 2n ** 40n;
      const results = [
        await attempt({ x: good.x }),
        await attempt({ ...good, z: good.x }),
        await attempt({ ...good, x: Int32Array.from(good.v, Math.round) }),
        await attempt({ ...good, v: good.v.subarray(1) }),
        await attempt({ ...good, x: big }),
        await attempt(null),
        await attempt(good),
      ];
      const m = await import("./model.js");
      try { await m.load("../cnn/weights.safetensors"); results.push("loaded"); } catch (e) { results.push(e.message); }
      try { await m.load("missing.safetensors"); results.push("loaded"); } catch (e) { results.push(e.message); }
      const other = await m.load();
      const ran = await other.run(good);
      await other.dispose();
      try { await other.run(good); results.push("ran"); } catch (e) { results.push(e.message); }
      results.push(ran.output_0.data instanceof BigInt64Array && ran.output_1.data instanceof Int32Array);
      return results;
    }""")
  finally:
    page.close()
  prefix = 'tgc model "int64": '
  assert messages[0] == prefix + 'missing input "v"'
  assert messages[1] == prefix + 'unknown input "z"; the model\'s inputs are "x", "v"'
  assert messages[2] == prefix + 'input "x" must be a BigInt64Array (int64), not an Int32Array'
  assert messages[3] == prefix + 'input "v" has 26 elements; its shape [3,9] needs 27'
  assert messages[4] == prefix + 'input "x"[2] = 1099511627776 does not fit in 32 bits (WebGPU computes int64 as ' \
                                 '32-bit words)'
  assert messages[5] == prefix + "run() takes an object {inputName: TypedArray}, not null"
  assert messages[6] == "ran"
  assert messages[7].startswith(prefix + "the weights file does not belong to this model: ")
  assert messages[8].startswith(prefix + "cannot fetch the weights from ") and "HTTP 404" in messages[8]
  assert messages[9] == prefix + "run() after dispose()"
  assert messages[10] is True


def test_browser_without_webgpu(playwright_instance, server, bundles):
  """Without --enable-unsafe-webgpu Chromium has no adapter: the demo page says so in plain words."""
  context, profile = chromium.launch(playwright_instance, webgpu=False)
  try:
    page = context.new_page()
    page.goto(f"{server}/mlp/index.html")
    page.wait_for_function("window.tgcError !== undefined", timeout=PAGE_TIMEOUT_MS)
    text = page.inner_text("#error")
    assert text.startswith('tgc model "mlp": ')
    assert "no WebGPU adapter is available" in text or "WebGPU is not available: navigator.gpu is missing" in text
    assert page.is_visible("#error") and page.inner_text("#status") == "Failed."
  finally:
    chromium.close(context, profile)


# ---------------------------------------------------------------- weights over the network

STREAM_JS = """async ({cache, image}) => {
  const writes = [];
  const write = GPUQueue.prototype.writeBuffer;
  GPUQueue.prototype.writeBuffer = function (buffer, offset, data, dataOffset, size) {
    if (buffer.label.includes(": weight ")) writes.push(size === undefined ? data.byteLength : size);
    return write.apply(this, arguments);
  };
  let whole = 0;
  for (const name of ["arrayBuffer", "blob"]) {
    const original = Response.prototype[name];
    Response.prototype[name] = function () { whole++; return original.apply(this, arguments); };
  }
  const m = await import("./model.js");
  const progress = [];
  let model;
  try {
    model = await m.load(undefined, {cache, onProgress: (done, total) => progress.push([done, total])});
  } catch (e) {
    return {error: e.message};
  }
  const out = await model.run({image: Float32Array.from(image)});
  await model.dispose();
  const outputs = Object.fromEntries(Object.entries(out).map(
    ([k, v]) => [k, {data: Array.from(v.data), shape: v.shape}]));
  return {progress, writes, whole, timings: model.loadTimings, outputs};
}"""


DAMAGE_CACHE_JS = """async () => {
  const cache = await caches.open("tgc-weights");
  const keys = await cache.keys();
  for (const key of keys) {
    const data = new Uint8Array(await (await cache.match(key)).arrayBuffer());
    data[data.length - 100] ^= 8;
    await cache.put(key, new Response(data));
  }
  return keys.length;
}"""


@pytest.fixture(scope="module")
def small_blocks(tmp_path_factory):
  """The cnn bundle with 256-byte sha256 blocks (so that its weights stream in many), a copy whose weights have a
  flipped bit, and a blank page beside each."""
  root = tmp_path_factory.mktemp("webgpu_blocks")
  original = emit_webgpu.BLOCK_BYTES
  emit_webgpu.BLOCK_BYTES = 256
  try:
    case, folder = emit_cases(root, {"cnn": cnn_case}, "webgpu")["cnn"]
  finally:
    emit_webgpu.BLOCK_BYTES = original
  bad = Path(shutil.copytree(folder, root / "bad"))
  data = bytearray((bad / "weights.safetensors").read_bytes())
  data[-100] ^= 8
  (bad / "weights.safetensors").write_bytes(bytes(data))
  for f in (Path(folder), bad): (f / "blank.html").write_text("<!doctype html><title>blank</title>")
  return case, folder


def test_browser_streams_and_caches_weights(small_blocks, references, browser):
  """load() streams the weights in blocks (no Response.arrayBuffer(), no write larger than a block), reports
  progress up to the file's size, and with {cache: true} a second load in a new page reads the weights from the Cache
  API: the server sees one request for them, and both loads' outputs match the reference. A flipped bit in the file
  is refused by the block's sha256; one in the cached entry makes the next load fetch the weights again (and store
  them anew: the load after it reads the cache)."""
  case, folder = small_blocks
  plan = plan_of(folder)
  requests: list[str] = []
  image = case.inputs["image"].reshape(-1).astype(np.float64).tolist()
  weights_url = "/cnn/weights.safetensors"
  with chromium.serve(os.path.dirname(folder), requests) as url:
    def load(cache, where="cnn"):
      page = browser.new_page()
      try:
        page.goto(f"{url}/{where}/blank.html")
        return page.evaluate(STREAM_JS, {"cache": cache, "image": image})
      finally:
        page.close()

    def damage_cache():      # one bit of the cached weights flipped
      page = browser.new_page()
      try:
        page.goto(f"{url}/cnn/blank.html")
        assert page.evaluate(DAMAGE_CACHE_JS) == 1
      finally:
        page.close()
    first, second = load(True), load(True)
    assert requests.count(weights_url) == 1, requests
    third = load(False)
    assert requests.count(weights_url) == 2
    bad = load(False, "bad")
    damage_cache()
    refetched, cached_again = load(True), load(True)     # a damaged entry is fetched again and stored anew
    assert requests.count(weights_url) == 3, requests
  for result, where in ((first, "network"), (second, "cache"), (third, "network"), (refetched, "network"),
                        (cached_again, "cache")):
    assert result["timings"]["weightsFrom"] == where
    got = outputs_from(result["outputs"], manifest_of(folder))
    compare(got, references["cnn"], case)
    total = plan["weightsBytes"]
    assert result["progress"][-1] == [total, total]
    assert all(t == total for _, t in result["progress"])
    assert [d for d, _ in result["progress"]] == sorted(d for d, _ in result["progress"])
    assert result["whole"] == 0
    assert max(result["writes"]) <= plan["weightsBlockBytes"] < total
    assert len(result["writes"]) >= total // plan["weightsBlockBytes"] - len(plan["weights"])
  assert len(plan["weightsBlocks"]) >= 3
  timings = first["timings"]
  assert timings["kernels"] == len(plan["kernels"]) >= timings["pipelines"] >= 1
  assert timings["totalMs"] >= timings["weightsMs"] > 0 and timings["pipelinesMs"] > 0
  assert bad["error"].startswith('tgc model "cnn": the weights file does not belong to this model: its sha256 '
                                 'differs'), bad


def test_chunked_weights(references, browser, wgpu_runtime, tmp_path):
  """--weight-chunk-mb: the weights as parts of at most that size (no whole file), listed in the manifest and the
  package; the page fetches them in order as one stream and the Python runtime joins them: both match the
  reference. A bad size is a user error."""
  case = cnn_case()
  folder = tmp_path / "cnn"
  folder.mkdir()
  write_artifact(case.compile("webgpu"), str(folder), weight_chunk_mb=1000 / 2 ** 20)
  manifest = manifest_of(str(folder))
  validate_manifest(manifest)
  parts = manifest["weights"]["parts"]
  assert len(parts) >= 3 and not (folder / "weights.safetensors").exists()
  assert all(p["nbytes"] == 992 for p in parts[:-1]) and set(p["file"] for p in parts) <= set(manifest["files"])
  joined = b"".join((folder / p["file"]).read_bytes() for p in parts)
  assert hashlib.sha256(joined).hexdigest() == manifest["weights"]["sha256"]
  assert [p["file"] for p in plan_of(str(folder))["weightsParts"]] == [p["file"] for p in parts]
  package = json.loads((folder / "package.json").read_text())
  assert all(f"./{p['file']}" in package["exports"] and p["file"] in package["files"] for p in parts)
  runner = artifact_runtime(open_artifact(str(folder)))     # the files checked against the manifest first
  try:
    compare(runner.run(case.inputs), references["cnn"], case)
  finally:
    runner.close()
  requests: list[str] = []
  with chromium.serve(str(tmp_path), requests) as url:
    page = open_demo(browser, f"{url}/cnn/index.html?runs=1", plain_inputs(case.inputs))
    try:
      compare(demo_outputs(page, manifest), references["cnn"], case)
    finally:
      page.close()
  assert [r for r in requests if "weights" in r] == [f"/cnn/{p['file']}" for p in parts]
  result = tgc("compile", str(ROOT / "examples" / "tiny_mlp.py") + ":build", "--target", "webgpu", "-o",
               tmp_path / "bad", "--weight-chunk-mb", "0")
  assert result.exit_code == 2 and "--weight-chunk-mb must be positive" in result.output
