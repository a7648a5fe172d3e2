"""The layer rules of docs/ARCHITECTURE.md, read from the source: allowed imports between the tgc layers (every import
statement, including ones inside functions, relative ones and importlib calls with a literal name; layers are
imported as `tgc.<layer>`, never by their bare folder name), no import cycles among tgc's modules (the same import
statements, function-level ones included, so a cycle cannot hide inside a function), a module docstring in every
file and no line longer than 120 characters."""
from __future__ import annotations
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINE = 120

# docs/ARCHITECTURE.md, the table of layers: package -> the tgc packages it may import (itself always allowed)
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


def import_statements(source: str, module: list[str], is_package: bool) -> list[tuple[int, str, list[str], bool]]:
  """(line, absolute dotted module, the names imported from it, whether it is a bare `from . import x`) of every
  import statement and importlib call with a literal name: `import a.b` -> ('a.b', []), `from a import b, c` ->
  ('a', ['b', 'c']). Relative imports are resolved against `module`; one that climbs above the top-level package
  resolves to '..' + the rest (always a violation)."""
  out: list[tuple[int, str, list[str], bool]] = []
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Import):
      out.extend((node.lineno, a.name, [], False) for a in node.names)
    elif isinstance(node, ast.ImportFrom):
      members = [a.name for a in node.names]
      if node.level == 0:
        out.append((node.lineno, node.module or "", members, False))
        continue
      base = module if is_package else module[:-1]
      up = node.level - 1
      if up > len(base) - 1:
        out.append((node.lineno, ".." + (node.module or ""), members, False))
        continue
      anchor = base[:len(base) - up]
      out.append((node.lineno, ".".join(anchor + ([node.module] if node.module else [])), members, not node.module))
    elif isinstance(node, ast.Call) and _is_dynamic_import(node.func) and node.args:
      arg = node.args[0]
      if isinstance(arg, ast.Constant) and isinstance(arg.value, str): out.append((node.lineno, arg.value, [], False))
  return out


def imported_modules(source: str, module: list[str], is_package: bool) -> list[tuple[int, str]]:
  """(line, absolute dotted name) of every module the source imports (`from tgc import aot` imports tgc.aot, `from
  . import x` the sibling module x)."""
  out: list[tuple[int, str]] = []
  for line, name, members, bare in import_statements(source, module, is_package):
    if bare:
      out.extend((line, f"{name}.{m}") for m in members)
      continue
    out.append((line, name))
    if name == "tgc": out.extend((line, f"tgc.{m}") for m in members)
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


def import_graph(files: list[Path], root: Path = ROOT) -> dict[str, set[str]]:
  """module -> the tgc modules its import statements load, function-level ones included. `from P import name` loads
  the module P.name when there is one, else P itself; the parent packages Python initializes on the way to a module
  are not counted (a package importing its own submodules is no cycle)."""
  modules = {".".join(module_of(p, root)): p for p in files}

  def known(name: str) -> str | None:
    parts = name.split(".")
    while parts and ".".join(parts) not in modules: parts.pop()
    return ".".join(parts) if parts else None

  graph: dict[str, set[str]] = {}
  for name, path in modules.items():
    targets: set[str] = set()
    for _, imported, members, _ in import_statements(path.read_text(), name.split("."), path.name == "__init__.py"):
      submodules = [f"{imported}.{m}" for m in members if f"{imported}.{m}" in modules]
      if len(submodules) < len(members) or not members: targets.add(known(imported))
      targets.update(submodules)
    graph[name] = {t for t in targets if t is not None and t != name}
  return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
  """One cycle (a list of modules whose last imports the first) for every group of modules that import each other
  (strongly connected components of more than one module), found without recursion."""
  index: dict[str, int] = {}
  low: dict[str, int] = {}
  stack: list[str] = []
  on_stack: set[str] = set()
  groups: list[list[str]] = []
  for start in sorted(graph):
    if start in index: continue
    work = [(start, iter(sorted(graph[start])))]
    index[start] = low[start] = len(index)
    stack.append(start)
    on_stack.add(start)
    while work:
      node, children = work[-1]
      child = next(children, None)
      if child is not None:
        if child not in index:
          index[child] = low[child] = len(index)
          stack.append(child)
          on_stack.add(child)
          work.append((child, iter(sorted(graph.get(child, ())))))
        elif child in on_stack: low[node] = min(low[node], index[child])
        continue
      work.pop()
      if work: low[work[-1][0]] = min(low[work[-1][0]], low[node])
      if low[node] == index[node]:
        group = []
        while True:
          member = stack.pop()
          on_stack.discard(member)
          group.append(member)
          if member == node: break
        if len(group) > 1: groups.append(sorted(group))
  return [_cycle_through(group, graph) for group in groups]


def _cycle_through(group: list[str], graph: dict[str, set[str]]) -> list[str]:
  """A shortest cycle from the group's first module back to itself, inside the group (breadth-first)."""
  members, first = set(group), group[0]
  parent: dict[str, str] = {}
  frontier = [first]
  while frontier:
    following = []
    for node in frontier:
      for child in sorted(graph[node] & members):
        if child == first:
          path = [node]
          while path[-1] != first: path.append(parent[path[-1]])
          return path[::-1]
        if child not in parent:
          parent[child] = node
          following.append(child)
    frontier = following
  return group


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


def test_no_import_cycles():
  cycles = import_cycles(import_graph(FILES))
  shown = "; ".join(" -> ".join(cycle + cycle[:1]) for cycle in cycles)
  assert not cycles, f"modules that import each other (directly or through others): {shown}"


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


def test_cycle_finder():
  graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e2"}, "e2": {"e"}, "f": {"d"}}
  assert import_cycles(graph) == [["a", "b", "c"], ["e", "e2"]]
  assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_import_graph(tmp_path):
  (tmp_path / "frontend" / "onnx").mkdir(parents=True)
  files = {"frontend/__init__.py": "from tgc.frontend.tensor import Tensor",
           "frontend/tensor.py":
             "from tgc.frontend import buffers\ndef f():\n  from tgc.frontend import functional",
           "frontend/buffers.py": "import numpy", "frontend/functional.py": "from tgc.frontend import Tensor",
           "frontend/onnx/__init__.py": "from . import importer",
           "frontend/onnx/importer.py": "from .registry import X",
           "frontend/onnx/registry.py": ""}
  for name, text in files.items(): (tmp_path / name).write_text(text)
  graph = import_graph([tmp_path / name for name in files], tmp_path)
  assert graph["tgc.frontend.tensor"] == {"tgc.frontend.buffers", "tgc.frontend.functional"}
  assert graph["tgc.frontend.functional"] == {"tgc.frontend"}
  assert graph["tgc.frontend.onnx"] == {"tgc.frontend.onnx.importer"}
  assert graph["tgc.frontend.onnx.importer"] == {"tgc.frontend.onnx.registry"}
  assert import_cycles(graph) == [["tgc.frontend", "tgc.frontend.tensor", "tgc.frontend.functional"]]
