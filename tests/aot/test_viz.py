"""`tgc viz` and VIZ=1: the page's data (as many kernels as the manifest, the same names; rewrite records with
file:line rule names; the model's nodes; the arena's lifetimes; every kernel's source found in an artifact of each
target), the CLI for an ONNX file, a Tensor-API model and an artifact folder (rebuilt or not), hostile model names
kept inside the JSON block, VIZ=1 pages beside the artifact folder or in the current folder, and the page in headless
Chromium: no console errors, no request leaves the page, one kernel entry per manifest kernel."""
from __future__ import annotations
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

import headless_chromium as chromium
from aot_helpers import MNIST, tgc
from tgc.aot import viz as viz_page
from tgc.aot.artifact import opt_text
from tgc.aot.compile import compile_model
from tgc.ir.config import config

HOSTILE = "</script><script>window.tgcPwned=1</script><!--"
DATA_BLOCK = re.compile(r'<script type="application/json" id="tgc-viz-data">(.*?)</script>', re.S)


def page_data(path: Path) -> dict:
  html = path.read_text(encoding="utf-8")
  blocks = DATA_BLOCK.findall(html)
  assert len(blocks) == 1
  assert "<" not in blocks[0] and ">" not in blocks[0] and "&" not in blocks[0]
  return json.loads(blocks[0])


def manifest(folder: Path) -> dict:
  return json.loads((folder / "manifest.json").read_text())


def onnx_model(path: Path, hostile: bool = False) -> Path:
  """x[2, 8] -> relu(x @ w + b) * 3; with `hostile`, node and output names that try to end the page's script."""
  import onnx
  from onnx import TensorProto, helper, numpy_helper
  rng = np.random.default_rng(0)
  name = (lambda n: HOSTILE + n) if hostile else (lambda n: n)
  inits = [numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w"),
           numpy_helper.from_array(rng.standard_normal((4,)).astype(np.float32), "b"),
           numpy_helper.from_array(np.array([3.0], np.float32), "three")]
  out = name("y")
  nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name=name("mm")),
           helper.make_node("Add", ["h", "b"], ["h2"], name=name("add")),
           helper.make_node("Relu", ["h2"], ["r"], name=name("relu")),
           helper.make_node("Mul", ["r", "three"], [out], name=name("scale"))]
  graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                            [helper.make_tensor_value_info(out, TensorProto.FLOAT, [2, 4])], inits)
  onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
  return path


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
  return tmp_path_factory.mktemp("viz")


@pytest.fixture(scope="module")
def mnist_out(workdir) -> Path:
  out = workdir / "mnist"
  compile_model(MNIST, "c", str(out))
  return out


@pytest.fixture(scope="module")
def mnist_page(workdir) -> Path:
  path = workdir / "mnist.html"
  result = tgc("viz", MNIST, "-o", path)
  assert result.exit_code == 0, result.output
  assert "9 kernels" in result.stdout
  return path


# ---------------------------------------------------------------- the page's data
def test_model_page_matches_the_manifest(mnist_page, mnist_out):
  data, m = page_data(mnist_page), manifest(mnist_out)
  assert [k["name"] for k in data["kernels"]] == [k["name"] for k in m["kernels"]]
  assert [k["opts"] for k in data["kernels"]] == [[opt_text(o) for o in k["opts"]] for k in m["kernels"]]
  assert [c["kernel"] for c in data["calls"]] == [c["kernel"] for c in m["calls"]]
  assert data["kind"] == "model" and data["target"] == "c" and data["arena_bytes"] == m["arena_bytes"]
  assert data["nodes"] and all(n["kernels"] for n in data["nodes"])
  # every kernel has its recorded section, its AST and its source headed by what it computes
  rw = data["rewrites"]
  for k in data["kernels"]:
    section = rw["sections"][k["section"]]
    assert section["kind"] == "kernel" and section["title"] == k["name"]
    assert [s["label"] for s in section["snapshots"]] == ["scheduled AST"]
    assert k["source"].startswith(f"// {k['name']} computes")
  schedule = rw["sections"][0]
  assert schedule["kind"] == "schedule" and schedule["snapshots"][0]["label"] == "graph to schedule"
  records = [r for s in rw["sections"] for r in s["records"]]
  assert {"symbolic", "expand", "vectorize"} <= {r["pass"] for r in records}
  assert all(re.match(r"^\w+\.py:\d+", rule) for r in records for rule, _ in r["rules"])
  assert all(r["before"] and r["after"] and r["before"] != r["after"] for r in records)
  # arena buffers: the plan's offsets and a lifetime inside the call order
  arena = [b for b in data["buffers"] if b["kind"] == "arena"]
  assert len(arena) == len(m["arena_buffers"])
  assert all(0 <= b["first"] <= b["last"] < len(data["calls"]) for b in arena)
  assert all(b["offset"] + b["nbytes"] <= data["arena_bytes"] for b in arena)


@pytest.mark.parametrize("target", ["c", "opencl", "cuda", "metal", "webgpu"])
def test_artifact_sources_of_every_target(workdir, target):
  out = workdir / f"mnist_{target}"
  compile_model(MNIST, target, str(out))
  data = viz_page.artifact_page_data(str(out), rebuild=False)
  assert len(data["kernels"]) == len(manifest(out)["kernels"]) and data["rewrites"] is None
  for k in data["kernels"]:
    assert k["source"] and k["source"].startswith(f"// {k['name']} computes"), k["name"]
    code = [line for line in k["source"].split("\n") if not line.startswith("//")]
    assert any(k["name"] in line for line in code), k["name"]     # the function itself, not the heading alone
    assert k["source"].count("{") == k["source"].count("}")
  assert any("rewrites are not shown" in n for n in data["notes"])


def test_kernel_text_ends_with_its_function():
  text = "\n".join(["// m_k1 computes: a (Add)", "#if TG_SIMD", "void m_k1(void) {", "}", "#else",
                    "void m_k1(void) {", "  { }", "}", "#endif", "", "// m_k10 computes no model node (a copy)",
                    "void m_k10(void) { }", "int after;"])
  assert kernel_text_lines("m_k1", text) == 9
  assert viz_page.kernel_text(text, "m_k10").endswith("void m_k10(void) { }")
  assert viz_page.kernel_text(text, "m_k2") is None


def kernel_text_lines(name: str, text: str) -> int:
  return len(viz_page.kernel_text(text, name).split("\n"))


def test_embedded_json_cannot_end_the_script():
  text = viz_page.embed_json({"name": HOSTILE + "&\u2028"})
  assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
  assert json.loads(text) == {"name": HOSTILE + "&\u2028"}


# ---------------------------------------------------------------- the command
def test_cli_onnx_file_and_hostile_names(workdir):
  model = onnx_model(workdir / "hostile.onnx", hostile=True)
  path = workdir / "hostile.html"
  result = tgc("viz", model, "-o", path)
  assert result.exit_code == 0, result.output
  html = path.read_text()
  assert HOSTILE not in html and "tgcPwned" in html      # there, but only as escaped JSON
  data = page_data(path)
  assert [n["name"] for n in data["nodes"]] == [HOSTILE + n for n in ("mm", "add", "relu", "scale")]
  assert data["outputs"][0]["name"] == HOSTILE + "y"
  assert all(n["kernels"] for n in data["nodes"]) and data["kernels"]
  assert any(row[0] == HOSTILE + "mm" for row in data["rewrites"]["origins"])


def test_cli_artifact_folder_rebuilt(workdir, mnist_out):
  path = workdir / "from_out.html"
  result = tgc("viz", mnist_out, "-o", path)
  assert result.exit_code == 0, result.output
  data = page_data(path)
  assert data["kind"] == "artifact" and len(data["kernels"]) == len(manifest(mnist_out)["kernels"])
  assert all(k["section"] >= 0 and k["source"] for k in data["kernels"])
  assert any("rebuilding" in n for n in data["notes"]), data["notes"]
  # the artifact's own opts are used, so the rebuild makes the same kernels
  rw = data["rewrites"]
  assert [s["title"] for s in rw["sections"] if s["kind"] == "kernel"] == [k["name"] for k in data["kernels"]]


def test_cli_artifact_folder_whose_model_is_gone(workdir):
  model = onnx_model(workdir / "gone.onnx")
  out = workdir / "gone_out"
  compile_model(str(model), "c", str(out))
  model.unlink()
  path = workdir / "gone.html"
  result = tgc("viz", out, "-o", path)
  assert result.exit_code == 0, result.output
  data = page_data(path)
  assert data["rewrites"] is None and any("rewrites are not shown" in n and "gone" in n for n in data["notes"])
  assert len(data["kernels"]) == len(manifest(out)["kernels"]) and all(k["source"] for k in data["kernels"])
  assert "note: rewrites are not shown" in result.stdout


def test_cli_errors(workdir, mnist_out):
  result = tgc("viz", mnist_out, "--target", "webgpu", "-o", workdir / "x.html")
  assert result.exit_code == 2 and "artifact folder" in result.stderr
  result = tgc("viz", MNIST, "-o", workdir / "no" / "such" / "x.html")
  assert result.exit_code == 2 and "does not exist" in result.stderr
  result = tgc("viz", workdir / "nope.py:build", "-o", workdir / "x.html")
  assert result.exit_code == 2 and "nope.py" in result.stderr


# ---------------------------------------------------------------- VIZ=1
def test_viz_env_on_compile_inspect_and_validate(workdir, monkeypatch):
  monkeypatch.setattr(config, "viz", True)
  out = workdir / "envout"
  result = tgc("compile", MNIST, "-o", out)
  assert result.exit_code == 0, result.output
  page = workdir / "envout.viz.html"
  assert f"VIZ=1: wrote {page}" in result.stderr and page.is_file()
  assert not any(name.endswith(".html") for name in os.listdir(out))      # the artifact itself is untouched
  data = page_data(page)
  assert len(data["kernels"]) == len(manifest(out)["kernels"]) and data["rewrites"]["sections"]
  page.unlink()
  result = tgc("inspect", out)     # reads an artifact: its page, without a rebuild
  assert result.exit_code == 0 and page.is_file(), result.output
  assert page_data(page)["kind"] == "artifact"
  monkeypatch.chdir(workdir)
  result = tgc("inspect", MNIST)   # compiles, writes no folder: viz.html here
  assert result.exit_code == 0 and (workdir / "viz.html").is_file(), result.output
  result = tgc("compile", workdir / "nope.py:build", "-o", workdir / "nope")
  assert result.exit_code == 2 and "VIZ=1" not in result.stderr and not (workdir / "nope.viz.html").exists()


# ---------------------------------------------------------------- in the browser
@pytest.fixture(scope="module")
def browser():
  reason = chromium.missing_browser()
  if reason: pytest.skip(reason)
  with chromium.playwright_session() as instance:
    context, profile = chromium.launch(instance, webgpu=False)
    yield context
    chromium.close(context, profile)


def open_page(browser, url: str):
  """The page at `url` once drawn, and the console errors, page errors and requests that left the page."""
  page = browser.new_page()
  problems: list[str] = []
  page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning")
          else None)
  page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
  page.on("request", lambda r: None if r.url == url or r.url.startswith("data:") else problems.append(r.url))
  page.goto(url)
  page.wait_for_function("window.tgcViz !== undefined || window.tgcVizError !== undefined",
                         timeout=chromium.PAGE_TIMEOUT_MS)
  return page, problems


def test_browser_shows_every_kernel(browser, mnist_page, mnist_out):
  count = len(manifest(mnist_out)["kernels"])
  page, problems = open_page(browser, mnist_page.as_uri())
  try:
    assert page.evaluate("() => window.tgcVizError || null") is None
    assert page.evaluate("() => window.tgcViz.kernels") == count
    assert page.locator("#kernels details.kernel[data-kernel]").count() == count
    # open a kernel, its AST, a rewrite and its drawing: everything draws without errors
    page.locator("#kernel-0 > summary").click()
    page.locator("#kernel-0 details summary", has_text="AST").click()
    page.locator("#kernel-0 .listing .row").nth(5).wait_for()      # parts of the page are built when opened
    assert page.locator("#kernel-0 .listing .row").count() > 5
    section = page.locator("#rewrites details.section").nth(1)
    section.locator("> summary").click()
    record = section.locator("details.record").first
    record.locator("> summary").click()
    record.locator("button", has_text="drawing").first.click()
    record.locator("svg g").nth(3).wait_for()
    assert record.locator("svg g").count() > 3
    assert page.locator("#schedule svg.chart rect.buf").count() == len(manifest(mnist_out)["arena_buffers"])
    assert problems == []
  finally:
    page.close()


def test_browser_hostile_names_are_text(browser, workdir):
  model = onnx_model(workdir / "hostile_browser.onnx", hostile=True)
  path = workdir / "hostile_browser.html"
  assert tgc("viz", model, "-o", path).exit_code == 0
  for url in (path.as_uri(), None):
    if url is None:    # the same page served over http (what a user's local server does)
      with chromium.serve(str(workdir)) as base:
        check_hostile_page(browser, f"{base}/{path.name}")
    else: check_hostile_page(browser, url)


def check_hostile_page(browser, url: str) -> None:
  page, problems = open_page(browser, url)
  try:
    assert page.evaluate("() => window.tgcPwned === undefined && window.tgcViz.ready")
    page.locator("#node-table > summary").click()
    page.locator("#nodes table td").first.wait_for()     # the table is built when the section first opens
    cells = page.locator("#nodes table td").all_inner_texts()
    assert HOSTILE + "mm" in cells
    titles = page.locator("#graph-view svg g.g-node > title").all_text_contents()     # the drawing: text nodes too
    assert any(t.startswith(HOSTILE + "mm (MatMul)") for t in titles), titles
    assert problems == []
  finally:
    page.close()


def test_page_is_a_few_hundred_kilobytes_for_mnist(mnist_page):
  assert 50_000 < mnist_page.stat().st_size < 2_000_000
