"""Half precision (`--precision f16`): a kernel's float32 arithmetic is done in float16, its accumulations in
float32. Buffers keep their types (a model's inputs, outputs, weights and intermediates are float32 as before), so
the same artifact can also carry float32 kernels for devices without half arithmetic.

The translation is type-directed, from each value to its float16 version (`_Half.of`), rather than a table of
rewrite rules: whether a float32 node becomes float16 depends on where its value goes, not on its own shape:
  LOAD of float32        -> CAST(float16, LOAD)            (the buffer is read as stored)
  CONST float32          -> CONST float16                  (values beyond 65504 become infinities)
  ALU / CAST to float32  -> the same op in float16         (comparisons compare float16 values)
  REDUCE to float32      -> CAST(float16, REDUCE(float32, CAST(float32, body)))   accumulated in float32
  BITCAST to or from float32 keeps its float32 operand (bit patterns are not values)
  STORE of float32       -> STORE(buf, idx, CAST(float32, value))
Index arithmetic, integers, booleans and float64 are untouched. Run after opts (they see the float32 kernel, so both
precisions launch alike), before expansion."""
from __future__ import annotations
from tgc.ir import Ops, UOp, GroupOp, dtypes

F32, F16 = dtypes.float32, dtypes.float16


class _Half:
  def __init__(self):
    self.memo: dict[UOp, UOp] = {}

  def of(self, u: UOp) -> UOp:
    """`u` (a float32 value) computed in float16."""
    if u in self.memo: return self.memo[u]
    if u.op is Ops.CONST: out = UOp.const(F16, u.arg)
    elif u.op is Ops.REDUCE:        # accumulated in float32, each term computed in float16 and widened
      out = UOp(Ops.REDUCE, F32, (self.of(u.src[0]).cast(F32),) + u.src[1:], u.arg).cast(F16)
    elif u.op is Ops.CAST: out = self.arg(u.src[0]).cast(F16)
    elif u.op in GroupOp.ALU: out = u.replace(dtype=F16, src=tuple(self.arg(s) for s in u.src))
    else: out = self.keep(u).cast(F16)          # LOAD, BITCAST: read as stored
    self.memo[u] = out
    return out

  def arg(self, s: UOp) -> UOp:
    """A source of an op that now computes in float16: float32 sources become float16 values."""
    return self.of(s) if s.dtype == F32 else self.keep(s)

  def keep(self, u: UOp) -> UOp:
    """`u` with the same type, its float32 operands translated where they feed float16 arithmetic."""
    key = ("keep", u)
    if key in self.memo: return self.memo[key]
    if u.op is Ops.BITCAST or u.op in (Ops.LOAD, Ops.STORE):
      srcs = tuple(self.full(s) if s.dtype == F32 else self.keep(s) for s in u.src)
    elif u.dtype != F32 and (u.op in GroupOp.ALU or u.op is Ops.CAST) and any(s.dtype == F32 for s in u.src):
      srcs = tuple(self.arg(s) for s in u.src)              # a comparison or a cast of float32 values
    else: srcs = tuple(self.keep(s) if s.dtype != F32 else s for s in u.src)
    out = u.replace(src=srcs) if srcs != u.src else u
    self.memo[key] = out
    return out

  def full(self, u: UOp) -> UOp:
    """A float32 value needed as float32 (a store, a bit pattern): computed values come from their float16
    computation, converted back; values read as stored (loads, their lanes, constants) stay as they are."""
    if u.op in GroupOp.ALU or u.op in (Ops.CAST, Ops.REDUCE): return self.of(u).cast(F32)
    return self.keep(u)


def half_precision(ast: UOp) -> UOp:
  """`ast` (SINK of STOREs) with its float32 arithmetic in float16 and its accumulations in float32."""
  h = _Half()
  stores = []
  for st in ast.src:
    buf, idx, val = st.src[:3]
    value = h.full(val) if val.dtype == F32 else h.keep(val)
    stores.append(st.replace(src=(buf, h.keep(idx), value) + tuple(h.keep(s) for s in st.src[3:])))
  return ast.replace(src=tuple(stores))
