"""The ONNX operator table: each operator is a function registered under its op type that maps one node onto
Tensor ops. A handler gets a `NodeContext` and returns a Tensor or a list of Tensors (one per node output). Also
`OnnxError`, the one error type of ONNX import."""
from __future__ import annotations
from dataclasses import dataclass, field
from typing import Any, Callable


class OnnxError(ValueError):
  """A model problem: one line naming the culprit (node, op, input, file). `model` is the model (path, or
  "<bytes>"/"<ModelProto>") when the message names it; otherwise the message names a node, input or tensor only."""

  def __init__(self, message: str, model: str | None = None):
    super().__init__(message)
    self.model = model


def first_line(error: BaseException) -> str:
  """The first non-empty line of an exception's message (its type name when it has none), for OnnxError texts."""
  lines = [ln.strip() for ln in str(error).strip().splitlines() if ln.strip()]
  return lines[0] if lines else type(error).__name__


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

  # ---------------------------------------------------------- axis arguments, checked against the rank
  def axis(self, value, rank: int, what: str = "attribute axis", extra: int = 0) -> int:
    """An ONNX axis (negative counts from the end) as 0..rank+extra-1. `extra` counts the dims a result adds
    (Unsqueeze, OneHot), whose negative axes count from the result's end. Outside [-(rank+extra),
    rank+extra-1]: an OnnxError naming the node, `what` and the value."""
    n = rank + extra
    v = int(value)
    if not -n <= v < n:
      allowed = f"{-n}..{n - 1}" if n else "none"
      raise self.fail(f"{what} {v} is out of range for a rank-{rank} input (allowed: {allowed})")
    return v % n

  def axes(self, values, rank: int, what: str = "attribute axes", extra: int = 0, unique: bool = True) -> list[int]:
    """Each of `values` checked and normalized as `axis`; with `unique` a repeated axis is an error too."""
    out = [self.axis(v, rank, what, extra) for v in values]
    if unique and len(set(out)) != len(out):
      raise self.fail(f"{what} {[int(v) for v in values]} repeat an axis (rank {rank + extra})")
    return out

  def perm(self, values, rank: int, what: str = "attribute perm") -> list[int]:
    """A permutation of 0..rank-1 (ONNX Transpose: no negative entries, each axis once)."""
    perm = [int(v) for v in values]
    if sorted(perm) != list(range(rank)):
      of = f"0..{rank - 1}" if rank else "no axes"
      raise self.fail(f"{what} {perm} is not a permutation of {of} (the input has rank {rank})")
    return perm


OPS: dict[str, Callable[[NodeContext], Any]] = {}


def onnx_op(*names: str):
  """Register a handler for one or more op types (the default domain, or 'com.microsoft:Name' style keys)."""
  def deco(fn):
    for n in names:
      if n in OPS: raise RuntimeError(f"ONNX op {n} registered twice")
      OPS[n] = fn
    return fn
  return deco
