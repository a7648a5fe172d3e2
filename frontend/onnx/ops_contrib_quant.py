"""com.microsoft integer matrix operators that onnxruntime.quantization writes: QGemm (QOperator models),
DynamicQuantizeMatMul, MatMulIntegerToFloat and DynamicQuantizeLSTM (dynamic quantization).

Each multiplies 8-bit integers minus their zero points into exact int32 accumulators, as onnxruntime's kernels do,
then scales the accumulator in float32 (`acc * (a_scale * b_scale)`, the product of the scales formed first, per
output column where B has per-column scales). QGemm with an output scale and zero point requantizes: round half to
even of `acc * scale`, plus the zero point, saturated to the output type.

The dynamic operators quantize their float input the way onnxruntime does at run time: one uint8 scale and zero
point for the whole matrix, from its range extended to include 0 (`scale = (max - min) / 255`, 1 when the range is
empty; `zero = round(-min / scale)` saturated to 0..255; `q = saturate(round(x / scale) + zero)`). DynamicQuantizeLSTM
is the ONNX LSTM with W and R stored transposed ([dirs, input, 4h] and [dirs, h, 4h]) as int8/uint8 with a scale per
direction or per direction and gate column: the input projection of all steps is one such product (X quantized once
per direction, over the steps up to the longest sequence), the recurrence quantizes the previous hidden state at
every step (stored as 8 bits: the recurrent product multiplies 8-bit values, codegen/dot.py). (onnxruntime splits
the batch between threads for large batches and quantizes each slice on its own; one slice is the single-threaded
result.) Results equal onnxruntime's up to float rounding, except where a value
lands on a rounding boundary of a dynamic quantization and the last bits of onnxruntime's approximate sigmoid/tanh
decide it: one quantization step apart, which a long recurrence carries on."""
from __future__ import annotations
import numpy as np
from tgc.ir import dtypes
from tgc.frontend.tensor import Tensor
from tgc.frontend.onnx.registry import NodeContext, onnx_op
from tgc.frontend.onnx import ops_rnn
from tgc.frontend.onnx.ops_quantization import integer_matmul, zero_free
from tgc.frontend.onnx.quantized_compute import EIGHT_BIT

DOMAIN = "com.microsoft"


# ---------------------------------------------------------------- shared pieces
def _scalar(t: Tensor) -> Tensor:
  return t.reshape(()).cast(dtypes.float32)


def _column_scale(ctx: NodeContext, scale: Tensor, n: int, what: str) -> Tensor:
  """A B-side scale or zero point as a 0-d tensor or one value per output column (N)."""
  if scale.numel() == 1: return scale.reshape(())
  if scale.ndim != 1 or scale.shape[0] != n:
    raise ctx.fail(f"{what} of shape {tuple(scale.shape)} is not supported (a scalar or one value per column, {n})")
  return scale


def dynamic_quantize(x: Tensor, ranged: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
  """x quantized to uint8 over its whole range (onnxruntime's dynamic quantization), as (q stored in 8 bits, the
  zero point in int32, the float32 scale); the range is that of `ranged` when given (x with entries that do not
  count set to 0)."""
  x = x.cast(dtypes.float32)
  r = x if ranged is None else ranged.cast(dtypes.float32)
  hi, lo = r.max().maximum(0.0), r.min().minimum(0.0)
  scale = (hi == lo).where(1.0, (hi - lo) / 255.0)
  zero = (0.0 - lo / scale).clip(0.0, 255.0).round()
  q = ((x / scale).round() + zero).clip(0.0, 255.0)
  return q.cast(dtypes.uint8).contiguous(), zero.cast(dtypes.int32), scale     # stored as 8 bits: dot products


def _requantize(ctx: NodeContext, y: Tensor, zero: Tensor) -> Tensor:
  """Round half to even, plus the zero point, saturated to the zero point's type (onnxruntime's requantization)."""
  if zero.dtype not in EIGHT_BIT: raise ctx.fail(f"output type {zero.dtype.name} is not supported (uint8 or int8)")
  info = np.iinfo(zero.dtype.numpy)
  q = y.round() + zero.reshape(()).cast(dtypes.float32)
  return q.clip(float(info.min), float(info.max)).cast(zero.dtype)


def _check_eight_bit(ctx: NodeContext, *named: tuple[str, Tensor | None]) -> None:
  for name, t in named:
    if t is not None and t.dtype not in EIGHT_BIT:
      raise ctx.fail(f"input {name} has type {t.dtype.name}; uint8 or int8 expected")


# ---------------------------------------------------------------- QGemm
@onnx_op(f"{DOMAIN}:QGemm")
def qgemm(ctx: NodeContext):
  a, a_scale, a_zp, b, b_scale, b_zp, c, y_scale, y_zp = (ctx.input(i) for i in range(9))
  _check_eight_bit(ctx, ("A", a), ("B", b))
  if a.ndim != 2 or b.ndim != 2: raise ctx.fail(f"A and B must be 2-D (got ranks {a.ndim} and {b.ndim})")
  if (y_scale is None) != (y_zp is None):
    raise ctx.fail("y_scale and y_zero_point must be given together (requantized output) or both omitted (float)")
  if int(ctx.attr("transA", 0)): a = a.T
  if int(ctx.attr("transB", 0)): b = b.T
  n = b.shape[1]
  acc = integer_matmul(a, a_zp, b, None if b_zp is None else _column_scale(ctx, b_zp, n, "b_zero_point"),
                       zero_free(ctx, 5))
  if c is not None: acc = acc + c.cast(dtypes.int32)
  scale = _scalar(a_scale) * float(ctx.attr("alpha", 1.0)) * _column_scale(ctx, b_scale, n, "b_scale")
  if y_scale is None: return acc.cast(dtypes.float32) * scale
  return _requantize(ctx, acc.cast(dtypes.float32) * (scale / _scalar(y_scale)), y_zp)


# ---------------------------------------------------------------- MatMul with a float result
def _matmul_to_float(ctx: NodeContext, aq: Tensor, a_zp: Tensor | None, a_scale: Tensor, b_inputs: tuple, bias):
  """((aq - a_zp) @ (B - B's zero point)) * (a_scale * B's scale) + bias; `b_inputs`: the input positions of B, its
  scale and its zero point."""
  b, b_scale, b_zp = (ctx.input(i) for i in b_inputs)
  if b.dtype not in EIGHT_BIT: raise ctx.fail(f"input B has type {b.dtype.name}; uint8 or int8 expected")
  n = b.shape[-1]
  zp = None if b_zp is None else _column_scale(ctx, b_zp, n, "b_zero_point")
  acc = integer_matmul(aq, a_zp, b, zp, zero_free(ctx, b_inputs[2]))
  y = acc.cast(dtypes.float32) * (a_scale * _column_scale(ctx, b_scale, n, "b_scale").cast(dtypes.float32))
  return y if bias is None else y + bias.cast(dtypes.float32)


@onnx_op(f"{DOMAIN}:DynamicQuantizeMatMul")
def dynamic_quantize_matmul(ctx: NodeContext):
  aq, a_zp, a_scale = dynamic_quantize(ctx.input(0))
  return _matmul_to_float(ctx, aq, a_zp, a_scale, (1, 2, 3), ctx.input(4))


@onnx_op(f"{DOMAIN}:MatMulIntegerToFloat")
def matmul_integer_to_float(ctx: NodeContext):
  a, a_scale, a_zp, bias = ctx.input(0), ctx.input(2), ctx.input(4), ctx.input(6)
  _check_eight_bit(ctx, ("A", a))
  if a_scale.numel() != 1 or (a_zp is not None and a_zp.numel() != 1):
    raise ctx.fail("a_scale and a_zero_point must be scalars (per-row quantization of A is not supported)")
  return _matmul_to_float(ctx, a, a_zp, _scalar(a_scale), (1, 3, 5), bias)


# ---------------------------------------------------------------- DynamicQuantizeLSTM
def _lstm_weights(ctx: NodeContext, i: int, what: str, dirs: int, cols: int) -> tuple:
  """Quantized W or R (input i, its scale and zero point at 8 + 2k, 9 + 2k) as ([dirs, K, 4h] 8-bit values, their
  [dirs, 1, 1] int32 zero points, whether those are all zero, [dirs, 1 or 4h] float32 scales)."""
  w = ctx.input(i)
  scale, zp = ctx.input(8 + 2 * (i - 1)), ctx.input(9 + 2 * (i - 1))
  _check_eight_bit(ctx, (what, w))
  if w.ndim != 3 or w.shape[0] != dirs or w.shape[2] != cols:
    raise ctx.fail(f"{what} has shape {tuple(w.shape)}; [{dirs}, K, {cols}] expected")
  for name, t in ((f"{what}_scale", scale), (f"{what}_zero_point", zp)):
    if t is None: raise ctx.fail(f"input {name} is required")
    if t.numel() not in (dirs, dirs * cols):
      raise ctx.fail(f"{name} has {t.numel()} values; one per direction ({dirs}) or per direction and column "
                     f"({dirs * cols}) expected")
  if zp.numel() != dirs and ctx.is_const(9 + 2 * (i - 1)):
    z = np.asarray(ctx.const_value(9 + 2 * (i - 1))).reshape(dirs, -1)
    if np.any(z != z[:, :1]): raise ctx.fail(f"{what}_zero_point differs between columns (not supported)")
  z = zp.reshape(dirs, -1).shrink((None, (0, 1))).reshape(dirs, 1, 1).cast(dtypes.int32)
  return w, z, zero_free(ctx, 9 + 2 * (i - 1)), scale.reshape(dirs, -1).cast(dtypes.float32)


@onnx_op(f"{DOMAIN}:DynamicQuantizeLSTM")
def dynamic_quantize_lstm(ctx: NodeContext):
  r = ctx.input(2)
  hidden = int(ctx.attr("hidden_size", r.shape[1] if r is not None and r.ndim == 3 else 0))
  p = ops_rnn._rnn_common(ctx, 4, ["Sigmoid", "Tanh", "Tanh"], hidden=hidden)
  dirs, h4 = p["num_dirs"], 4 * hidden
  wq, w_zero, w_free, w_scale = _lstm_weights(ctx, 1, "W", dirs, h4)
  rq, r_zero, r_free, r_scale = _lstm_weights(ctx, 2, "R", dirs, h4)
  if rq.shape[1] != hidden: raise ctx.fail(f"R has shape {tuple(r.shape)}; [{dirs}, {hidden}, {h4}] expected")
  b = ctx.input(3)
  bias = None if b is None else b.shrink((None, (0, h4))) + b.shrink((None, (h4, 2 * h4)))

  lens = p["lens"]

  def project(d: int, xd: Tensor) -> Tensor:
    # onnxruntime quantizes the steps up to the longest sequence only (the rest are never read)
    live = None
    if lens is not None:
      steps = Tensor.arange(xd.shape[0], device=xd.device).reshape(-1, 1, 1)
      live = (steps < lens.cast(dtypes.int32).max()).where(xd, 0.0)
    xq, zx, sx = dynamic_quantize(xd, live)
    acc = integer_matmul(xq.reshape(-1, xd.shape[-1]), zx, wq[d], w_zero[d], w_free)
    return (acc.cast(dtypes.float32) * (sx * w_scale[d])).reshape(xd.shape[0], xd.shape[1], h4)

  def pre_gates(d: int, t: int, xp: Tensor, hp: Tensor) -> Tensor:
    # with Y an output, onnxruntime zeroes the hidden state of sequences that ended before step t - 1
    ranged = None if lens is None or t == 0 else (lens.cast(dtypes.int32) >= t).reshape(-1, 1).where(hp, 0.0)
    hq, zh, sh = dynamic_quantize(hp, ranged)
    gates = xp + integer_matmul(hq, zh, rq[d], r_zero[d], r_free).cast(dtypes.float32) * (sh * r_scale[d])
    return gates if bias is None else gates + bias[d]
  p["project"] = project
  return ops_rnn.lstm_recurrence(ctx, p, pre_gates)
