"""What every elementwise op computes, in numpy: the semantics the renderers must reproduce.
Used for constant folding and by the numpy interpreter (the independent reference)."""
from __future__ import annotations
import numpy as np
from tgc.ir.dtype import DType
from tgc.ir.ops import Ops


def _tdiv(a, b):
  """C integer division: truncates toward zero; x/0 gives 0 (defined here so folding never raises)."""
  with np.errstate(divide="ignore", invalid="ignore"):
    bz = b == 0
    q = np.abs(a) // np.where(bz, 1, np.abs(b))
    return np.where(bz, 0, np.where((a < 0) != (b < 0), -q, q)).astype(np.result_type(a, b))


def _tmod(a, b):
  """C remainder: takes the sign of the dividend."""
  bz = b == 0
  return np.where(bz, 0, a - _tdiv(a, b) * np.where(bz, 0, b)).astype(np.result_type(a, b))


def _shift_amount(b, a):
  return np.asarray(b).astype(np.int64) % (np.asarray(a).dtype.itemsize * 8)


_UNARY = {
  Ops.NEG: lambda a: np.negative(a) if a.dtype != np.bool_ else np.logical_not(a),
  Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.SIN: np.sin, Ops.SQRT: np.sqrt, Ops.TRUNC: np.trunc, Ops.RINT: np.rint,
  Ops.RECIP: lambda a: np.reciprocal(a.astype(a.dtype)),
}
_BINARY = {
  Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply, Ops.FDIV: np.divide, Ops.IDIV: _tdiv, Ops.MOD: _tmod,
  Ops.MAX: np.maximum, Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal, Ops.CMPEQ: np.equal,
  Ops.AND: lambda a, b: np.logical_and(a, b) if a.dtype == np.bool_ else np.bitwise_and(a, b),
  Ops.OR: lambda a, b: np.logical_or(a, b) if a.dtype == np.bool_ else np.bitwise_or(a, b),
  Ops.XOR: lambda a, b: np.logical_xor(a, b) if a.dtype == np.bool_ else np.bitwise_xor(a, b),
  Ops.SHL: lambda a, b: np.left_shift(a, _shift_amount(b, a).astype(a.dtype)),
  Ops.SHR: lambda a, b: np.right_shift(a, _shift_amount(b, a).astype(a.dtype)),
  Ops.POW: np.power,
}


def exec_alu(op: Ops, dtype: DType, *srcs):
  """Apply `op` to numpy arrays (or scalars) and return the result in `dtype`'s numpy type."""
  srcs = tuple(np.asarray(s) for s in srcs)
  with np.errstate(all="ignore"):
    if op in _UNARY: out = _UNARY[op](srcs[0])
    elif op in _BINARY: out = _BINARY[op](*srcs)
    elif op is Ops.WHERE: out = np.where(srcs[0], srcs[1], srcs[2])
    elif op is Ops.MULACC: out = srcs[0] * srcs[1] + srcs[2]
    else: raise ValueError(f"exec_alu: {op} is not elementwise")
    return np.asarray(out).astype(dtype.numpy, copy=False)


def exec_cast(x, dtype: DType):
  """CAST semantics: float->int truncates (out-of-range is undefined in C; we saturate nothing), ->bool is x != 0."""
  x = np.asarray(x)
  with np.errstate(all="ignore"):
    if dtype.is_bool: return x != 0
    if dtype.is_int and x.dtype.kind == 'f':
      x = np.trunc(np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0))
      return x.astype(np.int64).astype(dtype.numpy) if dtype.itemsize < 8 or not dtype.is_unsigned else x.astype(
        dtype.numpy)
    return x.astype(dtype.numpy)


def exec_bitcast(x, dtype: DType):
  """BITCAST semantics: reinterpret each element's bits as `dtype` (same item size; numpy `.view`)."""
  x = np.asarray(x)
  if x.dtype.itemsize != dtype.numpy.itemsize:
    raise ValueError(f"exec_bitcast: {x.dtype} and {dtype} differ in size")
  return (x if x.flags.c_contiguous else x.copy()).view(dtype.numpy)
