"""examples/generate/generate.html and generate.js: greedy generation in headless Chromium on a WebGPU artifact
whose KV cache stays in GPU buffers. On the small language model of tests/emit/test_c_generate.py the page streams
the same tokens as onnxruntime's greedy loop (the prompt in one run or in chunks), shows the speeds, stops with a
message when the context is full, and its decode loop creates no GPU buffer."""
import os
import pytest
import headless_chromium as chromium
from tgc.aot import compile_model
from tests.aot.aot_helpers import ROOT
from tests.emit.test_c_generate import VOCAB, _reference_tokens
from tests.onnx.test_model_state import SEQ, decoder_model

CONTEXT = 24
COUNT = 12
# Before the page's scripts: every GPU buffer created, with the number of tokens the page shows at the time, and the
# page's token list after each change to it (the stream as it was seen).
WATCH = """
window.created = [];
const createBuffer = GPUDevice.prototype.createBuffer;
const shown = () => (document.getElementById("tokens")?.textContent || "").trim().split(/\\s+/).filter(Boolean);
GPUDevice.prototype.createBuffer = function (descriptor) {
  window.created.push(shown().length);
  return createBuffer.call(this, descriptor);
};
window.streamed = [];
document.addEventListener("DOMContentLoaded", () => new MutationObserver(() => window.streamed.push(shown()))
  .observe(document.getElementById("tokens"), { childList: true, characterData: true, subtree: true }));
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory):
  """The language model, compiled for webgpu, served at / with examples/generate at /generate: (onnx path, URL)."""
  reason = chromium.missing_browser()
  if reason: pytest.skip(reason)
  tmp = tmp_path_factory.mktemp("webgen")
  path = decoder_model(tmp, vocab=VOCAB)
  art = tmp / "art"
  compile_model(path, "webgpu", str(art), dims={SEQ: (1, 4)}, max_context=CONTEXT)
  with chromium.webgpu_context({"/": str(art), "/generate": os.path.join(ROOT, "examples", "generate")},
                                "/index.html") as (context, url):
    yield path, url, context


def _open(site, prompt: list[int], count: int):
  """The page once it has generated: (page, window.generated)."""
  _, url, context = site
  page = context.new_page()
  page.add_init_script(WATCH)
  page.goto(f"{url}/generate/generate.html?model=/model.js&tokens={','.join(map(str, prompt))}&count={count}")
  page.wait_for_function("window.generated !== undefined || window.generateError !== undefined",
                         timeout=chromium.PAGE_TIMEOUT_MS)
  error = page.evaluate("() => window.generateError || null")
  assert error is None, error
  return page, page.evaluate("() => window.generated")


@pytest.mark.parametrize("prompt", [[3], [5, 17, 2], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]])   # the last: 3 chunks of <= 4
def test_page_streams_the_tokens_of_onnxruntime_greedy(site, prompt):
  page, got = _open(site, prompt, COUNT)
  try:
    want = _reference_tokens(site[0], prompt, COUNT)
    assert got["tokens"] == want and not got["full"]
    assert page.evaluate("() => window.streamed") == [[str(t) for t in want[:k]] for k in range(1, COUNT + 1)]
    assert got["prefillTokensPerSecond"] > 0 and got["decodeTokensPerSecond"] > 0
    assert "tokens/s" in page.inner_text("#status")
    created = page.evaluate("() => window.created")
    assert created and created[0] == 0                # the load creates buffers (the watch works) ...
    assert not [k for k in created if 1 <= k < COUNT]  # ... the runs between the first token and the last none
  finally:
    page.close()


def test_page_stops_when_the_context_is_full(site):
  page, got = _open(site, [1, 2, 3], 30)         # 3 + 29 > 24 entries: 22 tokens, as generate.c prints
  try:
    assert got["full"] and got["tokens"] == _reference_tokens(site[0], [1, 2, 3], 22)
    assert f"the context is full ({CONTEXT} tokens)" in page.inner_text("#status")
    assert page.inner_text("#tokens").split() == [str(t) for t in got["tokens"]]
  finally:
    page.close()
