"""The layer rules of DESIGN.md, read from the source: allowed imports between the tgc layers (every import
statement, including ones inside functions, relative ones and importlib calls with a literal name; layers are
imported as `tgc.<layer>`, never by their bare folder name), a module docstring in every file and no line longer
than 120 characters."""
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
  layers = [p for pkg in sorted(PACKAGES) for p in (ROOT / pkg).rglob("*.py") if p.is_file()]
  return sorted(layers + [ROOT / "tgc" / "__init__.py"])


def module_of(path: Path, root: Path = ROOT) -> list[str]:
  """Dotted module parts of a file as installed: ir/uop.py -> ['tgc', 'ir', 'uop'], ir/__init__.py -> ['tgc', 'ir'],
  tgc/__init__.py -> ['tgc']."""
  parts = list(path.relative_to(root).with_suffix("").parts)
  parts = parts[:-1] if parts[-1] == "__init__" else parts
  return parts if parts[:1] == ["tgc"] else ["tgc"] + parts


def imported_modules(source: str, module: list[str], is_package: bool) -> list[tuple[int, str]]:
  """(line, absolute dotted name) of every module the source imports. Relative imports are resolved against
  `module`; one that climbs above the top-level package resolves to '..' + the rest (always a violation)."""
  out: list[tuple[int, str]] = []
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Import):
      out.extend((node.lineno, a.name) for a in node.names)
    elif isinstance(node, ast.ImportFrom):
      if node.level == 0:   # `from tgc import aot` imports the module tgc.aot
        out.append((node.lineno, node.module or ""))
        out.extend((node.lineno, f"{node.module}.{a.name}") for a in node.names if node.module == "tgc")
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
  """Imports of tgc layers that `module`'s layer may not use (the package `tgc` itself may use every layer)."""
  pkg = module[1] if len(module) > 1 else None
  bad = []
  for line, name in imported_modules(source, module, is_package):
    parts = name.split(".")
    if name.startswith(".."): bad.append(f"line {line}: relative import {name!r} leaves the package")
    elif parts[0] in PACKAGES: bad.append(f"line {line}: import {name!r} as 'tgc.{name}' (the installed name)")
    elif parts[0] == "tgc" and len(parts) > 1 and pkg is not None and parts[1] != pkg and parts[1] not in ALLOWED[pkg]:
      bad.append(f"line {line}: {pkg} may not import {name!r} (allowed: {sorted(ALLOWED[pkg]) or 'nothing'})")
  return bad


FILES = source_files()


def _id(p: Path) -> str: return str(p.relative_to(ROOT))


def test_scan_sees_the_packages():
  assert all((ROOT / pkg / "__init__.py").is_file() for pkg in PACKAGES)
  assert len([p for p in FILES if p.parts[-2] == "ir"]) >= 5
  assert ROOT / "tgc" / "__init__.py" in FILES


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
  ("ir", "from tgc.codegen import lower", False, ["tgc", "ir", "uop"], True),
  ("ir", "import numpy as np\nfrom tgc.ir.ops import Ops", False, ["tgc", "ir", "uop"], False),
  ("ir", "from ir.ops import Ops", False, ["tgc", "ir", "uop"], True),
  ("ir", "def f():\n  import tgc.runtimes.c as rc\n  return rc", False, ["tgc", "ir", "uop"], True),
  ("ir", "import importlib\nm = importlib.import_module('tgc.frontend.tensor')", False, ["tgc", "ir", "uop"], True),
  ("ir", "m = __import__('tgc.aot')", False, ["tgc", "ir", "uop"], True),
  ("codegen", "from tgc.ir import UOp\nfrom . import lower\nfrom .opt import beam", False, ["tgc", "codegen", "x"],
   False),
  ("codegen", "from ..runtimes import c", False, ["tgc", "codegen", "x"], True),
  ("codegen", "from ... import frontend", False, ["tgc", "codegen", "sub", "x"], True),
  ("codegen", "from .. import helpers", False, ["tgc", "codegen", "sub", "x"], False),
  ("codegen", "from ... import aot", True, ["tgc", "codegen", "sub"], True),
  ("codegen", "from ..... import aot", False, ["tgc", "codegen", "sub", "x"], True),
  ("runtimes", "from tgc.codegen.render import c\nfrom tgc.ir import dtypes", False, ["tgc", "runtimes", "c"], False),
  ("runtimes", "from tgc.frontend import Tensor", False, ["tgc", "runtimes", "c"], True),
  ("frontend", "from tgc.runtimes import get\nfrom tgc.codegen import schedule", False, ["tgc", "frontend", "t"],
   False),
  ("frontend", "import tgc.emit.c", False, ["tgc", "frontend", "t"], True),
  ("frontend", "from tgc.aot.cli import main", False, ["tgc", "frontend", "t"], True),
  ("frontend", "from tgc import aot", False, ["tgc", "frontend", "t"], True),
  ("emit", "from tgc.codegen import CompiledModel", False, ["tgc", "emit", "c"], False),
  ("emit", "from tgc.runtimes.c import run", False, ["tgc", "emit", "c"], True),
  ("aot", "import tgc.frontend, tgc.emit, tgc.runtimes, tgc.codegen, tgc.ir", False, ["tgc", "aot", "cli"], False),
  ("ir", "import emitter\nimport aotx\nfrom irish import x", False, ["tgc", "ir", "uop"], False),
])
def test_checker(pkg, source, is_package, module, want_bad):
  assert module[1] == pkg
  assert bool(violations(source, module, is_package)) is want_bad


def test_module_of(tmp_path):
  (tmp_path / "codegen" / "render").mkdir(parents=True)
  f = tmp_path / "codegen" / "render" / "c.py"
  assert module_of(f, tmp_path) == ["tgc", "codegen", "render", "c"]
  assert module_of(tmp_path / "codegen" / "__init__.py", tmp_path) == ["tgc", "codegen"]
  assert module_of(tmp_path / "tgc" / "__init__.py", tmp_path) == ["tgc"]
