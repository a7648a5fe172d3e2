"""Input dims an ONNX model leaves open, kept as sizes known only at run time.

A model declares an open dim as a `dim_param` (a name such as "batch" or "p2o.DynamicDimension.1"), or the old way
as a `dim_value` of -1 or 0. The user keeps one open by giving its range (`--dim NAME=LO..HI`, `dims=` of
`load_model`), and may name an open dim in a given input shape (`--input-shape x=1,3,48,W --dim W=32..1024`). Each
name becomes one `Variable`, named by an identifier derived from it (generated code and manifests spell it)."""
from __future__ import annotations
import re
from tgc.ir import UOp
from tgc.ir.sint import Variable, simplified
from tgc.frontend.onnx.registry import OnnxError


def identifier(name: str) -> str:
  """The variable name for a dim named `name`: its characters outside [A-Za-z0-9_] as `_`, a leading digit
  prefixed with `d` (so "p2o.DynamicDimension.1" is p2o_DynamicDimension_1)."""
  out = re.sub(r"[^A-Za-z0-9_]", "_", name)[:63]
  return out if out and not out[0].isdigit() else ("d" + out)[:63]


def dim_text(d) -> str:
  """A dim as the user wrote or the model declared it: an int, a name, a size expression's text or '?'."""
  if d is None: return "?"
  if isinstance(d, UOp): return str(d.arg[0]) if d.arg and isinstance(d.arg, tuple) else "<size>"
  return str(d)


_MULTIPLE = re.compile(r"\s*(?:(\d+)\s*\*\s*)?([A-Za-z_][\w.:/-]*?)\s*(?:\*\s*(\d+)\s*)?")


def size_multiple(text: str) -> tuple[int, str | None]:
  """`text` as (factor, size name): "h" is (1, "h"), "32*h" and "h*32" are (32, "h"); (0, None) for other text."""
  m = _MULTIPLE.fullmatch(text)
  if m is None or (m.group(1) and m.group(3)): return 0, None
  return int(m.group(1) or m.group(3) or 1), m.group(2)


class SizeNames:
  """The ranges the user gave, by dim name; the Variable of each name, made once; which names were used."""

  def __init__(self, ranges: dict):
    self.ranges: dict[str, tuple[int, int]] = {}
    for name, rng in ranges.items():
      lo, hi = rng
      if not isinstance(name, str) or not name:
        raise OnnxError(f"dims: a size needs a name, got {name!r}")
      if not (isinstance(lo, int) and isinstance(hi, int)) or not 1 <= lo <= hi:
        raise OnnxError(f"dims: size {name!r} needs 1 <= lowest <= highest, got {lo}..{hi}")
      self.ranges[name] = (lo, hi)
    taken: dict[str, str] = {}
    for name in self.ranges:
      other = taken.setdefault(identifier(name), name)
      if other != name:
        raise OnnxError(f"dims: sizes {other!r} and {name!r} would both be called {identifier(name)} in generated "
                        f"code; rename one with --input-shape")
    self.variables: dict[str, UOp] = {}
    self.held: set[str] = set()

  def hold(self, name: str, highest: int) -> UOp:
    """The size `name` as a state's length: 0..highest, tracked by the artifact (no --dim gives it)."""
    if name in self.ranges and name not in self.held:
      raise OnnxError(f"dims: size {name!r} is a state's length (0..{highest}, set by --max-context); drop its --dim")
    self.ranges[name] = (0, highest)
    self.held.add(name)
    return self.variable(name)

  def variable(self, name: str) -> UOp:
    if name not in self.variables:
      lo, hi = self.ranges[name]
      self.variables[name] = Variable(identifier(name), lo, hi)
    return self.variables[name]

  def _sum(self, d: str):
    """A dim_param that sums sizes with ranges and integers ("past_sequence_length + 1"), or None."""
    terms = [t.strip() for t in d.split("+")]
    if len(terms) < 2 or not all(t in self.ranges or t.isdigit() for t in terms): return None
    out = 0
    for t in terms: out = out + (int(t) if t.isdigit() else self.variable(t))
    return simplified(out)

  def given_dim(self, d, input_name: str):
    """A dim of a shape the user gave: an int, the name of a size with a range, or a multiple of one (`32*h`: a
    size that only takes multiples of 32)."""
    if isinstance(d, str) and not d.lstrip("-").isdigit():
      factor, name = (1, d) if d in self.ranges else size_multiple(d)
      if name is None:
        raise OnnxError(f"input_shapes: input {input_name!r} has a dim {d!r} that is neither a number, a size's "
                        f"name nor a multiple of one (32*h)")
      if name not in self.ranges:
        raise OnnxError(f"input_shapes: input {input_name!r} names a size {name!r} without a range; give it "
                        f"(dims, --dim {name}=LOWEST..HIGHEST)")
      return simplified(self.variable(name) * factor) if factor != 1 else self.variable(name)
    return int(d)

  def declared_dim(self, d, input_name: str, axis: int):
    """A dim the model declares: an int, or an open dim that has a range (a Variable). Other open dims are an
    error naming the input and the dim, saying how to fix or keep it."""
    if isinstance(d, int): return d
    if d and d in self.ranges: return self.variable(d)
    total = self._sum(d) if d else None
    if total is not None: return total
    legacy = " (a dim_value of -1 or 0 is an unknown size)" if d in ("-1", "0") else ""
    keep = f", or keep it open with --dim {d}=LOWEST..HIGHEST" if d and d not in ("-1", "0") else ""
    raise OnnxError(f"input {input_name!r}: dimension {axis} ({d or '?'}) is unknown{legacy}; give the input's "
                    f"shape (input_shapes, --input-shape {input_name}=d0,d1,...){keep}")

  def check_all_used(self) -> None:
    unused = [n for n in self.ranges if n not in self.variables]
    if unused:
      raise OnnxError(f"dims: no input has a dim named {unused[0]!r} (a dim_param of the model or a name in "
                      f"--input-shape)")
