"""numpy implementations of the com.microsoft operators tgc compiles, for the reference of `tgc validate`
(aot/reference.py passes them to `onnx.reference.ReferenceEvaluator`, which has none of them).

onnxruntime's kernels are no reference for these operators: their results depend on the CPU (without AVX-512 VNNI
its uint8 x int8 products add pairs of products saturated to int16). Each operator here is written from onnxruntime's
contrib operator specification (docs/ContribOperators.md: attributes, input order, optional inputs and defaults),
independently of tgc's front end:
- integer products are exact (8-bit values minus their zero points multiplied into int64; `_integer_matmul`), then
  scaled in float32 (the product of the scales, per output column where B has per-column scales);
- a QLinear operator is its float operator on float32 dequantized inputs (`(q - zero_point) * scale`) followed by a
  quantization of its float32 result: round half to even of `v / scale`, plus the zero point, saturated to the
  output type (uint8 or int8);
- the dynamic operators quantize their float input as DynamicQuantizeLinear does: uint8 over the whole tensor's
  range extended to include 0, `scale = (max - min) / 255` (1 when the range is empty), the zero point
  `round(-min / scale)` clipped to 0..255. DynamicQuantizeLSTM quantizes X once (its steps up to the longest
  sequence) and the previous hidden state at every step (zero for sequences that ended before the previous step).
Forms these do not implement (MatMulIntegerToFloat's a_scale other than per tensor, 8-bit types other than uint8
and int8, ...) raise an exception, and `onnx_reference` falls back to onnxruntime."""
from __future__ import annotations
import numpy as np
from onnx.reference.op_run import OpRun
from onnx.reference.ops.op_quantize_linear import _CommonQuantizeLinear
from onnx.reference.ops.op_dequantize_linear import DequantizeLinear_21

DOMAIN = "com.microsoft"
_LIMITS = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127)}


# ---------------------------------------------------------------- shared pieces
def _scalar(value, what: str) -> np.float32:
  """A per-tensor scale as a float32 scalar."""
  a = np.asarray(value)
  if a.size != 1: raise NotImplementedError(f"{what} must be a scalar (per-tensor), got shape {a.shape}")
  return np.float32(a.reshape(-1)[0])


def _zero(zero_point, what: str = "zero point") -> int:
  """A per-tensor zero point as an int (0 when omitted)."""
  if zero_point is None: return 0
  a = np.asarray(zero_point)
  if a.size != 1: raise NotImplementedError(f"{what} must be a scalar (per-tensor), got shape {a.shape}")
  return int(a.reshape(-1)[0])


def _limits(dtype) -> tuple[int, int]:
  dtype = np.dtype(dtype)
  if dtype not in _LIMITS: raise TypeError(f"quantized type {dtype} is not supported (uint8 or int8)")
  return _LIMITS[dtype]


def _eight_bit(*arrays: np.ndarray) -> None:
  for a in arrays: _limits(a.dtype)


def _dequantize(q: np.ndarray, scale, zero_point) -> np.ndarray:
  """(q - zero_point) * scale in float32 (scalar scale and zero point)."""
  _limits(q.dtype)
  return (q.astype(np.int64) - _zero(zero_point)).astype(np.float32) * _scalar(scale, "scale")


def _quantize(v: np.ndarray, scale, zero_point, dtype) -> np.ndarray:
  """saturate(round_half_even(v / scale) + zero_point) in `dtype` (uint8 or int8), v / scale in float32."""
  lo, hi = _limits(dtype)
  q = np.rint(np.asarray(v, np.float32) / _scalar(scale, "scale")).astype(np.float64) + _zero(zero_point)
  return np.clip(q, lo, hi).astype(dtype)


def _out_type(zero_point, like: np.ndarray) -> np.dtype:
  """The quantized output type: the output zero point's, else the input's (the operators' type T)."""
  return np.asarray(zero_point).dtype if zero_point is not None else like.dtype


def _integer_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """The exact int64 matrix product of integer arrays (numpy matmul broadcasting). Where every partial sum stays
  below 2**53 in magnitude the product runs on float64 BLAS, which then rounds nothing; else on int64."""
  a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
  bound = float(np.abs(a).max(initial=0)) * float(np.abs(b).max(initial=0)) * a.shape[-1]
  if bound < 2.0 ** 53: return np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(np.int64)
  return np.matmul(a, b)


def _column_parameter(value, n: int, what: str) -> np.ndarray:
  """A B-side scale or zero point: a scalar, one value per column ([N]) or one per column of each matrix of a batch
  ([..., 1, N]); returned in a shape that broadcasts against B ([..., K, N]) and the product ([..., M, N])."""
  a = np.asarray(value)
  if a.size == 1: return a.reshape(())
  if a.shape[-1] != n or (a.ndim >= 2 and a.shape[-2] != 1):
    raise NotImplementedError(f"{what} of shape {a.shape} is neither per-tensor nor per-column ({n} columns)")
  return a


def dynamic_quantize(x: np.ndarray, ranged: np.ndarray | None = None) -> tuple[np.ndarray, int, np.float32]:
  """DynamicQuantizeLinear of float32 `x`: (uint8 values, zero point, scale). The range is that of `ranged` when
  given (x with the entries that do not count set to 0), extended to include 0; an empty range gets scale 1."""
  x = np.asarray(x, np.float32)
  r = x if ranged is None else np.asarray(ranged, np.float32)
  hi = np.float32(max(0.0, float(r.max(initial=0.0))))
  lo = np.float32(min(0.0, float(r.min(initial=0.0))))
  scale = np.float32(1.0) if hi == lo else np.float32((hi - lo) / np.float32(255.0))
  zero = int(np.clip(np.rint(np.float32(0.0) - lo / scale), 0, 255))
  q = np.clip(np.rint(x / scale).astype(np.float64) + zero, 0, 255).astype(np.uint8)
  return q, zero, scale


def _matmul_to_float(a: np.ndarray, a_zero: int, a_scale: np.float32, b: np.ndarray, b_scale, b_zero_point,
                     bias) -> np.ndarray:
  """((a - a_zero) @ (b - b_zero_point)) * (a_scale * b_scale) + bias, the product exact, scaled in float32."""
  _limits(b.dtype)
  n = b.shape[-1]
  b_zero = 0 if b_zero_point is None else _column_parameter(b_zero_point, n, "b_zero_point").astype(np.int64)
  acc = _integer_matmul(a.astype(np.int64) - a_zero, b.astype(np.int64) - b_zero)
  scale = a_scale * _column_parameter(b_scale, n, "b_scale").astype(np.float32)
  y = acc.astype(np.float32) * scale
  return y if bias is None else y + np.asarray(bias, np.float32)


# ---------------------------------------------------------------- elementwise QLinear operators
class QLinearAdd(OpRun):
  """C = quantize(A_scale * (A - A_zero_point) + B_scale * (B - B_zero_point)), numpy broadcasting."""
  op_domain = DOMAIN

  def _run(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point=None):
    v = _dequantize(a, a_scale, a_zero_point) + _dequantize(b, b_scale, b_zero_point)
    return (_quantize(v, c_scale, c_zero_point, _out_type(c_zero_point, a)),)


class QLinearMul(OpRun):
  """C = quantize((A - A_zero_point) * (B - B_zero_point) * (A_scale * B_scale)), the integer product exact."""
  op_domain = DOMAIN

  def _run(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point=None):
    _eight_bit(a, b)
    product = (a.astype(np.int64) - _zero(a_zero_point)) * (b.astype(np.int64) - _zero(b_zero_point))
    v = product.astype(np.float32) * (_scalar(a_scale, "A_scale") * _scalar(b_scale, "B_scale"))
    return (_quantize(v, c_scale, c_zero_point, _out_type(c_zero_point, a)),)


class QLinearWhere(OpRun):
  """Z = quantize(condition ? dequantize(X) : dequantize(Y)), numpy broadcasting."""
  op_domain = DOMAIN

  def _run(self, condition, x, x_scale, x_zero_point, y, y_scale, y_zero_point, z_scale, z_zero_point):
    v = np.where(np.asarray(condition, bool), _dequantize(x, x_scale, x_zero_point),
                 _dequantize(y, y_scale, y_zero_point))
    return (_quantize(v, z_scale, z_zero_point, _out_type(z_zero_point, x)),)


class QLinearSigmoid(OpRun):
  """Y = quantize(1 / (1 + exp(-dequantize(X))))."""
  op_domain = DOMAIN

  def _run(self, x, x_scale, x_zero_point, y_scale, y_zero_point=None):
    v = _dequantize(x, x_scale, x_zero_point).astype(np.float64)
    return (_quantize((1.0 / (1.0 + np.exp(-v))).astype(np.float32), y_scale, y_zero_point,
                      _out_type(y_zero_point, x)),)


class QLinearLeakyRelu(OpRun):
  """Y = quantize(v >= 0 ? v : alpha * v) of v = dequantize(X); alpha defaults to 0.01."""
  op_domain = DOMAIN

  def _run(self, x, x_scale, x_zero_point, y_scale, y_zero_point=None, alpha=0.01):
    v = _dequantize(x, x_scale, x_zero_point)
    return (_quantize(np.where(v >= 0, v, v * np.float32(alpha)), y_scale, y_zero_point,
                      _out_type(y_zero_point, x)),)


# ---------------------------------------------------------------- pooling
def _mean_to_float(total: np.ndarray, count, scale) -> np.ndarray:
  """The mean of dequantized values from the exact sum of (q - zero_point): total * scale / count, float32."""
  return (total.astype(np.float64) * float(_scalar(scale, "x_scale")) / count).astype(np.float32)


class QLinearGlobalAveragePool(OpRun):
  """Y = quantize(mean of dequantize(X) over the spatial dims), keeping them as size 1; channels_last=1 reads and
  writes N x D1 ... Dn x C instead of N x C x D1 ... Dn."""
  op_domain = DOMAIN

  def _run(self, x, x_scale, x_zero_point, y_scale, y_zero_point, channels_last=0):
    _limits(x.dtype)
    axes = tuple(range(1, x.ndim - 1)) if channels_last else tuple(range(2, x.ndim))
    total = (x.astype(np.int64) - _zero(x_zero_point)).sum(axis=axes, keepdims=True)
    v = _mean_to_float(total, int(np.prod([x.shape[a] for a in axes])), x_scale)
    return (_quantize(v, y_scale, y_zero_point, _out_type(y_zero_point, x)),)


def _pool_geometry(size: int, kernel: int, stride: int, head: int, tail: int, auto_pad: str,
                   ceil_mode: int) -> tuple[int, int, int]:
  """(output size, head pad, tail pad) of one spatial dim, as the specification's formulas give them."""
  if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
    out = -(-size // stride)
    total = max(0, (out - 1) * stride + kernel - size)
    head = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
    return out, head, total - head
  if auto_pad == "VALID": return (size - kernel) // stride + 1, 0, 0
  span = size + head + tail - kernel
  if not ceil_mode: return span // stride + 1, head, tail
  out = -(-span // stride) + 1
  if (out - 1) * stride >= size + head: out -= 1     # the last window starts in the padding: dropped
  return out, head, tail


class QLinearAveragePool(OpRun):
  """Y = quantize(AveragePool(dequantize(X))): kernel_shape, strides, pads, auto_pad, ceil_mode as AveragePool; the
  divisor counts the pads when count_include_pad=1 (never the positions beyond them that ceil_mode adds);
  channels_last=1 reads and writes N x D1 ... Dn x C."""
  op_domain = DOMAIN

  def _run(self, x, x_scale, x_zero_point, y_scale, y_zero_point=None, auto_pad="NOTSET", ceil_mode=0,
           channels_last=0, count_include_pad=0, kernel_shape=None, pads=None, strides=None):
    _limits(x.dtype)
    if kernel_shape is None: raise ValueError("QLinearAveragePool: attribute kernel_shape is required")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    v = x.astype(np.int64) - _zero(x_zero_point)
    if channels_last: v = np.moveaxis(v, -1, 1)
    nd = v.ndim - 2
    kernel = [int(k) for k in kernel_shape]
    strides = [int(s) for s in strides] if strides else [1] * nd
    pads = [int(p) for p in pads] if pads else [0] * (2 * nd)
    widths, counted, window = [(0, 0), (0, 0)], [(0, 0), (0, 0)], []
    for i, size in enumerate(v.shape[2:]):
      out, head, tail = _pool_geometry(size, kernel[i], strides[i], pads[i], pads[nd + i], auto_pad, ceil_mode)
      window.append(slice(0, (out - 1) * strides[i] + 1, strides[i]))
      beyond = max(0, (out - 1) * strides[i] + kernel[i] - (size + head + tail))   # ceil_mode's extra positions
      widths.append((head, tail + beyond))
      counted.append((head, tail) if count_include_pad else (0, 0))
    values = np.pad(v, widths)
    # 1 where a position counts in the divisor: the input, and its pads with count_include_pad=1
    weight = np.pad(np.ones(v.shape[:2] + tuple(s + a + b for s, (a, b) in zip(v.shape[2:], counted[2:])), np.int64),
                    [(w[0] - c[0], w[1] - c[1]) for w, c in zip(widths, counted)])
    axes = tuple(range(2, v.ndim))

    def sums(a: np.ndarray) -> np.ndarray:
      view = np.lib.stride_tricks.sliding_window_view(a, kernel, axis=axes)[(Ellipsis, *window) + (slice(None),) * nd]
      return view.sum(axis=tuple(range(v.ndim, v.ndim + nd)))
    total, count = sums(values), sums(weight)
    out = _mean_to_float(total, np.maximum(count, 1), x_scale)
    if channels_last: out = np.moveaxis(out, 1, -1)
    return (_quantize(out, y_scale, y_zero_point, _out_type(y_zero_point, x)),)


# ---------------------------------------------------------------- QLinearConcat, QLinearSoftmax
class QLinearConcat(OpRun):
  """Y = quantize(Concat(dequantize(X_i) for each (X_i, scale_i, zero_point_i) after Y_scale, Y_zero_point))."""
  op_domain = DOMAIN

  def _run(self, y_scale, y_zero_point, *inputs, axis=None):
    if axis is None: raise ValueError("QLinearConcat: attribute axis is required")
    if not inputs or len(inputs) % 3: raise ValueError("QLinearConcat takes (tensor, scale, zero point) triples")
    parts = [_dequantize(inputs[i], inputs[i + 1], inputs[i + 2]) for i in range(0, len(inputs), 3)]
    v = np.concatenate(parts, axis=int(axis))
    return (_quantize(v, y_scale, y_zero_point, _out_type(y_zero_point, inputs[0])),)


class QLinearSoftmax(OpRun):
  """Y = quantize(Softmax(dequantize(X))) as Softmax of version `opset` defines it: from 13 on over `axis`, before
  over the dims from `axis` on coerced to one; `axis` defaults to -1 (the schema's default, whatever `opset`). The
  zero point of X cancels."""
  op_domain = DOMAIN

  def _run(self, x, x_scale, x_zero_point, y_scale, y_zero_point=None, axis=None, opset=None):  # noqa: ARG002
    _limits(x.dtype)
    if opset is None: raise ValueError("QLinearSoftmax: attribute opset is required")
    axis = -1 if axis is None else int(axis)
    axis = axis + x.ndim if axis < 0 else axis
    axes = (axis,) if int(opset) >= 13 else tuple(range(axis, x.ndim))
    xi = x.astype(np.int64)
    e = np.exp((xi - xi.max(axis=axes, keepdims=True)).astype(np.float64) * float(_scalar(x_scale, "X_scale")))
    y = (e / e.sum(axis=axes, keepdims=True)).astype(np.float32)
    return (_quantize(y, y_scale, y_zero_point, _out_type(y_zero_point, x)),)


# ---------------------------------------------------------------- integer matrix products
class QGemm(OpRun):
  """Y = alpha * a_scale * b_scale * ((A - a_zero_point) @ (B - b_zero_point) + C), A and B transposed as transA
  and transB say, B's scale and zero point per tensor or per column; C is int32 (scale alpha * a_scale * b_scale,
  zero point 0). Float32 without y_scale and y_zero_point, else quantized with them."""
  op_domain = DOMAIN

  def _run(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point=None, c=None, y_scale=None, y_zero_point=None,
           alpha=1.0, transA=0, transB=0):  # noqa: N803
    _eight_bit(a, b)
    if (y_scale is None) != (y_zero_point is None):
      raise ValueError("QGemm: y_scale and y_zero_point are given together or not at all")
    a = a.T if transA else a
    b = b.T if transB else b
    n = b.shape[-1]
    b_zero = 0 if b_zero_point is None else _column_parameter(b_zero_point, n, "b_zero_point").astype(np.int64)
    acc = _integer_matmul(a.astype(np.int64) - _zero(a_zero_point, "a_zero_point"), b.astype(np.int64) - b_zero)
    if c is not None: acc = acc + np.asarray(c, np.int64)
    scale = np.float32(alpha) * _scalar(a_scale, "a_scale") * _column_parameter(b_scale, n, "b_scale").astype(
      np.float32)
    y = acc.astype(np.float32) * scale
    if y_scale is None: return (y,)
    return (_quantize(y, y_scale, y_zero_point, np.asarray(y_zero_point).dtype),)


class DynamicQuantizeMatMul(OpRun):
  """Y = (DynamicQuantizeLinear(A) @ (B - b_zero_point)) * (A's scale * b_scale) + bias, float32."""
  op_domain = DOMAIN

  def _run(self, a, b, b_scale, b_zero_point=None, bias=None):
    aq, a_zero, a_scale = dynamic_quantize(a)
    return (_matmul_to_float(aq, a_zero, a_scale, b, b_scale, b_zero_point, bias),)


class MatMulIntegerToFloat(OpRun):
  """Y = ((A - a_zero_point) @ (B - b_zero_point)) * (a_scale * b_scale) + bias in the scales' type; A's scale
  and zero point per tensor, B's per tensor or per column."""
  op_domain = DOMAIN

  def _run(self, a, b, a_scale, b_scale, a_zero_point=None, b_zero_point=None, bias=None):
    _limits(a.dtype)
    y = _matmul_to_float(a, _zero(a_zero_point, "a_zero_point"), _scalar(a_scale, "a_scale"), b, b_scale,
                         b_zero_point, bias)
    return (y.astype(np.asarray(a_scale).dtype),)


# ---------------------------------------------------------------- DynamicQuantizeLSTM
def _activation(name: str, alphas: list, betas: list):
  """An RNN activation function on float32 arrays (computed in float64), taking its alpha and beta from the front
  of `alphas` and `betas` where it has them (defaults as the ONNX operators of the same name)."""
  key = name.decode() if isinstance(name, bytes) else name
  key = key.lower()
  uses = {"affine": (True, True), "leakyrelu": (True, False), "thresholdedrelu": (True, False),
          "scaledtanh": (True, True), "hardsigmoid": (True, True), "elu": (True, False)}
  defaults = {"leakyrelu": (0.01, 0.0), "hardsigmoid": (0.2, 0.5), "elu": (1.0, 0.0)}
  if key not in ("relu", "tanh", "sigmoid", "softsign", "softplus") and key not in uses:
    raise NotImplementedError(f"activation {name!r}")
  need_alpha, need_beta = uses.get(key, (False, False))
  alpha, beta = defaults.get(key, (0.0, 0.0))
  if need_alpha and alphas: alpha = float(alphas.pop(0))
  if need_beta and betas: beta = float(betas.pop(0))
  functions = {
    "relu": lambda v: np.maximum(v, 0.0), "tanh": np.tanh, "sigmoid": lambda v: 1.0 / (1.0 + np.exp(-v)),
    "affine": lambda v: alpha * v + beta, "leakyrelu": lambda v: np.where(v >= 0, v, alpha * v),
    "thresholdedrelu": lambda v: np.where(v > alpha, v, 0.0), "scaledtanh": lambda v: alpha * np.tanh(beta * v),
    "hardsigmoid": lambda v: np.clip(alpha * v + beta, 0.0, 1.0),
    "elu": lambda v: np.where(v >= 0, v, alpha * (np.exp(v) - 1.0)), "softsign": lambda v: v / (1.0 + np.abs(v)),
    "softplus": lambda v: np.log1p(np.exp(v))}
  f = functions[key]
  return lambda v: f(np.asarray(v, np.float64)).astype(np.float32)


def _lstm_weights(w: np.ndarray, scale, zero_point, dirs: int, cols: int, what: str) -> tuple:
  """Quantized W or R ([dirs, K, 4h]) as (int64 values minus their zero points, [dirs, 1 or 4h] float32 scales)."""
  _limits(w.dtype)
  if w.ndim != 3 or w.shape[0] != dirs or w.shape[2] != cols:
    raise ValueError(f"DynamicQuantizeLSTM: {what} has shape {w.shape}; [{dirs}, K, {cols}] expected")
  for name, t in ((f"{what}_scale", scale), (f"{what}_zero_point", zero_point)):
    if t is None: raise ValueError(f"DynamicQuantizeLSTM: input {name} is required")
    if np.asarray(t).size not in (dirs, dirs * cols):
      raise ValueError(f"DynamicQuantizeLSTM: {name} has {np.asarray(t).size} values; {dirs} or {dirs * cols}")
  zero = np.asarray(zero_point, np.int64).reshape(dirs, 1, -1)
  return w.astype(np.int64) - zero, np.asarray(scale, np.float32).reshape(dirs, -1)


class DynamicQuantizeLSTM(OpRun):
  """The ONNX LSTM (gates i, o, f, c; peepholes i, o, f; activations f, g, h per direction, default Sigmoid, Tanh,
  Tanh; clip; input_forget: f = 1 - i) with W [dirs, input, 4h] and R [dirs, h, 4h] stored transposed as 8-bit
  integers, their scales and zero points per direction or per direction and gate column. X @ W and H @ R are exact
  integer products of DynamicQuantizeLinear's uint8 values, scaled in float32: X quantized once (the steps up to the
  longest sequence), the previous hidden state at every step (zero for sequences that ended before that step)."""
  op_domain = DOMAIN

  def _run(self, x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None, w_scale=None,
           w_zero_point=None, r_scale=None, r_zero_point=None, activation_alpha=None, activation_beta=None,
           activations=None, clip=None, direction="forward", hidden_size=None, input_forget=0):
    direction = direction.decode() if isinstance(direction, bytes) else direction
    if direction not in ("forward", "reverse", "bidirectional"):
      raise ValueError(f"DynamicQuantizeLSTM: direction {direction!r}")
    dirs = 2 if direction == "bidirectional" else 1
    hidden = int(hidden_size) if hidden_size is not None else r.shape[1]
    h4 = 4 * hidden
    steps, batch, _ = x.shape
    names = list(activations) if activations else ["Sigmoid", "Tanh", "Tanh"] * dirs
    if len(names) != 3 * dirs: raise ValueError(f"DynamicQuantizeLSTM: {len(names)} activations for {dirs} dirs")
    alphas, betas = list(activation_alpha or []), list(activation_beta or [])
    funcs = [_activation(n, alphas, betas) for n in names]
    w_int, w_scales = _lstm_weights(w, w_scale, w_zero_point, dirs, h4, "W")
    r_int, r_scales = _lstm_weights(r, r_scale, r_zero_point, dirs, h4, "R")
    if r.shape[1] != hidden: raise ValueError(f"DynamicQuantizeLSTM: R has shape {r.shape}; hidden size {hidden}")
    bias = np.zeros((dirs, h4), np.float32) if b is None else \
      np.asarray(b, np.float32)[:, :h4] + np.asarray(b, np.float32)[:, h4:]
    lens = np.full(batch, steps, np.int64) if sequence_lens is None else np.asarray(sequence_lens, np.int64)
    h0 = np.zeros((dirs, batch, hidden), np.float32) if initial_h is None else np.asarray(initial_h, np.float32)
    c0 = np.zeros((dirs, batch, hidden), np.float32) if initial_c is None else np.asarray(initial_c, np.float32)
    peep = np.zeros((dirs, 3 * hidden), np.float32) if p is None else np.asarray(p, np.float32)
    longest = int(lens.max(initial=0))
    live = (np.arange(steps)[:, None] < longest)[..., None]
    xq, x_zero, x_scale = dynamic_quantize(x, np.where(live, x, 0.0))
    ys = np.zeros((steps, dirs, batch, hidden), np.float32)
    y_h, y_c = np.zeros((dirs, batch, hidden), np.float32), np.zeros((dirs, batch, hidden), np.float32)
    for d in range(dirs):
      reverse = direction == "reverse" or d == 1
      f, g, hf = funcs[3 * d:3 * d + 3]
      projected = _integer_matmul(xq.astype(np.int64) - x_zero, w_int[d]).astype(np.float32) * (x_scale * w_scales[d])
      h, c = h0[d].copy(), c0[d].copy()
      p_i, p_o, p_f = peep[d, :hidden], peep[d, hidden:2 * hidden], peep[d, 2 * hidden:]
      for t in range(longest):
        running = t < lens                       # the sequences that have a step t
        rows = np.where(running, lens - 1 - t, 0) if reverse else np.full(batch, t)
        xp = projected[rows, np.arange(batch)]
        ranged = h if t == 0 else np.where((lens >= t)[:, None], h, 0.0)
        hq, h_zero, h_scale = dynamic_quantize(h, ranged)
        hp = _integer_matmul(hq.astype(np.int64) - h_zero, r_int[d]).astype(np.float32) * (h_scale * r_scales[d])
        gates = xp + hp + bias[d]
        gi, go, gf, gc = (gates[:, k * hidden:(k + 1) * hidden] for k in range(4))
        gi, gf = gi + p_i * c, gf + p_f * c
        if clip is not None: gi, gf, gc = (np.clip(v, -clip, clip) for v in (gi, gf, gc))
        i = f(gi)
        forget = np.float32(1.0) - i if input_forget else f(gf)
        c_new = forget * c + i * g(gc)
        go = go + p_o * c_new
        if clip is not None: go = np.clip(go, -clip, clip)
        h_new = f(go) * hf(c_new)
        h, c = np.where(running[:, None], h_new, h), np.where(running[:, None], c_new, c)
        ys[rows[running], d, np.arange(batch)[running]] = h_new[running]
      y_h[d], y_c[d] = h, c
    return (ys, y_h, y_c)[:max(1, len(self.onnx_node.output))]


# ---------------------------------------------------------------- onnxruntime's QuantizeLinear, DequantizeLinear
class QuantizeLinear(_CommonQuantizeLinear):
  """The ONNX QuantizeLinear (round half to even, saturation; per tensor or along `axis`, default 1)."""
  op_domain = DOMAIN
  op_schema = None      # not the ONNX operator's schema: only `axis` is an attribute

  def _run(self, x, y_scale, y_zero_point=None, axis=1):
    return super()._run(x, y_scale, y_zero_point, axis=axis)


class DequantizeLinear(DequantizeLinear_21):
  """The ONNX DequantizeLinear ((x - zero_point) * scale; per tensor or along `axis`, default 1)."""
  op_domain = DOMAIN
  op_schema = None

  def _run(self, x, x_scale, x_zero_point=None, axis=1):
    return super()._run(x, x_scale, x_zero_point, axis=axis)


OPERATORS = [QLinearAdd, QLinearMul, QLinearWhere, QLinearSigmoid, QLinearLeakyRelu, QLinearGlobalAveragePool,
             QLinearAveragePool, QLinearConcat, QLinearSoftmax, QGemm, DynamicQuantizeMatMul, MatMulIntegerToFloat,
             DynamicQuantizeLSTM, QuantizeLinear, DequantizeLinear]
