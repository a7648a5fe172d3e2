"""Sizes known only at run time, as an artifact's runner sees them: the manifest's `dims` (name and range) and
shapes whose entries are ints or size text (`T`, `((T+(-1))/2)`). `bind_dims` reads each size's value off the
inputs' shapes (a dim that is a size's name, or a multiple of one, gives its value; every other dim is checked
against it), `shape_at` evaluates a shape for those values. Size text is parsed, never `eval`ed: names, integers,
+ - * / % and brackets."""
from __future__ import annotations
import ast
import functools
import numpy as np

_BINARY = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
           ast.Div: lambda a, b: a // b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}


class DimsError(ValueError):
  """Inputs whose shapes do not fit the artifact's shapes (the message names the input and the dimension)."""


def evaluate_size(text, values: dict[str, int]) -> int:
  """The value of a manifest shape entry (an int, or size text over `values`' names)."""
  if isinstance(text, int): return text
  return _value(_parsed(str(text)), values, text)


@functools.lru_cache(maxsize=1024)
def _parsed(text: str) -> ast.expr:
  try: return ast.parse(text, mode="eval").body
  except SyntaxError: raise DimsError(f"size {text!r} is not an expression") from None


def _value(node, values: dict[str, int], text) -> int:
  if isinstance(node, ast.Constant) and isinstance(node.value, int): return node.value
  if isinstance(node, ast.Name):
    if node.id not in values: raise DimsError(f"size {text!r} names {node.id}, which the artifact does not define")
    return values[node.id]
  if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub): return -_value(node.operand, values, text)
  if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
    a, b = _value(node.left, values, text), _value(node.right, values, text)
    if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and b == 0: raise DimsError(f"size {text!r}: / 0")
    return _BINARY[type(node.op)](a, b)
  raise DimsError(f"size {text!r} is not integer arithmetic over sizes")


def scaled_size(text, ranges: dict) -> tuple[str | None, int]:
  """A shape entry that gives a size's value: a size's name ("T": (T, 1)) or a multiple of one ("(h*32)": (h, 32));
  (None, 1) for any other entry."""
  if not isinstance(text, str): return None, 1
  if text in ranges: return text, 1
  node = _parsed(text)
  if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult) and isinstance(node.left, ast.Name) and \
     isinstance(node.right, ast.Constant) and node.left.id in ranges and isinstance(node.right.value, int) and \
     node.right.value > 0:
    return node.left.id, node.right.value
  return None, 1


def dim_ranges(manifest: dict) -> dict[str, tuple[int, int]]:
  return {d["name"]: (int(d["min"]), int(d["max"])) for d in manifest.get("dims", ())}


def bind_dims(manifest: dict, shapes: dict[str, tuple[int, ...]], held: dict[str, int] | None = None
              ) -> dict[str, int]:
  """The value of every size known at run time (in the manifest's order), read off the inputs' `shapes` (by input
  name), each checked against its range and every input dim checked against the shape it must have. `held`: the
  sizes the artifact tracks itself (its states' lengths), by name."""
  ranges = dim_ranges(manifest)
  values: dict[str, int] = dict(held or {})
  for spec in manifest["inputs"]:
    name, want, got = spec["name"], spec["shape"], tuple(shapes[spec["name"]])
    if len(got) != len(want):
      raise DimsError(f"input {name!r}: shape {got}, expected {len(want)} dims {_text(want)}")
    for axis, (w, g) in enumerate(zip(want, got)):
      size, factor = scaled_size(w, ranges)
      if size is None or size in values: continue
      lo, hi = ranges[size]
      if g % factor:
        raise DimsError(f"input {name!r}: dimension {axis} ({w}) is {g}, not a multiple of {factor}")
      if not lo <= g // factor <= hi:
        raise DimsError(f"input {name!r}: dimension {axis} ({w}) is {g}, outside the range {lo * factor}..{hi * factor}"
                        f"{f' in steps of {factor}' if factor > 1 else ''} the artifact was compiled for")
      values[size] = g // factor
  missing = [n for n in ranges if n not in values]
  if missing: raise DimsError(f"the inputs' shapes do not give the size of {', '.join(missing)}")
  for spec in manifest["inputs"]:
    expected = shape_at(spec["shape"], values)
    if tuple(shapes[spec["name"]]) != expected:
      raise DimsError(f"input {spec['name']!r}: shape {tuple(shapes[spec['name']])}, expected {expected} "
                      f"({_text(spec['shape'])} with {_assignments(values)})")
  return {n: values[n] for n in ranges}


def grown_lengths(manifest: dict, values: dict[str, int]) -> dict[str, int]:
  """What a run at these sizes leaves each state's length (a size the artifact holds) at, by the size's name; a
  DimsError naming the state when the run would grow it past its capacity."""
  grown: dict[str, int] = {}
  for st in manifest.get("states", ()):
    after, capacity = evaluate_size(st["grown"], values), st["shape"][st["axis"]]
    if after > capacity:
      raise DimsError(f"state {st['name']!r} has no room for this run's entries: it holds {values[st['length']]} of "
                      f"{capacity}, the run would make it {after} (reset it, or run fewer entries)")
    grown[st["length"]] = after
  return grown


def shape_at(shape: list, values: dict[str, int]) -> tuple[int, ...]:
  """A manifest shape for these sizes."""
  return tuple(evaluate_size(s, values) for s in shape)


def is_dynamic(manifest: dict) -> bool: return bool(manifest.get("dims"))


def sample_sizes(manifest: dict, count: int = 3) -> list[dict[str, int]]:
  """Sizes to test an artifact at: every size at its lowest, at its highest, and in between (`count` sets)."""
  ranges = dim_ranges(manifest)
  if not ranges: return [{}]
  picks = [np.linspace(lo, hi, count).round().astype(int).tolist() for lo, hi in ranges.values()]
  return [dict(zip(ranges, vals)) for vals in zip(*picks)]


def _text(shape: list) -> str: return "(" + ", ".join(str(s) for s in shape) + ")"


def _assignments(values: dict[str, int]) -> str: return ", ".join(f"{k}={v}" for k, v in values.items())
