"""ONNX convolutions and pooling: Conv, ConvTranspose, DeformConv, CausalConvWithState, Col2Im, MaxPool (with
indices), AveragePool, LpPool, the global pools and MaxUnpool. Window attributes (strides, dilations, pads) are
checked against the spec by `node_helpers.window_ints`."""
from __future__ import annotations
import numpy as np
from tgc.ir import dtypes
from tgc.ir.sint import simplified
from tgc.frontend.tensor import Tensor
from tgc.frontend import functional, winograd
from tgc.frontend.onnx.registry import NodeContext, onnx_op
from tgc.frontend.onnx import compose_nn as nn
from tgc.frontend.onnx.quantized_compute import quantized_conv, quantized_max_pool
from tgc.frontend.shapes import prod
from tgc.frontend.onnx.node_helpers import (attr_ints, attr_str, const_input, conv_window, declared_outputs,
                                            has_input, strides_dilations, window_ints)


# ---------------------------------------------------------------- convolution
@onnx_op("Conv")
def conv(ctx: NodeContext):
  x, w, b = ctx.input(0), ctx.input(1), ctx.input(2)
  strides, dilations, pads = conv_window(ctx, x, w.shape[2:])
  group = int(ctx.attr("group", 1))
  quantized = quantized_conv(ctx, x, w, b, strides, pads, dilations, group)
  if quantized is not None: return quantized
  if ctx.is_const(1) and w.dtype == dtypes.float32 and winograd.applies(x, w.shape, strides, pads, dilations, group):
    return winograd.conv2d(x, ctx.const_value(1), b, pads)
  return functional.conv(x, w, b, strides, pads, dilations, group).cast(x.dtype)


@onnx_op("ConvTranspose")
def conv_transpose(ctx: NodeContext):
  x, w, b = ctx.input(0), ctx.input(1), ctx.input(2)
  nd = w.ndim - 2
  kernel = w.shape[2:]
  strides, dilations = strides_dilations(ctx, nd)
  out_pad = attr_ints(ctx, "output_padding", [0] * nd)
  group = int(ctx.attr("group", 1))
  auto_pad = attr_str(ctx, "auto_pad", "NOTSET")
  out_shape = attr_ints(ctx, "output_shape")
  if out_shape is not None and len(out_shape) == nd + 2: out_shape = out_shape[2:]
  ins = x.shape[2:]
  natural = [s * (i - 1) + op + (k - 1) * d + 1 for s, i, op, k, d in zip(strides, ins, out_pad, kernel, dilations)]
  pads_attr = window_ints(ctx, "pads", nd, low=0)
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
  # the end pad that gives the target size; output_padding and a larger output_shape extend the end (a number also
  # over sizes known at run time: the target is the natural size less the pads)
  pads = [(b_, simplified(n - op - b_ - t)) for n, op, b_, t in zip(natural, out_pad, begins, targets)]
  return functional.conv_transpose_cropped(x, w, b, strides, pads, dilations, group).cast(x.dtype)


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
  kernel = attr_ints(ctx, "kernel_shape", list(w.shape[2:]))
  kh, kw = kernel
  group, og = int(ctx.attr("group", 1)), int(ctx.attr("offset_group", 1))
  (sh, sw), (dh, dw) = strides_dilations(ctx, 2)
  pads = window_ints(ctx, "pads", 2, [0, 0, 0, 0], low=0)
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


@onnx_op("CausalConvWithState")
def causal_conv_with_state(ctx: NodeContext):
  x, w, bias, past = ctx.input(0), ctx.input(1), ctx.input(2), ctx.input(3)
  activation = attr_str(ctx, "activation", "none")
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
  return declared_outputs(ctx, [y, state])


@onnx_op("Col2Im")
def col2im(ctx: NodeContext):
  x = ctx.input(0)
  image = [int(v) for v in const_input(ctx, 1, "image_shape").reshape(-1)]
  block = [int(v) for v in const_input(ctx, 2, "block_shape").reshape(-1)]
  nd = len(image)
  strides, dilations = strides_dilations(ctx, nd)
  pads = nn.resolve_pads("NOTSET", window_ints(ctx, "pads", nd, low=0), image, block, strides, dilations)
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


# ---------------------------------------------------------------- pooling
def _pool_args(ctx: NodeContext, x: Tensor):
  kernel = attr_ints(ctx, "kernel_shape")
  if not kernel: raise ctx.fail("attribute kernel_shape is required")
  nd = len(kernel)
  if x.ndim != nd + 2: raise ctx.fail(f"input of shape {x.shape} does not fit kernel_shape {kernel}")
  strides, dilations = strides_dilations(ctx, nd)
  pads = nn.resolve_pads(attr_str(ctx, "auto_pad", "NOTSET"), window_ints(ctx, "pads", nd, low=0), x.shape[2:], kernel,
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
  quantized = quantized_max_pool(ctx, x, lambda q: nn.max_pool(q, kernel, strides, dilations, pads, ceil_mode))
  return quantized if quantized is not None else nn.max_pool(x, kernel, strides, dilations, pads, ceil_mode)


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
  kernel = attr_ints(ctx, "kernel_shape")
  if not kernel: raise ctx.fail("attribute kernel_shape is required")
  nd = len(kernel)
  strides = window_ints(ctx, "strides", nd, [1] * nd)
  pads = nn.resolve_pads("NOTSET", window_ints(ctx, "pads", nd, low=0), x.shape[2:], kernel, strides, [1] * nd)
  inferred = [(i - 1) * s - b - e + k for i, s, (b, e), k in zip(x.shape[2:], strides, pads, kernel)]
  shape = [int(v) for v in const_input(ctx, 2, "output_shape")][2:] if has_input(ctx, 2) else inferred
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
