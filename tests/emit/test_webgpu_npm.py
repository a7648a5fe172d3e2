"""A webgpu artifact as an npm package: `npm pack` of the folder gives a tarball that installs; an app that imports
the package and its weights asset, bundled by esbuild (installed from the registry once, into tgc's cache folder),
runs in headless Chromium and its outputs match the numpy reference. Skips name the missing piece (npm, the
registry, Chromium)."""
from __future__ import annotations
import shutil
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pytest

import headless_chromium as chromium
from artifact_cases import mlp_case
from tgc.emit import write_artifact
from tgc.ir.config import config

pytestmark = pytest.mark.webgpu
ESBUILD_VERSION = "0.28.2"
NAME, VERSION = "@tgc-test/tiny-mlp", "2.1.0"
APP_JS = """import { load, inputs } from "@tgc-test/tiny-mlp";
import weightsUrl from "@tgc-test/tiny-mlp/weights.safetensors";

window.appResult = (async () => {
  const model = await load(weightsUrl);
  const out = await model.run({ [inputs[0].name]: Float32Array.from(window.appInput) });
  await model.dispose();
  return Object.fromEntries(Object.entries(out).map(([k, v]) => [k, { data: Array.from(v.data), shape: v.shape }]));
})();
"""
PAGE = '<!doctype html><meta charset="utf-8"><title>app</title><script type="module" src="app.js"></script>\n'


def sh(args: list[str], cwd, timeout: int = 300) -> subprocess.CompletedProcess:
  result = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout)
  assert result.returncode == 0, f"{' '.join(args)}: {result.stdout[-2000:]}{result.stderr[-2000:]}"
  return result


@pytest.fixture(scope="module")
def npm() -> str:
  path = shutil.which("npm")
  if path is None: pytest.skip("npm not found: install the Debian packages nodejs and npm")
  return path


@pytest.fixture(scope="module")
def esbuild(npm) -> str:
  """esbuild from the registry, installed once into the cache folder (TGC_CACHE_DIR) and reused by later runs."""
  folder = Path(config.cache_dir, "npm", f"esbuild-{ESBUILD_VERSION}")
  binary = folder / "node_modules" / ".bin" / "esbuild"
  if not binary.exists():
    folder.mkdir(parents=True, exist_ok=True)
    result = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefix", str(folder),
                             f"esbuild@{ESBUILD_VERSION}"], capture_output=True, text=True, timeout=600)
    if result.returncode != 0 or not binary.exists():
      pytest.skip(f"npm install esbuild@{ESBUILD_VERSION} failed (no registry?): {result.stderr.strip()[-300:]}")
  return str(binary)


@pytest.fixture(scope="module")
def package(tmp_path_factory):
  """The mlp case's webgpu artifact named @tgc-test/tiny-mlp 2.1.0, and the case."""
  case = mlp_case()
  folder = tmp_path_factory.mktemp("npm") / "tiny-mlp"
  folder.mkdir()
  write_artifact(case.compile("webgpu"), str(folder), npm_name=NAME, npm_version=VERSION)
  return case, folder


def test_npm_pack_gives_an_installable_package(package, npm, tmp_path):
  case, folder = package
  sh([npm, "pack", "--pack-destination", str(tmp_path)], folder)
  tarball = tmp_path / "tgc-test-tiny-mlp-2.1.0.tgz"
  with tarfile.open(tarball) as tar: packed = {m.name for m in tar.getmembers()}
  assert {f"package/{f}" for f in ("package.json", "model.js", "model.d.ts", "weights.safetensors",
                                   "manifest.json")} <= packed
  app = tmp_path / "app"
  app.mkdir()
  (app / "package.json").write_text('{"private": true, "type": "module"}\n')
  sh([npm, "install", "--no-audit", "--no-fund", "--offline", str(tarball)], app)
  installed = app / "node_modules" / "@tgc-test" / "tiny-mlp"
  assert (installed / "weights.safetensors").read_bytes() == (folder / "weights.safetensors").read_bytes()
  node = shutil.which("node")
  out = sh([node, "--input-type=module", "-e", 'import * as m from "@tgc-test/tiny-mlp"; '
            'console.log(m.name, JSON.stringify(m.inputs));'], app).stdout
  assert out.split()[0] == "mlp" and '"x"' in out


def test_esbuild_app_runs_in_chromium(package, npm, esbuild, tmp_path):
  """An app bundled with esbuild (the package's weights as a file asset) runs the model in headless Chromium."""
  reason = chromium.missing_browser()
  if reason: pytest.skip(reason)
  case, folder = package
  sh([npm, "pack", "--pack-destination", str(tmp_path)], folder)
  app = tmp_path / "app"
  app.mkdir()
  (app / "package.json").write_text('{"private": true, "type": "module"}\n')
  sh([npm, "install", "--no-audit", "--no-fund", "--offline", str(tmp_path / "tgc-test-tiny-mlp-2.1.0.tgz")], app)
  (app / "app.js").write_text(APP_JS)
  sh([esbuild, "app.js", "--bundle", "--format=esm", "--outdir=dist", "--loader:.safetensors=file"], app)
  dist = app / "dist"
  (dist / "index.html").write_text(PAGE)
  assert any(f.suffix == ".safetensors" for f in dist.iterdir()) and not (dist / "model.js").exists()
  x = case.inputs["x"]
  with chromium.serve(str(dist)) as url, chromium.playwright_session() as playwright:
    context, profile = chromium.launch(playwright)
    try:
      page = context.new_page()
      page.add_init_script(f"window.appInput = {x.reshape(-1).astype(np.float64).tolist()};")
      page.goto(f"{url}/index.html")
      page.wait_for_function("window.appResult !== undefined", timeout=chromium.PAGE_TIMEOUT_MS)
      try:
        got = page.evaluate("() => window.appResult")
      except Exception as error:           # noqa: BLE001 - the page's error, in one line
        if "WebGPU" in str(error) and "adapter" in str(error): pytest.skip("Chromium offers no WebGPU adapter")
        raise
    finally:
      chromium.close(context, profile)
  want = case.reference()
  for name, value in want.items():
    np.testing.assert_allclose(np.array(got[name]["data"], np.float32).reshape(got[name]["shape"]), value,
                               rtol=case.rtol, atol=case.atol)
