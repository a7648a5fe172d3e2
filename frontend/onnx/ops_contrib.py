"""com.microsoft operators that onnxruntime.quantization writes into QOperator-format models next to the standard
QLinearConv/QLinearMatMul: QLinearAdd, QLinearMul, QLinearGlobalAveragePool, QLinearSigmoid, QLinearLeakyRelu and
QLinearConcat. Each is its float operator between a dequantization of its inputs
(`(q - zero_point) * scale`) and a quantization of its result (round half to even, plus zero point, saturated to
the output type: uint8 or int8), as onnxruntime's contrib-op documentation defines them."""
from __future__ import annotations
from tgc.ir import dtypes
from tgc.frontend.tensor import Tensor
from tgc.frontend.onnx.registry import NodeContext, onnx_op

DOMAIN = "com.microsoft"


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
  return q.clip(lo, hi).cast(out)


def _binary(ctx: NodeContext, op) -> Tensor:
  a, a_scale, a_zp, b, b_scale, b_zp, c_scale, c_zp = (ctx.input(i) for i in range(8))
  return _quantize(ctx, op(_dequantize(a, a_scale, a_zp), _dequantize(b, b_scale, b_zp)), c_scale, c_zp, a)


@onnx_op(f"{DOMAIN}:QLinearAdd")
def qlinear_add(ctx: NodeContext): return _binary(ctx, lambda x, y: x + y)


@onnx_op(f"{DOMAIN}:QLinearMul")
def qlinear_mul(ctx: NodeContext): return _binary(ctx, lambda x, y: x * y)


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


@onnx_op(f"{DOMAIN}:QLinearConcat")
def qlinear_concat(ctx: NodeContext):
  y_scale, y_zp = ctx.input(0), ctx.input(1)
  parts = [_dequantize(ctx.input(i), ctx.input(i + 1), ctx.input(i + 2)) for i in range(2, len(ctx.inputs), 3)]
  axis = ctx.axis(int(ctx.attr("axis")), parts[0].ndim)
  return _quantize(ctx, parts[0].cat(*parts[1:], dim=axis), y_scale, y_zp, ctx.input(2))
