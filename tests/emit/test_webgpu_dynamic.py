"""WebGPU artifacts with sizes known only at run time: one artifact runs at every size of its range, through the wgpu
runtime and through model.js in headless Chromium, and matches the numpy reference on random inputs at the smallest,
a middle and the largest size; the kernels read the sizes from one uniform buffer, the plan's work-group counts are
size text; sizes out of range and shapes that do not fit are errors naming the input and dimension."""
import json
import numpy as np
import pytest
import headless_chromium as chromium
from tgc.aot import compile_model
from tgc.aot.validate import validate_artifact
from tgc.runtimes.artifact import ArtifactError
from tgc.runtimes.artifact_webgpu import WebGPUArtifact, read_plan
from tests.emit.dynamic_cases import ENCODER, MODELS, check_encoder, check_two_sizes, reference, two_feeds
from tests.emit.test_webgpu_artifact import wgpu_runtime  # noqa: F401 (fixture)

PAGE = """<!doctype html><meta charset="utf-8"><script type="module">
import { load } from "./model.js";
window.tgcRun = async (feeds) => {
  const model = await load("weights.safetensors");
  try {
    const inputs = Object.fromEntries(Object.entries(feeds).map(([k, v]) => [k, {data: Float32Array.from(v.data),
                                                                                   shape: v.shape}]));
    const outs = await model.run(inputs);
    return Object.fromEntries(Object.entries(outs).map(([k, v]) => [k, {data: Array.from(v.data), shape: v.shape}]));
  } finally { await model.dispose(); }
};
window.tgcFails = async (feeds) => {
  const model = await load("weights.safetensors");
  try { await model.run(feeds); return null; } catch (error) { return error.message; }
  finally { await model.dispose(); }
};
</script>"""


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
  """The encoder, the two-size model and the model of sizes in steps, compiled for webgpu."""
  root = tmp_path_factory.mktemp("wgdyn")
  (root / "dynamic_models.py").write_text(MODELS)
  out = {"enc": (ENCODER, root / "enc"), "two": (f"{root / 'dynamic_models.py'}:two_sizes", root / "two"),
         "steps": (f"{root / 'dynamic_models.py'}:steps", root / "steps")}
  for spec, folder in out.values():
    compile_model(spec, "webgpu", str(folder))
    (folder / "test.html").write_text(PAGE)
  return out


def test_plan_and_kernels_take_the_sizes(folders):
  spec, folder = folders["enc"]
  plan = read_plan((folder / "model.js").read_text())
  assert plan["dims"] == [{"name": "T", "min": 1, "max": 256}] and plan["inputs"][0]["shape"] == [1, "T", 64]
  assert any(isinstance(n, str) and "T" in n for c in plan["calls"] for n in c["workgroups"])
  sized = [k for k in plan["kernels"] if k.get("sizes")]
  assert sized and all("@group(1) @binding(0) var<uniform> dim_T: i32;" in k["wgsl"] for k in sized)
  manifest = json.loads((folder / "manifest.json").read_text())
  assert manifest["dims"] == plan["dims"] and "(T*8)" in json.dumps(read_plan(
    (folders["two"][1] / "model.js").read_text())["outputs"])


def test_wgpu_runs_every_size(folders, wgpu_runtime):
  with WebGPUArtifact(str(folders["enc"][1]), runtime=wgpu_runtime) as art: check_encoder(art, (1, 77, 256, 3))


def test_wgpu_two_sizes_and_expressions(folders, wgpu_runtime):
  spec, folder = folders["two"]
  with WebGPUArtifact(str(folder), runtime=wgpu_runtime) as art:
    check_two_sizes(art, spec)
    with pytest.raises(ArtifactError, match=r"input 'mask': shape \(2, 5\), expected \(2, 4\)"):
      art.run({"x": np.ones((2, 4, 8), np.float32), "mask": np.ones((2, 5), np.float32)})


def test_validate_checks_smallest_middle_largest(folders, wgpu_runtime):
  """At each sample size; on a software device also the quick kernels model.js runs first (the encoder has some)."""
  report = validate_artifact(str(folders["enc"][1]))
  sizes = ["output_0 at T=1", "output_0 at T=128", "output_0 at T=256"]
  quick = [f"{name} (cpu-quick kernels)" for name in sizes] if wgpu_runtime.software else []
  assert report.ok and [c.name for c in report.checks] == sizes + quick


@pytest.fixture(scope="module")
def page(folders):
  with chromium.webgpu_context(str(folders["enc"][1].parent), "/enc/test.html") as (context, url):
    tab = context.new_page()
    yield tab, url
    tab.close()


def _browser_run(tab, url: str, name: str, feeds: dict) -> dict:
  tab.goto(f"{url}/{name}/test.html")
  tab.wait_for_function("window.tgcRun !== undefined")
  plain = {k: {"data": v.reshape(-1).astype(np.float64).tolist(), "shape": list(v.shape)} for k, v in feeds.items()}
  got = tab.evaluate("(feeds) => window.tgcRun(feeds)", plain)
  return {k: np.array(v["data"], np.float32).reshape(v["shape"]) for k, v in got.items()}


def test_browser_model_js_runs_every_size(folders, page):
  tab, url = page
  rng = np.random.default_rng(2)
  spec = folders["enc"][0]
  for t in (1, 100, 256):
    feeds = {"tokens": rng.standard_normal((1, t, 64)).astype(np.float32)}
    got = _browser_run(tab, url, "enc", feeds)["output_0"]
    assert got.shape == (1, t, 64)
    np.testing.assert_allclose(got, reference(spec, feeds)["output_0"], rtol=1e-4, atol=1e-4)
  spec = folders["two"][0]
  feeds = two_feeds(rng, 3, 11)
  got, ref = _browser_run(tab, url, "two", feeds), reference(spec, feeds)
  for name in ref: np.testing.assert_allclose(got[name], ref[name].astype(np.float32), rtol=1e-4, atol=1e-4)


def test_browser_sizes_in_steps(folders, page):
  """An input dim that is a multiple of a size (8*h): model.js reads h off the shape, refuses a non-multiple."""
  tab, url = page
  feeds = {"x": np.random.default_rng(4).standard_normal((2, 24, 4)).astype(np.float32)}
  got, ref = _browser_run(tab, url, "steps", feeds), reference(folders["steps"][0], feeds)
  assert got["pooled"].shape == (2, 3, 4)
  for name in ref: np.testing.assert_allclose(got[name], ref[name], rtol=1e-5, atol=1e-5)
  fails = tab.evaluate("() => window.tgcFails({x: {data: new Float32Array(2 * 20 * 4), shape: [2, 20, 4]}})")
  assert "dimension 1 ((h*8)) is 20, not a multiple of 8" in fails
  fails = tab.evaluate("() => window.tgcFails({x: {data: new Float32Array(2 * 56 * 4), shape: [2, 56, 4]}})")
  assert "dimension 1 ((h*8)) is 56, outside the range 8..48 in steps of 8" in fails


def test_browser_errors_name_the_input_and_dimension(page):
  tab, url = page
  tab.goto(f"{url}/two/test.html")
  tab.wait_for_function("window.tgcFails !== undefined")
  fails = lambda feeds: tab.evaluate(f"() => window.tgcFails({feeds})")     # noqa: E731
  feed = lambda *shape: f"{{data: new Float32Array({int(np.prod(shape))}), shape: {list(shape)}}}"   # noqa: E731
  assert "dimension 1 (T) is 41, outside the range 3..40" in fails(f"{{x: {feed(1, 41, 8)}, mask: {feed(1, 41)}}}")
  assert 'input "mask" has shape [2, 5]; it needs [2, 4]' in fails(f"{{x: {feed(2, 4, 8)}, mask: {feed(2, 5)}}}")
  assert "must be {data: TypedArray, shape: number[]}" in fails("{x: new Float32Array(8), mask: new Float32Array(1)}")


def test_demo_page_runs_at_the_largest_sizes(folders, page):
  tab, url = page
  tab.goto(f"{url}/enc/index.html?runs=1")
  tab.wait_for_function("window.tgcResult !== undefined || window.tgcError !== undefined", timeout=120_000)
  assert tab.evaluate("() => window.tgcError") is None
  tokens = np.array(tab.evaluate("() => Array.from(window.tgcInputs.tokens)"), np.float32).reshape(1, 256, 64)
  out = tab.evaluate("() => ({shape: window.tgcResult.outputs.output_0.shape, "
                     "data: Array.from(window.tgcResult.outputs.output_0.data)})")
  assert out["shape"] == [1, 256, 64]
  want = reference(folders["enc"][0], {"tokens": tokens})["output_0"]
  np.testing.assert_allclose(np.array(out["data"], np.float32).reshape(1, 256, 64), want, rtol=1e-4, atol=1e-4)
  assert "[1,256,64]" in tab.inner_text("#outputs")
