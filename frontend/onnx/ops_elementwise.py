"""ONNX elementwise operators: arithmetic, comparisons and logic, bitwise ops, unary math, activations, Clip,
Where, IsInf, and the casts (Cast, CastLike, BitCast). Most are one Tensor op each, registered from a table."""
from __future__ import annotations
import math
import operator
from functools import reduce
import numpy as np
from tgc.ir import dtypes
from tgc.frontend.shapes import broadcast_shape
from tgc.frontend.tensor import Tensor
from tgc.frontend.onnx.registry import onnx_op
from tgc.frontend.onnx.dtypes import onnx_dtype
from tgc.frontend.onnx import compose as C
from tgc.frontend.onnx.node_helpers import first_input


# ---------------------------------------------------------------- one Tensor op each: sums, comparisons, logic
def _unary(name: str, fn):
  onnx_op(name)(lambda ctx: fn(first_input(ctx)))


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
  x = first_input(ctx)
  pos, neg = ctx.attr("detect_positive", 1), ctx.attr("detect_negative", 1)
  if pos and neg: return x.isinf()
  if pos: return x == math.inf
  if neg: return x == -math.inf
  return x.zeros_like(dtypes.bool)


# ---------------------------------------------------------------- unary math and activations
# operators that are one Tensor method of the same meaning: ONNX name -> method
_METHODS = {"Abs": "abs", "Sign": "sign", "Reciprocal": "reciprocal", "Sqrt": "sqrt", "Exp": "exp", "Log": "log",
            "Sin": "sin", "Cos": "cos", "Tan": "tan", "Floor": "floor", "Ceil": "ceil", "Round": "round",
            "Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh"}
for _name, _method in _METHODS.items(): _unary(_name, operator.methodcaller(_method))
# operators composed from Tensor ops (compose.py)
for _name, _fn in (("Asin", C.asin), ("Acos", C.acos), ("Atan", C.atan), ("Sinh", C.sinh), ("Cosh", C.cosh),
                   ("Asinh", C.asinh), ("Acosh", C.acosh), ("Atanh", C.atanh), ("Softplus", C.softplus)):
  _unary(_name, _fn)
_unary("Neg", lambda x: -x)
_unary("Erf", lambda x: x.erf() if x.dtype.is_float else x.erf().round().cast(x.dtype))
_unary("Softsign", lambda x: x / (1 + x.abs()))
_unary("Mish", lambda x: x * C.softplus(x).tanh())
_unary("HardSwish", lambda x: x * (x * (1 / 6) + 0.5).maximum(0).minimum(1))
_unary("Identity", lambda x: x)


@onnx_op("LeakyRelu")
def _leaky_relu(ctx):
  x = first_input(ctx)
  return (x < 0).where(x * ctx.attr("alpha", 0.01), x)


@onnx_op("PRelu")
def _prelu(ctx):
  x, slope = ctx.inputs[0], ctx.inputs[1]
  return (x < 0).where(x * slope.cast(x.dtype), x)


@onnx_op("Elu")
def _elu(ctx):
  x, alpha = first_input(ctx), ctx.attr("alpha", 1.0)
  return (x < 0).where((x.exp() - 1) * alpha, x)


@onnx_op("Selu")
def _selu(ctx):
  x = first_input(ctx)
  alpha, gamma = ctx.attr("alpha", 1.67326319217681884765625), ctx.attr("gamma", 1.05070102214813232421875)
  return (x > 0).where(x * gamma, (x.exp() * alpha - alpha) * gamma)


@onnx_op("Celu")
def _celu(ctx):
  x, alpha = first_input(ctx), ctx.attr("alpha", 1.0)
  return x.maximum(0) + ((x / alpha).exp() - 1).minimum(0) * alpha


@onnx_op("Gelu")
def _gelu(ctx):
  x = first_input(ctx)
  return x.gelu(ctx.attr("approximate", "none")).cast(x.dtype)


@onnx_op("HardSigmoid")
def _hard_sigmoid(ctx):
  x = first_input(ctx)
  return (x * ctx.attr("alpha", 0.2) + ctx.attr("beta", 0.5)).maximum(0).minimum(1)


@onnx_op("ThresholdedRelu")
def _thresholded_relu(ctx):
  x = first_input(ctx)
  return (x > ctx.attr("alpha", 1.0)).where(x, x.zeros_like())


@onnx_op("Shrink")
def _shrink(ctx):
  x = first_input(ctx)
  lambd, bias = ctx.attr("lambd", 0.5), ctx.attr("bias", 0.0)
  if not x.dtype.is_float:
    xf = x.cast(dtypes.float32)
    return (xf < -lambd).where(xf + bias, (xf > lambd).where(xf - bias, xf.zeros_like())).cast(x.dtype)
  return (x < -lambd).where(x + bias, (x > lambd).where(x - bias, x.zeros_like()))


@onnx_op("Swish")
def _swish(ctx):
  x = first_input(ctx)
  return x * (x * ctx.attr("alpha", 1.0)).sigmoid()


@onnx_op("Clip")
def _clip(ctx):
  x = first_input(ctx)
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
  return _cast_to(ctx, first_input(ctx), to)


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
  x = first_input(ctx)
  if to.storage_only or x.dtype.storage_only: raise ctx.fail("BitCast of low-precision types is not supported")
  if x.dtype.itemsize != to.itemsize: raise ctx.fail(f"BitCast {x.dtype.name} -> {to.name} changes the element size")
  if x.dtype.is_bool or to.is_bool:
    if x.dtype.is_bool and to.is_bool: return x
    return x.cast(to) if x.dtype.is_bool else x.ne(0)
  return x.bitcast(to)
