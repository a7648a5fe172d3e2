"""The ONNX operator table: each operator is a function registered under its op type that maps one node onto
Tensor ops. A handler gets a `NodeContext` and returns a Tensor or a list of Tensors (one per node output)."""
from __future__ import annotations
from dataclasses import dataclass, field
from typing import Any, Callable


class OnnxError(ValueError):
  """A model problem: one line naming the culprit (node, op, input, file)."""


@dataclass
class NodeContext:
  """What a handler sees: the node's inputs (None for omitted optional inputs), attributes with ONNX defaults
  not applied (use .attr(name, default)), the opset of its domain, and helpers for compile-time constants."""
  op_type: str
  name: str
  inputs: list            # list[Tensor | None]
  attrs: dict[str, Any]
  opset: int
  num_outputs: int
  const_value: Callable   # const_value(i) -> numpy array of input i; raises OnnxError if it is not a constant
  is_const: Callable      # is_const(i) -> bool
  domain: str = ""
  extra: dict = field(default_factory=dict)

  def attr(self, key: str, default=None):
    return self.attrs.get(key, default)

  def input(self, i: int):
    return self.inputs[i] if i < len(self.inputs) else None

  def fail(self, msg: str) -> OnnxError:
    return OnnxError(f"node {self.name!r} ({self.op_type}): {msg}")


OPS: dict[str, Callable[[NodeContext], Any]] = {}


def onnx_op(*names: str):
  """Register a handler for one or more op types (the default domain, or 'com.microsoft:Name' style keys)."""
  def deco(fn):
    for n in names:
      if n in OPS: raise RuntimeError(f"ONNX op {n} registered twice")
      OPS[n] = fn
    return fn
  return deco
