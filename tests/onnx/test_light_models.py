"""The real-architecture ONNX models of the onnx wheel (resnet50, squeezenet, shufflenet, densenet121, inception
v1/v2, vgg19, bvlc_alexnet, zfnet512) compiled by the real pipeline into C and WebGPU artifacts and run (C natively,
WebGPU through the wgpu runtime on lavapipe): as shipped against the stored output (onnx's own tolerances), and with
seeded random weights and input against onnxruntime; plus squeezenet's WebGPU artifact in headless Chromium
(SwiftShader WebGPU) through its demo page and model.js on the page's seeded random input, against onnxruntime.
The small ones run by default (on WebGPU only squeezenet's random-weights check); the others are marked slow
(`pytest --runslow`). WebGPU tests carry the `webgpu` marker (lavapipe and PoCL cannot share a process).
scripts/light_models.py prints the timings. Tolerances and the randomization are documented in light_models.py."""
from __future__ import annotations
import os
import sys
import warnings

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import light_models as lm  # noqa: E402
import headless_chromium as chromium  # noqa: E402

# compile + run of both variants on a 2-core machine: the default set stays within about two minutes
FAST = ("squeezenet", "shufflenet")
# WebGPU on lavapipe (a software Vulkan) takes 10-30 s per run of these (work-groups of one invocation where the
# spatial sizes are odd): by default only squeezenet's random-weights check (35-90 s here; shufflenet 60-140 s)
FAST_WEBGPU = {"random": ("squeezenet",), "stored": ()}
BROWSER_MODEL, BROWSER_SEED = "squeezenet", 11
BROWSER_TIMEOUT_MS = 600_000     # SwiftShader: about a minute per squeezenet run on a loaded 2-core machine


def _params(check: str = "stored"):
  out = [pytest.param("c", n, marks=() if n in FAST else pytest.mark.slow, id=f"c-{n}") for n in lm.NAMES]
  out += [pytest.param("webgpu", n, id=f"webgpu-{n}",
                       marks=(pytest.mark.webgpu,) + (() if n in FAST_WEBGPU[check] else (pytest.mark.slow,)))
          for n in lm.NAMES]
  return out


def _require_runtime(target: str) -> None:
  """Skip, naming the missing piece, when `target`'s artifacts cannot run here (no C compiler, no wgpu/adapter)."""
  from tgc.runtimes import RuntimeUnavailable, get_runtime
  try:
    get_runtime(target)
  except RuntimeUnavailable as error:
    pytest.skip(str(error))


def _load(name: str):
  if not lm.available(name): pytest.skip(f"light_{name}.onnx is not in this onnx wheel ({lm.data_dir()})")
  return lm.load(name)


@pytest.mark.parametrize("target,name", _params("stored"))
def test_stored_output(target, name):
  model = _load(name)
  _require_runtime(target)
  got = lm.run_tgc(model, lm.dummy_inputs(model), target).outputs
  ref = lm.stored_output(name)
  assert len(got) == 1 and got[0].shape == ref.shape and got[0].dtype == ref.dtype
  assert lm.stored_ok(name, got[0], ref), f"max abs error {lm.max_abs_error(got[0], ref):.3g}"


@pytest.mark.parametrize("target,name", _params("random"))
def test_random_weights_vs_onnxruntime(target, name):
  pytest.importorskip("onnxruntime", reason="onnxruntime (pip) is the reference for the light models")
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    model = lm.randomized(_load(name), seed=0)
  assert not any(n.op_type == "ConstantOfShape" for n in model.graph.node)
  _require_runtime(target)
  feeds = lm.random_inputs(model, seed=0)
  ref = lm.run_onnxruntime(model, feeds)[0][0]
  got = lm.run_tgc(model, feeds, target).outputs[0]
  assert got.shape == ref.shape
  assert np.isfinite(ref).all() and float(np.std(ref)) > 0, "degenerate reference: the randomization is too weak"
  assert lm.random_ok(got, ref), \
    f"max abs error {lm.max_abs_error(got, ref):.3g}, scaled {lm.scaled_error(got, ref):.3g}"


def test_randomized_is_deterministic():
  model = _load("squeezenet")
  a, b = lm.randomized(model, seed=3, calibrate=False), lm.randomized(model, seed=3, calibrate=False)
  assert a.SerializeToString() == b.SerializeToString()
  c = lm.randomized(model, seed=4, calibrate=False)
  assert a.SerializeToString() != c.SerializeToString()


@pytest.mark.webgpu
def test_webgpu_squeezenet_in_chromium(tmp_path):
  """Squeezenet (seeded random weights) as a WebGPU artifact, loaded by its demo page (index.html + model.js) in
  headless Chromium and run once on the page's seeded random input; the same input through onnxruntime."""
  reason = chromium.missing_browser()
  if reason: pytest.skip(reason)
  pytest.importorskip("onnxruntime", reason="onnxruntime (pip) is the reference for the light models")
  from tgc.aot.compile import compile_model
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    model = lm.randomized(_load(BROWSER_MODEL), seed=0)
  path = tmp_path / f"{BROWSER_MODEL}.onnx"
  path.write_bytes(model.SerializeToString())
  folder = tmp_path / "site" / BROWSER_MODEL
  compile_model(str(path), "webgpu", str(folder))
  manifest = chromium.manifest_of(str(folder))
  with chromium.serve(str(folder.parent)) as url, chromium.playwright_session() as playwright:
    context, profile = chromium.launch(playwright)
    try:
      demo = f"{url}/{BROWSER_MODEL}/index.html?autorun=0&seed={BROWSER_SEED}"
      if not chromium.has_webgpu_adapter(context, demo):
        pytest.skip("Chromium offers no WebGPU adapter (SwiftShader or a Vulkan driver is needed)")
      page = context.new_page()
      page.goto(demo)
      page.wait_for_function("window.tgc !== undefined || window.tgcError !== undefined",
                             timeout=chromium.PAGE_TIMEOUT_MS)
      assert page.evaluate("() => window.tgcError || null") is None
      page.set_default_timeout(BROWSER_TIMEOUT_MS)
      ran = page.evaluate(f"""async () => {{
        const feeds = window.tgc.randomInputs({BROWSER_SEED});
        const outs = await window.tgc.model.run(feeds);
        return {{inputs: Object.fromEntries(Object.entries(feeds).map(([k, v]) => [k, window.tgc.plain(v)])),
                 outputs: ({chromium.PLAIN_OUTPUTS})(outs)}};
      }}""")
    finally:
      chromium.close(context, profile)
  feeds = {t["name"]: chromium.from_plain(ran["inputs"][t["name"]], t["shape"], t["dtype"])
           for t in manifest["inputs"]}
  got = chromium.outputs_from(ran["outputs"], manifest)
  (x,) = feeds.values()
  assert x.shape == (1, 3, 224, 224) and np.unique(x).size > 100_000 and np.abs(x).max() <= 1
  ref = lm.run_onnxruntime(model, feeds)[0][0]
  out = got[model.graph.output[0].name]
  assert out.shape == ref.shape and np.isfinite(out).all() and float(np.std(ref)) > 0
  assert lm.random_ok(out, ref), \
    f"max abs error {lm.max_abs_error(out, ref):.3g}, scaled {lm.scaled_error(out, ref):.3g}"
