"""ONNX handlers for elementwise math, comparisons and logic, casts, reductions, and shape/movement operators.

Each handler maps one node onto lazy Tensor ops. Inputs that set shapes (Reshape's shape, Slice's starts, reduce
axes given as an input, ...) are read with `ctx.const_value`: they must fold to compile-time constants. Ops whose
output shape depends on data (NonZero, Compress's condition, Unique) work only on constants, i.e. when the
importer folds them."""
from __future__ import annotations
import math
from functools import reduce
import numpy as np
from tgc.ir import dtypes
from tgc.frontend.shapes import broadcast_shape, prod
from tgc.frontend.tensor import Tensor
from tgc.frontend import functional
from tgc.frontend.onnx.registry import NodeContext, onnx_op
from tgc.frontend.onnx.dtypes import onnx_dtype, array_to_tensor, host_values, array_dtype
from tgc.frontend.onnx import compose as C


def _x(ctx: NodeContext) -> Tensor: return ctx.inputs[0]
def _dev(ctx: NodeContext) -> str: return ctx.extra.get("device", "numpy")


def _ints(ctx: NodeContext, i: int) -> list[int]:
  return [int(v) for v in np.asarray(ctx.const_value(i)).reshape(-1)]


# ---------------------------------------------------------------- elementwise, one Tensor op each
def _unary(name: str, fn):
  onnx_op(name)(lambda ctx: fn(_x(ctx)))


def _binary(name: str, fn):
  onnx_op(name)(lambda ctx: fn(ctx.inputs[0], ctx.inputs[1]))


_binary("Add", lambda a, b: a + b)
_binary("Sub", lambda a, b: a - b)
_binary("Mul", lambda a, b: a * b)
_binary("BitwiseAnd", lambda a, b: a.bitwise_and(b))
_binary("BitwiseOr", lambda a, b: a.bitwise_or(b))
_binary("BitwiseXor", lambda a, b: a.bitwise_xor(b))
_unary("BitwiseNot", lambda x: x.bitwise_not())
_binary("Equal", lambda a, b: a == b)
_binary("Less", lambda a, b: a < b)
_binary("LessOrEqual", C.less_equal)
_binary("Greater", lambda a, b: a > b)
_binary("GreaterOrEqual", C.greater_equal)
_unary("Not", lambda x: x.logical_not())
_binary("And", lambda a, b: a.logical_and(b))
_binary("Or", lambda a, b: a.logical_or(b))
_binary("Xor", lambda a, b: a.logical_xor(b))
_unary("IsNaN", lambda x: x.isnan())


# ---------------------------------------------------------------- binary arithmetic
@onnx_op("Div")
def _div(ctx):
  a, b = ctx.inputs[0], ctx.inputs[1]
  if a.dtype.is_float: return a / b
  if a.dtype.is_bool: raise ctx.fail("Div on bool tensors")
  return a.idiv(b)


@onnx_op("Pow")
def _pow(ctx):
  x, y = ctx.inputs[0], ctx.inputs[1]
  if x.dtype.is_float: return x.pow(y.cast(x.dtype))
  # integer base: compute in double (exact for the values a test can check), convert like numpy's astype
  r = x.cast(dtypes.float64).pow(y.cast(dtypes.float64))
  return r.cast(x.dtype)


@onnx_op("Mod")
def _mod(ctx):
  a, b = ctx.inputs[0], ctx.inputs[1]
  if a.dtype.is_float: return C.fmod_float(a, b) if ctx.attr("fmod", 0) else C.mod_float(a, b)
  if ctx.attr("fmod", 0): return a.fmod(b)
  return a.mod(b)


@onnx_op("BitShift")
def _bitshift(ctx):
  a, b = ctx.inputs[0], ctx.inputs[1]
  bits = 8 * a.dtype.itemsize
  b = b.cast(a.dtype)
  out_of_range = (b >= bits) if a.dtype.is_unsigned else (b < 0).logical_or(b >= bits)
  safe = out_of_range.where(b.zeros_like(), b)
  if ctx.attr("direction") == "LEFT":
    if a.dtype.is_unsigned: shifted = a.lshift(safe)
    else:
      # shift the bit pattern: a left shift of a negative signed value is undefined in C
      udt = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}[a.dtype.itemsize]
      shifted = a.bitcast(udt).lshift(safe.bitcast(udt)).bitcast(a.dtype)
    return out_of_range.where(a.zeros_like(), shifted)
  fill = a.zeros_like() if a.dtype.is_unsigned else (a < 0).where(a.full_like(-1), a.zeros_like())
  return out_of_range.where(fill, a.rshift(safe))


@onnx_op("Max", "Min", "Sum", "Mean")
def _variadic(ctx):
  xs = [t for t in ctx.inputs if t is not None]
  if ctx.op_type == "Max": return reduce(lambda a, b: a.maximum(b), xs)
  if ctx.op_type == "Min": return reduce(lambda a, b: a.minimum(b), xs)
  s = reduce(lambda a, b: a + b, xs)
  if ctx.op_type == "Sum": return s
  return (s / len(xs)).cast(s.dtype) if s.dtype.is_float else s.idiv(len(xs))


# ---------------------------------------------------------------- selection and value tests
@onnx_op("Where")
def _where(ctx):
  cond, x, y = ctx.inputs[0], ctx.inputs[1], ctx.inputs[2]
  if ctx.is_const(0):
    # a constant condition that picks one side everywhere selects it at compile time
    c = np.asarray(ctx.const_value(0)).astype(bool)
    if c.all() or not c.any():
      shape = broadcast_shape(broadcast_shape(cond.shape, x.shape, "Where"), y.shape, "Where")
      return (x if c.all() else y)._broadcast_to(shape)
  return cond.cast(dtypes.bool).where(x, y)


@onnx_op("IsInf")
def _isinf(ctx):
  x = _x(ctx)
  pos, neg = ctx.attr("detect_positive", 1), ctx.attr("detect_negative", 1)
  if pos and neg: return x.isinf()
  if pos: return x == math.inf
  if neg: return x == -math.inf
  return x.zeros_like(dtypes.bool)


# ---------------------------------------------------------------- unary math
_unary("Neg", lambda x: -x)
_unary("Abs", lambda x: x.abs())
_unary("Sign", lambda x: x.sign())
_unary("Reciprocal", lambda x: x.reciprocal())
_unary("Sqrt", lambda x: x.sqrt())
_unary("Exp", lambda x: x.exp())
_unary("Log", lambda x: x.log())
_unary("Sin", lambda x: x.sin())
_unary("Cos", lambda x: x.cos())
_unary("Tan", lambda x: x.tan())
_unary("Asin", C.asin)
_unary("Acos", C.acos)
_unary("Atan", C.atan)
_unary("Sinh", C.sinh)
_unary("Cosh", C.cosh)
_unary("Asinh", C.asinh)
_unary("Acosh", C.acosh)
_unary("Atanh", C.atanh)
_unary("Erf", lambda x: x.erf() if x.dtype.is_float else x.erf().round().cast(x.dtype))
_unary("Floor", lambda x: x.floor())
_unary("Ceil", lambda x: x.ceil())
_unary("Round", lambda x: x.round())
_unary("Relu", lambda x: x.relu())
_unary("Sigmoid", lambda x: x.sigmoid())
_unary("Tanh", lambda x: x.tanh())
_unary("Softplus", C.softplus)
_unary("Softsign", lambda x: x / (1 + x.abs()))
_unary("Mish", lambda x: x * C.softplus(x).tanh())
_unary("HardSwish", lambda x: x * (x * (1 / 6) + 0.5).maximum(0).minimum(1))
_unary("Identity", lambda x: x)


@onnx_op("LeakyRelu")
def _leaky_relu(ctx):
  x = _x(ctx)
  return (x < 0).where(x * ctx.attr("alpha", 0.01), x)


@onnx_op("PRelu")
def _prelu(ctx):
  x, slope = ctx.inputs[0], ctx.inputs[1]
  return (x < 0).where(x * slope.cast(x.dtype), x)


@onnx_op("Elu")
def _elu(ctx):
  x, alpha = _x(ctx), ctx.attr("alpha", 1.0)
  return (x < 0).where((x.exp() - 1) * alpha, x)


@onnx_op("Selu")
def _selu(ctx):
  x = _x(ctx)
  alpha, gamma = ctx.attr("alpha", 1.67326319217681884765625), ctx.attr("gamma", 1.05070102214813232421875)
  return (x > 0).where(x * gamma, (x.exp() * alpha - alpha) * gamma)


@onnx_op("Celu")
def _celu(ctx):
  x, alpha = _x(ctx), ctx.attr("alpha", 1.0)
  return x.maximum(0) + ((x / alpha).exp() - 1).minimum(0) * alpha


@onnx_op("Gelu")
def _gelu(ctx):
  x = _x(ctx)
  return x.gelu(ctx.attr("approximate", "none")).cast(x.dtype)


@onnx_op("HardSigmoid")
def _hard_sigmoid(ctx):
  x = _x(ctx)
  return (x * ctx.attr("alpha", 0.2) + ctx.attr("beta", 0.5)).maximum(0).minimum(1)


@onnx_op("ThresholdedRelu")
def _thresholded_relu(ctx):
  x = _x(ctx)
  return (x > ctx.attr("alpha", 1.0)).where(x, x.zeros_like())


@onnx_op("Shrink")
def _shrink(ctx):
  x = _x(ctx)
  lambd, bias = ctx.attr("lambd", 0.5), ctx.attr("bias", 0.0)
  if not x.dtype.is_float:
    xf = x.cast(dtypes.float32)
    return (xf < -lambd).where(xf + bias, (xf > lambd).where(xf - bias, xf.zeros_like())).cast(x.dtype)
  return (x < -lambd).where(x + bias, (x > lambd).where(x - bias, x.zeros_like()))


@onnx_op("Swish")
def _swish(ctx):
  x = _x(ctx)
  return x * (x * ctx.attr("alpha", 1.0)).sigmoid()


@onnx_op("Clip")
def _clip(ctx):
  x = _x(ctx)
  if ctx.opset < 11:
    lo, hi = ctx.attr("min", None), ctx.attr("max", None)
    if lo is not None: x = x.maximum(lo)
    if hi is not None: x = x.minimum(hi)
    return x
  lo, hi = ctx.input(1), ctx.input(2)
  if lo is not None: x = x.maximum(lo.reshape(()).cast(x.dtype))
  if hi is not None: x = x.minimum(hi.reshape(()).cast(x.dtype))
  return x


# ---------------------------------------------------------------- casts
@onnx_op("Cast")
def _cast(ctx):
  to = onnx_dtype(ctx.attr("to"), f"node {ctx.name!r} (Cast) attribute 'to'")
  return _cast_to(ctx, _x(ctx), to)


@onnx_op("CastLike")
def _cast_like(ctx):
  return _cast_to(ctx, ctx.inputs[0], ctx.inputs[1].dtype)


def _cast_to(ctx, x: Tensor, to):
  if ctx.attr("round_mode", "up") != "up": raise ctx.fail(f"round_mode {ctx.attr('round_mode')!r} is not supported")
  if to.storage_only and not ctx.attr("saturate", 1): return x.cast(to, saturate=False)
  return x.cast(to)


@onnx_op("BitCast")
def _bitcast(ctx):
  to = onnx_dtype(ctx.attr("to"), f"node {ctx.name!r} (BitCast) attribute 'to'")
  x = _x(ctx)
  if to.storage_only or x.dtype.storage_only: raise ctx.fail("BitCast of low-precision types is not supported")
  if x.dtype.itemsize != to.itemsize: raise ctx.fail(f"BitCast {x.dtype.name} -> {to.name} changes the element size")
  if x.dtype.is_bool or to.is_bool:
    if x.dtype.is_bool and to.is_bool: return x
    return x.cast(to) if x.dtype.is_bool else x.ne(0)
  return x.bitcast(to)


# ---------------------------------------------------------------- reductions
_AXES_INPUT_OPSET = {"ReduceSum": 13}


def _reduce_axes(ctx: NodeContext, x: Tensor):
  """None (all axes) or a tuple of axes; () when noop_with_empty_axes and no axes."""
  if ctx.opset >= _AXES_INPUT_OPSET.get(ctx.op_type, 18) and ctx.input(1) is not None: axes = _ints(ctx, 1)
  elif ctx.opset < _AXES_INPUT_OPSET.get(ctx.op_type, 18): axes = ctx.attr("axes", None)
  else: axes = None
  if not axes: return () if ctx.attr("noop_with_empty_axes", 0) else None
  what = "attribute axes" if ctx.opset < _AXES_INPUT_OPSET.get(ctx.op_type, 18) else "axes (input 1)"
  return tuple(sorted(set(ctx.axes(axes, max(x.ndim, 1), what, unique=False))))


def _reduce(ctx, pre, red, post=None):
  x = _x(ctx)
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
  x = _x(ctx)
  axis = ctx.axis(ctx.attr("axis", 0), max(x.ndim, 1))
  keep = bool(ctx.attr("keepdims", 1))
  last = bool(ctx.attr("select_last_index", 0))
  n = x.shape[axis]
  v = x.flip(axis) if last else x
  idx = v.argmax(axis, keepdim=keep) if ctx.op_type == "ArgMax" else v.argmin(axis, keepdim=keep)
  idx = idx.cast(dtypes.int64)
  return (n - 1 - idx) if last else idx


# ---------------------------------------------------------------- shapes and movement
@onnx_op("Shape")
def _shape(ctx):
  shape = list(_x(ctx).shape)
  r = len(shape)
  start = ctx.attr("start", 0)
  end = ctx.attr("end", r)
  start = min(max(start + r if start < 0 else start, 0), r)
  end = min(max(end + r if end < 0 else end, 0), r)
  return array_to_tensor(np.array(shape[start:end], np.int64).reshape(-1), _dev(ctx))


@onnx_op("Size")
def _size(ctx): return array_to_tensor(np.array(_x(ctx).numel(), np.int64), _dev(ctx))


@onnx_op("Constant")
def _constant(ctx):
  a = ctx.attrs
  if "value" in a: return array_to_tensor(a["value"], _dev(ctx))
  if "sparse_value" in a: return array_to_tensor(a["sparse_value"], _dev(ctx))
  if "value_float" in a: return array_to_tensor(np.array(a["value_float"], np.float32), _dev(ctx))
  if "value_floats" in a: return array_to_tensor(np.array(a["value_floats"], np.float32), _dev(ctx))
  if "value_int" in a: return array_to_tensor(np.array(a["value_int"], np.int64), _dev(ctx))
  if "value_ints" in a: return array_to_tensor(np.array(a["value_ints"], np.int64).reshape(-1), _dev(ctx))
  raise ctx.fail("string constants are not supported" if any(k.startswith("value_string") for k in a)
                 else "no value attribute")


@onnx_op("ConstantOfShape")
def _constant_of_shape(ctx):
  shape = _ints(ctx, 0)
  value = ctx.attr("value", None)
  if value is None: return Tensor.full(tuple(shape), 0.0, dtypes.float32, _dev(ctx))
  dt = array_dtype(value)
  v = host_values(value, dt).reshape(-1)[0].item()
  if dt.storage_only: return Tensor.full(tuple(shape), v, dtypes.float32, _dev(ctx)).cast(dt)
  return Tensor.full(tuple(shape), v, dt, _dev(ctx))


@onnx_op("Reshape")
def _reshape(ctx):
  x = _x(ctx)
  if ctx.opset < 5: shape = list(ctx.attr("shape"))
  else: shape = _ints(ctx, 1)
  allowzero = ctx.attr("allowzero", 0)
  if not allowzero: shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
  return x.reshape(tuple(shape))


@onnx_op("Flatten")
def _flatten(ctx):
  x = _x(ctx)
  axis = int(ctx.attr("axis", 1))
  if not -x.ndim <= axis <= x.ndim:
    raise ctx.fail(f"attribute axis {axis} is out of range for a rank-{x.ndim} input (allowed: {-x.ndim}..{x.ndim})")
  if axis < 0: axis += x.ndim
  return x.reshape(prod(x.shape[:axis]), prod(x.shape[axis:]))


@onnx_op("Transpose")
def _transpose(ctx):
  x = _x(ctx)
  perm = ctx.attr("perm", None)
  return x.permute(tuple(ctx.perm(perm, x.ndim)) if perm is not None else tuple(reversed(range(x.ndim))))


def _axes_what(ctx: NodeContext, opset_input: int) -> str:
  return "axes (input 1)" if ctx.opset >= opset_input else "attribute axes"


def _axes_arg(ctx: NodeContext, opset_input: int):
  if ctx.opset >= opset_input: return _ints(ctx, 1) if ctx.input(1) is not None else None
  return ctx.attr("axes", None)


@onnx_op("Squeeze")
def _squeeze(ctx):
  x = _x(ctx)
  axes = _axes_arg(ctx, 13)
  if axes is None: return x.reshape(tuple(s for s in x.shape if s != 1))
  axes = set(ctx.axes(axes, x.ndim, _axes_what(ctx, 13)))
  for a in axes:
    if x.shape[a] != 1: raise ctx.fail(f"cannot squeeze axis {a} of size {x.shape[a]} (shape {x.shape})")
  return x.reshape(tuple(s for i, s in enumerate(x.shape) if i not in axes))


@onnx_op("Unsqueeze")
def _unsqueeze(ctx):
  x = _x(ctx)
  axes = _axes_arg(ctx, 13) or []
  axes = sorted(ctx.axes(axes, x.ndim, _axes_what(ctx, 13), extra=len(axes)))
  shape = list(x.shape)
  for a in axes: shape.insert(a, 1)
  return x.reshape(tuple(shape))


@onnx_op("Expand")
def _expand(ctx):
  x = _x(ctx)
  shape = broadcast_shape(x.shape, tuple(_ints(ctx, 1)), "Expand")
  return x._broadcast_to(shape)


@onnx_op("Concat")
def _concat(ctx):
  xs = [t for t in ctx.inputs if t is not None]
  axis = ctx.axis(ctx.attr("axis", 0), xs[0].ndim)
  if len(xs) == 1: return xs[0]
  return functional.cat(xs, axis)


@onnx_op("Split")
def _split(ctx):
  x = _x(ctx)
  axis = ctx.axis(ctx.attr("axis", 0), x.ndim)
  n = x.shape[axis]
  if ctx.opset >= 13 and ctx.input(1) is not None: sizes = _ints(ctx, 1)
  elif ctx.opset < 13 and ctx.attr("split", None): sizes = list(ctx.attr("split"))
  else:
    parts = ctx.attr("num_outputs", None) or ctx.num_outputs
    if ctx.attr("num_outputs", None) is not None:
      size = -(-n // parts)
      sizes = [min(size, n - i * size) for i in range(parts)]
    else:
      if n % parts: raise ctx.fail(f"cannot split axis of size {n} into {parts} equal parts")
      sizes = [n // parts] * parts
  if sum(sizes) != n: raise ctx.fail(f"split sizes {sizes} do not add up to {n}")
  out, off = [], 0
  for s in sizes:
    out.append(x.shrink(tuple((off, off + s) if i == axis else None for i in range(x.ndim))))
    off += s
  return out


@onnx_op("Slice")
def _slice(ctx):
  x = _x(ctx)
  if ctx.opset < 10:
    starts, ends = ctx.attr("starts"), ctx.attr("ends")
    axes = ctx.attr("axes", None)
    steps = None
  else:
    starts, ends = _ints(ctx, 1), _ints(ctx, 2)
    axes = _ints(ctx, 3) if ctx.input(3) is not None else None
    steps = _ints(ctx, 4) if ctx.input(4) is not None else None
  axes = list(range(len(starts))) if axes is None else \
    ctx.axes(axes, x.ndim, "attribute axes" if ctx.opset < 10 else "axes (input 3)")
  steps = steps or [1] * len(starts)
  idx = [slice(None)] * x.ndim
  for a, s, e, st in zip(axes, starts, ends, steps):
    if st == 0: raise ctx.fail("slice step cannot be 0")
    idx[a] = slice(s, e, st)
  return functional.getitem(x, tuple(idx))


@onnx_op("Gather")
def _gather(ctx):
  x = ctx.inputs[0]
  axis = ctx.axis(ctx.attr("axis", 0), x.ndim)
  if ctx.is_const(1):
    idx = np.asarray(ctx.const_value(1))
    if idx.size <= 64: return C.take_const(x, axis, idx)
  return C.take(x, axis, ctx.inputs[1])


@onnx_op("GatherElements")
def _gather_elements(ctx):
  x, idx = ctx.inputs[0], ctx.inputs[1]
  return functional.gather(x, ctx.axis(ctx.attr("axis", 0), x.ndim), C.index_int(idx))


@onnx_op("GatherND")
def _gather_nd(ctx):
  return C.gather_nd(ctx.inputs[0], ctx.inputs[1], ctx.attr("batch_dims", 0))


@onnx_op("ScatterElements", "Scatter")
def _scatter_elements(ctx):
  data, idx, upd = ctx.inputs[0], ctx.inputs[1], ctx.inputs[2]
  axis = ctx.axis(ctx.attr("axis", 0), data.ndim)
  return C.scatter_elements(data, idx, upd.cast(data.dtype), axis, ctx.attr("reduction", "none"))


@onnx_op("ScatterND")
def _scatter_nd(ctx):
  data, idx, upd = ctx.inputs[0], ctx.inputs[1], ctx.inputs[2]
  return C.scatter_nd(data, idx, upd.cast(data.dtype), ctx.attr("reduction", "none"))


@onnx_op("Pad")
def _pad(ctx):
  x = _x(ctx)
  mode = ctx.attr("mode", "constant")
  value = None
  if ctx.opset < 11:
    pads = list(ctx.attr("pads", ctx.attr("paddings", [])))
    v = ctx.attr("value", 0.0)
    if v: value = C.scalar(v, x.dtype, x.device)
    axes = list(range(x.ndim))
  else:
    pads = _ints(ctx, 1)
    if ctx.input(2) is not None: value = ctx.inputs[2]
    axes = ctx.axes(_ints(ctx, 3), x.ndim, "axes (input 3)") if ctx.input(3) is not None else list(range(x.ndim))
  if len(pads) != 2 * len(axes): raise ctx.fail(f"pads {pads} do not match {len(axes)} axes")
  pairs = [(0, 0)] * x.ndim
  for k, a in enumerate(axes): pairs[a] = (pads[k], pads[k + len(axes)])
  if mode == "constant":
    return C.pad(x, pairs, "constant", value)
  if mode not in ("reflect", "edge", "wrap"): raise ctx.fail(f"unknown pad mode {mode!r}")
  return C.pad(x, pairs, mode)


@onnx_op("Tile")
def _tile(ctx):
  x = _x(ctx)
  reps = _ints(ctx, 1)
  if len(reps) != x.ndim: raise ctx.fail(f"repeats {reps} do not match rank {x.ndim}")
  if any(r == 0 for r in reps):
    return x.shrink(tuple((0, 0) if r == 0 else None for r in reps)).repeat(tuple(max(r, 1) for r in reps))
  return x.repeat(tuple(reps))


@onnx_op("Range")
def _range(ctx):
  start, limit, delta = (np.asarray(ctx.const_value(i)).reshape(()) for i in range(3))
  dt = ctx.inputs[0].dtype
  n = max(int(math.ceil((float(limit) - float(start)) / float(delta))), 0) if float(delta) else 0
  if n == 0: return Tensor.zeros(0, dtype=dt, device=_dev(ctx))
  i = Tensor.arange(n, dtype=dt if not dt.is_float else dtypes.float64, device=_dev(ctx))
  if dt.is_float: return (i * float(delta) + float(start)).cast(dt)
  return i * int(delta) + int(start)


@onnx_op("OneHot")
def _one_hot(ctx):
  idx, values = ctx.inputs[0], ctx.inputs[2]
  depth = int(np.asarray(ctx.const_value(1)).reshape(-1)[0])
  if idx.dtype.is_float: idx = idx.cast(dtypes.int64)
  off = values.shrink(((0, 1),)).reshape(())
  on = values.shrink(((1, 2),)).reshape(())
  return C.one_hot(idx, depth, ctx.axis(ctx.attr("axis", -1), idx.ndim, extra=1), off, on)


@onnx_op("DepthToSpace")
def _depth_to_space(ctx):
  x = _x(ctx)
  bs = ctx.attr("blocksize")
  b, c, h, w = x.shape
  if ctx.attr("mode", "DCR") == "DCR":
    y = x.reshape(b, bs, bs, c // (bs * bs), h, w).permute(0, 3, 4, 1, 5, 2)
  else:
    y = x.reshape(b, c // (bs * bs), bs, bs, h, w).permute(0, 1, 4, 2, 5, 3)
  return y.reshape(b, c // (bs * bs), h * bs, w * bs)


@onnx_op("SpaceToDepth")
def _space_to_depth(ctx):
  x = _x(ctx)
  bs = ctx.attr("blocksize")
  b, c, h, w = x.shape
  y = x.reshape(b, c, h // bs, bs, w // bs, bs)
  y = y.permute(0, 3, 5, 1, 2, 4) if ctx.attr("mode", "DCR") == "DCR" else y.permute(0, 1, 3, 5, 2, 4)
  return y.reshape(b, c * bs * bs, h // bs, w // bs)


@onnx_op("Trilu")
def _trilu(ctx):
  x = _x(ctx)
  k = 0
  if ctx.input(1) is not None: k = int(np.asarray(ctx.const_value(1)).reshape(-1)[0]) if ctx.is_const(1) else \
    ctx.inputs[1]
  rows, cols = x.shape[-2], x.shape[-1]
  mask = C.triangle_mask(rows, cols, k, bool(ctx.attr("upper", 1)), x.device)
  return mask.where(x, x.zeros_like())


@onnx_op("EyeLike")
def _eye_like(ctx):
  x = _x(ctx)
  dt = onnx_dtype(ctx.attr("dtype"), f"node {ctx.name!r} (EyeLike)") if ctx.attr("dtype") is not None else x.dtype
  rows, cols = x.shape
  k = ctx.attr("k", 0)
  diff = C.arange(cols, x.device).reshape(1, cols) - C.arange(rows, x.device).reshape(rows, 1)
  return (diff == k).cast(dt)


@onnx_op("Compress")
def _compress(ctx):
  x = _x(ctx)
  cond = np.asarray(ctx.const_value(1)).reshape(-1).astype(bool)
  axis = ctx.attr("axis", None)
  if axis is None: x, axis = x.reshape(-1), 0
  axis = ctx.axis(axis, x.ndim)
  idx = np.nonzero(cond[:x.shape[axis]])[0]
  return C.take_const(x, axis, idx)


@onnx_op("NonZero")
def _nonzero(ctx):
  arr = np.asarray(ctx.const_value(0))
  nz = np.array(np.nonzero(arr if arr.ndim else arr.reshape(1)), np.int64).reshape(max(arr.ndim, 1), -1)
  return array_to_tensor(nz, _dev(ctx))


@onnx_op("Unique")
def _unique(ctx):
  arr = np.asarray(ctx.const_value(0))
  dt = ctx.inputs[0].dtype
  axis = ctx.attr("axis", None)
  sorted_ = ctx.attr("sorted", 1)
  if axis is None:
    flat = arr.reshape(-1)
    y, idx, inv, cnt = np.unique(flat, return_index=True, return_inverse=True, return_counts=True)
  else:
    axis = ctx.axis(axis, arr.ndim)
    y, idx, inv, cnt = np.unique(arr, axis=axis, return_index=True, return_inverse=True, return_counts=True)
  inv = inv.reshape(-1)
  if not sorted_:
    order = np.argsort(idx, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    y = np.take(y, order, axis=0 if axis is None else axis)
    idx, cnt, inv = idx[order], cnt[order], rank[inv]
  dev = _dev(ctx)
  return [array_to_tensor(host_values(y, dt), dev, dt)] + [array_to_tensor(v.astype(np.int64), dev)
                                                           for v in (idx, inv, cnt)]


@onnx_op("ReverseSequence")
def _reverse_sequence(ctx):
  x, lens = ctx.inputs[0], ctx.inputs[1]
  bax, tax = ctx.attr("batch_axis", 1), ctx.attr("time_axis", 0)
  if {bax, tax} != {0, 1}: raise ctx.fail(f"batch_axis {bax} and time_axis {tax} must be 0 and 1, one each")
  nb, nt = x.shape[bax], x.shape[tax]
  t = C.arange(nt, x.device).reshape(1, nt)
  lens2 = C.index_int(lens).reshape(nb, 1)
  src = (t < lens2).where(lens2 - 1 - t, t)                     # (nb, nt)
  shape = [1] * x.ndim
  shape[bax], shape[tax] = nb, nt
  src = src if bax < tax else src.permute(1, 0)
  src = src.reshape(tuple(shape))._broadcast_to(x.shape)
  return functional.gather(x, tax, src)


@onnx_op("CenterCropPad")
def _center_crop_pad(ctx):
  x = _x(ctx)
  shape = _ints(ctx, 1)
  axes = ctx.axes(ctx.attr("axes", list(range(x.ndim))), x.ndim)
  for a, target in zip(axes, shape):
    n = x.shape[a]
    if target < n:
      start = (n - target) // 2
      x = x.shrink(tuple((start, start + target) if i == a else None for i in range(x.ndim)))
    elif target > n:
      before = (target - n) // 2
      x = x.pad(tuple((before, target - n - before) if i == a else (0, 0) for i in range(x.ndim)))
  return x


@onnx_op("Det")
def _det(ctx):
  x = _x(ctx)
  return C.det(x).cast(x.dtype)


@onnx_op("TensorScatter")
def _tensor_scatter(ctx):
  """Write `update` into `past_cache` along `axis` at each batch row's write index (circular: modulo the cache
  length); positions the update does not cover keep the cache."""
  past, upd = ctx.inputs[0], ctx.inputs[1]
  axis = ctx.axis(ctx.attr("axis", -2), past.ndim)
  maxlen, seq = past.shape[axis], upd.shape[axis]
  nb = past.shape[0]
  w = C.index_int(ctx.input(2)) if ctx.input(2) is not None else Tensor.zeros(nb, dtype=dtypes.int32,
                                                                               device=past.device)
  shape = [1] * past.ndim
  shape[axis] = maxlen
  p = C.arange(maxlen, past.device).reshape(tuple(shape))
  wshape = [1] * past.ndim
  wshape[0] = nb
  j = p - w.reshape(tuple(wshape))
  if ctx.attr("mode", "linear") == "circular": j = j.mod(maxlen)
  valid = (j >= 0).logical_and(j < seq)
  idx = valid.where(j, j.zeros_like())._broadcast_to(past.shape)
  picked = upd._broadcast_to(past.shape) if seq == 1 else functional.gather(upd, axis, idx)
  return valid._broadcast_to(past.shape).where(picked, past)


@onnx_op("OptionalHasElement")
def _optional_has_element(ctx):
  return Tensor.full((), ctx.input(0) is not None, dtypes.bool, _dev(ctx))


@onnx_op("OptionalGetElement")
def _optional_get_element(ctx):
  if ctx.input(0) is None: raise ctx.fail("the optional input is empty")
  return ctx.inputs[0]


# ---------------------------------------------------------------- ai.onnx.preview.training
def _optimizer_groups(ctx: NodeContext, per: int) -> list[list[Tensor]]:
  rest = ctx.inputs[2:]
  n = len(rest) // per
  return [[rest[i + k * n] for k in range(per)] for i in range(n)]


@onnx_op("ai.onnx.preview.training:Adagrad")
def _adagrad(ctx):
  r, t = ctx.inputs[0].reshape(()), ctx.inputs[1].reshape(())
  decay, eps, norm = ctx.attr("decay_factor", 0.0), ctx.attr("epsilon", 0.0), ctx.attr("norm_coefficient", 0.0)
  xs, hs = [], []
  for x, g, h in _optimizer_groups(ctx, 3):
    rate = r / (t.cast(r.dtype) * decay + 1)
    g_reg = x * norm + g
    h_new = h + g_reg * g_reg
    xs.append((x - rate * g_reg / (h_new.sqrt() + eps)).cast(x.dtype))
    hs.append(h_new.cast(h.dtype))
  return xs + hs


@onnx_op("ai.onnx.preview.training:Momentum")
def _momentum(ctx):
  r, t = ctx.inputs[0].reshape(()), ctx.inputs[1].reshape(())
  alpha, beta, norm = ctx.attr("alpha"), ctx.attr("beta"), ctx.attr("norm_coefficient")
  nesterov = ctx.attr("mode", "standard") == "nesterov"
  xs, vs = [], []
  for x, g, v in _optimizer_groups(ctx, 3):
    g_reg = x * norm + g
    beta_adj = (t > 0).where(C.scalar(beta, g_reg.dtype, x.device), C.scalar(1.0, g_reg.dtype, x.device))
    v_new = v * alpha + g_reg * beta_adj
    step = (g_reg + v_new * alpha) if nesterov else v_new
    xs.append((x - r * step).cast(x.dtype))
    vs.append(v_new.cast(v.dtype))
  return xs + vs


@onnx_op("ai.onnx.preview.training:Adam")
def _adam(ctx):
  r, t = ctx.inputs[0].reshape(()), ctx.inputs[1].reshape(())
  alpha, beta = ctx.attr("alpha", 0.9), ctx.attr("beta", 0.999)
  eps, norm, post = ctx.attr("epsilon", 0.0), ctx.attr("norm_coefficient", 0.0), ctx.attr("norm_coefficient_post", 0.0)
  tf = t.cast(dtypes.float64)
  corr = ((1 - (tf * math.log(beta)).exp()).sqrt() / (1 - (tf * math.log(alpha)).exp())).cast(r.dtype)
  r_adj = (t > 0).where(r * corr, r)
  xs, vs, hs = [], [], []
  for x, g, v, h in _optimizer_groups(ctx, 4):
    g_reg = x * norm + g
    v_new = v * alpha + g_reg * (1 - alpha)
    h_new = h * beta + g_reg * g_reg * (1 - beta)
    x_new = (x - r_adj * (v_new / (h_new.sqrt() + eps))) * (1 - post)
    xs.append(x_new.cast(x.dtype))
    vs.append(v_new.cast(v.dtype))
    hs.append(h_new.cast(h.dtype))
  return xs + vs + hs


@onnx_op("TfIdfVectorizer")
def _tfidf_vectorizer(ctx):
  """N-gram counts over the last axis against the constant pool, as the reference: for every skip distance
  d = 1..max_skip_count+1 and start i, the gram X[i], X[i+d], ... counts when it is in the pool (a unigram
  counts once). Unrolled into comparisons of shifted slices."""
  x = _x(ctx)
  if ctx.attr("pool_strings", None): raise ctx.fail("string pools are not supported")
  pool = [int(v) for v in ctx.attr("pool_int64s", [])]
  counts_at = [int(v) for v in ctx.attr("ngram_counts", [])]
  indexes = [int(v) for v in ctx.attr("ngram_indexes", [])]
  lo, hi, skips = ctx.attr("min_gram_length"), ctx.attr("max_gram_length"), ctx.attr("max_skip_count")
  mode, weights = ctx.attr("mode"), ctx.attr("weights", None)
  grams = []                     # (values, output index)
  gid = 0
  for size, start in enumerate(counts_at, 1):
    end = counts_at[size] if size < len(counts_at) else len(pool)
    for k in range(start, end, size):
      if lo <= size <= hi: grams.append((pool[k:k + size], indexes[gid]))
      gid += 1
  out_size = max(indexes) + 1
  c = x.shape[-1]
  xi = x.cast(dtypes.int64)
  per_index: dict[int, Tensor] = {}
  for values, idx in grams:
    n = len(values)
    for d in range(1, (skips if n > 1 else 0) + 2):
      length = c - (n - 1) * d
      if length <= 0: continue
      hit = None
      for k, v in enumerate(values):
        part = xi.shrink(tuple((k * d, k * d + length) if a == x.ndim - 1 else None for a in range(x.ndim))) == v
        hit = part if hit is None else hit.logical_and(part)
      cnt = hit.cast(dtypes.float32).sum(-1)
      per_index[idx] = cnt if idx not in per_index else per_index[idx] + cnt
  lead = x.shape[:-1]
  zero = Tensor.zeros(*lead, dtype=dtypes.float32, device=x.device)
  cols = [per_index.get(i, zero) for i in range(out_size)]
  tf = Tensor.stack(cols, -1) if cols else Tensor.zeros(*lead, 0, device=x.device)
  w = Tensor(np.asarray(weights, np.float32), device=x.device) if weights else None
  if mode == "TF": return tf
  if mode == "IDF": return (tf > 0).where(w if w is not None else tf.ones_like(), tf.zeros_like())
  if mode == "TFIDF": return tf * w if w is not None else tf
  raise ctx.fail(f"unknown mode {mode!r}")


# ---------------------------------------------------------------- ai.onnx.ml
@onnx_op("ai.onnx.ml:Binarizer")
def _binarizer(ctx):
  x = _x(ctx)
  return (x > ctx.attr("threshold", 0.0)).cast(x.dtype)


@onnx_op("ai.onnx.ml:ArrayFeatureExtractor")
def _array_feature_extractor(ctx):
  x, idx = ctx.inputs[0], ctx.inputs[1]
  if ctx.is_const(1): return C.take_const(x, -1, np.asarray(ctx.const_value(1)).reshape(-1))
  return C.take(x, -1, idx.reshape(-1))


@onnx_op("ai.onnx.ml:TreeEnsemble")
def _tree_ensemble(ctx):
  """Each tree is a constant structure: every leaf's reach condition (the conjunction of the splits on its path)
  becomes a boolean tensor, and leaves add (or min/max) their weight into their target column."""
  x = _x(ctx)
  if x.ndim != 2: raise ctx.fail(f"expects a 2-D input, got {x.shape}")
  a = ctx.attr
  splits = np.asarray(a("nodes_splits")).reshape(-1).astype(np.float64)
  features, modes = a("nodes_featureids"), a("nodes_modes")
  modes = [int(m) for m in np.asarray(modes).reshape(-1)]
  true_ids, false_ids = a("nodes_truenodeids"), a("nodes_falsenodeids")
  true_leaf, false_leaf = a("nodes_trueleafs"), a("nodes_falseleafs")
  targets, weights = a("leaf_targetids"), np.asarray(a("leaf_weights")).reshape(-1).astype(np.float64)
  missing = a("nodes_missing_value_tracks_true", None) or [0] * len(modes)
  members = list(np.asarray(a("membership_values")).reshape(-1)) if a("membership_values", None) is not None else []
  agg, post, n_targets = a("aggregate_function", 1), a("post_transform", 0), a("n_targets")
  if post not in (0, 1, 2): raise ctx.fail(f"post_transform {post} is not supported")
  member_sets: dict[int, list[float]] = {}
  it = iter(members)
  for i, m in enumerate(modes):
    if m == 6:
      vals = []
      for v in it:
        if np.isnan(v): break
        vals.append(float(v))
      member_sets[i] = vals
  n = x.shape[0]
  cols: dict[int, Tensor] = {}

  def condition(i: int) -> Tensor:
    f = x.shrink((None, (features[i], features[i] + 1))).reshape(n)
    v, m = splits[i], modes[i]
    if m == 0: c = C.less_equal(f, float(v))
    elif m == 1: c = f < v
    elif m == 2: c = C.greater_equal(f, float(v))
    elif m == 3: c = f > v
    elif m == 4: c = f == v
    elif m == 5: c = f != v
    elif m == 6:
      c = Tensor.full((n,), False, dtypes.bool, x.device)
      for mv in member_sets[i]: c = c.logical_or(f == mv)
    else: raise ctx.fail(f"unknown node mode {m}")
    return c.logical_or(f.isnan()) if missing[i] else c

  leaves: list[tuple[Tensor, int]] = []      # (reach mask, leaf index)

  def walk(i: int, is_leaf: bool, mask: Tensor, depth: int):
    if depth > 10000: raise ctx.fail("tree too deep")
    if is_leaf:
      leaves.append((mask, i))
      return
    c = condition(i)
    walk(true_ids[i], bool(true_leaf[i]), mask.logical_and(c), depth + 1)
    walk(false_ids[i], bool(false_leaf[i]), mask.logical_and(c.logical_not()), depth + 1)

  roots = a("tree_roots")
  everyone = Tensor.full((n,), True, dtypes.bool, x.device)
  for r in roots:
    if true_leaf[r] and false_leaf[r] and true_ids[r] == false_ids[r]: leaves.append((everyone, true_ids[r]))
    else: walk(r, False, everyone, 0)
  dt = x.dtype
  ident = {0: 0.0, 1: 0.0, 2: math.inf, 3: -math.inf}[agg]
  for mask, leaf in leaves:
    t, w = targets[leaf], float(weights[leaf]) / (len(roots) if agg == 0 else 1)
    contrib = mask.where(C.scalar(w, dt, x.device), C.scalar(ident, dt, x.device))
    if t not in cols: cols[t] = contrib
    elif agg in (0, 1): cols[t] = cols[t] + contrib
    elif agg == 2: cols[t] = cols[t].minimum(contrib)
    else: cols[t] = cols[t].maximum(contrib)
  empty = Tensor.full((n,), 0.0 if agg in (0, 1) else ident, dt, x.device)
  out = Tensor.stack([cols.get(t, empty) for t in range(n_targets)], 1)
  if post == 1: out = out.softmax(1).cast(dt)
  elif post == 2: out = out.sigmoid().cast(dt)
  return out
