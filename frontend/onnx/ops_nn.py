"""ONNX neural-network operators mapped onto lazy Tensor ops: convolutions, pooling, matrix products, quantized
arithmetic, normalizations, the softmax family, Resize, TopK, CumSum, Einsum, recurrent layers (unrolled over the
static sequence length), losses, Fourier transforms and window functions, grid sampling, RoiAlign, Col2Im, and
the newer transformer operators (Attention, RMSNormalization, RotaryEmbedding, LinearAttention, ...).

Each handler follows the ONNX spec for every opset in use and onnx.reference where the spec leaves room.
Attributes arrive without defaults applied; compile-time constant inputs (sizes, scales, k, axes) are read
with `ctx.const_value`. Random operators (Bernoulli, RandomNormal, training-mode Dropout) are not supported."""
from __future__ import annotations
import math
import numpy as np
from tgc.ir import dtypes, promote
from tgc.frontend.tensor import Tensor
from tgc.frontend import functional
from tgc.frontend.onnx.registry import NodeContext, onnx_op
from tgc.frontend.onnx import compose_nn as nn
from tgc.frontend.shapes import prod
from tgc.frontend.onnx.dtypes import ONNX_DTYPES

# ---------------------------------------------------------------- attribute and input helpers
def _str(ctx: NodeContext, name: str, default: str) -> str:
  v = ctx.attr(name, default)
  return v.decode() if isinstance(v, bytes) else str(v)


def _ints(ctx: NodeContext, name: str, default=None):
  v = ctx.attr(name, None)
  if v is None or (isinstance(v, (list, tuple)) and len(v) == 0): return default
  return [int(i) for i in v]


def _floats(ctx: NodeContext, name: str, default=None):
  v = ctx.attr(name, None)
  if v is None or (isinstance(v, (list, tuple)) and len(v) == 0): return default
  return [float(i) for i in v]


def _strs(ctx: NodeContext, name: str, default=None):
  v = ctx.attr(name, None)
  if v is None or len(v) == 0: return default
  return [s.decode() if isinstance(s, bytes) else str(s) for s in v]


def _present(ctx: NodeContext, i: int) -> bool: return ctx.input(i) is not None


def _const(ctx: NodeContext, i: int, what: str) -> np.ndarray:
  """The value of compile-time constant input i (`what` names it); the importer explains how to pin it if not."""
  if i >= len(ctx.inputs) or ctx.inputs[i] is None: raise ctx.fail(f"input {i} ({what}) is required")
  return np.asarray(ctx.const_value(i))


def _const_or_none(ctx: NodeContext, i: int, what: str):
  if not _present(ctx, i): return None
  v = _const(ctx, i, what)
  return None if v.size == 0 else v


def _outputs(ctx: NodeContext, outs: list):
  """Only as many outputs as the node declares."""
  return outs[:max(1, ctx.num_outputs)] if len(outs) > 1 else outs[0]


def _channel_shape(x: Tensor) -> tuple[int, ...]: return (1, -1) + (1,) * (x.ndim - 2)


def _window_ints(ctx: NodeContext, name: str, nd: int, default=None, low: int = 1):
  """A conv/pool window attribute (strides, dilations: one value >= 1 per spatial axis; pads: begins then ends,
  each >= 0, `low` 0), checked against the spec; `default` when it is absent."""
  v = _ints(ctx, name)
  if v is None: return default
  want = 2 * nd if name == "pads" else nd
  if len(v) != want:
    raise ctx.fail(f"attribute {name} {v} has {len(v)} values; {want} expected for {nd} spatial axes")
  bad = [i for i in v if i < low]
  if bad:
    raise ctx.fail(f"attribute {name} {v} has the value {bad[0]}; each must be >= {low}")
  return v


def _strides_dilations(ctx: NodeContext, nd: int):
  return _window_ints(ctx, "strides", nd, [1] * nd), _window_ints(ctx, "dilations", nd, [1] * nd)


def _conv_common(ctx: NodeContext, x: Tensor, kernel):
  nd = len(kernel)
  strides, dilations = _strides_dilations(ctx, nd)
  pads = nn.resolve_pads(_str(ctx, "auto_pad", "NOTSET"), _window_ints(ctx, "pads", nd, low=0), x.shape[2:], kernel,
                         strides, dilations)
  return strides, dilations, pads


# ---------------------------------------------------------------- convolution
@onnx_op("Conv")
def conv(ctx: NodeContext):
  x, w, b = ctx.input(0), ctx.input(1), ctx.input(2)
  strides, dilations, pads = _conv_common(ctx, x, w.shape[2:])
  return functional.conv(x, w, b, strides, pads, dilations, int(ctx.attr("group", 1))).cast(x.dtype)


@onnx_op("ConvTranspose")
def conv_transpose(ctx: NodeContext):
  x, w, b = ctx.input(0), ctx.input(1), ctx.input(2)
  nd = w.ndim - 2
  kernel = w.shape[2:]
  strides, dilations = _strides_dilations(ctx, nd)
  out_pad = _ints(ctx, "output_padding", [0] * nd)
  group = int(ctx.attr("group", 1))
  auto_pad = _str(ctx, "auto_pad", "NOTSET")
  out_shape = _ints(ctx, "output_shape")
  if out_shape is not None and len(out_shape) == nd + 2: out_shape = out_shape[2:]
  ins = x.shape[2:]
  natural = [s * (i - 1) + op + (k - 1) * d + 1 for s, i, op, k, d in zip(strides, ins, out_pad, kernel, dilations)]
  pads_attr = _window_ints(ctx, "pads", nd, low=0)
  if pads_attr is None and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
    targets = out_shape or [i * s for i, s in zip(ins, strides)]
    begins = []
    for n, t in zip(natural, targets):
      total = n - t
      begins.append(total // 2 if auto_pad == "SAME_UPPER" else total - total // 2)
  else:
    pads = nn.resolve_pads("NOTSET", pads_attr, ins, kernel, strides, dilations)
    begins = [b_ for b_, _ in pads]
    targets = out_shape or [n - b_ - e for n, (b_, e) in zip(natural, pads)]
  # the end pad that gives the target size; output_padding and a larger output_shape extend the end
  pads = [(b_, n - op - b_ - t) for n, op, b_, t in zip(natural, out_pad, begins, targets)]
  return functional.conv_transpose_cropped(x, w, b, strides, pads, dilations, group).cast(x.dtype)


# ---------------------------------------------------------------- pooling
def _pool_args(ctx: NodeContext, x: Tensor):
  kernel = _ints(ctx, "kernel_shape")
  if not kernel: raise ctx.fail("attribute kernel_shape is required")
  nd = len(kernel)
  if x.ndim != nd + 2: raise ctx.fail(f"input of shape {x.shape} does not fit kernel_shape {kernel}")
  strides, dilations = _strides_dilations(ctx, nd)
  pads = nn.resolve_pads(_str(ctx, "auto_pad", "NOTSET"), _window_ints(ctx, "pads", nd, low=0), x.shape[2:], kernel,
                         strides, dilations)
  return kernel, strides, dilations, pads, bool(ctx.attr("ceil_mode", 0))


@onnx_op("MaxPool")
def max_pool(ctx: NodeContext):
  x = ctx.input(0)
  kernel, strides, dilations, pads, ceil_mode = _pool_args(ctx, x)
  if ctx.num_outputs > 1:
    y, idx = nn.max_pool_with_indices(x, kernel, strides, dilations, pads, ceil_mode,
                                      int(ctx.attr("storage_order", 0)))
    return [y, idx]
  return nn.max_pool(x, kernel, strides, dilations, pads, ceil_mode)


@onnx_op("AveragePool")
def average_pool(ctx: NodeContext):
  x = ctx.input(0)
  kernel, strides, dilations, pads, ceil_mode = _pool_args(ctx, x)
  return nn.avg_pool(x, kernel, strides, dilations, pads, ceil_mode, bool(ctx.attr("count_include_pad", 0)))


@onnx_op("LpPool")
def lp_pool(ctx: NodeContext):
  x = ctx.input(0)
  kernel, strides, dilations, pads, ceil_mode = _pool_args(ctx, x)
  return nn.lp_pool(x, kernel, strides, dilations, pads, float(ctx.attr("p", 2)), ceil_mode)


@onnx_op("GlobalAveragePool")
def global_average_pool(ctx: NodeContext):
  x = ctx.input(0)
  return x.mean(tuple(range(2, x.ndim)), keepdim=True).cast(x.dtype)


@onnx_op("GlobalMaxPool")
def global_max_pool(ctx: NodeContext):
  x = ctx.input(0)
  return x.max(tuple(range(2, x.ndim)), keepdim=True)


@onnx_op("GlobalLpPool")
def global_lp_pool(ctx: NodeContext):
  x = ctx.input(0)
  p = float(ctx.attr("p", 2))
  a = x._float().abs()
  s = (a * a if p == 2 else a.pow(p)).sum(tuple(range(2, x.ndim)), keepdim=True)
  return (s.sqrt() if p == 2 else s.pow(1.0 / p)).cast(x.dtype)


@onnx_op("MaxUnpool")
def max_unpool(ctx: NodeContext):
  x, idx = ctx.input(0), ctx.input(1)
  kernel = _ints(ctx, "kernel_shape")
  if not kernel: raise ctx.fail("attribute kernel_shape is required")
  nd = len(kernel)
  strides = _window_ints(ctx, "strides", nd, [1] * nd)
  pads = nn.resolve_pads("NOTSET", _window_ints(ctx, "pads", nd, low=0), x.shape[2:], kernel, strides, [1] * nd)
  inferred = [(i - 1) * s - b - e + k for i, s, (b, e), k in zip(x.shape[2:], strides, pads, kernel)]
  shape = [int(v) for v in _const(ctx, 2, "output_shape")][2:] if _present(ctx, 2) else inferred
  n, c = x.shape[:2]
  spatial_in, spatial_out = prod(x.shape[2:]), prod(inferred)
  # indices count over (N, C, *inferred); make them local to each (n, c) plane, then scatter by a one-hot sum
  base = Tensor.arange(n * c, dtype=dtypes.int64, device=x.device).reshape(n, c, 1) * spatial_out
  local = idx.cast(dtypes.int64).reshape(n, c, spatial_in) - base
  hit = nn.one_hot(local, spatial_out)                                  # (n, c, in, out)
  y = nn.masked_select_sum(hit, x.reshape(n, c, spatial_in, 1), 2).reshape(n, c, *inferred)
  if list(shape) != inferred:
    y = y.pad(((0, 0), (0, 0)) + tuple((0, t - i) for t, i in zip(shape, inferred)))
  return y


# ---------------------------------------------------------------- matrix products
@onnx_op("MatMul")
def matmul(ctx: NodeContext):
  a, b = ctx.input(0), ctx.input(1)
  dt = promote(a.dtype, b.dtype)
  if a.ndim == 1 and b.ndim == 1: return (a.cast(dt) * b.cast(dt)).sum(0, dtype=dt)
  return a.matmul(b)


@onnx_op("Gemm")
def gemm(ctx: NodeContext):
  a, b, c = ctx.input(0), ctx.input(1), ctx.input(2)
  alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
  if ctx.attr("transA", 0): a = a.T
  if ctx.attr("transB", 0): b = b.T
  y = a.matmul(b)
  if alpha != 1.0: y = y * alpha
  if c is not None and beta != 0.0: y = y + (c * beta if beta != 1.0 else c)
  return y.cast(a.dtype)


def _minus_zero_point(x: Tensor, zp, axis_shape=None) -> Tensor:
  """x widened to int32 minus its zero point (exact integer arithmetic)."""
  xi = x.cast(dtypes.int32)
  if zp is None: return xi
  z = zp.cast(dtypes.int32)
  if axis_shape is not None and z.ndim == 1 and z.shape[0] > 1: z = z.reshape(axis_shape)
  elif z.ndim == 1 and z.shape[0] == 1: z = z.reshape(())
  return xi - z


@onnx_op("MatMulInteger")
def matmul_integer(ctx: NodeContext):
  a, b = ctx.input(0), ctx.input(1)
  ai = _minus_zero_point(a, ctx.input(2), (-1, 1))
  bi = _minus_zero_point(b, ctx.input(3))
  return ai.matmul(bi)


@onnx_op("ConvInteger")
def conv_integer(ctx: NodeContext):
  x, w = ctx.input(0), ctx.input(1)
  strides, dilations, pads = _conv_common(ctx, x, w.shape[2:])
  xi = _minus_zero_point(x, ctx.input(2))
  wi = _minus_zero_point(w, ctx.input(3), (-1,) + (1,) * (w.ndim - 1))
  return functional.conv(xi, wi, None, strides, pads, dilations, int(ctx.attr("group", 1)))


def _requantize(acc: Tensor, scale: Tensor, zp, out_dtype) -> Tensor:
  """Round-half-even acc*scale + zero point, saturated to `out_dtype` (an 8/16-bit integer type)."""
  y = acc.cast(dtypes.float32) * scale.cast(dtypes.float32)
  if zp is not None: y = y + zp.cast(dtypes.float32).reshape(zp.shape if zp.ndim != 1 or zp.shape[0] != 1 else ())
  info = np.iinfo(out_dtype.numpy)
  return y.round().clip(float(info.min), float(info.max)).cast(out_dtype)


def _scalar_or(t: Tensor, shape) -> Tensor:
  if t.ndim == 0 or t.numel() == 1: return t.reshape(())
  return t.reshape(shape)


@onnx_op("QLinearMatMul")
def qlinear_matmul(ctx: NodeContext):
  a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp = (ctx.input(i) for i in range(8))
  acc = _minus_zero_point(a, a_zp, (-1, 1)).matmul(_minus_zero_point(b, b_zp))
  scale = _scalar_or(a_scale, (-1, 1)) * _scalar_or(b_scale, (-1,)) / y_scale.reshape(())
  return _requantize(acc, scale, y_zp, (y_zp if y_zp is not None else a).dtype)


@onnx_op("QLinearConv")
def qlinear_conv(ctx: NodeContext):
  x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, bias = (ctx.input(i) for i in range(9))
  strides, dilations, pads = _conv_common(ctx, x, w.shape[2:])
  xi = _minus_zero_point(x, x_zp)
  wi = _minus_zero_point(w, w_zp, (-1,) + (1,) * (w.ndim - 1))
  acc = functional.conv(xi, wi, None, strides, pads, dilations, int(ctx.attr("group", 1)))
  if bias is not None: acc = acc + bias.cast(dtypes.int32).reshape(_channel_shape(acc))
  scale = x_scale.reshape(()) * _scalar_or(w_scale, _channel_shape(acc)) / y_scale.reshape(())
  return _requantize(acc, scale, y_zp, (y_zp if y_zp is not None else x).dtype)


# ---------------------------------------------------------------- quantization
def _quant_param(p: Tensor, shape, axis: int, block_size: int) -> Tensor:
  """A scale or zero point broadcast against `shape`: scalar, per-axis (1-D along `axis`) or blocked (same rank,
  each entry covering `block_size` consecutive elements along `axis`)."""
  if p.ndim == 0 or p.numel() == 1: return p.reshape(())
  axis %= len(shape)
  if not block_size:
    return p.reshape(tuple(p.shape[0] if a == axis else 1 for a in range(len(shape))))
  rep = p.unsqueeze(axis + 1)
  rep = rep.expand(rep.shape[:axis + 1] + (block_size,) + rep.shape[axis + 2:])
  rep = rep.reshape(p.shape[:axis] + (p.shape[axis] * block_size,) + p.shape[axis + 1:])
  return rep.shrink(tuple((0, shape[axis]) if a == axis else None for a in range(len(shape))))


_INT_RANGES = {dtypes.int4: (-8, 7), dtypes.uint4: (0, 15), dtypes.int2: (-2, 1), dtypes.uint2: (0, 3)}


def _int_range(dt) -> tuple[int, int]:
  if dt in _INT_RANGES: return _INT_RANGES[dt]
  info = np.iinfo(dt.numpy)
  return int(info.min), int(info.max)


@onnx_op("QuantizeLinear")
def quantize_linear(ctx: NodeContext):
  x, scale, zp = ctx.input(0), ctx.input(1), ctx.input(2)
  axis, block = int(ctx.attr("axis", 1)), int(ctx.attr("block_size", 0))
  if scale.numel() > 1: axis = ctx.axis(axis, x.ndim)      # per-axis or blocked: the axis is used
  if zp is not None: out_dt = zp.dtype
  elif ctx.attr("output_dtype"): out_dt = ONNX_DTYPES.get(int(ctx.attr("output_dtype")))
  else: out_dt = dtypes.uint8
  if out_dt is None or out_dt.is_bool or out_dt in (dtypes.bfloat16, dtypes.float16, dtypes.float32,
                                                   dtypes.float64) or out_dt.itemsize > 2:
    raise ctx.fail(f"quantizing to {out_dt.name if out_dt else ctx.attr('output_dtype')} is not supported")
  precision = ONNX_DTYPES.get(int(ctx.attr("precision", 0) or 0))
  dt = precision or promote(x.dtype, scale.dtype)
  if dt.storage_only: dt = dtypes.float32
  v = x.cast(dt) / _quant_param(scale, x.shape, axis, block).cast(dt)
  zero = _quant_param(zp, x.shape, axis, block).cast(dtypes.float32) if zp is not None else None
  if out_dt.is_float:                     # float8: zero point unused, saturate as Cast; float4e2m1 adds it
    v = v.cast(dtypes.float32)
    if zero is not None and out_dt == dtypes.float4e2m1: v = v + zero
    return v.cast(out_dt, saturate=bool(ctx.attr("saturate", 1)))
  v = v.round().cast(dtypes.float32)
  if zero is not None: v = v + zero
  lo, hi = _int_range(out_dt)
  v = v.clip(float(lo), float(hi))
  return v.cast(dtypes.int32).cast(out_dt) if out_dt.storage_only else v.cast(out_dt)


@onnx_op("DequantizeLinear")
def dequantize_linear(ctx: NodeContext):
  x, scale, zp = ctx.input(0), ctx.input(1), ctx.input(2)
  axis, block = int(ctx.attr("axis", 1)), int(ctx.attr("block_size", 0))
  if scale.numel() > 1: axis = ctx.axis(axis, x.ndim)      # per-axis or blocked: the axis is used
  out_dt = ONNX_DTYPES.get(int(ctx.attr("output_dtype", 0) or 0)) or scale.dtype
  if x.dtype.is_float: v = x.cast(dtypes.float32)            # float8 / float4e2m1: the zero point must be 0
  elif x.dtype.storage_only or x.dtype.itemsize <= 2:
    xi = x.cast(dtypes.int32)
    if zp is not None: xi = xi - _quant_param(zp, x.shape, axis, block).cast(dtypes.int32)
    v = xi.cast(dtypes.float32)
  else:
    v = x.cast(dtypes.float32)
    if zp is not None: v = v - _quant_param(zp, x.shape, axis, block).cast(dtypes.float32)
  return (v * _quant_param(scale, x.shape, axis, block).cast(dtypes.float32)).cast(out_dt)


@onnx_op("DynamicQuantizeLinear")
def dynamic_quantize_linear(ctx: NodeContext):
  x = ctx.input(0).cast(dtypes.float32)
  hi = x.max().maximum(0.0)
  lo = x.min().minimum(0.0)
  scale = (hi == lo).where(1.0, hi - lo) / 255.0
  zp = (0.0 - lo / scale).clip(0.0, 255.0).round()
  y = ((x / scale).round() + zp).clip(0.0, 255.0).cast(dtypes.uint8)
  return [y, scale.cast(ctx.input(0).dtype), zp.cast(dtypes.uint8)]


# ---------------------------------------------------------------- normalization
@onnx_op("BatchNormalization")
def batch_normalization(ctx: NodeContext):
  x, scale, bias, mean, var = (ctx.input(i) for i in range(5))
  eps, momentum = float(ctx.attr("epsilon", 1e-5)), float(ctx.attr("momentum", 0.9))
  if ctx.opset >= 14: training = bool(ctx.attr("training_mode", 0))
  elif ctx.opset < 7: training = not ctx.attr("is_test", 0) and ctx.num_outputs > 1
  else: training = ctx.num_outputs > 1
  cs = _channel_shape(x)
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
  return _outputs(ctx, [o.cast(x.dtype) for o in outs])


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
  cs = _channel_shape(x)
  return (y * scale.reshape(cs) + bias.reshape(cs)).cast(x.dtype)


@onnx_op("LayerNormalization")
def layer_normalization(ctx: NodeContext):
  x, scale, bias = ctx.input(0), ctx.input(1), ctx.input(2)
  axis = ctx.axis(ctx.attr("axis", -1), x.ndim)
  stash = int(ctx.attr("stash_type", 1)) == 1
  y, mean, inv = _normalize(x, tuple(range(axis, x.ndim)), float(ctx.attr("epsilon", 1e-5)), stash)
  y = y.cast(x.dtype) * scale
  if bias is not None: y = y + bias
  return _outputs(ctx, [y.cast(x.dtype), mean, inv])


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
  cs = _channel_shape(x)
  return (y * scale.reshape(cs) + bias.reshape(cs)).cast(x.dtype)


@onnx_op("MeanVarianceNormalization")
def mean_variance_normalization(ctx: NodeContext):
  x = ctx.input(0)
  axes = tuple(ctx.axes(_ints(ctx, "axes", [0, 2, 3]), x.ndim))
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
  return (x / (bias + (alpha / size) * sums).pow(beta)).cast(x.dtype)


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
    ratio = float(_const(ctx, 1, "ratio").reshape(-1)[0]) if _present(ctx, 1) else 0.5
    training = bool(_const(ctx, 2, "training_mode").reshape(-1)[0]) if _present(ctx, 2) else False
  else:
    ratio = float(ctx.attr("ratio", 0.5))
    training = ctx.opset < 7 and not ctx.attr("is_test", 0)
  if training and ratio != 0.0: raise ctx.fail("training-mode Dropout is random and not supported")
  if ctx.num_outputs < 2: return x
  mask = Tensor.full(x.shape, True, dtypes.bool, x.device)
  return [x, mask if ctx.opset >= 10 else mask.cast(x.dtype)]


# ---------------------------------------------------------------- resize
def _resize(ctx: NodeContext, x: Tensor, scales, sizes, roi, mode: str, coord: str, nearest: str, axes=None):
  r = x.ndim
  axes = ctx.axes(axes, r) if axes else list(range(r))
  cubic_a = float(ctx.attr("cubic_coeff_a", -0.75))
  exclude = bool(ctx.attr("exclude_outside", 0))
  extrap_value = float(ctx.attr("extrapolation_value", 0.0))
  antialias = bool(ctx.attr("antialias", 0))
  policy = _str(ctx, "keep_aspect_ratio_policy", "stretch")
  if sizes is not None:
    sizes = [int(s) for s in sizes.reshape(-1)]
    if len(sizes) != len(axes): raise ctx.fail(f"sizes {sizes} do not match axes {axes}")
    factors = {a: s / x.shape[a] for a, s in zip(axes, sizes)}
    out = dict(zip(axes, sizes))
    if policy != "stretch":
      pick = min if policy == "not_larger" else max
      scale = pick(factors.values())
      factors = {a: scale for a in axes}
      out = {a: int(scale * x.shape[a] + 0.5) for a in axes}
  elif scales is not None:
    scales = np.asarray(scales).reshape(-1)
    if len(scales) != len(axes): raise ctx.fail(f"scales {scales.tolist()} do not match axes {axes}")
    factors = {a: float(s) for a, s in zip(axes, scales)}
    out = {a: int(np.float64(s) * x.shape[a]) for a, s in zip(axes, scales)}
  else: raise ctx.fail("one of scales or sizes is required")
  if roi is not None:
    roi = np.asarray(roi, dtype=np.float64).reshape(-1)
    roi = {a: (roi[i], roi[i + len(axes)]) for i, a in enumerate(axes)} if len(roi) == 2 * len(axes) else \
      {a: (roi[a], roi[a + r]) for a in axes}
  y = x
  for a in axes:
    scale, n_out = factors[a], out[a]
    lo_hi = roi.get(a) if roi is not None else None
    trivial_roi = lo_hi is None or (math.isclose(lo_hi[0], 0.0) and math.isclose(lo_hi[1], 1.0))
    if math.isclose(scale, 1.0) and n_out == x.shape[a] and (trivial_roi or coord != "tf_crop_and_resize"): continue
    if n_out == 0: raise ctx.fail(f"output size 0 on axis {a}")
    axis_nearest = nearest
    if nearest == "simple": axis_nearest = "ceil" if scale < 1 else "floor"
    idx, coeffs, extrap = nn.resize_taps(x.shape[a], n_out, scale, mode, coord, axis_nearest, cubic_a, exclude,
                                         antialias and scale < 1, lo_hi if lo_hi is not None else (0.0, 1.0))
    y = nn.resize_axis(y, a, idx, coeffs, extrap, extrap_value)
  return y


@onnx_op("Resize")
def resize(ctx: NodeContext):
  x = ctx.input(0)
  mode = _str(ctx, "mode", "nearest")
  if ctx.opset < 11:
    scales = _const(ctx, 1, "scales")
    return _resize(ctx, x, scales, None, None, mode, "asymmetric", "simple")
  roi = _const_or_none(ctx, 1, "roi")
  scales = _const_or_none(ctx, 2, "scales")
  sizes = _const_or_none(ctx, 3, "sizes")
  coord = _str(ctx, "coordinate_transformation_mode", "half_pixel")
  nearest = _str(ctx, "nearest_mode", "round_prefer_floor")
  return _resize(ctx, x, None if sizes is not None else scales, sizes, roi, mode, coord, nearest,
                 _ints(ctx, "axes"))


@onnx_op("Upsample")
def upsample(ctx: NodeContext):
  x = ctx.input(0)
  scales = np.asarray(_floats(ctx, "scales")) if ctx.opset < 9 else _const(ctx, 1, "scales")
  mode = _str(ctx, "mode", "nearest")
  if mode == "bilinear": mode = "linear"
  return _resize(ctx, x, scales, None, None, mode, "asymmetric", "floor")


# ---------------------------------------------------------------- top-k, cumsum, einsum, reverse
@onnx_op("TopK")
def top_k(ctx: NodeContext):
  x = ctx.input(0)
  k = int(ctx.attr("k")) if ctx.opset < 10 else int(_const(ctx, 1, "K").reshape(-1)[0])
  axis = ctx.axis(ctx.attr("axis", -1), x.ndim)
  if not 0 <= k <= x.shape[axis]: raise ctx.fail(f"k={k} out of range for axis {axis} of shape {x.shape}")
  values, indices = nn.topk(x, k, axis, bool(ctx.attr("largest", 1)))
  return [values, indices]


@onnx_op("CumSum", "CumProd")
def cumulative(ctx: NodeContext):
  x = ctx.input(0)
  axis = ctx.axis(_const(ctx, 1, "axis").reshape(-1)[0], x.ndim, "axis (input 1)")
  scan = nn.cumsum if ctx.op_type == "CumSum" else nn.cumprod
  return scan(x, axis, bool(ctx.attr("exclusive", 0)), bool(ctx.attr("reverse", 0)))


@onnx_op("Einsum")
def einsum(ctx: NodeContext):
  return nn.einsum(_str(ctx, "equation", ""), [t for t in ctx.inputs if t is not None])


def _reverse_by_length(x: Tensor, lengths: Tensor, time_axis: int, batch_axis: int) -> Tensor:
  """Reverse the first lengths[b] steps along time_axis of every batch entry b (the rest stays)."""
  others = [a for a in range(x.ndim) if a not in (time_axis, batch_axis)]
  xt = x.permute([batch_axis] + others + [time_axis])               # (B, ..., T)
  t_len = x.shape[time_axis]
  t = Tensor.arange(t_len, device=x.device).reshape(1, t_len)
  ln = lengths.cast(dtypes.int32).reshape(-1, 1)
  src = (t < ln).where(ln - 1 - t, t)                                # (B, T)
  hit = nn.one_hot(src, t_len).reshape((x.shape[batch_axis],) + (1,) * len(others) + (t_len, t_len))
  y = nn.masked_select_sum(hit, xt.unsqueeze(-2), -1)                # (B, ..., T)
  order = [batch_axis] + others + [time_axis]
  return y.permute([order.index(a) for a in range(x.ndim)])


# ---------------------------------------------------------------- recurrent layers
def _activation(name: str, alpha, beta):
  n = name.lower()
  if n == "relu": return lambda t: t.relu()
  if n == "tanh": return lambda t: t.tanh()
  if n == "sigmoid": return lambda t: t.sigmoid()
  if n == "affine": return lambda t: t * (1.0 if alpha is None else alpha) + (0.0 if beta is None else beta)
  if n == "leakyrelu": return lambda t: t.leaky_relu(0.01 if alpha is None else alpha)
  if n == "thresholdedrelu":
    a = 1.0 if alpha is None else alpha
    return lambda t: (t > a).where(t, 0.0)
  if n == "scaledtanh":
    a, b = (1.0 if alpha is None else alpha), (1.0 if beta is None else beta)
    return lambda t: a * (t * b).tanh()
  if n == "hardsigmoid":
    a, b = (0.2 if alpha is None else alpha), (0.5 if beta is None else beta)
    return lambda t: (t * a + b).clip(0.0, 1.0)
  if n == "elu": return lambda t: t.elu(1.0 if alpha is None else alpha)
  if n == "softsign": return lambda t: t / (1 + t.abs())
  if n == "softplus": return lambda t: t.softplus()
  raise ValueError(f"unknown activation {name!r}")


_NEEDS_ALPHA = {"affine", "leakyrelu", "thresholdedrelu", "scaledtanh", "hardsigmoid", "elu"}
_NEEDS_BETA = {"affine", "scaledtanh", "hardsigmoid"}


def _activations(ctx: NodeContext, defaults: list[str], num_dirs: int) -> list[list]:
  """Per direction, the activation functions (attribute `activations` with its alpha/beta lists, consumed in
  order by the functions that take them)."""
  names = _strs(ctx, "activations") or defaults * num_dirs
  if len(names) == len(defaults) and num_dirs == 2: names = names * 2
  alphas, betas = list(_floats(ctx, "activation_alpha", [])), list(_floats(ctx, "activation_beta", []))
  fns = []
  for name in names:
    a = alphas.pop(0) if name.lower() in _NEEDS_ALPHA and alphas else None
    b = betas.pop(0) if name.lower() in _NEEDS_BETA and betas else None
    try: fns.append(_activation(name, a, b))
    except ValueError as e: raise ctx.fail(str(e)) from None
  per = len(defaults)
  return [fns[d * per:(d + 1) * per] for d in range(num_dirs)]


def _rnn_common(ctx: NodeContext, gates: int, defaults: list[str]):
  x, w, r = ctx.input(0), ctx.input(1), ctx.input(2)
  b, lens, h0 = ctx.input(3), ctx.input(4), ctx.input(5)
  layout = int(ctx.attr("layout", 0))
  direction = _str(ctx, "direction", "forward")
  num_dirs = 2 if direction == "bidirectional" else 1
  if w.shape[0] != num_dirs: raise ctx.fail(f"W has {w.shape[0]} directions but direction is {direction!r}")
  hidden = r.shape[-1]
  if layout: x = x.transpose(0, 1)
  if h0 is not None and layout: h0 = h0.transpose(0, 1)
  seq, batch = x.shape[0], x.shape[1]
  if b is None: b = Tensor.zeros(num_dirs, 2 * gates * hidden, dtype=x.dtype, device=x.device)
  if h0 is None: h0 = Tensor.zeros(num_dirs, batch, hidden, dtype=x.dtype, device=x.device)
  clip = ctx.attr("clip")
  acts = _activations(ctx, defaults, num_dirs)
  return dict(x=x, w=w, r=r, b=b, lens=lens, h0=h0, layout=layout, direction=direction, num_dirs=num_dirs,
              hidden=hidden, seq=seq, batch=batch, clip=None if clip is None else float(clip), acts=acts)


def _clip(t: Tensor, clip):
  return t if clip is None else t.clip(-clip, clip)


def _run_directions(p: dict, step, states0: list[Tensor]):
  """Unroll `step(d, x_proj_t, states) -> states` (states[0] is H) over time for each direction; handles
  reverse order and per-batch sequence lengths (steps past a sequence's end keep the state and output 0)."""
  x, lens = p["x"], p["lens"]
  seq = p["seq"]
  ys, finals = [], []
  for d in range(p["num_dirs"]):
    reverse = p["direction"] == "reverse" or d == 1
    xd = x
    if reverse: xd = _reverse_by_length(x, lens, 0, 1) if lens is not None else x.flip(0)
    proj = p["project"](d, xd)                                        # (seq, batch, gates*hidden)
    states = [s[d] for s in states0]
    outs = []
    for t in range(seq):
      new = step(d, proj[t], states)
      if lens is not None:
        alive = (lens.cast(dtypes.int32) > t).reshape(-1, 1)
        new = [alive.where(n, s) for n, s in zip(new, states)]
        outs.append(alive.where(new[0], 0.0).cast(new[0].dtype))
      else: outs.append(new[0])
      states = new
    y = Tensor.stack(outs, 0)                                          # (seq, batch, hidden)
    if reverse: y = _reverse_by_length(y, lens, 0, 1) if lens is not None else y.flip(0)
    ys.append(y)
    finals.append(states)
  y = Tensor.stack(ys, 1)                                              # (seq, dirs, batch, hidden)
  final = [Tensor.stack([f[i] for f in finals], 0) for i in range(len(states0))]
  if p["layout"]:
    y = y.permute(2, 0, 1, 3)
    final = [f.transpose(0, 1) for f in final]
  return y, final


def _projector(p: dict, gates: int):
  w, b, hidden = p["w"], p["b"], p["hidden"]
  def project(d: int, xd: Tensor) -> Tensor:
    wb = b[d].shrink(((0, gates * hidden),))
    return xd.matmul(w[d].T) + wb
  return project


@onnx_op("RNN")
def rnn(ctx: NodeContext):
  p = _rnn_common(ctx, 1, ["Tanh"])
  p["project"] = _projector(p, 1)
  hidden = p["hidden"]
  def step(d, xp, states):
    rb = p["b"][d].shrink(((hidden, 2 * hidden),))
    return [p["acts"][d][0](_clip(xp + states[0].matmul(p["r"][d].T) + rb, p["clip"]))]
  y, (yh,) = _run_directions(p, step, [p["h0"]])
  return _outputs(ctx, [y.cast(p["x"].dtype), yh.cast(p["x"].dtype)])


@onnx_op("GRU")
def gru(ctx: NodeContext):
  p = _rnn_common(ctx, 3, ["Sigmoid", "Tanh"])
  p["project"] = _projector(p, 3)
  h = p["hidden"]
  linear_before_reset = bool(ctx.attr("linear_before_reset", 0))
  def part(t: Tensor, i: int) -> Tensor: return t.shrink(tuple([None] * (t.ndim - 1) + [(i * h, (i + 1) * h)]))
  def step(d, xp, states):
    f, g = p["acts"][d]
    hp = states[0]
    r_w = p["r"][d]                                                   # (3h, h): z, r, h
    rb = p["b"][d].shrink(((3 * h, 6 * h),))
    hz_r = hp.matmul(part(r_w.T, 0).cat(part(r_w.T, 1), dim=1)) + part(rb, 0).cat(part(rb, 1))
    z = f(_clip(part(xp, 0) + part(hz_r, 0), p["clip"]))
    r = f(_clip(part(xp, 1) + part(hz_r, 1), p["clip"]))
    rh_w, rh_b = part(r_w.T, 2), part(rb, 2)
    if linear_before_reset: cand = part(xp, 2) + r * (hp.matmul(rh_w) + rh_b)
    else: cand = part(xp, 2) + (r * hp).matmul(rh_w) + rh_b
    hn = g(_clip(cand, p["clip"]))
    return [(1 - z) * hn + z * hp]
  y, (yh,) = _run_directions(p, step, [p["h0"]])
  return _outputs(ctx, [y.cast(p["x"].dtype), yh.cast(p["x"].dtype)])


@onnx_op("LSTM")
def lstm(ctx: NodeContext):
  p = _rnn_common(ctx, 4, ["Sigmoid", "Tanh", "Tanh"])
  p["project"] = _projector(p, 4)
  h, batch, num_dirs = p["hidden"], p["batch"], p["num_dirs"]
  x = p["x"]
  c0 = ctx.input(6)
  if c0 is None: c0 = Tensor.zeros(num_dirs, batch, h, dtype=x.dtype, device=x.device)
  elif p["layout"]: c0 = c0.transpose(0, 1)
  peep = ctx.input(7)
  coupled = bool(ctx.attr("input_forget", 0))
  def part(t: Tensor, i: int) -> Tensor: return t.shrink(tuple([None] * (t.ndim - 1) + [(i * h, (i + 1) * h)]))
  def step(d, xp, states):
    f, g, hact = p["acts"][d]
    hp, cp = states
    rb = p["b"][d].shrink(((4 * h, 8 * h),))
    gates = xp + hp.matmul(p["r"][d].T) + rb                           # i, o, f, c
    pi = po = pf = None
    if peep is not None: pi, po, pf = (part(peep[d], k) for k in range(3))
    gi = part(gates, 0) + (cp * pi if pi is not None else 0)
    gf = part(gates, 2) + (cp * pf if pf is not None else 0)
    i = f(_clip(gi, p["clip"]))
    fg = (1 - i) if coupled else f(_clip(gf, p["clip"]))
    cand = g(_clip(part(gates, 3), p["clip"]))
    c = fg * cp + i * cand
    go = part(gates, 1) + (c * po if po is not None else 0)
    o = f(_clip(go, p["clip"]))
    return [o * hact(c), c]
  y, (yh, yc) = _run_directions(p, step, [p["h0"], c0])
  return _outputs(ctx, [y.cast(x.dtype), yh.cast(x.dtype), yc.cast(x.dtype)])


# ---------------------------------------------------------------- losses
def _gather_class(x: Tensor, target: Tensor) -> Tensor:
  """x (N, C, d...), target (N, d...) -> x[n, target[n, d...], d...] (0 where the target is out of range)."""
  c = x.shape[1]
  hit = nn.one_hot(target, c)                                          # (N, d..., C)
  return nn.masked_select_sum(hit, nn.move_axis(x, 1, -1), -1)


def _nll(ctx: NodeContext, logp: Tensor, target: Tensor, weight, reduction: str, ignore_index):
  picked = -_gather_class(logp, target)
  if weight is not None: w = nn.gather_last(weight, target.reshape(-1)).reshape(target.shape)
  else: w = None
  if ignore_index is not None:
    keep = target.cast(dtypes.int64) != int(ignore_index)
    w = keep.where(w if w is not None else 1.0, 0.0).cast(logp.dtype)
  loss = picked * w if w is not None else picked
  if reduction == "none": return loss
  if reduction == "sum": return loss.sum()
  if reduction != "mean": raise ctx.fail(f"unknown reduction {reduction!r}")
  return loss.sum() / w.sum() if w is not None else loss.mean()


@onnx_op("NegativeLogLikelihoodLoss")
def negative_log_likelihood_loss(ctx: NodeContext):
  x = ctx.input(0)
  loss = _nll(ctx, x, ctx.input(1), ctx.input(2), _str(ctx, "reduction", "mean"), ctx.attr("ignore_index"))
  return loss.cast(x.dtype)


@onnx_op("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy_loss(ctx: NodeContext):
  x = ctx.input(0)
  logp = x.log_softmax(1)
  loss = _nll(ctx, logp, ctx.input(1), ctx.input(2), _str(ctx, "reduction", "mean"), ctx.attr("ignore_index"))
  return _outputs(ctx, [loss.cast(x.dtype), logp.cast(x.dtype)])


# ---------------------------------------------------------------- signal processing
def _window(ctx: NodeContext, terms: list[tuple[float, int]]):
  """sum_j a_j * cos(2 pi m_j n / N) for n < size, N = size (periodic) or size - 1 (symmetric)."""
  size = int(_const(ctx, 0, "size").reshape(-1)[0])
  out_dt = ONNX_DTYPES.get(int(ctx.attr("output_datatype", 1)), dtypes.float32)
  periodic = int(ctx.attr("periodic", 1))
  denom = size if periodic else size - 1
  n = Tensor.arange(size, dtype=dtypes.float32, device=ctx.input(0).device)
  out = None
  for a, m in terms:
    term = (n * (2 * math.pi * m / denom)).cos() * a if m else Tensor.full((size,), a, dtypes.float32, n.device)
    out = term if out is None else out + term
  return out.cast(out_dt)


@onnx_op("HannWindow")
def hann_window(ctx: NodeContext): return _window(ctx, [(0.5, 0), (-0.5, 1)])


@onnx_op("HammingWindow")
def hamming_window(ctx: NodeContext):
  alpha = 25.0 / 46.0
  return _window(ctx, [(alpha, 0), (-(1 - alpha), 1)])


@onnx_op("BlackmanWindow")
def blackman_window(ctx: NodeContext): return _window(ctx, [(0.42, 0), (-0.5, 1), (0.08, 2)])


def _complex_parts(x: Tensor):
  last = x.shape[-1]
  lead = [None] * (x.ndim - 1)
  re = x.shrink(tuple(lead + [(0, 1)])).reshape(x.shape[:-1])
  im = x.shrink(tuple(lead + [(1, 2)])).reshape(x.shape[:-1]) if last == 2 else None
  return re, im


@onnx_op("DFT")
def dft(ctx: NodeContext):
  x = ctx.input(0)
  if ctx.opset >= 20:
    axis = ctx.axis(_const(ctx, 2, "axis").reshape(-1)[0], x.ndim, "axis (input 2)") if _present(ctx, 2) else \
      x.ndim - 2
  else: axis = ctx.axis(ctx.attr("axis", 1), x.ndim)
  if axis == x.ndim - 1: raise ctx.fail("axis must not be the last (complex) axis")
  inverse, onesided = bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0))
  n = x.shape[axis]
  length = int(_const(ctx, 1, "dft_length").reshape(-1)[0]) if _present(ctx, 1) else \
    (2 * (n - 1) if inverse and onesided else n)
  re, im = _complex_parts(x)
  re, im = nn.move_axis(re, axis, -1), nn.move_axis(im, axis, -1) if im is not None else None
  if inverse and onesided:
    if im is None: im = re.zeros_like()
    re, im = nn.hermitian_extend(re, im, length)
    out_re, _ = nn.dft_last(re, im, length, True, False)
    return nn.move_axis(out_re, -1, axis).unsqueeze(-1).cast(x.dtype)
  out_re, out_im = nn.dft_last(re, im, length, inverse, onesided)
  out = Tensor.stack([out_re, out_im], -1)
  return nn.move_axis(out, -2, axis).cast(x.dtype)


@onnx_op("STFT")
def stft(ctx: NodeContext):
  x = ctx.input(0)
  step = int(_const(ctx, 1, "frame_step").reshape(-1)[0])
  window = ctx.input(2)
  if _present(ctx, 3): frame = int(_const(ctx, 3, "frame_length").reshape(-1)[0])
  elif window is not None: frame = window.shape[0]
  else: frame = x.shape[-2]
  onesided = bool(ctx.attr("onesided", 1))
  n_frames = 1 + (x.shape[-2] - frame) // step
  re, im = _complex_parts(x)                                         # (batch, length)
  def frames(t: Tensor) -> Tensor:
    return nn.windows(t, (frame,), (step,), (1,), [(0, 0)]).shrink((None, (0, n_frames), None))
  re = frames(re)
  im = frames(im) if im is not None else None
  if window is not None:
    re = re * window.reshape(1, 1, frame)
    im = im * window.reshape(1, 1, frame) if im is not None else None
  out_re, out_im = nn.dft_last(re, im, frame, False, onesided)
  return Tensor.stack([out_re, out_im], -1).cast(x.dtype)


# ---------------------------------------------------------------- spatial transforms
@onnx_op("AffineGrid")
def affine_grid(ctx: NodeContext):
  theta = ctx.input(0)
  size = [int(s) for s in _const(ctx, 1, "size").reshape(-1)]
  align = bool(ctx.attr("align_corners", 0))
  spatial = size[2:]
  nd = len(spatial)
  dev = theta.device
  def coords(n: int) -> Tensor:
    i = Tensor.arange(n, dtype=dtypes.float32, device=dev)
    if align: return i * (2.0 / (n - 1)) - 1.0 if n > 1 else i * 0.0 - 1.0
    return (i * 2.0 + 1.0) / n - 1.0
  # homogeneous base grid (*spatial, nd + 1) with coordinates ordered x (last axis), y, (z), 1
  parts = []
  for k in range(nd):
    axis = nd - 1 - k                                                # x runs along the last spatial axis
    c = coords(spatial[axis]).reshape(tuple(spatial[axis] if a == axis else 1 for a in range(nd)))
    parts.append(c.expand(tuple(spatial)))
  parts.append(Tensor.ones(*spatial, device=dev))
  base = Tensor.stack(parts, -1).reshape(prod(spatial), nd + 1)
  grid = base.cast(theta.dtype).matmul(theta.transpose(1, 2))         # (N, points, nd)
  return grid.reshape(theta.shape[0], *spatial, nd)


def _reflect(x: Tensor, lo: float, hi: float) -> Tensor:
  rng = hi - lo
  def fold(dx: Tensor, near: float, far: float, sign: float) -> Tensor:
    n = (dx / rng).trunc()
    r = dx - n * rng
    even = (n - (n * 0.5).floor() * 2) == 0
    return even.where(near + sign * r, far - sign * r)
  below = fold(lo - x, lo, hi, 1.0)
  above = fold(x - hi, hi, lo, -1.0)
  return (x < lo).where(below, (x > hi).where(above, x))


def _cubic_weights(t: Tensor, a: float) -> list[Tensor]:
  """Keys' cubic convolution weights of the taps at -1, 0, 1, 2 for a fractional offset t in [0, 1)
  (constants folded in Python; only additions of them, so no `x - -c` reaches the renderers)."""
  def far(u: Tensor) -> Tensor: return ((u * a + (-5 * a)) * u + 8 * a) * u + (-4 * a)     # 1 <= |u| < 2
  def near(u: Tensor) -> Tensor: return (u * (a + 2) + (-(a + 3))) * u * u + 1.0          # |u| < 1
  return [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]


@onnx_op("GridSample")
def grid_sample(ctx: NodeContext):
  x, grid = ctx.input(0), ctx.input(1)
  mode = _str(ctx, "mode", "linear" if ctx.opset >= 20 else "bilinear")
  mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
  padding = _str(ctx, "padding_mode", "zeros")
  align = bool(ctx.attr("align_corners", 0))
  n, c = x.shape[:2]
  dims = x.shape[2:]
  nd = len(dims)
  out_sp = grid.shape[1:-1]
  pts = prod(out_sp)
  g = grid.cast(dtypes.float32).reshape(n, pts, nd)
  xf = x._float()
  acc = xf.reshape(n, c, 1, *dims)                                    # contract the last axis first
  for k in range(nd - 1, -1, -1):
    size = dims[k]
    comp = g.shrink((None, None, (nd - 1 - k, nd - k))).reshape(n, pts)   # grid is ordered x, y, (z)
    coord = (comp + 1) / 2.0 * (size - 1) if align else ((comp + 1) * size - 1) / 2.0
    lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
    if mode == "nearest": coord = coord.round()
    if padding == "border": coord = (coord < lo).where(coord.clip(0.0, size - 1.0),
                                                       (coord > hi).where(coord.clip(0.0, size - 1.0), coord))
    elif padding == "reflection": coord = _reflect(coord, lo, hi)
    if mode == "nearest": taps = [(coord.trunc(), None)]
    else:
      base = coord.floor()
      t = coord - base
      if mode == "linear": taps = [(base, 1 - t), (base + 1, t)]
      else:
        taps = [(base + (j - 1), w) for j, w in enumerate(_cubic_weights(t, -0.75))]
    weights = None                                                    # (n, pts, size)
    for pos, wt in taps:
      if padding == "border": pos = pos.clip(0.0, size - 1.0)
      elif padding == "reflection": pos = _reflect(pos, lo, hi).trunc()
      hit = nn.one_hot(pos.cast(dtypes.int32), size).cast(dtypes.float32)
      term = hit if wt is None else hit * wt.unsqueeze(-1)
      weights = term if weights is None else weights + term
    # acc (n, c, pts or 1, dims[0..k]) -> contract axis k
    wk = weights.reshape(n, 1, pts, *([1] * k), size)
    acc = (acc * wk).sum(-1)
  return acc.reshape(n, c, *out_sp).cast(x.dtype)


def _roi_axis(start: Tensor, length: Tensor, pooled: int, grid: int, size: int):
  """Bilinear taps of RoiAlign's sample points along one axis: for rois (R,), the sample coordinates
  start + p*bin + (g + 0.5)*bin/grid, p < pooled, g < grid, as (R, pooled*grid) low/high indices and weights
  (zero for samples outside [-1, size])."""
  r = start.shape[0]
  dev = start.device
  p = Tensor.arange(pooled, dtype=dtypes.float32, device=dev).reshape(1, pooled, 1)
  g = (Tensor.arange(grid, dtype=dtypes.float32, device=dev) + 0.5).reshape(1, 1, grid) * (1.0 / grid)
  bin_size = (length * (1.0 / pooled)).reshape(r, 1, 1)
  c = (start.reshape(r, 1, 1) + (p + g) * bin_size).reshape(r, pooled * grid)
  valid = (c >= -1.0).logical_and(c <= float(size)).cast(dtypes.float32)
  c = c.maximum(0.0)
  low = c.trunc()
  edge = low >= size - 1
  low = edge.where(float(size - 1), low)
  high = edge.where(float(size - 1), low + 1)
  c = edge.where(low, c)
  frac = c - low
  return low.cast(dtypes.int32), high.cast(dtypes.int32), (1.0 - frac) * valid, frac * valid


@onnx_op("RoiAlign")
def roi_align(ctx: NodeContext):
  x, rois, batch_idx = ctx.input(0), ctx.input(1), ctx.input(2)
  ph, pw = int(ctx.attr("output_height", 1)), int(ctx.attr("output_width", 1))
  ratio = int(ctx.attr("sampling_ratio", 0))
  scale = float(ctx.attr("spatial_scale", 1.0))
  mode = _str(ctx, "mode", "avg").lower()
  half_pixel = _str(ctx, "coordinate_transformation_mode", "half_pixel" if ctx.opset >= 16 else
                    "output_half_pixel") == "half_pixel"
  n, c, h, w = x.shape
  r = rois.shape[0]
  boxes = rois.cast(dtypes.float32) * scale - (0.5 if half_pixel else 0.0)
  def col(i: int) -> Tensor: return boxes.shrink((None, (i, i + 1))).reshape(r)
  x0, y0, x1, y1 = col(0), col(1), col(2), col(3)
  rw, rh = x1 - x0, y1 - y0
  if not half_pixel: rw, rh = rw.maximum(1.0), rh.maximum(1.0)
  if ratio > 0: gh = gw = ratio
  else:
    if not ctx.is_const(1): raise ctx.fail("sampling_ratio 0 (adaptive) needs constant rois")
    b = np.asarray(ctx.const_value(1), dtype=np.float64) * scale - (0.5 if half_pixel else 0.0)
    hs, ws = b[:, 3] - b[:, 1], b[:, 2] - b[:, 0]
    if not half_pixel: hs, ws = np.maximum(hs, 1.0), np.maximum(ws, 1.0)
    grids_h, grids_w = np.ceil(hs / ph).astype(int), np.ceil(ws / pw).astype(int)
    if len(set(grids_h.tolist())) > 1 or len(set(grids_w.tolist())) > 1:
      raise ctx.fail("sampling_ratio 0 with rois that need different sampling grids is not supported")
    gh, gw = max(int(grids_h[0]), 1), max(int(grids_w[0]), 1)
  xr = nn.masked_select_sum(nn.one_hot(batch_idx, n).reshape(r, n, 1, 1, 1), x._float().unsqueeze(0), 1)
  ylo, yhi, wylo, wyhi = _roi_axis(y0, rh, ph, gh, h)                 # (R, ph*gh)
  xlo, xhi, wxlo, wxhi = _roi_axis(x0, rw, pw, gw, w)
  if mode == "avg":
    def taps(lo, hi, wlo, whi, size, pooled, grid):
      weights = nn.one_hot(lo, size) * wlo.unsqueeze(-1) + nn.one_hot(hi, size) * whi.unsqueeze(-1)
      return weights.reshape(r, pooled, grid, size).sum(2)
    ay, ax = taps(ylo, yhi, wylo, wyhi, h, ph, gh), taps(xlo, xhi, wxlo, wxhi, w, pw, gw)
    rows = (xr.unsqueeze(2) * ay.reshape(r, 1, ph, h, 1)).sum(3)        # (R, C, ph, W)
    out = (rows.unsqueeze(3) * ax.reshape(r, 1, 1, pw, w)).sum(-1) * (1.0 / max(gh * gw, 1))
    return out.cast(x.dtype)
  if mode != "max": raise ctx.fail(f"unknown mode {mode!r}")
  yi = Tensor.stack([ylo, yhi], -1).reshape(r, ph * gh * 2)              # taps interleaved (sample, corner)
  xi = Tensor.stack([xlo, xhi], -1).reshape(r, pw * gw * 2)
  wy = Tensor.stack([wylo, wyhi], -1).reshape(r, 1, ph * gh * 2, 1)
  wx = Tensor.stack([wxlo, wxhi], -1).reshape(r, 1, 1, pw * gw * 2)
  rows = nn.masked_select_sum(nn.one_hot(yi, h).reshape(r, 1, ph * gh * 2, h, 1), xr.unsqueeze(2), 3)
  vals = nn.masked_select_sum(nn.one_hot(xi, w).reshape(r, 1, 1, pw * gw * 2, w), rows.unsqueeze(3), 4)
  vals = (vals * wy * wx).reshape(r, c, ph, gh * 2, pw, gw * 2)
  return vals.max((3, 5)).cast(x.dtype)


@onnx_op("Col2Im")
def col2im(ctx: NodeContext):
  x = ctx.input(0)
  image = [int(v) for v in _const(ctx, 1, "image_shape").reshape(-1)]
  block = [int(v) for v in _const(ctx, 2, "block_shape").reshape(-1)]
  nd = len(image)
  strides, dilations = _strides_dilations(ctx, nd)
  pads = nn.resolve_pads("NOTSET", _window_ints(ctx, "pads", nd, low=0), image, block, strides, dilations)
  n, ck, length = x.shape
  k = prod(block)
  c = ck // k
  outs = [(i + b + e - (kk - 1) * d - 1) // s + 1
          for i, (b, e), kk, d, s in zip(image, pads, block, dilations, strides)]
  if prod(outs) != length: raise ctx.fail(f"{length} blocks do not tile image {image} with block {block}")
  cols = x.reshape(n, c, k, *outs)
  padded = [i + b + e for i, (b, e) in zip(image, pads)]
  total = None
  for j, offset in enumerate(np.ndindex(*block)):
    # block element `offset` of every window lands at offset*dilation + window_position*stride
    piece = cols.shrink((None, None, (j, j + 1)) + (None,) * nd).reshape(n, c, *outs)
    if any(s > 1 for s in strides):
      piece = piece.reshape((n, c) + tuple(v for o in outs for v in (o, 1)))
      piece = piece.pad(((0, 0), (0, 0)) + tuple(p for s in strides for p in ((0, 0), (0, s - 1))))
      piece = piece.reshape((n, c) + tuple(o * s for o, s in zip(outs, strides)))
    starts = [o * d for o, d in zip(offset, dilations)]
    piece = piece.pad(((0, 0), (0, 0)) + tuple((st, p - st - sz) for st, p, sz in zip(starts, padded, piece.shape[2:])))
    total = piece if total is None else total + piece
  return total.shrink((None, None) + tuple((b, b + i) for (b, _), i in zip(pads, image))).cast(x.dtype)


# ---------------------------------------------------------------- operators beyond the original table
# Newer ONNX operators (normalizations, rotary embeddings, attention, ...).
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


@onnx_op("SwiGLU")
def swiglu(ctx: NodeContext):
  a, b = ctx.input(0), ctx.input(1)
  alpha = float(ctx.attr("alpha", 1.0))
  return (a * (a * alpha).sigmoid().cast(a.dtype) * b).cast(a.dtype)


@onnx_op("RotaryEmbedding")
def rotary_embedding(ctx: NodeContext):
  x, cos, sin, pos = ctx.input(0), ctx.input(1), ctx.input(2), ctx.input(3)
  interleaved = bool(ctx.attr("interleaved", 0))
  if x.ndim == 4: xs = x.permute(0, 2, 1, 3)                          # (B, S, H, D)
  else:
    heads = int(ctx.attr("num_heads", 0))
    if not heads: raise ctx.fail("3-D input needs the num_heads attribute")
    xs = x.reshape(x.shape[0], x.shape[1], heads, x.shape[2] // heads)
  b, s, h, d = xs.shape
  rd = int(ctx.attr("rotary_embedding_dim", 0)) or d
  half = rd // 2
  if pos is not None:                                                 # caches (max_pos, half) indexed by position
    hit = nn.one_hot(pos, cos.shape[0]).reshape(b, s, cos.shape[0], 1)
    cos = nn.masked_select_sum(hit, cos.reshape(1, 1, *cos.shape), 2)
    sin = nn.masked_select_sum(hit, sin.reshape(1, 1, *sin.shape), 2)
  cos, sin = cos.reshape(b, s, 1, half), sin.reshape(b, s, 1, half)
  rot = xs.shrink((None, None, None, (0, rd)))
  if interleaved:
    pairs = rot.reshape(b, s, h, half, 2)
    x1 = pairs.shrink((None,) * 4 + ((0, 1),)).reshape(b, s, h, half)
    x2 = pairs.shrink((None,) * 4 + ((1, 2),)).reshape(b, s, h, half)
  else:
    x1, x2 = rot.shrink((None, None, None, (0, half))), rot.shrink((None, None, None, (half, rd)))
  real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
  rot = Tensor.stack([real, imag], -1).reshape(b, s, h, rd) if interleaved else real.cat(imag, dim=-1)
  out = rot.cat(xs.shrink((None, None, None, (rd, d))), dim=-1) if rd < d else rot
  out = out.cast(x.dtype)
  return out.permute(0, 2, 1, 3) if x.ndim == 4 else out.reshape(x.shape)


def _neg_inf_where(allowed: Tensor, dt) -> Tensor:
  """0 where allowed, -inf elsewhere: an additive attention bias."""
  return allowed.where(Tensor.full((), 0.0, dt, allowed.device), Tensor.full((), -math.inf, dt, allowed.device))


def _masked_softmax(x: Tensor) -> Tensor:
  """Softmax over the last axis that gives 0 (not NaN) for rows that are entirely -inf."""
  m = x.max(-1, keepdim=True)
  safe = (m == -math.inf).where(0.0, m).cast(x.dtype)
  e = (x - safe).exp().cast(x.dtype)
  s = e.sum(-1, keepdim=True)
  return e / (s == 0).where(1.0, s).cast(x.dtype)


def _heads_4d(t: Tensor, heads: int) -> Tensor:
  b, s, hidden = t.shape
  return t.reshape(b, s, heads, hidden // heads).permute(0, 2, 1, 3)


@onnx_op("Attention")
def attention(ctx: NodeContext):
  q, k, v, mask, past_k, past_v, nonpad = (ctx.input(i) for i in range(7))
  rank3 = q.ndim == 3
  if rank3:
    qh, kvh = ctx.attr("q_num_heads"), ctx.attr("kv_num_heads")
    if qh is None or kvh is None: raise ctx.fail("3-D inputs need q_num_heads and kv_num_heads")
    q, k, v = _heads_4d(q, int(qh)), _heads_4d(k, int(kvh)), _heads_4d(v, int(kvh))
  dt = q.dtype
  scale = ctx.attr("scale")
  scale = 1.0 / math.sqrt(q.shape[3]) if scale is None else float(scale)
  root = float(np.asarray(np.sqrt(scale), dtype=dt.compute.numpy)) if not dt.storage_only else math.sqrt(scale)
  if past_k is not None: k = past_k.cat(k, dim=2)
  if past_v is not None: v = past_v.cat(v, dim=2)
  present_k, present_v = k, v
  batch, q_len, kv_len = q.shape[0], q.shape[2], k.shape[2]
  dev = q.device
  bias_dt = dt.compute
  bias = Tensor.zeros(q_len, kv_len, dtype=bias_dt, device=dev)
  if mask is not None and mask.shape[-1] < kv_len:
    fill = False if mask.dtype.is_bool else -math.inf
    mask = mask.pad(((0, 0),) * (mask.ndim - 1) + ((0, kv_len - mask.shape[-1]),), value=fill)
  i_idx = Tensor.arange(q_len, device=dev).reshape(q_len, 1)
  j_idx = Tensor.arange(kv_len, device=dev).reshape(1, kv_len)
  if past_k is None and nonpad is not None: offset = (nonpad.cast(dtypes.int32) - q_len).reshape(-1, 1, 1, 1)
  else: offset = past_k.shape[2] if past_k is not None else 0
  if mask is not None: mask_bias = _neg_inf_where(mask, bias_dt) if mask.dtype.is_bool else mask.cast(bias_dt)
  if ctx.attr("is_causal", 0):
    base = mask_bias if mask is not None else bias
    bias = base + _neg_inf_where(j_idx <= i_idx + offset, bias_dt)
  elif mask is not None: bias = bias + mask_bias
  left, right = int(ctx.attr("left_window_size", -1)), int(ctx.attr("right_window_size", -1))
  if left >= 0 or right >= 0:
    diff = i_idx + offset - j_idx
    allowed = None
    if left >= 0: allowed = diff <= left
    if right >= 0: allowed = (-diff <= right) if allowed is None else allowed.logical_and(-diff <= right)
    bias = bias + _neg_inf_where(allowed, bias_dt)
  if nonpad is not None:
    keep = j_idx.reshape(1, 1, 1, kv_len) < nonpad.cast(dtypes.int32).reshape(-1, 1, 1, 1)
    bias = bias + _neg_inf_where(keep, bias_dt)
  heads_q, heads_kv = q.shape[1], k.shape[1]
  if heads_q != heads_kv and heads_q % heads_kv == 0:
    reps = heads_q // heads_kv
    def repeat(t: Tensor) -> Tensor:
      return t.unsqueeze(2).expand(t.shape[0], heads_kv, reps, *t.shape[2:]).reshape(t.shape[0], heads_q, *t.shape[2:])
    k, v = repeat(k), repeat(v)
  qk = (q * root).cast(dt).matmul((k.transpose(2, 3) * root).cast(dt)).cast(dt)
  softcap = float(ctx.attr("softcap", 0.0) or 0.0)
  if softcap > 0: qk = ((qk / softcap).tanh() * softcap).cast(dt)
  qk_bias = (qk + bias).cast(dt)
  mode = int(ctx.attr("qk_matmul_output_mode", 0))
  qk_out = qk_bias if mode == 2 else qk
  precision = ONNX_DTYPES.get(int(ctx.attr("softmax_precision", 0) or 0))
  probs = _masked_softmax(qk_bias.cast(precision) if precision is not None else qk_bias.cast(dt.compute))
  masked_rows = bias.max(-1, keepdim=True) == -math.inf
  probs = masked_rows.where(0.0, probs).cast(probs.dtype)
  if mode == 3: qk_out = probs
  y = probs.cast(dt).matmul(v).cast(dt)
  if rank3: y = y.permute(0, 2, 1, 3).reshape(batch, q_len, -1)
  return _outputs(ctx, [y, present_k, present_v, qk_out.cast(dt)])


@onnx_op("CausalConvWithState")
def causal_conv_with_state(ctx: NodeContext):
  x, w, bias, past = ctx.input(0), ctx.input(1), ctx.input(2), ctx.input(3)
  activation = _str(ctx, "activation", "none")
  b, c, _ = x.shape
  k = w.shape[2]
  if past is None: past = Tensor.zeros(b, c, k - 1, dtype=x.dtype, device=x.device)
  padded = past.cat(x, dim=2) if k > 1 else x
  if k == 1:                                                          # depthwise 1-wide kernel: a per-channel scale
    y = x * w.reshape(1, c, 1) + (bias.reshape(1, c, 1) if bias is not None else 0)
  else: y = functional.conv(padded, w, bias, 1, 0, 1, c)
  y = y.cast(x.dtype)
  if activation in ("silu", "swish"): y = (y.cast(dtypes.float32) * y.cast(dtypes.float32).sigmoid()).cast(x.dtype)
  elif activation != "none": raise ctx.fail(f"unknown activation {activation!r}")
  state = padded.shrink((None, None, (padded.shape[2] - (k - 1), padded.shape[2])))
  return _outputs(ctx, [y, state])


@onnx_op("LinearAttention")
def linear_attention(ctx: NodeContext):
  q, k, v, past, decay, beta = (ctx.input(i) for i in range(6))
  rule = _str(ctx, "update_rule", "gated_delta")
  hq, hkv = int(ctx.attr("q_num_heads", 0)), int(ctx.attr("kv_num_heads", 0))
  if not hq or not hkv or hq % hkv: raise ctx.fail("q_num_heads must be a positive multiple of kv_num_heads")
  gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
  if gating and decay is None: raise ctx.fail(f"update_rule {rule!r} needs the decay input")
  if delta and beta is None: raise ctx.fail(f"update_rule {rule!r} needs the beta input")
  b, t, _ = q.shape
  dk, dv = q.shape[-1] // hq, v.shape[-1] // hkv
  group = hq // hkv
  f32 = dtypes.float32
  q4, k4, v4 = (_heads_4d(a, h).cast(f32) for a, h in ((q, hq), (k, hkv), (v, hkv)))
  if decay is not None:
    decay4 = decay.reshape(b, t, hkv, 1).permute(0, 2, 1, 3) if decay.shape[-1] == hkv else _heads_4d(decay, hkv)
    decay4 = decay4.cast(f32)
  if beta is not None: beta4 = beta.reshape(b, t, beta.shape[-1], 1).permute(0, 2, 1, 3).cast(f32)
  state = past.cast(f32) if past is not None else Tensor.zeros(b, hkv, dk, dv, device=q.device)
  scale = float(ctx.attr("scale", 0.0) or 0.0) or 1.0 / math.sqrt(dk)
  def step(a: Tensor, i: int) -> Tensor:
    return a.shrink((None, None, (i, i + 1), None)).reshape(*a.shape[:2], a.shape[3])
  outs = []
  for i in range(t):
    qt, kt, vt = step(q4, i), step(k4, i), step(v4, i)
    if gating: state = state * step(decay4, i).exp().unsqueeze(-1)
    if delta:
      retrieved = (state * kt.unsqueeze(-1)).sum(2)                     # (B, Hkv, dv)
      vt = step(beta4, i) * (vt - retrieved)
    state = state + kt.unsqueeze(-1) * vt.unsqueeze(-2)
    read = state if group == 1 else \
      state.unsqueeze(2).expand(b, hkv, group, dk, dv).reshape(b, hq, dk, dv)
    outs.append((qt.unsqueeze(-1) * read).sum(2) * scale)               # (B, Hq, dv)
  y = Tensor.stack(outs, 2).permute(0, 2, 1, 3).reshape(b, t, hq * dv).cast(q.dtype)
  return _outputs(ctx, [y, state.cast(past.dtype if past is not None else q.dtype)])


def _bilinear_axis(coord: Tensor, size: int) -> Tensor:
  """One-hot bilinear weights (..., size) of a coordinate along an axis; taps outside [0, size) weigh 0."""
  low = coord.floor()
  frac = coord - low
  low_i = low.cast(dtypes.int32)
  return nn.one_hot(low_i, size).cast(dtypes.float32) * (1.0 - frac).unsqueeze(-1) + \
    nn.one_hot(low_i + 1, size).cast(dtypes.float32) * frac.unsqueeze(-1)


@onnx_op("DeformConv")
def deform_conv(ctx: NodeContext):
  x, w, offset, bias, mask = (ctx.input(i) for i in range(5))
  if x.ndim != 4: raise ctx.fail("only 2-D deformable convolution is supported")
  n, c, ih, iw = x.shape
  oc, cg = w.shape[:2]
  kernel = _ints(ctx, "kernel_shape", list(w.shape[2:]))
  kh, kw = kernel
  group, og = int(ctx.attr("group", 1)), int(ctx.attr("offset_group", 1))
  (sh, sw), (dh, dw) = _strides_dilations(ctx, 2)
  pads = _window_ints(ctx, "pads", 2, [0, 0, 0, 0], low=0)
  oh, ow = offset.shape[2:]
  kk, pp = kh * kw, oh * ow
  off = offset.cast(dtypes.float32).reshape(n, og, kh, kw, 2, oh, ow)
  def grid(axis: int, stride: int, dil: int, pad: int, k_len: int, out_len: int) -> Tensor:
    k_pos = Tensor.arange(k_len, dtype=dtypes.float32, device=x.device) * dil
    o_pos = Tensor.arange(out_len, dtype=dtypes.float32, device=x.device) * stride - pad
    if axis == 0: base = k_pos.reshape(k_len, 1, 1, 1) + o_pos.reshape(1, 1, out_len, 1)      # (kh, 1, oh, 1)
    else: base = k_pos.reshape(1, k_len, 1, 1) + o_pos.reshape(1, 1, 1, out_len)             # (1, kw, 1, ow)
    part = off.shrink((None, None, None, None, (axis, axis + 1), None, None)).reshape(n, og, kh, kw, oh, ow)
    return (part + base).reshape(n, og, kk, pp)
  wy = _bilinear_axis(grid(0, sh, dh, pads[0], kh, oh), ih)                # (n, og, K, P, H)
  wx = _bilinear_axis(grid(1, sw, dw, pads[1], kw, ow), iw)                # (n, og, K, P, W)
  xg = x._float().reshape(n, og, c // og, 1, 1, ih, iw)
  rows = (xg * wx.reshape(n, og, 1, kk, pp, 1, iw)).sum(-1)               # (n, og, c/og, K, P, H)
  sampled = (rows * wy.reshape(n, og, 1, kk, pp, ih)).sum(-1)             # (n, og, c/og, K, P)
  if mask is not None: sampled = sampled * mask.cast(dtypes.float32).reshape(n, og, 1, kk, pp)
  sampled = sampled.reshape(n, group, 1, cg, kk, pp)
  wt = w.cast(dtypes.float32).reshape(1, group, oc // group, cg, kk, 1)
  y = (sampled * wt).sum((3, 4)).reshape(n, oc, oh, ow)
  if bias is not None: y = y + bias.cast(dtypes.float32).reshape(1, oc, 1, 1)
  return y.cast(x.dtype)


@onnx_op("MelWeightMatrix")
def mel_weight_matrix(ctx: NodeContext):
  mels, dft_len, rate, lo_hz, hi_hz = (_const(ctx, i, name).reshape(()) for i, name in
                                       enumerate(("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz",
                                                  "upper_edge_hertz")))
  out_dt = ONNX_DTYPES.get(int(ctx.attr("output_datatype", 1)), dtypes.float32)
  n_mels, bins = int(mels), int(dft_len) // 2 + 1
  # the triangle edges (spectrogram bin numbers) follow from the constant inputs, computed as the reference does
  lo_mel = 2595 * np.log1p(lo_hz / 700) / np.log(10)
  hi_mel = 2595 * np.log1p(hi_hz / 700) / np.log(10)
  edges = np.arange(0, n_mels + 2) * ((hi_mel - lo_mel) / (n_mels + 2)) + lo_mel
  edges = (((dft_len + 1) * (700 * np.expm1(edges / 2595 * np.log(10)))) // rate).astype(int)
  dev = ctx.extra.get("device", "numpy")
  j = Tensor.arange(bins, dtype=dtypes.float32, device=dev).reshape(bins, 1)
  def row(values) -> Tensor: return Tensor(np.asarray(values, np.float32).reshape(1, n_mels), device=dev)
  left, center, right = row(edges[:-2]), row(edges[1:-1]), row(edges[2:])
  rise = (j - left) / (center - left).maximum(1.0)
  fall = (right - j) / (right - center).maximum(1.0)
  out = ((j >= left).logical_and(j <= center)).where(rise, 0.0)
  out = ((j >= center).logical_and(j < right)).where(fall, out)
  out = ((j == center).logical_and(center == left)).where(1.0, out)
  return out.cast(out_dt)
