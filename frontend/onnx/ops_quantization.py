"""ONNX quantization operators: QuantizeLinear and DequantizeLinear (per-tensor, per-axis and blocked; integer,
4/2-bit and float8 types), DynamicQuantizeLinear, MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv
(exact int32 accumulation, then round-half-even requantization; summed in float32 on the 8-bit values where the
constant weights prove every sum exact there: `quantized_compute.exact_float_operands`; 3x3 convolutions in
Winograd's integer form where the target wants it: `quantized_compute.winograd_integers`). onnxruntime's com.microsoft
QLinear* operators are in `ops_contrib`."""
from __future__ import annotations
import numpy as np
from tgc.ir import dtypes, promote
from tgc.frontend.tensor import Tensor
from tgc.frontend import functional
from tgc.frontend.onnx.registry import NodeContext, onnx_op
from tgc.frontend.onnx.dtypes import ONNX_DTYPES
from tgc.frontend.onnx.node_helpers import channel_shape, conv_window
from tgc.frontend.onnx.quantized_compute import (EIGHT_BIT, exact_float_operands, record_dequantized, requantized,
                                                  shifted_conv, shifted_matmul, winograd_integers)


# ---------------------------------------------------------------- integer matrix products and convolutions
def _minus_zero_point(x: Tensor, zp, axis_shape=None) -> Tensor:
  """x widened to int32 minus its zero point (exact integer arithmetic)."""
  xi = x.cast(dtypes.int32)
  return xi if zp is None else xi - _zero_point(zp, axis_shape)


def _zero_point(zp: Tensor, axis_shape=None) -> Tensor:
  """A zero point as int32, one value per entry along the axis of `axis_shape` (its other dims 1) or a scalar."""
  z = zp.cast(dtypes.int32)
  if axis_shape is not None and z.ndim == 1 and z.shape[0] > 1: return z.reshape(axis_shape)
  return z.reshape(()) if z.ndim == 1 and z.shape[0] == 1 else z


def zero_free(ctx: NodeContext, index: int) -> bool:
  """Whether the zero point at input `index` is absent or a constant of zeros."""
  return ctx.input(index) is None or (ctx.is_const(index) and not np.any(np.asarray(ctx.const_value(index))))


def integer_matmul(a: Tensor, a_zero: Tensor | None, b: Tensor, b_zero: Tensor | None, b_zero_free: bool) -> Tensor:
  """(a - a_zero) @ (b - b_zero) in int32 (a's zero point one value or one per row). For 8-bit a and b without a
  zero point of b (`b_zero_free`): a @ b - a_zero * (column sums of b), so the reduction multiplies the 8-bit values
  themselves (the CPU's dot-product instructions, codegen/dot.py) and a zero point known only at run time (dynamic
  quantization) costs one product per output."""
  if not b_zero_free or a.dtype not in EIGHT_BIT or b.dtype not in EIGHT_BIT:
    return _minus_zero_point(a, a_zero, (-1, 1)).matmul(_minus_zero_point(b, b_zero))
  acc = a.cast(dtypes.int32).matmul(b.cast(dtypes.int32))
  if a_zero is None: return acc
  return acc - _zero_point(a_zero, (-1, 1)) * b.cast(dtypes.int32).sum(-2)


@onnx_op("MatMulInteger")
def matmul_integer(ctx: NodeContext):
  return integer_matmul(ctx.input(0), ctx.input(2), ctx.input(1), ctx.input(3), zero_free(ctx, 3))


@onnx_op("ConvInteger")
def conv_integer(ctx: NodeContext):
  x, w = ctx.input(0), ctx.input(1)
  strides, dilations, pads = conv_window(ctx, x, w.shape[2:])
  group = int(ctx.attr("group", 1))
  tiles = winograd_integers(ctx, x, ctx.input(2), 1, ctx.input(3), strides, pads, dilations, group)
  if tiles is not None: return tiles
  xi = _minus_zero_point(x, ctx.input(2))
  wi = _minus_zero_point(w, ctx.input(3), (-1,) + (1,) * (w.ndim - 1))
  return functional.conv(xi, wi, None, strides, pads, dilations, group)


def _requantize(acc: Tensor, scale: Tensor, zp, out_dtype) -> Tensor:
  """Round-half-even acc*scale + zero point, saturated to `out_dtype` (an 8/16-bit integer type)."""
  y = acc.cast(dtypes.float32) * scale.cast(dtypes.float32)
  if zp is not None: y = y + zp.cast(dtypes.float32).reshape(zp.shape if zp.ndim != 1 or zp.shape[0] != 1 else ())
  info = np.iinfo(out_dtype.numpy)
  out = y.round().clip(float(info.min), float(info.max)).cast(out_dtype)
  return out.contiguous() if out_dtype.itemsize == 1 else out     # stored as 8 bits between kernels


def _scalar_or(t: Tensor, shape) -> Tensor:
  if t.ndim == 0 or t.numel() == 1: return t.reshape(())
  return t.reshape(shape)


@onnx_op("QLinearMatMul")
def qlinear_matmul(ctx: NodeContext):
  a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp = (ctx.input(i) for i in range(8))
  per_tensor = b.ndim == 2 and (a_zp is None or a_zp.numel() == 1)
  exact = exact_float_operands(ctx, a, a_zp, 3, b_zp, None, (0,)) if per_tensor else None
  if exact is not None: acc = shifted_matmul(*exact)
  else: acc = _minus_zero_point(a, a_zp, (-1, 1)).matmul(_minus_zero_point(b, b_zp))
  scale = _scalar_or(a_scale, (-1, 1)) * _scalar_or(b_scale, (-1,)) / y_scale.reshape(())
  return _requantize(acc, scale, y_zp, (y_zp if y_zp is not None else a).dtype)


@onnx_op("QLinearConv")
def qlinear_conv(ctx: NodeContext):
  x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, bias = (ctx.input(i) for i in range(9))
  strides, dilations, pads = conv_window(ctx, x, w.shape[2:])
  group = int(ctx.attr("group", 1))
  acc = winograd_integers(ctx, x, x_zp, 3, w_zp, strides, pads, dilations, group)
  exact = exact_float_operands(ctx, x, x_zp, 3, w_zp, 8, tuple(range(1, w.ndim))) if acc is None else None
  if exact is not None: acc = shifted_conv(*exact, strides, pads, dilations, group)
  elif acc is None:
    xi, wi = _minus_zero_point(x, x_zp), _minus_zero_point(w, w_zp, (-1,) + (1,) * (w.ndim - 1))
    acc = functional.conv(xi, wi, None, strides, pads, dilations, group)
  if bias is not None: acc = acc + bias.cast(acc.dtype).reshape(channel_shape(acc))
  scale = x_scale.reshape(()) * _scalar_or(w_scale, channel_shape(acc)) / y_scale.reshape(())
  return _requantize(acc, scale, y_zp, (y_zp if y_zp is not None else x).dtype)


# ---------------------------------------------------------------- quantize and dequantize
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
  same = requantized(ctx, x, out_dt) if precision is None else None
  if same is not None: return same                      # QuantizeLinear(DequantizeLinear(q)) with q's parameters
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
  if out_dt.storage_only: return v.cast(dtypes.int32).cast(out_dt)
  # 8-bit activations are stored as such between kernels (the consumers read them through a cast)
  return v.cast(out_dt).contiguous() if out_dt.itemsize == 1 else v.cast(out_dt)


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
  out = (v * _quant_param(scale, x.shape, axis, block).cast(dtypes.float32)).cast(out_dt)
  record_dequantized(ctx, out, axis, block)
  return out


@onnx_op("DynamicQuantizeLinear")
def dynamic_quantize_linear(ctx: NodeContext):
  x = ctx.input(0).cast(dtypes.float32)
  hi = x.max().maximum(0.0)
  lo = x.min().minimum(0.0)
  scale = (hi == lo).where(1.0, hi - lo) / 255.0
  zp = (0.0 - lo / scale).clip(0.0, 255.0).round()
  y = ((x / scale).round() + zp).clip(0.0, 255.0).cast(dtypes.uint8).contiguous()   # stored as 8 bits
  return [y, scale.cast(ctx.input(0).dtype), zp.cast(dtypes.uint8)]
