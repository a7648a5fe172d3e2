"""C99 renderer: grid ranges are loops; float16 is stored as 16-bit words and computed in float.

Vectors are GCC/Clang vector extensions (`float __attribute__((vector_size(32)))`: the compiler emits AVX2, AVX-512
or NEON for them as the -march flags allow), which the prelude allows (`TG_SIMD`) unless `TG_NO_SIMD` is set or the
compiler is neither GCC nor Clang; kernels with vector types then stop with an `#error` naming the `generic` CPU level,
whose kernels have none (one lane: plain C99 for any compiler). The prelude also lets both compilers fuse
multiplies and adds (FMA), and keeps gcc quiet about the ABI of vector arguments wider than the -march flags allow
(only static helpers take them; gcc warns at the end of the file, so that stays off); the floating-point options are
pushed, and `SIMD_POSTLUDE` pops them where the kernels end, so the functions a caller sees keep the compiler's own.
Kernels are declared `TG_KERNEL void name(...)`: model.c defines TG_KERNEL as `static`.
Every kernel takes, after its buffers, `tg_lo` and `tg_hi`: it runs iterations [tg_lo, tg_hi) of its outermost
output loop (the task loop; lowering folds small outer loops into it), so a thread pool can split it; a kernel
without output loops runs when tg_lo < tg_hi. Vector loads and stores go through may_alias types of 4-byte alignment
(any element address is fine); comparisons give masks of 32-bit integers (-1 or 0), selects are bitwise. Only 32-bit
lanes are vector ops (`vectorize` does the rest lane by lane); exp2 on vectors is a polynomial (`_exp2_helper`).
Integer dot products (DOT: codegen/dot.py) are the CPU level's intrinsics, from <immintrin.h> or <arm_neon.h>."""
from __future__ import annotations
from tgc.ir import Ops, UOp, DType, dtypes
from tgc.codegen.registry import TargetSpec
from tgc.codegen.render.cstyle import CStyleRenderer, number_side, zero_rows

_MATH = ((Ops.EXP2, "exp2"), (Ops.LOG2, "log2"), (Ops.SIN, "sin"), (Ops.SQRT, "sqrt"), (Ops.TRUNC, "trunc"),
         (Ops.RINT, "rint"), (Ops.POW, "pow"))
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
SIMD_PRELUDE = """#ifndef TG_KERNEL
#define TG_KERNEL
#endif
#if !defined(TG_NO_SIMD) && (defined(__GNUC__) || defined(__clang__))
#define TG_SIMD 1
#else
#define TG_SIMD 0
#endif
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpsabi"
#pragma float_control(push)
#pragma clang fp contract(fast)
#elif defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpsabi"
#pragma GCC push_options
#pragma GCC optimize("fp-contract=fast")
#endif"""
# where the kernels end (model.c: after them and their launch glue): the floating-point options as they were before
SIMD_POSTLUDE = """#if defined(__clang__)
#pragma float_control(pop)
#elif defined(__GNUC__)
#pragma GCC pop_options
#endif"""
# kernels with vector types (every CPU level but `generic`) need GCC or Clang; the plain C of `generic` does not
NEEDS_SIMD = """#if !TG_SIMD
#error "the kernels use GCC/Clang vector extensions: build with gcc or clang, or compile the model --cpu generic"
#endif"""
_VEC_NAMES = {dtypes.float32: "f32", dtypes.int32: "i32", dtypes.uint32: "u32", dtypes.index: "i32", dtypes.bool: "i32",
              dtypes.int8: "i8", dtypes.uint8: "u8", dtypes.int16: "i16", dtypes.uint16: "u16"}
_VEC_C = {"f32": ("float", 4), "i32": ("int", 4), "u32": ("unsigned int", 4), "i8": ("signed char", 1),
          "u8": ("unsigned char", 1), "i16": ("short", 2), "u16": ("unsigned short", 2)}
_CMP = {Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.CMPEQ: "=="}
# integer dot products by CPU level (Target.cpu.dot): the header, then per vector bytes the integer type and the
# function's prefix (x86: __m128i/_mm, __m256i/_mm256, __m512i/_mm512; Arm: 16-byte NEON only)
_DOT_HEADER = {"madd4": "immintrin.h", "vnni": "immintrin.h", "sdot": "arm_neon.h"}
_X86_VECTORS = {16: ("__m128i", "_mm"), 32: ("__m256i", "_mm256"), 64: ("__m512i", "_mm512")}


def _madd4_helper(nbytes: int) -> str:
  """VNNI's dot product (four uint8 x int8 per 32-bit lane, added to acc) in two pmaddwd: the even and the odd bytes
  of each 16-bit half, zero-extended (a) and sign-extended (b) to int16, pairs (0, 2) and (1, 3)."""
  m, fn = _X86_VECTORS[nbytes]
  return (f"#if TG_SIMD\nstatic inline {m} tg_dot4{fn}({m} acc, {m} a, {m} b) {{\n"
          f"  {m} even = {fn}_madd_epi16({fn}_and_si{nbytes * 8}(a, {fn}_set1_epi16(255)), "
          f"{fn}_srai_epi16({fn}_slli_epi16(b, 8), 8));\n"
          f"  {m} odd = {fn}_madd_epi16({fn}_srli_epi16(a, 8), {fn}_srai_epi16(b, 8));\n"
          f"  return {fn}_add_epi32(acc, {fn}_add_epi32(even, odd));\n}}\n#endif")


def _madd8_helper(nbytes: int) -> str:
  """Two groups of four uint8 x int8 per 32-bit lane (a0 with b0, a1 with b1), added to acc, in pmaddubsw, exactly:
  each a is split into its high six bits h and low two l (a = 4h + l), so that no pair of products pmaddubsw adds
  into int16 saturates (|h0*b0 + h0'*b0'| + |h1*b1 + h1'*b1'| <= 4 * 63 * 128 < 32768; the l sums 16x smaller); two
  pmaddwd widen the h sum (times 4) and the l sum into the int32 lanes. Five instructions per 32 products, where
  `tg_dot4` spends four and unpacks the weights (`dot.shares_one_integer` says where this pays)."""
  m, fn = _X86_VECTORS[nbytes]
  bits = nbytes * 8
  split = "".join(f"  {m} h{i} = {fn}_and_si{bits}({fn}_srli_epi16(a{i}, 2), {fn}_set1_epi8(63)), "
                  f"l{i} = {fn}_and_si{bits}(a{i}, {fn}_set1_epi8(3));\n" for i in range(2))
  return (f"#if TG_SIMD\nstatic inline {m} tg_dot8{fn}({m} acc, {m} a0, {m} b0, {m} a1, {m} b1) {{\n{split}"
          f"  {m} h = {fn}_add_epi16({fn}_maddubs_epi16(h0, b0), {fn}_maddubs_epi16(h1, b1));\n"
          f"  {m} l = {fn}_add_epi16({fn}_maddubs_epi16(l0, b0), {fn}_maddubs_epi16(l1, b1));\n"
          f"  return {fn}_add_epi32(acc, {fn}_add_epi32({fn}_madd_epi16(h, {fn}_set1_epi16(4)), "
          f"{fn}_madd_epi16(l, {fn}_set1_epi16(1))));\n}}\n#endif")


# masked loads and stores of 32-bit lanes by vector bytes: the macro that allows them, the load of `p` under mask
# `m`, the store of `x` (AVX: the mask is the integer vector itself, its sign bits; AVX-512: a mask register of the
# lanes that are not 0)
_AVX512_MASK = "_mm512_cmpneq_epi32_mask((__m512i)m, _mm512_setzero_si512())"
_MASKED_X86 = {
  16: ("defined(__AVX__)", "_mm_maskload_ps((const float *)p, (__m128i)m)",
       "_mm_maskstore_ps((float *)p, (__m128i)m, (__m128)x)"),
  32: ("defined(__AVX__)", "_mm256_maskload_ps((const float *)p, (__m256i)m)",
       "_mm256_maskstore_ps((float *)p, (__m256i)m, (__m256)x)"),
  64: ("defined(__AVX512F__)", f"_mm512_maskz_loadu_ps({_AVX512_MASK}, p)",
       f"_mm512_mask_storeu_ps(p, {_AVX512_MASK}, (__m512)x)")}
# where a masked access is one instruction (the helpers' fast paths)
MASKED_INCLUDE = "#if TG_SIMD && (defined(__AVX__) || defined(__AVX512F__))\n#include <immintrin.h>\n#endif"


def vector_type(d: DType) -> str:
  """The C name of a vector type: 32-bit lanes (bool vectors are masks of int32), or 8- and 16-bit integers (only
  loaded, converted and stored)."""
  return f"tg_{_VEC_NAMES[d.scalar]}x{d.count}"


# ops on each lane of a float32 vector done in one instruction where the CPU has it, by op and vector bytes: (the
# macro that allows it, its header, the call); elsewhere the helper calls the C function lane by lane
_NEAREST = "_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC"
_LANEWISE = {
  Ops.SQRT: ("sqrt", "sqrtf", {16: (("defined(__aarch64__)", "arm_neon.h", "vsqrtq_f32((float32x4_t)x)"),
                                    ("defined(__SSE__)", "immintrin.h", "_mm_sqrt_ps((__m128)x)")),
                               32: (("defined(__AVX__)", "immintrin.h", "_mm256_sqrt_ps((__m256)x)"),),
                               64: (("defined(__AVX512F__)", "immintrin.h", "_mm512_sqrt_ps((__m512)x)"),)}),
  Ops.RINT: ("rint", "rintf", {16: (("defined(__aarch64__)", "arm_neon.h", "vrndnq_f32((float32x4_t)x)"),
                                    ("defined(__SSE4_1__)", "immintrin.h", f"_mm_round_ps((__m128)x, {_NEAREST})")),
                               32: (("defined(__AVX__)", "immintrin.h", f"_mm256_round_ps((__m256)x, {_NEAREST})"),),
                               64: (("defined(__AVX512F__)", "immintrin.h",
                                     f"_mm512_roundscale_ps((__m512)x, {_NEAREST})"),)})}


def _lanewise_helper(op: Ops, lanes: int) -> str:
  """`op` (`_LANEWISE`: a square root, a rounding to the nearest even integer) of each lane of a float32 vector,
  exactly as the C function gives it: one instruction where the CPU has it, else lane by lane. Lane by lane, a
  compiler keeps each sqrtf's errno (a call for a negative lane) and writes no vector instruction: an LRN's x ** 0.75
  took 16 scalar square roots per vector of 8; each int8 output's rintf took an extract, a round and an insert."""
  name, scalar_fn, by_bytes = _LANEWISE[op]
  f, ways = f"tg_f32x{lanes}", by_bytes[4 * lanes]
  headers = "".join(f"#{'if' if n == 0 else 'elif'} {cond}\n#include <{h}>\n" for n, (cond, h, _) in enumerate(ways))
  calls = "".join(f"#{'if' if n == 0 else 'elif'} {cond}\n  return ({f}){call};\n"
                  for n, (cond, _, call) in enumerate(ways))
  return (f"#if TG_SIMD\n{headers}#endif\nstatic inline {f} tg_{name}_{f[3:]}({f} x) {{\n{calls}#else\n  {f} r;\n"
          f"  for (int i = 0; i < {lanes}; i++) r[i] = {scalar_fn}(x[i]);\n  return r;\n#endif\n}}\n#endif")


def _exp2_helper(lanes: int) -> str:
  """2^x on float32 vectors: x = n + f (n an integer, |f| <= 1/2), 2^f by its Taylor polynomial of degree 7 (error
  below 3e-9, under float rounding), 2^n as two exponent scalings so results down into the subnormal range get one
  rounding; x is clamped to [-252, 254] (0 and inf beyond), NaN propagates."""
  f, i = f"tg_f32x{lanes}", f"tg_i32x{lanes}"
  coefs = ["1.525273380405984e-05f", "0.00015403530393381606f", "0.0013333558146428443f", "0.009618129107628477f",
           "0.05550410866482158f", "0.2402265069591007f", "0.6931471805599453f", "1.0f"]
  horner = f"p = r * {coefs[0]} + {coefs[1]};\n" + "".join(f"  p = p * r + {c};\n" for c in coefs[2:])
  return (f"#if TG_SIMD\nstatic inline {f} tg_exp2_{f[3:]}({f} x) {{\n"
          f"  const {f} lo = ({f}){{0}} - 252.0f, hi = ({f}){{0}} + 254.0f;\n  {f} n, r, p;\n  {i} m, k, k1;\n"
          f"  m = x < lo; x = ({f})((m & ({i})lo) | (~m & ({i})x));\n"
          f"  m = x > hi; x = ({f})((m & ({i})hi) | (~m & ({i})x));\n"
          f"  n = (x + 12582912.0f) - 12582912.0f;\n  r = x - n;\n  {horner}"
          f"  k = __builtin_convertvector(n, {i});\n  k1 = k >> 1;\n"
          f"  return p * ({f})((k1 + 127) << 23) * ({f})((k - k1 + 127) << 23);\n}}\n#endif")


def _masked_helper(op: Ops, d: DType) -> str:
  """A masked vector load or store (lanes whose mask is 0 are not touched; a masked load gives 0 there): one
  instruction where the compiler targets AVX (`vmaskmovps`, 4 and 8 lanes) or AVX-512 (`vmovups` under a mask register,
  16 lanes); elsewhere one plain vector access when every lane is on, else lane by lane."""
  v, n, c = vector_type(d), d.count, _VEC_C[_VEC_NAMES[d.scalar]][0]
  m = f"tg_i32x{n}"
  every = f"  int i, all = 1;\n  for (i = 0; i < {n}; i++) all &= m[i] != 0;\n"
  x86 = _MASKED_X86.get(n * 4)
  if op is Ops.LOAD:
    body = (f"  {v} r = {{0}};\n{every}  if (all) return *(const {v}u *)p;\n"
            f"  for (i = 0; i < {n}; i++) if (m[i]) r[i] = p[i];\n  return r;\n")
    if x86 is not None: body = f"#if {x86[0]}\n  return ({v}){x86[1]};\n#else\n{body}#endif\n"
    return f"#if TG_SIMD\nstatic inline {v} tg_mload_{v[3:]}(const {c} *p, {m} m) {{\n{body}}}\n#endif"
  body = f"{every}  if (all) {{ *({v}u *)p = x; return; }}\n  for (i = 0; i < {n}; i++) if (m[i]) p[i] = x[i];\n"
  if x86 is not None: body = f"#if {x86[0]}\n  {x86[2]};\n#else\n{body}#endif\n"
  return f"#if TG_SIMD\nstatic inline void tg_mstore_{v[3:]}({c} *p, {v} x, {m} m) {{\n{body}}}\n#endif"


def _typedefs(kind: str, lanes: int) -> str:
  c, itemsize = _VEC_C[kind]
  size = itemsize * lanes
  return (f"#if TG_SIMD\ntypedef {c} tg_{kind}x{lanes} __attribute__((vector_size({size})));\n"
          f"typedef {c} tg_{kind}x{lanes}u __attribute__((vector_size({size}), aligned({itemsize}), __may_alias__));\n"
          "#endif")


class CRenderer(CStyleRenderer):
  language = "c"
  kernel_prefix = "TG_KERNEL "
  vector_ops = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.NEG, Ops.MAX, Ops.MULACC, Ops.WHERE, Ops.CMPLT,
                          Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR, Ops.CAST, Ops.BITCAST, Ops.RECIP,
                          Ops.EXP2, Ops.SQRT, Ops.RINT})
  vector_itemsizes = frozenset({1, 2, 4})
  masked_vectors = True
  zero_rows = True
  types = {dtypes.bool: "int", dtypes.int8: "signed char", dtypes.int16: "short", dtypes.int32: "int",
           dtypes.int64: "long long", dtypes.uint8: "unsigned char", dtypes.uint16: "unsigned short",
           dtypes.uint32: "unsigned int", dtypes.uint64: "unsigned long long", dtypes.float16: "float",
           dtypes.float32: "float", dtypes.float64: "double", dtypes.index: "int"}
  storage_types = {dtypes.bool: "unsigned char", dtypes.float16: "unsigned short"}
  math_fns = {(op, d): name + ("f" if d != dtypes.float64 else "")
              for op, name in _MATH for d in (dtypes.float16, dtypes.float32, dtypes.float64)}

  def prefix(self, program: list[UOp]) -> list[str]:
    out = ["#include <math.h>", "#include <string.h>", SIMD_PRELUDE]
    if any(u.dtype == dtypes.float16 for u in program): out.append(HALF_HELPERS)
    vecs = sorted({(_VEC_NAMES[d.scalar], d.count) for u in program for d in (u.dtype, *(s.dtype for s in u.src))
                   if d.count > 1})
    if vecs: out.append(NEEDS_SIMD)
    if any(u.op is Ops.DOT for u in program):
      out.append(f"#if TG_SIMD\n#include <{_DOT_HEADER[self.target.cpu.dot]}>\n#endif")
      if self.target.cpu.dot == "madd4":
        dots = [u for u in program if u.op is Ops.DOT and u.src[0].dtype.itemsize == 1]
        out += [_madd4_helper(n) for n in sorted({u.dtype.count * u.dtype.itemsize for u in dots})]
        out += [_madd8_helper(n) for n in sorted({u.dtype.count * u.dtype.itemsize for u in dots if len(u.src) > 3})]
    out += [_typedefs(kind, lanes) for kind, lanes in sorted(set(vecs) | {("i32", n) for _, n in vecs})]
    out += [_exp2_helper(n) for n in sorted({u.dtype.count for u in program if u.op is Ops.EXP2 and u.dtype.count > 1})]
    out += [_lanewise_helper(op, n) for op, n in sorted({(u.op, u.dtype.count) for u in program
                                                           if u.op in _LANEWISE and u.dtype.count > 1},
                                                          key=lambda x: (x[0].value, x[1]))]
    masked = {(u.op, u.dtype if u.op is Ops.LOAD else u.src[2].dtype) for u in program
              if u.op in (Ops.LOAD, Ops.STORE) and len(u.src) > 2 + (u.op is Ops.STORE) and u.src[-1].dtype.count > 1}
    if masked: out.append(MASKED_INCLUDE)
    out += [_masked_helper(op, d) for op, d in sorted(masked, key=lambda m: (m[0].value, vector_type(m[1])))]
    rows = {(row.name, row.size, self.storage_type(row.dtype)) for row in zero_rows(program).values()}
    out += [f"static const {ctype} {name}[{size}] = {{0}};" for name, size, ctype in sorted(rows)]
    return out

  @property
  def lane_masks(self) -> bool:
    """x86 with AVX or AVX-512 (x86-64-v3 and up) loads and stores under a mask in one instruction (`_MASKED_X86`)."""
    cpu = self.target.cpu
    return cpu is not None and cpu.arch == "x86_64" and cpu.vector_bytes >= 32

  # ---- vectors ----
  def type_name(self, d: DType) -> str: return vector_type(d) if d.count > 1 else self.types[d]

  def render_vector(self, lanes: list[str], d: DType) -> str:
    if d.scalar.is_bool: lanes = [f"-({x})" for x in lanes]
    return f"(({vector_type(d)}){{{', '.join(lanes)}}})"

  def render_vector_load(self, buf: str, idx: str, d: DType) -> str:
    return f"(({vector_type(d)})*(const {vector_type(d)}u *)({buf} + ({idx})))"

  def render_vector_store(self, buf: str, idx: str, val: str, d: DType) -> str:
    return f"*({vector_type(d)}u *)({buf} + ({idx})) = {val};"

  def render_masked_load(self, buf: str, idx: str, mask: str, d: DType) -> str:
    return f"tg_mload_{vector_type(d)[3:]}({buf} + ({idx}), {mask})"

  def render_masked_store(self, buf: str, idx: str, val: str, mask: str, d: DType) -> str:
    return f"tg_mstore_{vector_type(d)[3:]}({buf} + ({idx}), {val}, {mask});"

  def render_gated_load(self, gate: str, load: str, d: DType) -> str:
    if d.count == 1: return super().render_gated_load(gate, load, d)
    return f"(({gate})?{load}:{self.render_vector([self.render_const(0, d.scalar)] * d.count, d)})"

  def render_vector_alu(self, u: UOp, s: list[str]) -> str:
    d, src = u.dtype, u.src[0].dtype
    if u.op in _CMP: return f"({s[0]}{_CMP[u.op]}{s[1]})"
    if u.op is Ops.WHERE: return self._select(s[0], s[1], s[2], d)
    if u.op is Ops.MAX:
      if not d.scalar.is_float: return self._select(f"({s[0]}>{s[1]})", s[0], s[1], d)
      k = number_side(u)
      if k is not None: return self._select(f"({s[k]}>{s[1 - k]})", s[k], s[1 - k], d)
      return self._select(f"(({s[0]}>{s[1]})|({s[0]}!={s[0]}))", s[0], s[1], d)
    if u.op is Ops.RECIP: return f"(1.0f/{s[0]})"
    if u.op is Ops.EXP2: return f"tg_exp2_f32x{d.count}({s[0]})"
    if u.op in _LANEWISE: return f"tg_{_LANEWISE[u.op][0]}_f32x{d.count}({s[0]})"
    if u.op is Ops.NEG: return f"(-{s[0]})" if not d.scalar.is_bool else f"(~{s[0]})"
    if u.op is Ops.CAST: return self._vector_cast(s[0], src, d)
    if u.op is Ops.BITCAST: return f"(({vector_type(d) if d.count > 1 else self.type_name(d)})({s[0]}))"
    if u.op is Ops.MULACC: return f"(({s[0]}*{s[1]})+{s[2]})"
    if u.op is Ops.DOT:
      acc = s[-1] if len(s) % 2 else self.render_vector(["0"] * d.count, d)
      return self._dot(d, s[:len(s) // 2 * 2], acc, u.src[0].dtype)
    return {Ops.ADD: "({0}+{1})", Ops.SUB: "({0}-{1})", Ops.MUL: "({0}*{1})", Ops.FDIV: "({0}/{1})",
            Ops.AND: "({0}&{1})", Ops.OR: "({0}|{1})", Ops.XOR: "({0}^{1})"}[u.op].format(*s)

  def _dot(self, d: DType, ops: list[str], acc: str, operand: DType) -> str:
    """acc plus the integer dot products of the operands (a, b, or a0, b0, a1, b1: `madd4` pairs) per 32-bit lane, in
    the instruction the operand type says (the CPU level's kind, or pmaddwd's pairs of int16 that every x86 level
    falls back to): x86 pmaddwd (then an add), VNNI vpdpbusd (four uint8 x int8, added by the one instruction;
    `madd4`: the same in two pmaddwd, a pair of them in pmaddubsw), Arm sdot (four int8)."""
    kind, t = self.target.cpu.dot, vector_type(d)
    m, fn = _X86_VECTORS.get(d.count * d.itemsize, ("", ""))
    if len(ops) == 4: return f"(({t})tg_dot8{fn}(({m})({acc}), " + ", ".join(f"({m})({o})" for o in ops) + "))"
    a, b = ops
    if kind == "sdot": return f"(({t})vdotq_s32((int32x4_t)({acc}), (int8x16_t)({a}), (int8x16_t)({b})))"
    if operand.scalar == dtypes.int16: return f"({acc}+({t}){fn}_madd_epi16(({m})({a}), ({m})({b})))"
    if kind == "vnni": return f"(({t}){fn}_dpbusd_epi32(({m})({acc}), ({m})({a}), ({m})({b})))"
    return f"(({t})tg_dot4{fn}(({m})({acc}), ({m})({a}), ({m})({b})))"

  def _select(self, mask: str, a: str, b: str, d: DType) -> str:
    if d.scalar.is_int or d.scalar.is_bool: return f"(({mask}&{a})|(~{mask}&{b}))"
    m = vector_type(d.scalar.vec(d.count)).replace("f32", "i32")
    return f"(({vector_type(d)})(({mask}&(({m}){a}))|(~{mask}&(({m}){b}))))"

  def _vector_cast(self, x: str, src: DType, dst: DType) -> str:
    if src.scalar == dst.scalar or (src.scalar in (dtypes.int32, dtypes.index) and dst.scalar in (dtypes.int32,
                                                                                                   dtypes.index)):
      return x
    if dst.scalar.is_bool: return f"({x}!=0)" if not src.scalar.is_bool else x
    if src.scalar.is_bool: x = f"(-{x})"
    return f"__builtin_convertvector({x}, {vector_type(dst)})"

  def render_load(self, buf, idx, d):
    return f"tg_h2f({buf}[{idx}])" if d == dtypes.float16 else f"{buf}[{idx}]"

  def kernel_signature(self, name, args, local_size):
    return f"{self.kernel_prefix}void {name}({', '.join(args + ['int tg_lo', 'int tg_hi'])})"

  def render_for(self, name: str, end: str, task: bool = False) -> str:
    if task: return f"for (int {name} = tg_lo; {name} < tg_hi; {name}++) {{"
    return super().render_for(name, end)

  def kernel_preamble(self, task):
    return [] if task is not None else ["  if (tg_lo >= tg_hi) return;"]

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


TARGET = TargetSpec("c", "C", CRenderer, "tgc.emit.c:write_c_bundle", artifact="tgc.runtimes.artifact_c:CArtifact",
                    runtime="tgc.runtimes.c:CRuntime", cpu=True, emit_options=("embed_weights",),
                    run_options=("threads", "profile"), aliases=("cpu",), run_time_sizes=True,
                    states=True)
