"""Storage-only dtypes inside kernels: values of bfloat16, float8, int4, float4e2m1, int2 ... are carried as their
bit patterns (uint32) and converted with the elementwise graphs of `ir.lowp`, so every renderer handles them with
ordinary ops. Packed sub-byte buffers are read as (byte >> shift) & mask; they are written a whole byte per
work-item by `pack_store` (the scheduler builds such kernels over bytes)."""
from __future__ import annotations
from tgc.ir import Ops, UOp, dtypes, DType, PatternMatcher, UPat, graph_rewrite
from tgc.ir.lowp import decode, encode, encode_array, per_word

U32 = dtypes.uint32


def storage_word(d: DType) -> DType: return dtypes.from_numpy(d.np)


def to_bits(u: UOp) -> UOp:
  """The uint32 bit pattern of a storage-only-typed value."""
  d = u.dtype
  if u.op is Ops.LOAD:
    buf, idx = u.src[0], u.src[1]
    k = per_word(d)
    word_idx = idx if k == 1 else idx // k
    word = UOp(Ops.LOAD, storage_word(d), (buf, word_idx) + u.src[2:]).cast(U32)
    if k == 1: return word
    shift = ((idx % k) * d.elem_bits).cast(U32)
    return word.alu(Ops.SHR, shift).alu(Ops.AND, UOp.const(U32, (1 << d.elem_bits) - 1))
  if u.op is Ops.CONST: return UOp.const(U32, int(encode_array([u.arg], d)[0]))
  if u.op is Ops.WHERE: return UOp(Ops.WHERE, U32, (u.src[0], to_bits(u.src[1]), to_bits(u.src[2])))
  if u.op is Ops.CAST:
    x = u.src[0]
    saturate = u.arg is not False
    if x.dtype.storage_only: x = decode(to_bits(x), x.dtype)
    src = dtypes.float32 if (d.is_float or x.dtype.is_float) else dtypes.int32
    return encode(x.cast(src), d, saturate)
  raise TypeError(f"no bit pattern for {u.op.name} of {d.name}")


def _decode_cast(c: UOp, x: UOp) -> UOp | None:
  if not x.dtype.storage_only or c.dtype.storage_only: return None
  return decode(to_bits(x), x.dtype).cast(c.dtype)


def _store_bits(st: UOp) -> UOp | None:
  buf, idx, val = st.src[:3]
  if not buf.dtype.storage_only or val.dtype == storage_word(buf.dtype) or per_word(buf.dtype) > 1: return None
  return st.replace(src=(buf, idx, to_bits(val).cast(storage_word(buf.dtype))) + st.src[3:])


storage_types = PatternMatcher([
  # CAST(x: bfloat16/float8/int4... -> float32/int32...) -> decode(bits of x)
  (UPat(Ops.CAST, name="c", src=(UPat.var("x"),)), _decode_cast),
  # STORE(buf: storage-only, idx, v) -> store v's bit pattern as the storage word
  (UPat(Ops.STORE, name="st"), _store_bits),
])


def lower_storage_types(ast: UOp) -> UOp:
  return graph_rewrite(ast, storage_types)


def pack_store(out_arg: UOp, byte_idx: UOp, values: list[UOp]) -> UOp:
  """STORE of one packed byte from the values of its elements (low bits first)."""
  d = out_arg.dtype
  word = None
  for i, v in enumerate(values):
    b = to_bits(v)
    if i: b = b.alu(Ops.SHL, UOp.const(U32, i * d.elem_bits))
    word = b if word is None else word.alu(Ops.OR, b)
  return UOp(Ops.STORE, dtypes.bool, (out_arg, byte_idx, word.cast(dtypes.uint8)))
