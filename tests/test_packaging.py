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


def _dist(requirement: str) -> str:
  """The normalized distribution name of a requirement ('pytest-xdist>=3' -> 'pytest-xdist')."""
  import re
  return re.sub(r"[-_.]+", "-", re.split(r"[<>=!~;\[ ]", requirement.strip(), maxsplit=1)[0]).lower()


def test_constraints_pin_every_dependency():
  """constraints.txt (what scripts/setup.sh installs with) pins one exact version of every dependency and extra in
  pyproject.toml, and of nothing twice."""
  import tomllib
  project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
  wanted = {_dist(r) for r in project["dependencies"]}
  for extra in project["optional-dependencies"].values(): wanted |= {_dist(r) for r in extra}
  lines = [ln.strip() for ln in (ROOT / "constraints.txt").read_text().splitlines()]
  pins = [ln for ln in lines if ln and not ln.startswith("#")]
  assert all(ln.count("==") == 1 for ln in pins), [ln for ln in pins if ln.count("==") != 1]
  names = [_dist(ln) for ln in pins]
  assert len(names) == len(set(names))
  assert wanted - set(names) == set()
  assert "-c constraints.txt" in (ROOT / "scripts" / "setup.sh").read_text()
