"""Outputs whose rows a run decides (a Loop's scan output, the loop's condition computed on the device): every
artifact holds them padded to the trip count beside an output counting the rows a run filled (the manifest's
`rows`). The Python runners cut them (tests/onnx/test_ops_nn.py); so do the example programs of the C and OpenCL
artifacts, which write only the filled rows to their .npy files, and model.js in headless Chromium."""
import numpy as np
import onnx
import pytest
from onnx.reference import ReferenceEvaluator
import headless_chromium as chromium
from tgc.aot import compile_model
from tests.emit.dynamic_cases import growing_loop, run_main
from tests.emit.test_opencl_artifact import cl_device  # noqa: F401 (fixture)

SCALES = (0.05, 1.0, 12.0)       # inputs that stop the loop after 8 steps (its trip count), a few, and one


PAGE = """<!doctype html><meta charset="utf-8"><script type="module">
import { load } from "./model.js";
window.tgcRun = async (feeds) => {
  const model = await load("weights.safetensors");
  try {
    const outs = await model.run(Object.fromEntries(Object.entries(feeds).map(([k, v]) => [k, Float32Array.from(v)])));
    return Object.fromEntries(Object.entries(outs).map(([k, v]) => [k, {data: Array.from(v.data), shape: v.shape}]));
  } finally { await model.dispose(); }
};
</script>"""


def _feeds(scale: float, seed: int) -> dict[str, np.ndarray]:
  rng = np.random.default_rng(seed)
  return {"x": rng.uniform(0, scale, 4).astype(np.float32), "v0": rng.uniform(0, scale, 4).astype(np.float32)}


def _reference(feeds: dict) -> dict[str, np.ndarray]:
  return dict(zip(["v", "vs"], ReferenceEvaluator(growing_loop()).run(None, feeds)))


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
  path = tmp_path_factory.mktemp("rows") / "growing.onnx"
  onnx.save(growing_loop(), str(path))
  return str(path)


def _check_main(folder: str, tmp_path) -> None:
  """`make main`, then ./main on each input: the .npy files hold the last v, the filled rows of vs and their count."""
  import subprocess
  subprocess.run(["make", "-s", "main"], cwd=folder, check=True, capture_output=True)
  lengths = set()
  for n, scale in enumerate(SCALES):
    feeds = _feeds(scale, n)
    done = run_main(folder, tmp_path, feeds)
    assert done.returncode == 0, done.stderr
    want = _reference(feeds)
    rows = int(np.load(tmp_path / "vs_rows.npy"))
    assert f"output 'vs' float32 ({rows}, 4)" in done.stdout, done.stdout
    for name in want: np.testing.assert_allclose(np.load(tmp_path / f"{name}.npy"), want[name], rtol=1e-5, atol=1e-6)
    lengths.add(rows)
  assert len(lengths) == 3 and 8 in lengths, lengths


def test_c_example_program_writes_the_filled_rows(model_file, tmp_path):
  out = tmp_path / "c"
  compile_model(model_file, "c", str(out))
  _check_main(str(out), tmp_path)


def test_opencl_example_program_writes_the_filled_rows(model_file, cl_device, tmp_path):
  out = tmp_path / "cl"
  compile_model(model_file, "opencl", str(out))
  _check_main(str(out), tmp_path)


def test_webgpu_model_js_gives_the_filled_rows(model_file, tmp_path):
  out = tmp_path / "wg" / "loop"
  compile_model(model_file, "webgpu", str(out))
  (out / "test.html").write_text(PAGE)
  with chromium.webgpu_context(str(out.parent), "/loop/test.html") as (context, url):
    tab = context.new_page()
    for n, scale in enumerate(SCALES):
      feeds = _feeds(scale, n)
      tab.goto(f"{url}/loop/test.html")
      tab.wait_for_function("window.tgcRun !== undefined")
      plain = tab.evaluate("(feeds) => window.tgcRun(feeds)", {k: v.tolist() for k, v in feeds.items()})
      got = {k: np.array(v["data"], np.float64).reshape(v["shape"]) for k, v in plain.items()}
      want = _reference(feeds)
      assert got["vs"].shape == want["vs"].shape and int(got["vs_rows"]) == len(want["vs"])
      for name in want: np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)
    tab.close()
