"""States kept by a WebGPU artifact (`--max-context N` on target webgpu): the decoder of tests/onnx/test_model_state.py,
its KV cache in GPU buffers of their own. Checked against onnxruntime (with the cache passed in and out) over calls of
different lengths through the wgpu runner and through model.js in headless Chromium: outputs, the states' entries,
their length, resets, a run past the capacity refused without changing anything, decode runs that create no GPU
buffer, runs queued behind others following on in call order; `tgc validate` on the artifact; a bundle without
states gets none of the state code."""
import json
import numpy as np
import pytest
from click.testing import CliRunner
import headless_chromium as chromium
from tgc.aot import compile_model
from tgc.aot.cli import cli
from tgc.runtimes.artifact import ArtifactError
from tgc.runtimes.artifact_webgpu import WebGPUArtifact, read_plan
from tests.emit.test_webgpu_artifact import wgpu_runtime  # noqa: F401 (fixture)
from tests.onnx.test_model_state import (CACHE, HEAD_DIM, HEADS, PAST, SEQ, check_rewind, decoder_model,
                                        empty_cache, feeds_at, ort, run_calls)

CAPACITY = 16

PAGE = """<!doctype html><meta charset="utf-8"><script type="module">
import { load } from "./model.js";
let created = 0;           // GPU buffers made since the page opened
const createBuffer = GPUDevice.prototype.createBuffer;
GPUDevice.prototype.createBuffer = function (descriptor) { created += 1; return createBuffer.call(this, descriptor); };
const feed = (f) => ({ x: { data: Float32Array.from(f.x.data), shape: f.x.shape },
                       attention_mask: { data: BigInt64Array.from(f.attention_mask.data, BigInt),
                                         shape: f.attention_mask.shape } });
const plain = (t) => ({ data: Array.from(t.data), shape: t.shape });
const message = async (f) => { try { await f(); return null; } catch (error) { return error.message; } };
window.tgcStates = async (runs, decode, tooLong) => {
  const model = await load("weights.safetensors");
  try {
    const out = { states: model.states, loaded: model.stateLength, lengths: [], created };
    const results = [];            // the runs are started at once: the second is queued behind the first
    for (const f of runs) {
      results.push(model.run(feed(f)));
      out.lengths.push(model.stateLength);
    }
    const held = [model.readState(0), model.readState(1)];      // read once both runs are done
    out.ys = (await Promise.all(results)).map((r) => plain(r.y));
    out.held = (await Promise.all(held)).map(plain);
    const before = created;
    for (const f of decode) await model.run(feed(f));
    out.decodeCreated = created - before;
    out.decoded = model.stateLength;
    out.tooLong = await message(() => model.run(feed(tooLong)));
    out.afterTooLong = model.stateLength;
    out.badReset = await message(() => model.resetState(17));
    model.resetState();
    out.reset = model.stateLength;
    out.again = plain((await model.run(feed(runs[0]))).y);
    out.againLength = model.stateLength;
    return out;
  } finally { await model.dispose(); }
};
</script>"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
  """The decoder compiled for webgpu with a cache of CAPACITY entries (and a page that drives its model.js)."""
  root = tmp_path_factory.mktemp("wgstate")
  out = root / "decoder"
  compile_model(decoder_model(root), "webgpu", str(out), dims={SEQ: (1, 8)}, max_context=CAPACITY)
  (out / "test.html").write_text(PAGE)
  return out


@pytest.fixture(scope="module")
def session(folder):
  return ort.InferenceSession(str(folder.parent / "decoder.onnx"), providers=["CPUExecutionProvider"])


def _reference(session, lengths) -> tuple[list[dict], list[np.ndarray], dict]:
  """Feeds of runs of these lengths from an empty cache, onnxruntime's y of each and the cache after the last."""
  feeds, ys, cache, past = [], [], empty_cache(), 0
  for seq in lengths:
    f = feeds_at(past, seq)
    ref = session.run(None, {**f, **cache})
    feeds.append(f)
    ys.append(ref[0])
    cache, past = dict(zip(CACHE, ref[1:])), past + seq
  return feeds, ys, cache


def test_plan_keeps_states_in_buffers_of_their_own(folder):
  plan = read_plan((folder / "model.js").read_text())
  assert [t["name"] for t in plan["inputs"]] == ["x", "attention_mask"]
  assert [t["name"] for t in plan["outputs"]] == ["y"]
  assert [(s["name"], s["output"], s["shape"], s["axis"], s["capacity"], s["length"]) for s in plan["states"]] == \
    [(c, c.replace("past_key_values", "present"), [1, HEADS, CAPACITY, HEAD_DIM], 2, CAPACITY, PAST) for c in CACHE]
  held = [s["buffer"] for s in plan["states"]]
  assert len(set(held)) == 2 and all(plan["buffers"][b]["label"].startswith("state ") for b in held)
  assert all(not plan["buffers"][b]["label"].startswith("slot") for b in held)
  writers = [c for c in plan["calls"] for b in held if c["args"][0] == b]
  assert len(writers) == 2           # each state is written by one call: the one appending this run's entries
  manifest = json.loads((folder / "manifest.json").read_text())
  assert [s["name"] for s in manifest["states"]] == list(CACHE)


def test_wgpu_runner_matches_onnxruntime_over_calls_of_different_lengths(folder, session, wgpu_runtime):
  with WebGPUArtifact(str(folder), runtime=wgpu_runtime) as art:
    assert art.held_sizes() == {PAST: 0}
    for _ in range(2):             # the second round after a reset starts a new sequence
      cache, past = run_calls(art, session)
      before = [art.state(i) for i in range(2)]
      with pytest.raises(ArtifactError, match="state 'past_key_values.0.key' has no room"):
        art.run(feeds_at(past, 6))                # 12 + 6 > 16: refused, nothing changes
      assert art.held_sizes() == {PAST: past}
      for i in range(2): np.testing.assert_array_equal(art.state(i), before[i])
      feeds = feeds_at(past, 4)                   # exactly full
      np.testing.assert_allclose(art.run(feeds)["y"], session.run(None, {**feeds, **cache})[0], rtol=1e-4, atol=1e-5)
      assert art.held_sizes() == {PAST: CAPACITY}
      art.reset_state()
    check_rewind(art, session, CAPACITY, r"reset_state\(17\)")


def test_validate_fills_the_cache_and_compares_with_the_reference(folder, wgpu_runtime):
  result = CliRunner().invoke(cli, ["validate", str(folder)])
  assert result.exit_code == 0, result.output
  assert "state past_key_values.0.key after 3 runs at sequence_length=4, past_sequence_length=8" in result.output
  assert result.output.rstrip().endswith("OK")


def test_bundles_without_states_have_no_state_code(tmp_path):
  out = tmp_path / "dyn"
  compile_model(decoder_model(tmp_path), "webgpu", str(out), dims={SEQ: (1, 8), PAST: (1, 8)})
  js = (out / "model.js").read_text()
  assert "HeldSizes" not in js and "readState" not in js and "function bindSizes(shapes) {" in js
  assert "stateLength" not in (out / "model.d.ts").read_text()


@pytest.fixture(scope="module")
def page(folder):
  with chromium.webgpu_context(str(folder), "/test.html") as (context, url):
    tab = context.new_page()
    yield tab, url
    tab.close()


def _plain(feeds: dict) -> dict:
  return {k: {"data": v.reshape(-1).tolist(), "shape": list(v.shape)} for k, v in feeds.items()}


def test_browser_model_js_keeps_the_cache(page, session):
  tab, url = page
  feeds, ys, cache = _reference(session, (3, 1))
  decode = [feeds_at(4 + k, 1) for k in range(5)]                    # five one-token runs after the first two
  too_long = feeds_at(9, 8)                                           # 9 + 8 > 16
  tab.goto(f"{url}/test.html")
  tab.wait_for_function("window.tgcStates !== undefined")
  got = tab.evaluate("([runs, decode, tooLong]) => window.tgcStates(runs, decode, tooLong)",
                     [[_plain(f) for f in feeds], [_plain(f) for f in decode], _plain(too_long)])
  assert [(s["name"], s["output"], s["capacity"], s["axis"]) for s in got["states"]] == \
    [(c, c.replace("past_key_values", "present"), CAPACITY, 2) for c in CACHE]
  assert got["loaded"] == 0 and got["lengths"] == [3, 4] and got["created"] > 0
  for y, want in zip(got["ys"], ys):
    np.testing.assert_allclose(np.array(y["data"], np.float32).reshape(y["shape"]), want, rtol=1e-4, atol=1e-5)
  for held, c in zip(got["held"], CACHE):
    assert held["shape"] == [1, HEADS, 4, HEAD_DIM]
    np.testing.assert_allclose(np.array(held["data"], np.float32).reshape(held["shape"]), cache[c], rtol=1e-5,
                               atol=1e-6)
  assert got["decodeCreated"] == 0 and got["decoded"] == 9
  assert 'state "past_key_values.0.key" has no room for this run\'s entries: it holds 9 of 16' in got["tooLong"]
  assert got["afterTooLong"] == 9
  assert f"resetState(17): a state's length is 0 to its capacity {CAPACITY}" in got["badReset"]
  assert got["reset"] == 0 and got["againLength"] == 3
  np.testing.assert_allclose(np.array(got["again"]["data"], np.float32).reshape(got["again"]["shape"]), ys[0],
                             rtol=1e-4, atol=1e-5)


def test_demo_page_runs_from_empty_states(page):
  tab, url = page
  tab.goto(f"{url}/index.html?runs=3")
  tab.wait_for_function("window.tgcResult !== undefined || window.tgcError !== undefined", timeout=120_000)
  assert tab.evaluate("() => window.tgcError") is None
  assert tab.evaluate("() => [window.tgcResult.outputs.y.shape, window.tgc.model.stateLength]") == [[1, 8, 16], 8]
