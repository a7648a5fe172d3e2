"""com.microsoft operators that onnxruntime.quantization writes into QOperator-format models next to the standard
QLinearConv/QLinearMatMul: QLinearAdd, QLinearMul, QLinearGlobalAveragePool, QLinearAveragePool, QLinearSigmoid,
QLinearLeakyRelu, QLinearConcat, QLinearWhere and QLinearSoftmax; also its QuantizeLinear/DequantizeLinear (the
ONNX operators).
Each QLinear op is its float operator between a dequantization of its inputs (`(q - zero_point) * scale`) and a
quantization of its result (round half to even, plus zero point, saturated to the output type: uint8 or int8), as
onnxruntime's contrib-op documentation defines them; QLinearSoftmax follows onnxruntime's kernel (the exponential of
`x - max(x)` in double rounded to float32 as its 256-entry table holds it, the float32 sum, `floor(1 / y_scale)`).
The integer matrix operators (QGemm, DynamicQuantizeLSTM, ...) are in `ops_contrib_quant`."""
from __future__ import annotations
import math
import numpy as np
from tgc.ir import dtypes
from tgc.frontend.tensor import Tensor
from tgc.frontend.onnx.registry import NodeContext, onnx_op
from tgc.frontend.onnx import compose_nn as nn
from tgc.frontend.onnx.ops_conv import _pool_args
from tgc.frontend.onnx.ops_quantization import dequantize_linear, quantize_linear

DOMAIN = "com.microsoft"


# onnxruntime's own QuantizeLinear/DequantizeLinear (quantize_static with use_qdq_contrib_ops, 16-bit and 4-bit QDQ):
# the ONNX operators (scale, zero point, axis; round half to even and saturation)
onnx_op(f"{DOMAIN}:QuantizeLinear")(quantize_linear)
onnx_op(f"{DOMAIN}:DequantizeLinear")(dequantize_linear)


def _dequantize(q: Tensor, scale: Tensor, zero_point: Tensor | None) -> Tensor:
  v = q.cast(dtypes.float32)
  if zero_point is not None: v = v - zero_point.reshape(()).cast(dtypes.float32)
  return v * scale.reshape(()).cast(dtypes.float32)


def _quantize(ctx: NodeContext, v: Tensor, scale: Tensor, zero_point: Tensor | None, like: Tensor) -> Tensor:
  out = (zero_point if zero_point is not None else like).dtype
  if out not in (dtypes.uint8, dtypes.int8): raise ctx.fail(f"quantized type {out.name} is not supported")
  lo, hi = (0.0, 255.0) if out == dtypes.uint8 else (-128.0, 127.0)
  q = (v / scale.reshape(()).cast(dtypes.float32)).round()
  if zero_point is not None: q = q + zero_point.reshape(()).cast(dtypes.float32)
  return q.clip(lo, hi).cast(out).contiguous()      # stored as 8 bits between kernels, as QuantizeLinear's are


def _binary(ctx: NodeContext, op) -> Tensor:
  a, a_scale, a_zp, b, b_scale, b_zp, c_scale, c_zp = (ctx.input(i) for i in range(8))
  return _quantize(ctx, op(_dequantize(a, a_scale, a_zp), _dequantize(b, b_scale, b_zp)), c_scale, c_zp, a)


@onnx_op(f"{DOMAIN}:QLinearAdd")
def qlinear_add(ctx: NodeContext): return _binary(ctx, lambda x, y: x + y)


@onnx_op(f"{DOMAIN}:QLinearMul")
def qlinear_mul(ctx: NodeContext): return _binary(ctx, lambda x, y: x * y)


@onnx_op(f"{DOMAIN}:QLinearWhere")
def qlinear_where(ctx: NodeContext):
  cond, x, x_scale, x_zp, y, y_scale, y_zp, z_scale, z_zp = (ctx.input(i) for i in range(9))
  v = cond.cast(dtypes.bool).where(_dequantize(x, x_scale, x_zp), _dequantize(y, y_scale, y_zp))
  return _quantize(ctx, v, z_scale, z_zp, x)


def _unary(ctx: NodeContext, op) -> Tensor:
  x, x_scale, x_zp, y_scale, y_zp = (ctx.input(i) for i in range(5))
  return _quantize(ctx, op(_dequantize(x, x_scale, x_zp)), y_scale, y_zp, x)


@onnx_op(f"{DOMAIN}:QLinearSigmoid")
def qlinear_sigmoid(ctx: NodeContext): return _unary(ctx, lambda v: v.sigmoid())


@onnx_op(f"{DOMAIN}:QLinearLeakyRelu")
def qlinear_leaky_relu(ctx: NodeContext):
  alpha = float(ctx.attr("alpha", 0.01))
  return _unary(ctx, lambda v: (v < 0).where(v * alpha, v))


def _channels_first(ctx: NodeContext, fn) -> Tensor:
  """Run `fn` on the dequantized input in NCHW order (channels_last=1 inputs are NHWC and so is the result)."""
  last = bool(ctx.attr("channels_last", 0))

  def op(v: Tensor) -> Tensor:
    if last: v = v.permute(0, v.ndim - 1, *range(1, v.ndim - 1))
    y = fn(v)
    return y.permute(0, *range(2, y.ndim), 1) if last else y
  return _unary(ctx, op)


@onnx_op(f"{DOMAIN}:QLinearGlobalAveragePool")
def qlinear_global_average_pool(ctx: NodeContext):
  return _channels_first(ctx, lambda v: v.mean(axis=tuple(range(2, v.ndim)), keepdim=True))


@onnx_op(f"{DOMAIN}:QLinearAveragePool")
def qlinear_average_pool(ctx: NodeContext):
  def pool(v: Tensor) -> Tensor:
    kernel, strides, dilations, pads, ceil_mode = _pool_args(ctx, v)
    return nn.avg_pool(v, kernel, strides, dilations, pads, ceil_mode, bool(ctx.attr("count_include_pad", 0)))
  return _channels_first(ctx, pool)


@onnx_op(f"{DOMAIN}:QLinearConcat")
def qlinear_concat(ctx: NodeContext):
  y_scale, y_zp = ctx.input(0), ctx.input(1)
  parts = [_dequantize(ctx.input(i), ctx.input(i + 1), ctx.input(i + 2)) for i in range(2, len(ctx.inputs), 3)]
  axis = ctx.axis(int(ctx.attr("axis")), parts[0].ndim)
  return _quantize(ctx, parts[0].cat(*parts[1:], dim=axis), y_scale, y_zp, ctx.input(2))


def _table_shift(x_scale: float, reduce_len: int) -> float:
  """onnxruntime's QLinearSoftmax computes exp((x - max(x) + shift) * x_scale) in double, rounded to float32 (a
  256-entry table): `shift` scales the terms up as far as a float32 sum of `reduce_len` of them allows."""
  return max(0.0, math.log(float(np.float32(np.finfo(np.float32).max) / np.float32(reduce_len))) - 5.0) / x_scale


@onnx_op(f"{DOMAIN}:QLinearSoftmax")
def qlinear_softmax(ctx: NodeContext):
  x, y_zp = ctx.input(0), ctx.input(4)
  if ctx.attr("opset") is None: raise ctx.fail("attribute opset is required")
  opset = int(ctx.attr("opset"))
  if x.dtype not in (dtypes.uint8, dtypes.int8): raise ctx.fail(f"input type {x.dtype.name} is not supported")
  if not (ctx.is_const(1) and ctx.is_const(3)): raise ctx.fail("X_scale and y_scale must be compile-time constants")
  axis = ctx.axis(int(ctx.attr("axis", -1)), x.ndim)     # the contrib schema's default, whatever the opset
  axes = (axis,) if opset >= 13 else tuple(range(axis, x.ndim))
  x_scale = float(np.asarray(ctx.const_value(1), np.float32).reshape(-1)[0])
  shift = _table_shift(x_scale, int(np.prod([x.shape[a] for a in axes])))
  xi = x.cast(dtypes.int32)
  e = ((xi - xi.max(axis=axes, keepdim=True)).cast(dtypes.float64) + shift) * x_scale
  e = e.exp().cast(dtypes.float32)
  big = np.floor(np.float32(1.0) / np.asarray(ctx.const_value(3), np.float32).reshape(-1)[0])
  q = (e * float(big) / e.sum(axis=axes, keepdim=True)).round()
  out = (y_zp if y_zp is not None else x).dtype
  if y_zp is not None: q = q + y_zp.reshape(()).cast(dtypes.float32)
  lo, hi = (0.0, 255.0) if out == dtypes.uint8 else (-128.0, 127.0)
  return q.clip(lo, hi).cast(out)
