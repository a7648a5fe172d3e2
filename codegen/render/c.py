"""C99 renderer: grid ranges are loops; float16 is stored as 16-bit words and computed in float."""
from __future__ import annotations
from tgc.ir import Ops, UOp, DType, dtypes
from tgc.codegen.render.cstyle import CStyleRenderer

_MATH = ((Ops.EXP2, "exp2"), (Ops.LOG2, "log2"), (Ops.SIN, "sin"), (Ops.SQRT, "sqrt"), (Ops.TRUNC, "trunc"),
         (Ops.POW, "pow"))
HALF_HELPERS = r"""static float tg_h2f(unsigned short h) {
  unsigned int s = (unsigned int)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
  float f;
  if (e == 0) {
    if (m == 0) u = s;
    else { e = 113; while (!(m & 0x400u)) { m <<= 1; e--; } u = s | (e << 23) | ((m & 0x3ffu) << 13); }
  } else if (e == 31) u = s | 0x7f800000u | (m << 13);
  else u = s | ((e + 112) << 23) | (m << 13);
  memcpy(&f, &u, 4);
  return f;
}
static unsigned short tg_f2h(float f) {
  unsigned int u, s, e, m, r;
  memcpy(&u, &f, 4);
  s = (u >> 16) & 0x8000u; e = (u >> 23) & 0xffu; m = u & 0x7fffffu;
  if (e == 0xff) return (unsigned short)(s | 0x7c00u | (m ? 0x200u : 0u));
  if (e > 142) return (unsigned short)(s | 0x7c00u);
  if (e < 113) {
    if (e < 102) return (unsigned short)s;
    m |= 0x800000u; r = 126 - e;
    { unsigned int half = 1u << (r - 1), rem = m & ((1u << r) - 1), q = m >> r;
      if (rem > half || (rem == half && (q & 1u))) q++;
      return (unsigned short)(s | q); }
  }
  r = ((e - 112) << 10) | (m >> 13);
  m &= 0x1fffu;
  if (m > 0x1000u || (m == 0x1000u && (r & 1u))) r++;
  return (unsigned short)(s | r);
}
"""


class CRenderer(CStyleRenderer):
  target = "c"
  types = {dtypes.bool: "int", dtypes.int8: "signed char", dtypes.int16: "short", dtypes.int32: "int",
           dtypes.int64: "long long", dtypes.uint8: "unsigned char", dtypes.uint16: "unsigned short",
           dtypes.uint32: "unsigned int", dtypes.uint64: "unsigned long long", dtypes.float16: "float",
           dtypes.float32: "float", dtypes.float64: "double", dtypes.index: "int"}
  storage_types = {dtypes.bool: "unsigned char", dtypes.float16: "unsigned short"}
  math_fns = {(op, d): name + ("f" if d != dtypes.float64 else "")
              for op, name in _MATH for d in (dtypes.float16, dtypes.float32, dtypes.float64)}

  def prefix(self, program: list[UOp]) -> list[str]:
    out = ["#include <math.h>", "#include <string.h>"]
    if any(u.dtype == dtypes.float16 for u in program): out.append(HALF_HELPERS)
    return out

  def render_load(self, buf, idx, d):
    return f"tg_h2f({buf}[{idx}])" if d == dtypes.float16 else f"{buf}[{idx}]"

  def render_store(self, buf, idx, val, d):
    if d == dtypes.float16: return f"{buf}[{idx}] = tg_f2h({val});"
    if d.is_bool: return f"{buf}[{idx}] = (unsigned char)({val});"
    return f"{buf}[{idx}] = {val};"

  def render_cast(self, x, src, dst):
    if dst == dtypes.float16: return f"tg_h2f(tg_f2h((float)({x})))"
    return super().render_cast(x, src, dst)

  def render_bitcast(self, x: str, src: DType, dst: DType) -> str:
    if src == dtypes.float16 or dst == dtypes.float16:
      if src == dtypes.float16: return f"(({self.type_name(dst)})tg_f2h({x}))"
      return f"tg_h2f((unsigned short)({x}))"
    # a statement expression is not C99: use a union-free memcpy through a compound literal
    return f"(*({self.type_name(dst)}*)memcpy(&(({self.type_name(dst)}){{0}}), &(({self.type_name(src)}){{{x}}}), " \
           f"sizeof({self.type_name(dst)})))"
