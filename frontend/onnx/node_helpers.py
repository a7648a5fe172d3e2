"""What the operator handlers (`ops_*.py`) share for reading a node: its first input, the device it builds on,
attributes as Python values (`attr_*`, None or the default when absent), compile-time constant inputs
(`const_input`, `const_ints`), the outputs the node declares, and the conv/pool window attributes checked against
the spec (`window_ints`, `strides_dilations`, `conv_window`)."""
from __future__ import annotations
import numpy as np
from tgc.ir import UOp
from tgc.frontend.tensor import Tensor
from tgc.frontend.onnx.registry import NodeContext
from tgc.frontend.onnx import compose_nn as nn


def first_input(ctx: NodeContext) -> Tensor: return ctx.inputs[0]


def node_device(ctx: NodeContext) -> str:
  """The device the graph is built on, for tensors a handler makes from constants."""
  return ctx.extra.get("device", "numpy")


# ---------------------------------------------------------------- attributes
def attr_str(ctx: NodeContext, name: str, default: str) -> str:
  v = ctx.attr(name, default)
  return v.decode() if isinstance(v, bytes) else str(v)


def attr_ints(ctx: NodeContext, name: str, default=None):
  v = ctx.attr(name, None)
  if v is None or (isinstance(v, (list, tuple)) and len(v) == 0): return default
  return [int(i) for i in v]


def attr_floats(ctx: NodeContext, name: str, default=None):
  v = ctx.attr(name, None)
  if v is None or (isinstance(v, (list, tuple)) and len(v) == 0): return default
  return [float(i) for i in v]


def attr_strs(ctx: NodeContext, name: str, default=None):
  v = ctx.attr(name, None)
  if v is None or len(v) == 0: return default
  return [s.decode() if isinstance(s, bytes) else str(s) for s in v]


# ---------------------------------------------------------------- inputs and outputs
def has_input(ctx: NodeContext, i: int) -> bool: return ctx.input(i) is not None


def const_input(ctx: NodeContext, i: int, what: str) -> np.ndarray:
  """The value of compile-time constant input i (`what` names it); the importer explains how to pin it if not."""
  if i >= len(ctx.inputs) or ctx.inputs[i] is None: raise ctx.fail(f"input {i} ({what}) is required")
  return np.asarray(ctx.const_value(i))


def const_input_or_none(ctx: NodeContext, i: int, what: str):
  if not has_input(ctx, i): return None
  v = const_input(ctx, i, what)
  return None if v.size == 0 else v


def const_ints(ctx: NodeContext, i: int) -> list:
  """Compile-time constant input i (shapes, axes, starts, ...) flattened to Python ints; a size known only at run
  time stays a size expression (`ir.sint`)."""
  return [v if isinstance(v, UOp) else int(v) for v in np.asarray(ctx.const_value(i)).reshape(-1)]


def declared_outputs(ctx: NodeContext, outs: list):
  """Only as many outputs as the node declares."""
  return outs[:max(1, ctx.num_outputs)] if len(outs) > 1 else outs[0]


def channel_shape(x: Tensor) -> tuple[int, ...]: return (1, -1) + (1,) * (x.ndim - 2)


# ---------------------------------------------------------------- conv and pool windows
def window_ints(ctx: NodeContext, name: str, nd: int, default=None, low: int = 1):
  """A conv/pool window attribute (strides, dilations: one value >= 1 per spatial axis; pads: begins then ends,
  each >= 0, `low` 0), checked against the spec; `default` when it is absent."""
  v = attr_ints(ctx, name)
  if v is None: return default
  want = 2 * nd if name == "pads" else nd
  if len(v) != want:
    raise ctx.fail(f"attribute {name} {v} has {len(v)} values; {want} expected for {nd} spatial axes")
  bad = [i for i in v if i < low]
  if bad:
    raise ctx.fail(f"attribute {name} {v} has the value {bad[0]}; each must be >= {low}")
  return v


def strides_dilations(ctx: NodeContext, nd: int):
  return window_ints(ctx, "strides", nd, [1] * nd), window_ints(ctx, "dilations", nd, [1] * nd)


def conv_window(ctx: NodeContext, x: Tensor, kernel):
  """Strides, dilations and (begin, end) pads per spatial axis of a convolution of `x` by `kernel`."""
  nd = len(kernel)
  strides, dilations = strides_dilations(ctx, nd)
  pads = nn.resolve_pads(attr_str(ctx, "auto_pad", "NOTSET"), window_ints(ctx, "pads", nd, low=0), x.shape[2:],
                         kernel, strides, dilations)
  return strides, dilations, pads
