"""Packaging: a wheel of the project installs one top-level package, `tgc` (its layers inside it, the host templates
and the manifest schema as package data), plus its metadata and the `tgc` console script."""
from __future__ import annotations
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PACKAGED = ("tgc", "ir", "codegen", "frontend", "emit", "runtimes", "templates", "aot", "pyproject.toml", "README.md")


def test_wheel_installs_only_the_tgc_package(tmp_path):
  src = tmp_path / "src"      # a copy: building writes build/ and *.egg-info next to the sources
  src.mkdir()
  for name in PACKAGED:
    if (ROOT / name).is_dir(): shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    else: shutil.copy(ROOT / name, src / name)
  subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                  str(tmp_path), str(src)], check=True, capture_output=True, cwd=tmp_path)
  (wheel,) = tmp_path.glob("tgc-*.whl")
  names = zipfile.ZipFile(wheel).namelist()
  tops = {n.split("/")[0] for n in names}
  assert {t for t in tops if not t.endswith(".dist-info")} == {"tgc"}
  for layer in ("ir", "codegen", "codegen/render", "frontend", "frontend/onnx", "emit", "runtimes", "aot"):
    assert f"tgc/{layer}/__init__.py" in names
  assert "tgc/templates/c/model.c.tmpl" in names and "tgc/emit/manifest.schema.json" in names
  assert "tgc/templates/viz/page.html.tmpl" in names
  entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
  assert "tgc = tgc.aot.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
