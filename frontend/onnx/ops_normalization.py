"""ONNX normalizations and the softmax family: BatchNormalization (inference and training mode),
InstanceNormalization, LayerNormalization, GroupNormalization, MeanVarianceNormalization, LRN, LpNormalization,
RMSNormalization, Softmax, LogSoftmax, Hardmax, and Dropout (inference only: training-mode Dropout is random and
refused)."""
from __future__ import annotations
from tgc.ir import dtypes
from tgc.frontend.tensor import Tensor
from tgc.frontend.onnx.registry import NodeContext, onnx_op
from tgc.frontend.onnx import compose_nn as nn
from tgc.frontend.shapes import prod
from tgc.frontend.onnx.node_helpers import attr_ints, channel_shape, const_input, declared_outputs, has_input


# ---------------------------------------------------------------- normalization
@onnx_op("BatchNormalization")
def batch_normalization(ctx: NodeContext):
  x, scale, bias, mean, var = (ctx.input(i) for i in range(5))
  eps, momentum = float(ctx.attr("epsilon", 1e-5)), float(ctx.attr("momentum", 0.9))
  if ctx.opset >= 14: training = bool(ctx.attr("training_mode", 0))
  elif ctx.opset < 7: training = not ctx.attr("is_test", 0) and ctx.num_outputs > 1
  else: training = ctx.num_outputs > 1
  cs = channel_shape(x)
  if not training:
    inv = (var.cast(dtypes.float32) + eps).rsqrt()
    return x.batchnorm(scale, bias, mean, inv).cast(x.dtype)
  axes = tuple(a for a in range(x.ndim) if a != 1)
  xf = x._float()
  m = xf.mean(axes)
  d = xf - m.reshape(cs)
  v = (d * d).mean(axes)
  y = d * (v + eps).rsqrt().reshape(cs) * scale.reshape(cs) + bias.reshape(cs)
  running_mean = mean * momentum + m * (1 - momentum)
  running_var = var * momentum + v * (1 - momentum)
  outs = [y, running_mean, running_var] if ctx.opset >= 14 else [y, running_mean, running_var, m, v]
  return declared_outputs(ctx, [o.cast(x.dtype) for o in outs])


def _normalize(x: Tensor, axes, eps: float, stash_float: bool = True):
  """(x - mean) / sqrt(var + eps) over `axes` in float32 (or the input's float type), with mean and 1/std."""
  xf = x.cast(dtypes.float32) if stash_float and x.dtype != dtypes.float64 else x._float()
  mean = xf.mean(axes, keepdim=True)
  d = xf - mean
  inv = ((d * d).mean(axes, keepdim=True) + eps).rsqrt()
  return d * inv, mean, inv


@onnx_op("InstanceNormalization")
def instance_normalization(ctx: NodeContext):
  x, scale, bias = ctx.input(0), ctx.input(1), ctx.input(2)
  y, _, _ = _normalize(x, tuple(range(2, x.ndim)), float(ctx.attr("epsilon", 1e-5)))
  cs = channel_shape(x)
  return (y * scale.reshape(cs) + bias.reshape(cs)).cast(x.dtype)


@onnx_op("LayerNormalization")
def layer_normalization(ctx: NodeContext):
  x, scale, bias = ctx.input(0), ctx.input(1), ctx.input(2)
  axis = ctx.axis(ctx.attr("axis", -1), x.ndim)
  stash = int(ctx.attr("stash_type", 1)) == 1
  y, mean, inv = _normalize(x, tuple(range(axis, x.ndim)), float(ctx.attr("epsilon", 1e-5)), stash)
  y = y.cast(x.dtype) * scale
  if bias is not None: y = y + bias
  return declared_outputs(ctx, [y.cast(x.dtype), mean, inv])


@onnx_op("GroupNormalization")
def group_normalization(ctx: NodeContext):
  x, scale, bias = ctx.input(0), ctx.input(1), ctx.input(2)
  groups = int(ctx.attr("num_groups"))
  n, c = x.shape[:2]
  stash = int(ctx.attr("stash_type", 1)) == 1
  xg = x.reshape(n, groups, -1)
  y, _, _ = _normalize(xg, (2,), float(ctx.attr("epsilon", 1e-5)), stash)
  y = y.reshape(x.shape).cast(x.dtype)
  if scale.shape[0] == groups and groups != c:         # opset 18: one scale and bias per group
    scale = scale.reshape(groups, 1).expand(groups, c // groups).reshape(c)
    bias = bias.reshape(groups, 1).expand(groups, c // groups).reshape(c)
  cs = channel_shape(x)
  return (y * scale.reshape(cs) + bias.reshape(cs)).cast(x.dtype)


@onnx_op("MeanVarianceNormalization")
def mean_variance_normalization(ctx: NodeContext):
  x = ctx.input(0)
  axes = tuple(ctx.axes(attr_ints(ctx, "axes", [0, 2, 3]), x.ndim))
  mean = x.mean(axes, keepdim=True)
  var = (x * x).mean(axes, keepdim=True) - mean * mean
  return ((x - mean) / (var.sqrt() + 1e-9)).cast(x.dtype)


@onnx_op("LRN")
def lrn(ctx: NodeContext):
  x = ctx.input(0)
  size = int(ctx.attr("size"))
  alpha, beta, bias = float(ctx.attr("alpha", 1e-4)), float(ctx.attr("beta", 0.75)), float(ctx.attr("bias", 1.0))
  before = (size - 1) // 2
  sq = nn.move_axis(x._float() * x._float(), 1, -1)
  sums = nn.windows(sq, (size,), (1,), (1,), [(before, size - 1 - before)]).sum(-1)
  sums = nn.move_axis(sums, -1, 1)
  base = bias + (alpha / size) * sums
  if bias > 0 and alpha >= 0 and beta == 0.75: scale = base.sqrt() * base.sqrt().sqrt()   # vector square roots, no pow
  else: scale = base.pow(beta)
  return (x / scale).cast(x.dtype)


@onnx_op("LpNormalization")
def lp_normalization(ctx: NodeContext):
  x = ctx.input(0)
  axis, p = ctx.axis(ctx.attr("axis", -1), x.ndim), int(ctx.attr("p", 2))
  xf = x._float()
  if p == 1: norm = xf.abs().sum(axis, keepdim=True)
  elif p == 2: norm = (xf * xf).sum(axis, keepdim=True).sqrt()
  else: raise ctx.fail(f"p must be 1 or 2, got {p}")
  return (norm == 0).where(0.0, xf / norm).cast(x.dtype)


@onnx_op("RMSNormalization")
def rms_normalization(ctx: NodeContext):
  x, scale = ctx.input(0), ctx.input(1)
  axis = ctx.axis(ctx.attr("axis", -1), x.ndim)
  stash = int(ctx.attr("stash_type", 1)) == 1
  xf = x.cast(dtypes.float32) if stash and x.dtype != dtypes.float64 else x._float()
  ms = (xf * xf).mean(tuple(range(axis, x.ndim)), keepdim=True)
  return (xf * (ms + float(ctx.attr("epsilon", 1e-5))).rsqrt() * scale).cast(x.dtype)


# ---------------------------------------------------------------- softmax family
def _softmax_like(ctx: NodeContext, fn):
  x = ctx.input(0)
  if x.ndim == 0: return fn(x.reshape(1), 0).reshape(())
  if ctx.opset < 13:
    axis = ctx.axis(ctx.attr("axis", 1), x.ndim)
    return fn(x.reshape(prod(x.shape[:axis]), prod(x.shape[axis:])), 1).reshape(x.shape)
  return fn(x, ctx.axis(ctx.attr("axis", -1), x.ndim))


@onnx_op("Softmax")
def softmax(ctx: NodeContext):
  return _softmax_like(ctx, lambda t, a: t.softmax(a).cast(t.dtype))


@onnx_op("LogSoftmax")
def log_softmax(ctx: NodeContext):
  return _softmax_like(ctx, lambda t, a: t.log_softmax(a).cast(t.dtype))


def _hardmax(t: Tensor, axis: int) -> Tensor:
  n = t.shape[axis]
  ar = Tensor.arange(n, device=t.device).reshape(tuple(n if i == axis else 1 for i in range(t.ndim)))
  return (t.argmax(axis, keepdim=True) == ar).cast(t.dtype)


@onnx_op("Hardmax")
def hardmax(ctx: NodeContext):
  return _softmax_like(ctx, _hardmax)


@onnx_op("Dropout")
def dropout(ctx: NodeContext):
  x = ctx.input(0)
  if ctx.opset >= 12:
    ratio = float(const_input(ctx, 1, "ratio").reshape(-1)[0]) if has_input(ctx, 1) else 0.5
    training = bool(const_input(ctx, 2, "training_mode").reshape(-1)[0]) if has_input(ctx, 2) else False
  else:
    ratio = float(ctx.attr("ratio", 0.5))
    training = ctx.opset < 7 and not ctx.attr("is_test", 0)
  if training and ratio != 0.0: raise ctx.fail("training-mode Dropout is random and not supported")
  if ctx.num_outputs < 2: return x
  mask = Tensor.full(x.shape, True, dtypes.bool, x.device)
  return [x, mask if ctx.opset >= 10 else mask.cast(x.dtype)]
