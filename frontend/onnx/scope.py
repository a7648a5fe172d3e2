"""The values of an ONNX graph being built, by name: Tensors, or (array, dtype) compile-time constants. A subgraph
(If branch, Loop or Scan body) or a function body gets a child scope that sees its parents' values; a function
body's scope also holds its own opset imports, the calling node's attributes and the formal inputs the call leaves
out."""
from __future__ import annotations
from typing import Protocol
import onnx
from onnx import AttributeProto
from tgc.frontend.tensor import Tensor
from tgc.frontend.onnx.registry import OnnxError


class GraphBuilder(Protocol):
  """What scopes and the control-flow builders use of the graph being imported (`importer.OnnxGraph`)."""
  opsets: dict[str, int]
  typed_names: set[str]

  def device_const(self, name: str, value: tuple, device: str, cache: bool) -> Tensor: ...
  def run_subgraph(self, graph: onnx.GraphProto, outer: Scope, inputs: list) -> list: ...
  def note_rows(self, t: Tensor, rows: Tensor) -> None: ...
  def rows_of(self, t: Tensor) -> Tensor | None: ...


class Scope:
  """Values by name: Tensors, or (array, dtype) compile-time constants; subgraph scopes see their parents'."""

  def __init__(self, parent: Scope | None, device: str, graph: GraphBuilder, top: bool):
    self.parent, self.device, self.graph, self.top = parent, device, graph, top
    self.tensors: dict[str, Tensor] = {}
    self.consts: dict[str, tuple] = {}
    self.opsets: dict[str, int] | None = None            # a function body's own opset imports
    self.ref_attrs: dict[str, AttributeProto] | None = None   # a function call's attributes
    self.absent: set[str] = set()                          # a function's formal inputs the call leaves out

  def opset(self, domain: str) -> int:
    s = self
    while s is not None:
      if s.opsets is not None and domain in s.opsets: return s.opsets[domain]
      s = s.parent
    return self.graph.opsets.get(domain, 0)

  def attrs_of_call(self) -> dict | None:
    s = self
    while s is not None:
      if s.ref_attrs is not None: return s.ref_attrs
      s = s.parent
    return None

  def is_absent(self, name: str) -> bool:
    s = self
    while s is not None:
      if name in s.consts or name in s.tensors: return False
      if name in s.absent: return True
      s = s.parent
    return False

  def set(self, name: str, v) -> None:
    if isinstance(v, tuple): self.consts[name] = v
    else: self.tensors[name] = v

  def lookup(self, name: str, label: str = "", op: str = "", rows: bool = False):
    """The value of `name`. A scan output whose rows are counted at run time (a Loop whose condition is computed on
    the device: padded to its trip count) is only given where `rows` says the caller takes that count along."""
    s = self
    while s is not None:
      if name in s.consts: return s.consts[name]
      if name in s.tensors:
        v = s.tensors[name]
        if not rows and self.graph.rows_of(v) is not None:
          raise OnnxError(f"node {label!r} ({op}): input {name!r} is a Loop's scan output whose length is decided at "
                          f"run time (the loop's condition is computed on the device); it can only be a graph output")
        return v
      s = s.parent
    raise OnnxError(f"node {label!r} ({op}): input {name!r} has no value")

  def owner(self, name: str) -> Scope:
    s = self
    while s is not None:
      if name in s.consts or name in s.tensors: return s
      s = s.parent
    raise KeyError(name)

  def as_tensor(self, name: str, v) -> Tensor:
    if not isinstance(v, tuple): return v
    return self.graph.device_const(name, v, self.device, self.owner(name).top)

  def tensor(self, name: str) -> Tensor:
    """A graph output (a scan output with rows counted at run time included)."""
    return self.as_tensor(name, self.lookup(name, "graph", "output", rows=True))

  def all_names(self) -> set[str]:
    out, s = set(), self
    while s is not None:
      out |= set(s.tensors) | set(s.consts)
      s = s.parent
    return out
