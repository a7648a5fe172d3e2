"""The layer rules of DESIGN.md, read from the source: allowed imports between the tgc packages (every import
statement, including ones inside functions, relative ones and importlib calls with a literal name), a module
docstring in every file and no line longer than 120 characters."""
from __future__ import annotations
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINE = 120

# DESIGN.md, "Allowed imports": package -> the tgc packages it may import (itself always allowed)
ALLOWED: dict[str, set[str]] = {
  "ir": set(),
  "codegen": {"ir"},
  "runtimes": {"ir", "codegen"},
  "frontend": {"ir", "codegen", "runtimes"},
  "emit": {"ir", "codegen"},
  "aot": {"ir", "codegen", "runtimes", "frontend", "emit"},
}
PACKAGES = set(ALLOWED)


def source_files() -> list[Path]:
  return sorted(p for pkg in sorted(PACKAGES) for p in (ROOT / pkg).rglob("*.py") if p.is_file())


def module_of(path: Path, root: Path = ROOT) -> list[str]:
  """Dotted module parts of a file: ir/uop.py -> ['ir', 'uop'], ir/__init__.py -> ['ir']."""
  parts = list(path.relative_to(root).with_suffix("").parts)
  return parts[:-1] if parts[-1] == "__init__" else parts


def imported_modules(source: str, module: list[str], is_package: bool) -> list[tuple[int, str]]:
  """(line, absolute dotted name) of every module the source imports. Relative imports are resolved against
  `module`; one that climbs above the top-level package resolves to '..' + the rest (always a violation)."""
  out: list[tuple[int, str]] = []
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Import):
      out.extend((node.lineno, a.name) for a in node.names)
    elif isinstance(node, ast.ImportFrom):
      if node.level == 0:
        out.append((node.lineno, node.module or ""))
        continue
      base = module if is_package else module[:-1]
      up = node.level - 1
      if up > len(base) - 1:
        out.append((node.lineno, ".." + (node.module or "")))
        continue
      anchor = base[:len(base) - up]
      names = [node.module] if node.module else [a.name for a in node.names]
      out.extend((node.lineno, ".".join(anchor + [n])) for n in names)
    elif isinstance(node, ast.Call) and _is_dynamic_import(node.func) and node.args:
      arg = node.args[0]
      if isinstance(arg, ast.Constant) and isinstance(arg.value, str): out.append((node.lineno, arg.value))
  return out


def _is_dynamic_import(func: ast.expr) -> bool:
  if isinstance(func, ast.Name): return func.id in ("__import__", "import_module")
  return isinstance(func, ast.Attribute) and func.attr == "import_module"


def violations(source: str, module: list[str], is_package: bool) -> list[str]:
  """Imports of tgc packages that `module`'s package may not use."""
  pkg = module[0]
  bad = []
  for line, name in imported_modules(source, module, is_package):
    top = name.split(".")[0]
    if name.startswith(".."): bad.append(f"line {line}: relative import {name!r} leaves the package")
    elif top in PACKAGES and top != pkg and top not in ALLOWED[pkg]:
      bad.append(f"line {line}: {pkg} may not import {name!r} (allowed: {sorted(ALLOWED[pkg]) or 'nothing'})")
  return bad


FILES = source_files()


def _id(p: Path) -> str: return str(p.relative_to(ROOT))


def test_scan_sees_the_packages():
  assert all((ROOT / pkg / "__init__.py").is_file() for pkg in PACKAGES)
  assert len([p for p in FILES if p.parts[-2] == "ir"]) >= 5


@pytest.mark.parametrize("path", FILES, ids=_id)
def test_allowed_imports(path: Path):
  bad = violations(path.read_text(), module_of(path), path.name == "__init__.py")
  assert not bad, f"{_id(path)}: " + "; ".join(bad)


@pytest.mark.parametrize("path", FILES, ids=_id)
def test_module_docstring(path: Path):
  doc = ast.get_docstring(ast.parse(path.read_text()))
  assert doc and doc.strip(), f"{_id(path)} has no module docstring"


@pytest.mark.parametrize("path", FILES, ids=_id)
def test_line_length(path: Path):
  long = [i for i, ln in enumerate(path.read_text().splitlines(), 1) if len(ln) > MAX_LINE]
  assert not long, f"{_id(path)}: lines longer than {MAX_LINE} chars: {long[:10]}"


# ---- the checker itself catches what it must ----

@pytest.mark.parametrize("pkg, source, is_package, module, want_bad", [
  ("ir", "from codegen import lower", False, ["ir", "uop"], True),
  ("ir", "import numpy as np\nfrom ir.ops import Ops", False, ["ir", "uop"], False),
  ("ir", "def f():\n  import runtimes.c as rc\n  return rc", False, ["ir", "uop"], True),
  ("ir", "import importlib\nm = importlib.import_module('frontend.tensor')", False, ["ir", "uop"], True),
  ("ir", "m = __import__('aot')", False, ["ir", "uop"], True),
  ("codegen", "from ir import UOp\nfrom . import lower\nfrom .opt import beam", False, ["codegen", "x"], False),
  ("codegen", "from ..runtimes import c", False, ["codegen", "x"], True),
  ("codegen", "from ... import frontend", False, ["codegen", "sub", "x"], True),
  ("codegen", "from .. import helpers", False, ["codegen", "sub", "x"], False),
  ("codegen", "from ... import aot", True, ["codegen", "sub"], True),
  ("codegen", "from .... import aot", False, ["codegen", "sub", "x"], True),
  ("runtimes", "from codegen.render import c\nfrom ir import dtypes", False, ["runtimes", "c"], False),
  ("runtimes", "from frontend import Tensor", False, ["runtimes", "c"], True),
  ("frontend", "from runtimes import get\nfrom codegen import schedule", False, ["frontend", "t"], False),
  ("frontend", "import emit.c", False, ["frontend", "t"], True),
  ("frontend", "from aot.cli import main", False, ["frontend", "t"], True),
  ("emit", "from codegen import CompiledModel", False, ["emit", "c"], False),
  ("emit", "from runtimes.c import run", False, ["emit", "c"], True),
  ("aot", "import frontend, emit, runtimes, codegen, ir", False, ["aot", "cli"], False),
  ("ir", "import emitter\nimport aotx\nfrom irish import x", False, ["ir", "uop"], False),
])
def test_checker(pkg, source, is_package, module, want_bad):
  assert module[0] == pkg
  assert bool(violations(source, module, is_package)) is want_bad


def test_module_of(tmp_path):
  (tmp_path / "codegen" / "render").mkdir(parents=True)
  f = tmp_path / "codegen" / "render" / "c.py"
  assert module_of(f, tmp_path) == ["codegen", "render", "c"]
  assert module_of(tmp_path / "codegen" / "__init__.py", tmp_path) == ["codegen"]
