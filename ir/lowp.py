"""Conversions between the compute types (float32, int32) and the storage-only low-precision dtypes.

`decode` and `encode` build graphs of elementwise UOps only (CONST, ALU ops, CAST, BITCAST), so every renderer
gets the conversions without target-specific code. The bit-level work is done in uint32/int32 with no wrap-around
and no shift by 32 or more, and floats are only touched by BITCAST and exact operations (an exact int->float CAST
and a multiply by a power of two with a normal result), so results do not depend on denormal flushing, fast-math
or NaN comparison semantics.

The results match ONNX's reference Cast (onnx.reference, ml_dtypes underneath) bit for bit:
  * bfloat16: round to nearest even; NaN -> 0x7fc0 with the input's sign; overflow rounds to +-inf.
  * float8 (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz): round to nearest even, subnormals included.
    saturate=True (ONNX's default): +-inf and finite values beyond the range -> +-max finite; NaN stays NaN.
    saturate=False: out of range -> +-inf for e5m2, NaN for e4m3fn (signed), NaN (0x80) for the fnuz types.
    NaN is 0x7f/0xff (e4m3fn), 0x7e/0xfe (e5m2), 0x80 (fnuz, which also have no -0: a negative zero result is 0).
  * float4e2m1: round to nearest even; always saturates (+-inf -> +-6); NaN -> 0x8 for +NaN, 0x0 for -NaN
    (what ml_dtypes gives; the type has no NaN).
  * int4/uint4/int2/uint2: ONNX Cast keeps the low bits (two's complement wrap); from float it truncates toward
    zero first (NaN and +-inf give 0). QuantizeLinear clips instead: `clip_int` before `encode`.
"""
from __future__ import annotations
from dataclasses import dataclass
import numpy as np
from tgc.ir.dtype import DType, dtypes
from tgc.ir.exec import exec_alu, exec_bitcast, exec_cast
from tgc.ir.ops import GroupOp, Ops
from tgc.ir.uop import UOp


@dataclass(frozen=True)
class FloatFormat:
  """A small binary float layout: sign, `exp_bits` exponent bits with `bias`, `man_bits` mantissa bits."""
  exp_bits: int
  man_bits: int
  bias: int
  max_mag: int                      # bits (sign cleared) of the largest finite value
  nan: tuple[int, int]              # bits encode writes for NaN: (positive input, negative input)
  overflow: tuple[int, int] | None  # bits for out-of-range input with saturate=False; None: always saturates
  nan_kind: str                     # how decode spots NaN/inf: 'ieee', 'all_ones', 'neg_zero' or 'none'
  neg_zero: bool = True             # False for fnuz: a zero result never carries the sign

  @property
  def bits(self) -> int: return 1 + self.exp_bits + self.man_bits


FORMATS: dict[DType, FloatFormat] = {
  dtypes.bfloat16: FloatFormat(8, 7, 127, 0x7f7f, (0x7fc0, 0xffc0), (0x7f80, 0xff80), "ieee"),
  dtypes.float8e4m3fn: FloatFormat(4, 3, 7, 0x7e, (0x7f, 0xff), (0x7f, 0xff), "all_ones"),
  dtypes.float8e4m3fnuz: FloatFormat(4, 3, 8, 0x7f, (0x80, 0x80), (0x80, 0x80), "neg_zero", neg_zero=False),
  dtypes.float8e5m2: FloatFormat(5, 2, 15, 0x7b, (0x7e, 0xfe), (0x7c, 0xfc), "ieee"),
  dtypes.float8e5m2fnuz: FloatFormat(5, 2, 16, 0x7f, (0x80, 0x80), (0x80, 0x80), "neg_zero", neg_zero=False),
  dtypes.float4e2m1: FloatFormat(2, 1, 1, 0x7, (0x8, 0x0), None, "none"),
}

INT_RANGES: dict[DType, tuple[int, int]] = {
  dtypes.int4: (-8, 7), dtypes.uint4: (0, 15), dtypes.int2: (-2, 1), dtypes.uint2: (0, 3),
}

_F32_INF = 0x7f800000
_F32_QNAN = 0x7fc00000


def _u32(v: int) -> UOp: return UOp.const(dtypes.uint32, v)
def _i32(v: int) -> UOp: return UOp.const(dtypes.int32, v)
def _bitcast(x: UOp, dtype: DType) -> UOp: return UOp(Ops.BITCAST, dtype, (x,))
def _alu(op: Ops, a: UOp, b) -> UOp: return a.alu(op, b if isinstance(b, UOp) else a.const_like(b))
def _and(a: UOp, b) -> UOp: return _alu(Ops.AND, a, b)
def _or(a: UOp, b) -> UOp: return _alu(Ops.OR, a, b)
def _xor(a: UOp, b) -> UOp: return _alu(Ops.XOR, a, b)
def _shl(a: UOp, b) -> UOp: return _alu(Ops.SHL, a, b)
def _shr(a: UOp, b) -> UOp: return _alu(Ops.SHR, a, b)
def _min(a: UOp, b: int) -> UOp: return a.lt(b).where(a, a.const_like(b))


def _check(dtype: DType):
  if dtype not in FORMATS and dtype not in INT_RANGES:
    raise ValueError(f"{dtype} is not a storage-only low-precision dtype")


def _mask(dtype: DType) -> int: return (1 << dtype.elem_bits) - 1


# ---------------------------------------------------------------- decode

def decode(bits: UOp, dtype: DType) -> UOp:
  """The value of the `dtype` element whose raw bit pattern is in the low bits of the uint32 `bits` (higher bits
  are ignored): float32 for float types, int32 for integer types (int4/int2 sign-extended)."""
  _check(dtype)
  if bits.dtype != dtypes.uint32: raise TypeError(f"decode wants uint32 bits, got {bits.dtype}")
  b = _and(bits, _mask(dtype))
  if dtype in INT_RANGES:
    if dtype.is_unsigned: return b.cast(dtypes.int32)
    half = 1 << (dtype.elem_bits - 1)
    return _xor(b, half).cast(dtypes.int32) + (-half)
  if dtype == dtypes.bfloat16: return _bitcast(_shl(b, 16), dtypes.float32)
  return _decode_small_float(b, FORMATS[dtype])


def _decode_small_float(b: UOp, f: FloatFormat) -> UOp:
  mag_bits = f.exp_bits + f.man_bits
  sign = _shl(_shr(b, mag_bits), 31)
  mag = _and(b, (1 << mag_bits) - 1)
  # normal: move the fields into place and rebias the exponent (no overflow: mag < 2**7)
  normal = _shl(mag, 23 - f.man_bits) + ((127 - f.bias) << 23)
  # subnormal (exponent field 0): mantissa * 2**(1 - bias - man_bits), exact and normal in float32
  scale = UOp.const(dtypes.float32, 2.0 ** (1 - f.bias - f.man_bits))
  subnormal = _bitcast(mag.cast(dtypes.float32) * scale, dtypes.uint32)
  out = mag.lt(1 << f.man_bits).where(subnormal, normal)
  if f.nan_kind == "ieee":
    top = ((1 << f.exp_bits) - 1) << f.man_bits
    out = mag.eq(top).where(_u32(_F32_INF), out)
    out = _u32(top).lt(mag).where(_u32(_F32_QNAN), out)
  elif f.nan_kind == "all_ones":
    out = mag.eq((1 << mag_bits) - 1).where(_u32(_F32_QNAN), out)
  out = _or(out, sign)
  if f.nan_kind == "neg_zero": out = b.eq(1 << mag_bits).where(_u32(_F32_QNAN), out)
  return _bitcast(out, dtypes.float32)


# ---------------------------------------------------------------- encode

def encode(value: UOp, dtype: DType, saturate: bool = True) -> UOp:
  """The raw bit pattern (low bits of a uint32) of `value` converted to `dtype` as ONNX's Cast does.
  `value` is float32 for float targets and int32 for integer targets (float32 is accepted there too: it is
  truncated toward zero first, NaN and +-inf giving 0). `saturate` is ONNX Cast's attribute: it only changes
  float8 targets (float4e2m1 always saturates; bfloat16 and the integer types never do, ints wrap)."""
  _check(dtype)
  if dtype in INT_RANGES: return _encode_int(value, dtype)
  if value.dtype != dtypes.float32: raise TypeError(f"encode to {dtype} wants float32, got {value.dtype}")
  if dtype == dtypes.bfloat16: return _encode_bfloat16(value)
  return _encode_small_float(value, FORMATS[dtype], saturate)


def clip_int(value: UOp, dtype: DType) -> UOp:
  """`value` (int32) clamped to the range of the integer `dtype`: ONNX QuantizeLinear's (and saturate_cast's)
  clipping. `encode(clip_int(v, d), d)` gives QuantizeLinear's bits; plain `encode` wraps as Cast does."""
  lo, hi = INT_RANGES[dtype]
  if value.dtype != dtypes.int32: raise TypeError(f"clip_int wants int32, got {value.dtype}")
  return _min(value.maximum(lo), hi)


def _encode_int(value: UOp, dtype: DType) -> UOp:
  if value.dtype == dtypes.float32:
    # |x| < 2**31 (exponent field below 127 + 31) casts exactly after truncation; NaN, inf and huge give 0
    exp = _and(_shr(_bitcast(value, dtypes.uint32), 23), 0xff)
    value = exp.lt(127 + 31).where(value, value.const_like(0.0)).cast(dtypes.int32)
  if value.dtype != dtypes.int32: raise TypeError(f"encode to {dtype} wants int32, got {value.dtype}")
  return _and(value, _mask(dtype)).cast(dtypes.uint32)


def _encode_bfloat16(value: UOp) -> UOp:
  u = _bitcast(value, dtypes.uint32)
  a = _and(u, 0x7fffffff)
  rounded = _shr(a + 0x7fff + _and(_shr(a, 16), 1), 16)   # round to nearest even; carries into the exponent
  sign = _and(_shr(u, 16), 0x8000)
  return _u32(_F32_INF).lt(a).where(_or(sign, 0x7fc0), _or(rounded, sign))


def _encode_small_float(value: UOp, f: FloatFormat, saturate: bool) -> UOp:
  u = _bitcast(value, dtypes.uint32)
  negative = _shr(u, 31).eq(1)
  a = _and(u, 0x7fffffff)
  is_nan = _u32(_F32_INF).lt(a)
  shift = 23 - f.man_bits
  # target-normal inputs: round the float32 magnitude to man_bits (ties to even), then rebias the exponent in int32
  rounded = _shr(a + ((1 << (shift - 1)) - 1) + _and(_shr(a, shift), 1), shift)
  normal = rounded.cast(dtypes.int32) + (-((127 - f.bias) << f.man_bits))
  # target-subnormal inputs: shift the mantissa (implicit bit included) right by 1 - bias - man_bits - unbiased
  # exponent, rounding ties to even; shifts are kept in [24 - man_bits, 31] (25 and more give 0)
  exp = _shr(a, 23).cast(dtypes.int32)
  exp = exp.lt(128 - f.bias).where(exp, _i32(127 - f.bias))
  sub_shift = _min((151 - f.bias - f.man_bits) - exp, 31)
  mant = _or(_and(a, 0x7fffff), 0x800000)
  half_minus_1 = _shr(_u32(0x3fffffff), (31 - sub_shift).cast(dtypes.uint32))   # 2**(shift - 1) - 1
  sub_shift = sub_shift.cast(dtypes.uint32)
  subnormal = _shr(mant + half_minus_1 + _and(_shr(mant, sub_shift), 1), sub_shift)
  mag = a.lt((128 - f.bias) << 23).where(subnormal.cast(dtypes.int32), normal)
  overflow = _i32(f.max_mag).lt(mag)
  if saturate or f.overflow is None: mag = overflow.where(_i32(f.max_mag), mag)
  sign_bit = 1 << (f.bits - 1)
  sign = negative.where(_i32(sign_bit), _i32(0))
  if not f.neg_zero: sign = mag.eq(0).where(_i32(0), sign)
  out = _or(mag, sign)
  if not saturate and f.overflow is not None:
    out = overflow.where(negative.where(_i32(f.overflow[1]), _i32(f.overflow[0])), out)
  out = is_nan.where(negative.where(_i32(f.nan[1]), _i32(f.nan[0])), out)
  return out.cast(dtypes.uint32)


# ---------------------------------------------------------------- numpy evaluation of elementwise graphs

def eval_elementwise(root: UOp, env: dict[UOp, np.ndarray]) -> np.ndarray:
  """Evaluate an elementwise UOp graph over numpy arrays with the IR's reference semantics (ir.exec).
  `env` maps the graph's leaves (any UOp) to arrays; CONSTs broadcast."""
  vals: dict[UOp, np.ndarray] = {}
  for u in root.toposort():
    if u in env: vals[u] = np.asarray(env[u]); continue
    srcs = [vals[s] for s in u.src]
    if u.op is Ops.CONST: vals[u] = np.array(u.arg).astype(u.dtype.numpy)
    elif u.op is Ops.CAST: vals[u] = exec_cast(srcs[0], u.dtype)
    elif u.op is Ops.BITCAST: vals[u] = exec_bitcast(srcs[0], u.dtype)
    elif u.op in GroupOp.ALU: vals[u] = exec_alu(u.op, u.dtype, *srcs)
    else: raise ValueError(f"eval_elementwise: {u.op} is not elementwise and has no value in env")
  return vals[root]


# ---------------------------------------------------------------- host-side storage layout

def per_word(dtype: DType) -> int:
  """Elements per storage word: 1 for 8/16-bit types, 2 (4-bit) or 4 (2-bit) per byte for packed types."""
  return 8 // dtype.elem_bits if dtype.elem_bits < 8 else 1


def storage_nbytes(dtype: DType, numel: int) -> int:
  k = per_word(dtype)
  return -(-numel // k) * dtype.itemsize


def pack(bits: np.ndarray, dtype: DType) -> np.ndarray:
  """Element bit patterns (any int array) -> the flat storage array (sub-byte types packed low nibble first)."""
  flat = np.asarray(bits).reshape(-1).astype(np.uint32) & ((1 << dtype.elem_bits) - 1)
  k = per_word(dtype)
  if k == 1: return flat.astype(dtype.np)
  flat = np.concatenate([flat, np.zeros((-len(flat)) % k, np.uint32)]).reshape(-1, k)
  out = np.zeros(len(flat), np.uint32)
  for i in range(k): out |= flat[:, i] << (i * dtype.elem_bits)
  return out.astype(np.uint8)


def unpack(storage: np.ndarray, dtype: DType, shape) -> np.ndarray:
  """The flat storage array -> uint32 element bit patterns of `shape`."""
  n = int(np.prod(shape))
  raw = np.asarray(storage).reshape(-1).view(dtype.np).astype(np.uint32)
  k = per_word(dtype)
  if k > 1:
    raw = np.stack([(raw >> (i * dtype.elem_bits)) & ((1 << dtype.elem_bits) - 1) for i in range(k)], 1).reshape(-1)
  return raw[:n].reshape(shape)


def value_numpy(dtype: DType) -> np.dtype:
  """The numpy dtype that holds every value of a storage-only dtype exactly (what users read and write for it):
  float32 for the float types, int8 for int4/int2, uint8 for uint4/uint2."""
  _check(dtype)
  if dtype in INT_RANGES: return np.dtype(np.uint8 if dtype.is_unsigned else np.int8)
  return np.dtype(np.float32)


def encode_array(values: np.ndarray, dtype: DType, saturate: bool = True) -> np.ndarray:
  """numpy values (floats, or ints for integer types) -> uint32 bit patterns, as `encode` computes them."""
  src = dtypes.float32 if dtype.is_float or np.asarray(values).dtype.kind == 'f' else dtypes.int32
  leaf = UOp(Ops.DEFINE_GLOBAL, src, (), ("host", 0))
  return eval_elementwise(encode(leaf, dtype, saturate), {leaf: np.asarray(values).astype(src.numpy)})


def decode_array(bits: np.ndarray, dtype: DType) -> np.ndarray:
  leaf = UOp(Ops.DEFINE_GLOBAL, dtypes.uint32, (), ("host", 1))
  return eval_elementwise(decode(leaf, dtype), {leaf: np.asarray(bits).astype(np.uint32)})
