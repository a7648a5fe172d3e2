"""Convolutions and matrix products of dequantized operands computed on the quantized values.

A QDQ model (onnxruntime.quantization, tf2onnx, ...) writes `Conv(DequantizeLinear(xq), DequantizeLinear(wq))`:
taken literally, every weight is dequantized to float each run into a buffer of its own, and every activation is
kept as float between kernels. With compile-time scales and zero points the same value is

    conv(DQ(xq; sx, zx), DQ(wq; sw[c], 0)) = conv(xq - zx, wq) * (sx * sw[c])

so the reduction reads the 8-bit tensors themselves (a cast on load; the weights stay 8-bit in the weights file
and can be laid out at compile time like any constant) and the scales are applied once per output element. Weights
that are float already give conv(xq - zx, w) * sx the same way (8-bit weights are never folded to float at
compile time, however small: the importer keeps their DequantizeLinear). The integer products summed in float32
are exact up to 2**24, then rounded as the float reference rounds; outputs
equal the QDQ reference within its tolerance. `DequantizeLinear` records what it dequantized (`record_dequantized`)
and the Conv, MatMul and Gemm handlers ask for it (`quantized_conv`, `quantized_matmul`); anything else (blocked or
non-constant scales, per-axis activations, float8 inputs) keeps the literal form; dequantized weights with zero
points are read dequantized. Where the target wants it (x86 without VNNI), conv(xq - zx, wq) of a 3x3 convolution
is Winograd's integer form (frontend/winograd.py `conv2d_integers`: the same integers in 2.25x fewer products), here
and for QLinearConv and ConvInteger (`winograd_integers`)."""
from __future__ import annotations
import contextlib
import contextvars
from dataclasses import dataclass
import numpy as np
from tgc.ir import Ops, dtypes
from tgc.frontend.tensor import Tensor
from tgc.frontend import functional, winograd
from tgc.frontend.onnx.registry import NodeContext

EIGHT_BIT = (dtypes.int8, dtypes.uint8)
ROW_CHANNELS = (2, 3)       # input channels of the 8-bit convolutions read by rows (`_rows_conv`)
ROW_MIN_TAPS = 6            # ... with at least this many taps per row (3x3 over 2 channels: 6 in 8)
_row_group = contextvars.ContextVar("row_group", default=0)


@contextlib.contextmanager
def rows_enabled(group: int):
  """Within the block, 8-bit convolutions over few channels are read by rows (`_rows_conv`), their taps padded to a
  multiple of `group`: the convolutions traced there are for a target whose integer dot products take `group`
  consecutive bytes (`codegen.dot.bytes_group`; 0: none, no rows)."""
  token = _row_group.set(group)
  try: yield
  finally: _row_group.reset(token)


@dataclass(frozen=True)
class Dequantized:
  """What a DequantizeLinear output is: `(q - zero) * scale`, scale and zero known at compile time; `axis` is the
  axis a per-axis scale runs along (None: one scale for the whole tensor)."""
  q: Tensor
  scale: np.ndarray      # float32, 0-d or 1-d
  zero: np.ndarray       # int64, same shape as scale
  axis: int | None
  values: np.ndarray | None = None     # q's values when they are constants (weights)


def record_dequantized(ctx: NodeContext, out: Tensor, axis: int, block: int) -> None:
  """Remember that `out` is the dequantized 8-bit input 0 of this DequantizeLinear (when its scale and zero point
  are constants and it is no blocked quantization)."""
  x = ctx.input(0)
  graph = ctx.extra.get("graph")
  if graph is None or block or x.dtype not in EIGHT_BIT or out.dtype != dtypes.float32: return
  params = _constant_params(ctx)
  if params is None: return
  scale, zero = params
  if scale.size == 1: scale, zero, axis = scale.reshape(()), zero.reshape(()), None
  elif scale.ndim != 1: return
  graph.dequantized[out.uop] = Dequantized(x, scale, zero, axis, np.asarray(ctx.const_value(0)) if ctx.is_const(0)
                                           else None)


def _constant_params(ctx: NodeContext) -> tuple[np.ndarray, np.ndarray] | None:
  """A (De)QuantizeLinear's scale (float32) and zero point (int64; zeros when absent) when both are constants."""
  if not ctx.is_const(1) or (ctx.input(2) is not None and not ctx.is_const(2)): return None
  scale = np.asarray(ctx.const_value(1), np.float32)
  return scale, np.asarray(ctx.const_value(2), np.int64) if ctx.input(2) is not None else np.zeros_like(scale, np.int64)


def _source(ctx: NodeContext, t: Tensor | None) -> Dequantized | None:
  graph = ctx.extra.get("graph")
  if graph is None or t is None: return None
  return graph.dequantized.get(t.uop)


def _activation(ctx: NodeContext, t: Tensor) -> tuple[Tensor, int, float] | None:
  """A per-tensor dequantized activation as (q in float32, its zero point, its scale)."""
  src = _source(ctx, t)
  if src is None or src.axis is not None: return None
  return src.q.cast(dtypes.float32), int(src.zero), float(src.scale)


def _weight(ctx: NodeContext, t: Tensor, channels: int, axis: int,
            cast: bool = True) -> tuple[Tensor, np.ndarray, np.ndarray | None] | None:
  """Dequantized weights with zero points 0 and one scale or one per output channel (`axis`), as (q in float32, or
  as stored without `cast`, the `channels` scales, q's values when they are constants)."""
  src = _source(ctx, t)
  if src is None or np.any(src.zero != 0): return None
  if src.axis is not None and (src.axis % t.ndim != axis or src.scale.shape[0] != channels): return None
  scales = np.broadcast_to(src.scale, (channels,)).astype(np.float32)
  return (src.q.cast(dtypes.float32) if cast else src.q), scales, src.values


def _scaled(acc: Tensor, sx: float, sw: np.ndarray | None, channel_axis: int) -> Tensor:
  """acc times the activation's scale and the weights' (one per output channel along `channel_axis`, or none: the
  weights are float already)."""
  if sw is None: return acc * float(sx)
  shape = tuple(-1 if a == channel_axis % acc.ndim else 1 for a in range(acc.ndim))
  return acc * Tensor(sw * np.float32(sx), device=acc.device).reshape(shape)


def quantized_conv(ctx: NodeContext, x: Tensor, w: Tensor, b: Tensor | None, strides, pads, dilations,
                   group: int) -> Tensor | None:
  """Conv of a dequantized activation (and dequantized or float weights) on its 8-bit values, or None."""
  act = _activation(ctx, x)
  if act is None or w.dtype != dtypes.float32: return None
  xq, zero, sx = act
  wq, sw, values = _weight(ctx, w, w.shape[0], 0) or (w, None, None)
  q = _source(ctx, x).q                          # the 8-bit activation itself (`_activation` converted it)
  if values is not None and winograd.integers_apply(q, values, strides, pads, dilations, group):
    return _biased(_scaled(winograd.conv2d_integers(q, zero, values, pads).cast(dtypes.float32), sx, sw, 1), b)
  values = values if exact_without_zero(xq, values, tuple(range(1, w.ndim))) else None
  return _biased(_scaled(shifted_conv(xq, zero, wq, values, strides, pads, dilations, group), sx, sw, 1), b)


def _biased(y: Tensor, b: Tensor | None) -> Tensor:
  """y plus the bias `b` of its channels (axis 1), if any."""
  return y + b.reshape((1, -1) + (1,) * (y.ndim - 2)) if b is not None else y


def quantized_matmul(ctx: NodeContext, a: Tensor, b: Tensor, b_transposed: bool = False) -> Tensor | None:
  """a @ b (b given as [N, K] when `b_transposed`) of a dequantized activation and 2-d weights (dequantized, with
  one scale or one per output column, or float) on the activation's 8-bit values; or None."""
  act = _activation(ctx, a)
  if act is None or b.ndim != 2 or b.dtype != dtypes.float32: return None
  aq, zero, sa = act
  n = b.shape[0] if b_transposed else b.shape[1]
  # the 8-bit weights as stored: matmul repacks them before converting them (`Tensor.matmul`)
  bq, sb, values = _weight(ctx, b, n, 0 if b_transposed else 1, cast=False) or (b, None, None)
  if values is not None and b_transposed: values = values.T
  values = values if exact_without_zero(aq, values, (0,)) else None
  return _scaled(shifted_matmul(aq, zero, bq.T if b_transposed else bq, values), sa, sb, -1)


# ---------------------------------------------------------------- zero points outside the reduction
def exact_without_zero(x: Tensor, w: np.ndarray | None, reduce_axes: tuple[int, ...], bias: float = 0.0) -> bool:
  """Whether the float32 sums of the 8-bit `x` (converted, not minus its zero point) times the integer weights `w`
  (summed over `reduce_axes`), plus `bias`, stay exact: every partial sum below 2**24."""
  if w is None or w.dtype.kind not in "iu": return False
  if x.dtype != dtypes.float32 or x.uop.op is not Ops.CAST or x.uop.src[0].dtype not in EIGHT_BIT: return False
  return _sums_exact(x.uop.src[0].dtype, 0, _abs_sum(w, reduce_axes), bias)


def _weight_sums(zero: int, values: np.ndarray, reduce_axes: tuple[int, ...], shape, device: str) -> Tensor:
  sums = zero * values.astype(np.int64).sum(axis=reduce_axes)
  return Tensor(sums.astype(np.float32), device=device).reshape(shape)


def shifted_conv(xf: Tensor, zero: int, wf: Tensor, values: np.ndarray | None, strides, pads, dilations,
                 group: int) -> Tensor:
  """conv(xf - zero, wf). With the weights' integer values (`values`, when `exact_without_zero`): conv(xf padded with
  `zero`, wf) - zero * (each output channel's weight sum), the same integers, so that the reduction reads the 8-bit
  values as they are (codegen/dot.py: one 32-bit load per four channels and no sum of the weights beside the
  products) and the zero point costs one subtraction per output."""
  if zero and values is None:
    return functional.conv(xf - float(zero), wf, None, strides, pads, dilations, group)
  y = _rows_conv(xf, zero, values, strides, pads, dilations, group)
  if y is None: y = functional.conv(xf, wf, None, strides, pads, dilations, group, pad_value=float(zero))
  if not zero: return y
  return y - _weight_sums(zero, values, tuple(range(1, values.ndim)), (1, -1) + (1,) * (y.ndim - 2), y.device)


def _rows_conv(xf: Tensor, zero: int, values: np.ndarray | None, strides, pads, dilations,
               group: int) -> Tensor | None:
  """conv(xf padded with `zero`, the weights `values`) of a 2-D convolution over an 8-bit image of ROW_CHANNELS
  channels (an RGB stem), as a convolution of one channel over its rows: the image padded, stored channels last and
  realized (one 8-bit buffer), each row of W pixels of C channels read as one row of W*C values, the kernel's KW taps
  of C channels as KW*C taps side by side, strided by C times the stride. Zero taps make them a multiple of the
  bytes one dot product takes (`rows_enabled`; the row is padded on the right far enough for them to read inside
  it). Each output then sums KH runs of consecutive bytes, which the dot-product instructions read four at a time
  (codegen/dot.py: one 32-bit load), where the taps of C channels were bytes C apart (four loads, shifts and gates
  per group). None where it does not apply: not enabled (`rows_enabled`), no 8-bit image, weights not known,
  groups, dilation, fewer than ROW_MIN_TAPS taps."""
  src, word = xf.uop.src[0] if xf.uop.op is Ops.CAST else None, _row_group.get()
  if not word or src is None or src.dtype not in EIGHT_BIT or values is None or values.ndim != 4: return None
  n, cin, h, w = xf.shape
  cout, _, kh, kw = values.shape
  if group != 1 or cin not in ROW_CHANNELS or tuple(dilations) != (1, 1) or kw * cin < ROW_MIN_TAPS: return None
  if not all(isinstance(d, int) for d in (n, h, w)): return None
  (top, bottom), (left, right) = functional.conv_pads(pads, (kh, kw), (1, 1), strides, "conv")
  sy, sx = strides
  padded = w + left + right
  width = (padded - kw) // sx + 1                                  # output columns
  taps = -(-kw * cin // word) * word                               # each row's taps, zeros past kw * cin
  extra = max(0, -(-((width - 1) * sx * cin + taps - padded * cin) // cin))     # pixels the last zero taps read
  image = xf._new(src).pad(((0, 0), (0, 0), (top, bottom), (left, right + extra)), value=zero)
  rows = image.permute((0, 2, 3, 1)).reshape((n, 1, h + top + bottom, (padded + extra) * cin)).contiguous()
  kernel = np.zeros((cout, 1, kh, taps), values.dtype)
  kernel[..., :kw * cin] = values.transpose(0, 2, 3, 1).reshape(cout, 1, kh, kw * cin)
  weights = Tensor(kernel, device=xf.device).cast(dtypes.float32)
  return functional.conv(rows.cast(dtypes.float32), weights, None, (sy, sx * cin), 0, 1, 1)


def shifted_matmul(af: Tensor, zero: int, b: Tensor, values: np.ndarray | None) -> Tensor:
  """(af - zero) @ b, as af @ b - zero * (b's column sums) with b's integer values (see `shifted_conv`)."""
  if not zero or values is None: return (af - float(zero) if zero else af).matmul(b)
  return af.matmul(b) - _weight_sums(zero, values, (0,), (-1,), af.device)


def quantized_max_pool(ctx: NodeContext, x: Tensor, pool) -> Tensor | None:
  """`pool` (a max pooling) of a dequantized activation with a positive scale, on its 8-bit values converted to float:
  dequantizing is increasing, so max(DQ(q)) = DQ(max(q)); the pooling reads the 8-bit tensor, not a float copy."""
  src = _source(ctx, x)
  if src is None or src.axis is not None or not float(src.scale) > 0: return None
  zero = int(src.zero)
  pooled = pool(src.q.cast(dtypes.float32))
  out = (pooled - float(zero) if zero else pooled) * float(src.scale)
  # the pooled values are the input's integers: what it is the dequantization of, for a QuantizeLinear after it
  ctx.extra["graph"].dequantized[out.uop] = Dequantized(pooled.cast(src.q.dtype).contiguous(), src.scale, src.zero,
                                                         None)
  return out


def requantized(ctx: NodeContext, x: Tensor, out_dtype) -> Tensor | None:
  """This QuantizeLinear of `x` when `x` is the dequantization of an 8-bit tensor q of type `out_dtype` with this
  node's scale and zero point, per tensor and constant: q itself, exactly (round(((q - z) * s) / s) + z = q: the
  float error of the division is far below a half, nothing is clipped). None otherwise."""
  src = _source(ctx, x)
  if src is None or src.axis is not None or src.q.dtype != out_dtype or ctx.attr("block_size", 0): return None
  params = _constant_params(ctx) if ctx.input(2) is not None else None
  if params is None: return None
  scale, zero = params
  if scale.size != 1 or zero.size != 1 or not 0 < float(scale) < np.inf: return None
  return src.q if float(scale) == float(src.scale) and int(zero) == int(src.zero) else None


# ---------------------------------------------------------------- integer products summed exactly in float32
FLOAT_EXACT = 1 << 24      # every integer up to this magnitude is a float32


def _abs_sum(w: np.ndarray, reduce_axes: tuple[int, ...]) -> float:
  """The largest sum of |w| over `reduce_axes` (one per output)."""
  return float(np.abs(w.astype(np.int64)).sum(axis=reduce_axes).max(initial=0))


def _sums_exact(dtype, zero: int, abs_sum: float, bias: float) -> bool:
  """Whether every partial sum of (an 8-bit `dtype` value - `zero`) times weights whose |sums| reach `abs_sum`, plus
  a bias of up to `bias`, stays below 2**24."""
  lo, hi = (0, 255) if dtype == dtypes.uint8 else (-128, 127)
  return max(abs(lo - zero), abs(hi - zero)) * abs_sum + bias < FLOAT_EXACT


def winograd_integers(ctx: NodeContext, x: Tensor, x_zero: Tensor | None, w_index: int, w_zero: Tensor | None,
                      strides, pads, dilations, group: int) -> Tensor | None:
  """conv(x - x_zero, w) in int32 in Winograd's integer form (frontend/winograd.py `conv2d_integers`) for a
  QLinearConv or ConvInteger (x's zero point input 2, w's input `w_index`, its zero point input `w_index` + 2): an
  8-bit `x` with one constant zero point, constant 8-bit weights whose zero points are 0, where the target wants it
  (`winograd.integers_apply`); else None."""
  if x.dtype not in EIGHT_BIT or not ctx.is_const(w_index): return None
  if any(z is not None and not ctx.is_const(i) for i, z in ((2, x_zero), (w_index + 2, w_zero))): return None
  w = np.asarray(ctx.const_value(w_index))
  if w.dtype not in (np.int8, np.uint8) or not winograd.integers_apply(x, w, strides, pads, dilations, group):
    return None
  if w_zero is not None and np.any(np.asarray(ctx.const_value(w_index + 2)) != 0): return None
  zx = np.unique(np.asarray(ctx.const_value(2))) if x_zero is not None else np.zeros(1, np.int64)
  return winograd.conv2d_integers(x, int(zx[0]), w, pads) if zx.size == 1 else None


def exact_float_operands(ctx: NodeContext, x: Tensor, x_zero, w_index: int, w_zero, bias_index: int | None,
                         reduce_axes: tuple[int, ...]) -> tuple[Tensor, int, Tensor, np.ndarray | None] | None:
  """(x as float32, x's zero point, w as float32, w's values or None) when the integer sums of products of a
  QLinearConv/QLinearMatMul are exact in float32: constant weights with zero points 0 and constant zero points, and
  |x - x_zero| * sum |w| (per output, over the `reduce_axes` of the weights) + |bias| below 2**24 (a bound from the
  weights' values). Then the float32 accumulation gives the int32 accumulator bit for bit, and the product reads the
  8-bit tensors converted on load (SIMD) instead of int32 copies; w's values come with them when the sums of x
  itself are exact too (as `exact_without_zero` says: the zero point can go outside the reduction, `shifted_conv`). None
  otherwise (the int32 arithmetic stays)."""
  if x.dtype not in EIGHT_BIT or not ctx.is_const(w_index): return None
  if any(z is not None and not ctx.is_const(i) for i, z in ((2, x_zero), (w_index + 2, w_zero))): return None
  w = np.asarray(ctx.const_value(w_index))
  if w.dtype not in (np.int8, np.uint8): return None
  if w_zero is not None and np.any(np.asarray(ctx.const_value(w_index + 2)) != 0): return None
  zx = int(np.asarray(ctx.const_value(2)).reshape(-1)[0]) if x_zero is not None else 0
  if x_zero is not None and np.unique(np.asarray(ctx.const_value(2))).size > 1: return None
  bias = 0.0
  if bias_index is not None and ctx.input(bias_index) is not None:
    if not ctx.is_const(bias_index): return None
    bias = float(np.abs(np.asarray(ctx.const_value(bias_index), np.int64)).max(initial=0))
  abs_sum = _abs_sum(w, reduce_axes)
  if not _sums_exact(x.dtype, zx, abs_sum, bias): return None
  wf = ctx.input(w_index).cast(dtypes.float32)
  return x.cast(dtypes.float32), zx, wf, w if _sums_exact(x.dtype, 0, abs_sum, bias) else None
