"""Headless Chromium (SwiftShader WebGPU) for the browser tests and bench/bench_webgpu_browser.py: the Debian
chromium binary driven by Playwright (never `playwright install`), a local http server on 127.0.0.1 (a secure
context, so WebGPU is offered), and the conversions between numpy arrays and what a page hands back (the demo page
of a webgpu artifact: window.tgcGivenInputs, window.tgcResult, window.tgc.plain)."""
from __future__ import annotations
import atexit
import contextlib
import http.server
import importlib.util
import json
import os
import posixpath
import shutil
import tempfile
import threading
import urllib.parse
from typing import Iterator

import numpy as np

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless=new", "--no-sandbox", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run", "--disable-quic", "--disable-dev-shm-usage"]
WEBGPU_FLAG = "--enable-unsafe-webgpu"
PAGE_TIMEOUT_MS = 120_000
HAS_ADAPTER_JS = "async () => !!(navigator.gpu && await navigator.gpu.requestAdapter())"
PLAIN_OUTPUTS = ("(outs) => Object.fromEntries(Object.entries(outs).map(([k, v]) => "
                 "[k, {data: window.tgc.plain(v.data), shape: v.shape}]))")
# served with these types whatever the machine's mime.types says (module scripts must be JavaScript)
CONTENT_TYPES = {".js": "text/javascript", ".mjs": "text/javascript", ".wasm": "application/wasm",
                 ".json": "application/json", ".html": "text/html", ".onnx": "application/octet-stream",
                 ".safetensors": "application/octet-stream"}


def missing_browser() -> str | None:
  """Why headless Chromium cannot be driven here (one line naming the missing piece), or None."""
  if not os.path.exists(CHROMIUM): return f"{CHROMIUM} not found: install the Debian package chromium"
  if importlib.util.find_spec("playwright") is None:
    return "playwright not installed: pip install playwright (it drives /usr/bin/chromium; no `playwright install` " \
           "needed)"
  return None


class _Handler(http.server.SimpleHTTPRequestHandler):
  """Serves `routes` (URL prefix -> folder; the longest prefix wins), quietly."""
  routes: dict[str, str] = {}
  requests: list | None = None       # when a list: the path of every GET request is appended to it
  extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, **CONTENT_TYPES}

  def translate_path(self, path: str) -> str:
    path = posixpath.normpath(urllib.parse.unquote(path.split("?", 1)[0].split("#", 1)[0]))
    for prefix in sorted(self.routes, key=len, reverse=True):
      base = prefix.rstrip("/")
      if path == base or path.startswith(base + "/"):
        rest = [p for p in path[len(base):].split("/") if p and p not in (".", "..")]
        return os.path.join(self.routes[prefix], *rest)
    return os.path.join(tempfile.gettempdir(), "tgc-no-such-route", "x")   # 404

  def do_GET(self) -> None:
    if self.requests is not None: self.requests.append(self.path.split("?", 1)[0])
    super().do_GET()

  def log_message(self, *args) -> None: pass


@contextlib.contextmanager
def serve(routes: dict[str, str] | str, requests: list | None = None) -> Iterator[str]:
  """Serve a folder (or {URL prefix: folder}) over http://127.0.0.1:<free port> from a thread; yields the base URL.
  `requests`: a list that gets the path of every GET request (to count what a page fetched)."""
  if isinstance(routes, str): routes = {"/": routes}
  handler = type("RoutedHandler", (_Handler,), {"routes": {p: os.path.abspath(d) for p, d in routes.items()},
                                                "requests": requests})
  httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
  thread = threading.Thread(target=httpd.serve_forever, daemon=True)
  thread.start()
  try:
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
  finally:
    httpd.shutdown()
    httpd.server_close()


_PLAYWRIGHT: list = []      # [(manager, instance)] once started: one sync Playwright per process


@contextlib.contextmanager
def playwright_session():
  """The process's sync Playwright (the caller checks missing_browser() first). It is started on first use and
  stopped at exit: a sync Playwright runs an event loop in its thread, so a second one cannot start beside it
  (tests of different files in one pytest worker share it)."""
  if not _PLAYWRIGHT:
    from playwright.sync_api import sync_playwright
    manager = sync_playwright()
    _PLAYWRIGHT.append((manager, manager.start()))
    atexit.register(manager.__exit__, None, None, None)
  yield _PLAYWRIGHT[0][1]


def launch(playwright, webgpu: bool = True):
  """Chromium with a fresh profile: (context, profile folder); close with `close(context, profile)`."""
  profile = tempfile.mkdtemp(prefix="tgc-chromium-")
  context = playwright.chromium.launch_persistent_context(
    profile, executable_path=CHROMIUM, headless=True, ignore_default_args=["--headless"],
    args=CHROMIUM_FLAGS + ([WEBGPU_FLAG] if webgpu else []))
  return context, profile


def close(context, profile: str) -> None:
  context.close()
  shutil.rmtree(profile, ignore_errors=True)


def has_webgpu_adapter(context, url: str) -> bool:
  """Whether a page at `url` (served from 127.0.0.1) gets a WebGPU adapter."""
  page = context.new_page()
  try:
    page.goto(url)
    return bool(page.evaluate(HAS_ADAPTER_JS))
  finally:
    page.close()


NO_ADAPTER = "Chromium offers no WebGPU adapter (SwiftShader or a Vulkan driver is needed)"


@contextlib.contextmanager
def webgpu_context(routes: dict[str, str] | str, probe: str) -> Iterator[tuple[object, str]]:
  """For tests: Chromium with WebGPU over the served `routes` (see `serve`), as (context, base URL); the test is
  skipped, naming the missing piece, without a browser or without a WebGPU adapter (asked on the page at `probe`, a
  path on the server)."""
  import pytest
  reason = missing_browser()
  if reason: pytest.skip(reason)
  with serve(routes) as url, playwright_session() as pw:
    context, profile = launch(pw)
    try:
      if not has_webgpu_adapter(context, f"{url}{probe}"): pytest.skip(NO_ADAPTER)
      yield context, url
    finally:
      close(context, profile)


# ---------------------------------------------------------------- values in and out of pages

def plain_inputs(inputs: dict[str, np.ndarray]) -> dict[str, list]:
  """Inputs as window.tgcGivenInputs takes them: flat lists of what the TypedArray holds (float16: bits)."""
  out = {}
  for name, arr in inputs.items():
    arr = np.asarray(arr).reshape(-1)
    if arr.dtype == np.float16: arr = arr.view(np.uint16)
    out[name] = [str(v) for v in arr.tolist()] if arr.dtype == np.int64 else arr.astype(np.float64).tolist() \
        if arr.dtype.kind == "f" else arr.astype(np.int64).tolist()
  return out


def from_plain(values: list, shape, dtype: str) -> np.ndarray:
  dtype = np.dtype(dtype)
  if dtype == np.float16: return np.array(values, np.uint16).view(np.float16).reshape(shape)
  if dtype.kind in "iu" and dtype.itemsize == 8: return np.array([int(v) for v in values], dtype).reshape(shape)
  return np.array(values, np.float64).astype(dtype).reshape(shape)


def outputs_from(page_value: dict, manifest: dict) -> dict[str, np.ndarray]:
  dtypes_ = {o["name"]: o["dtype"] for o in manifest["outputs"]}
  return {name: from_plain(v["data"], v["shape"], dtypes_[name]) for name, v in page_value.items()}


def inputs_used(page, manifest: dict) -> dict[str, np.ndarray]:
  """The inputs the demo page ran (window.tgcInputs), as numpy arrays in the manifest's order."""
  used = page.evaluate("() => Object.fromEntries(Object.entries(window.tgcInputs).map(([k, v]) => "
                       "[k, window.tgc.plain(v)]))")
  return {t["name"]: from_plain(used[t["name"]], t["shape"], t["dtype"]) for t in manifest["inputs"]}


def demo_outputs(page, manifest: dict) -> dict[str, np.ndarray]:
  """The outputs of the demo page's last run (window.tgcResult)."""
  return outputs_from(page.evaluate(f"() => ({PLAIN_OUTPUTS})(window.tgcResult.outputs)"), manifest)


def open_demo(context, url: str, given: dict | None = None, timeout_ms: int = PAGE_TIMEOUT_MS):
  """A new page on a demo page URL, once it has run (or failed: AssertionError with the page's message)."""
  page = context.new_page()
  if given is not None: page.add_init_script(f"window.tgcGivenInputs = {json.dumps(given)};")
  page.goto(url)
  page.wait_for_function("window.tgcResult !== undefined || window.tgcError !== undefined", timeout=timeout_ms)
  error = page.evaluate("() => window.tgcError || null")
  if error is not None:
    page.close()
    raise AssertionError(error)
  return page


def manifest_of(folder: str) -> dict:
  with open(os.path.join(folder, "manifest.json"), encoding="utf-8") as f: return json.load(f)

