"""ONNX reductions and scans: ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare, ArgMax/ArgMin,
TopK, CumSum and CumProd. Reduce axes given as an input (opset 13 ReduceSum, opset 18 the rest) and TopK's k must
be compile-time constants."""
from __future__ import annotations
import math
from tgc.ir import dtypes
from tgc.frontend.shapes import prod
from tgc.frontend.tensor import Tensor
from tgc.frontend.onnx.registry import NodeContext, onnx_op
from tgc.frontend.onnx import compose_nn as nn
from tgc.frontend.onnx.node_helpers import const_input, const_ints, first_input


# ---------------------------------------------------------------- reductions
_AXES_INPUT_OPSET = {"ReduceSum": 13}


def _reduce_axes(ctx: NodeContext, x: Tensor):
  """None (all axes) or a tuple of axes; () when noop_with_empty_axes and no axes."""
  if ctx.opset >= _AXES_INPUT_OPSET.get(ctx.op_type, 18) and ctx.input(1) is not None: axes = const_ints(ctx, 1)
  elif ctx.opset < _AXES_INPUT_OPSET.get(ctx.op_type, 18): axes = ctx.attr("axes", None)
  else: axes = None
  if not axes: return () if ctx.attr("noop_with_empty_axes", 0) else None
  what = "attribute axes" if ctx.opset < _AXES_INPUT_OPSET.get(ctx.op_type, 18) else "axes (input 1)"
  return tuple(sorted(set(ctx.axes(axes, max(x.ndim, 1), what, unique=False))))


def _reduce(ctx, pre, red, post=None):
  x = first_input(ctx)
  axes = _reduce_axes(ctx, x)
  keep = bool(ctx.attr("keepdims", 1))
  v = pre(x)
  if axes == (): out = v
  else: out = red(v, axes if axes is not None else tuple(range(x.ndim)), keep)
  if post is not None: out = post(out)
  return out.cast(x.dtype)


def _sum(v, axes, keep): return v.sum(axes, keepdim=keep, dtype=v.dtype)


def _sum_f(v, axes, keep):
  """Sums that are inputs of float math (log, sqrt): accumulate in float."""
  return v.sum(axes, keepdim=keep, dtype=v.dtype if v.dtype.is_float else dtypes.float32)


def _float(v): return v if v.dtype.is_float else v.cast(dtypes.float32)


def _logsumexp(v, axes, keep):
  v = _float(v)
  m = v.max(axes, keepdim=True)
  m = m.isinf().where(m.zeros_like(), m)
  out = (v - m).exp().sum(axes, keepdim=True).log() + m
  return out if keep else out.reshape(tuple(s for i, s in enumerate(v.shape) if i not in axes))


def _mean(v, axes, keep):
  n = prod(v.shape[a] for a in axes)
  if v.dtype.is_float: return (v.sum(axes, keepdim=keep) * (1.0 / n)) if n else v.sum(axes, keepdim=keep) * math.nan
  return v.sum(axes, keepdim=keep, dtype=dtypes.int64).idiv(max(n, 1))


_REDUCTIONS = {
  "ReduceSum": (lambda x: x, _sum, None),
  "ReduceMean": (lambda x: x, _mean, None),
  "ReduceMax": (lambda x: x, lambda v, a, k: v.max(a, keepdim=k), None),
  "ReduceMin": (lambda x: x, lambda v, a, k: v.min(a, keepdim=k), None),
  "ReduceProd": (lambda x: x, lambda v, a, k: v.prod(a, keepdim=k), None),
  "ReduceL1": (lambda x: x.abs(), _sum, None),
  "ReduceL2": (lambda x: _float(x) * _float(x), _sum_f, lambda s: s.sqrt()),
  "ReduceLogSum": (lambda x: x, _sum_f, lambda s: _float(s).log()),
  "ReduceLogSumExp": (lambda x: x, _logsumexp, None),
  "ReduceSumSquare": (lambda x: x * x, _sum, None),
}


def _register_reduction(name, parts):
  pre, red, post = parts
  onnx_op(name)(lambda ctx: _reduce(ctx, pre, red, post))


for _n, _p in _REDUCTIONS.items(): _register_reduction(_n, _p)


@onnx_op("ArgMax", "ArgMin")
def _argmax(ctx):
  x = first_input(ctx)
  axis = ctx.axis(ctx.attr("axis", 0), max(x.ndim, 1))
  keep = bool(ctx.attr("keepdims", 1))
  last = bool(ctx.attr("select_last_index", 0))
  n = x.shape[axis]
  v = x.flip(axis) if last else x
  idx = v.argmax(axis, keepdim=keep) if ctx.op_type == "ArgMax" else v.argmin(axis, keepdim=keep)
  idx = idx.cast(dtypes.int64)
  return (n - 1 - idx) if last else idx


# ---------------------------------------------------------------- top-k and cumulative scans
@onnx_op("TopK")
def top_k(ctx: NodeContext):
  x = ctx.input(0)
  k = int(ctx.attr("k")) if ctx.opset < 10 else int(const_input(ctx, 1, "K").reshape(-1)[0])
  axis = ctx.axis(ctx.attr("axis", -1), x.ndim)
  if not 0 <= k <= x.shape[axis]: raise ctx.fail(f"k={k} out of range for axis {axis} of shape {x.shape}")
  values, indices = nn.topk(x, k, axis, bool(ctx.attr("largest", 1)))
  return [values, indices]


@onnx_op("CumSum", "CumProd")
def cumulative(ctx: NodeContext):
  x = ctx.input(0)
  axis = ctx.axis(const_input(ctx, 1, "axis").reshape(-1)[0], x.ndim, "axis (input 1)")
  scan = nn.cumsum if ctx.op_type == "CumSum" else nn.cumprod
  return scan(x, axis, bool(ctx.attr("exclusive", 0)), bool(ctx.attr("reverse", 0)))
