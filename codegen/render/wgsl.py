"""WGSL renderer (WebGPU compute shaders). One kernel is one shader module: the storage-buffer bindings, the
work-group arrays and the helper functions it needs are declared at module scope (`prefix`), then the entry point
`@compute @workgroup_size(x, y, z) fn <name>(@builtin(workgroup_id) gid, @builtin(local_invocation_id) lid)`.

Bindings: argument i of the kernel is `@group(0) @binding(i) var<storage, ...> data{i}`; only the buffers the
kernel uses are declared (sizes known only at run time: uniforms of bind group 1, `size_binding`), and
`render_kernel` reports them as data (`KernelParam`s: index, read_write, element type,
atomic) with the module-scope declarations and features, for runtimes and loaders. Buffers the kernel only reads
are `read`, the ones it stores to `read_write`. The renderer keeps no state between calls: the facts of one kernel
live on a copy made for that call.

Types: no 64-bit types. int64/uint64 are rendered as i32/u32 (storage and compute) only with `narrow_int64=True`;
otherwise rendering names the offending buffer in a ValueError (storing int64 tensors as 32-bit words is the
caller's decision). float64 is rendered as f32 only with `narrow_f64=True` (the caller then holds float64 tensors
as float32 words), otherwise it is an error. Indices are i32.

Sub-32-bit storage: buffers of bool/int8/uint8/int16/uint16/float16 (and the 8/16-bit storage words of
bfloat16, float8, int4, ...) are `array<u32>`, 4 or 2 elements per little-endian word. `prepare` rewrites each
element load into one load of its word (index `idx / k`, hash-consed, so the elements of one word share a single
load) and a shift; signed types are sign-extended. Such values are computed in i32/u32 and wrapped back into their
range after every op that can leave it, as C's narrow types would. A kernel that stores to such a buffer declares
it `array<atomic<u32>>` and `atomicOr`s each element's bits into its word, so neighbouring elements written by
different invocations never race: **the buffer must be zero before the launch** (the WebGPU runtime clears such
bindings in the same command buffer; a loader must `clearBuffer` them before each dispatch). A kernel may not
also read a buffer it writes this way.

float16: stored packed as above and computed in f32 (default), or in f16 with `f16=True` (adds `enable f16;`;
the device needs the "shader-f16" feature). Conversions to half are done in software (round to nearest even,
overflow to inf), as WGSL leaves the rounding of f32->f16 conversions to the implementation, except where float32
arithmetic is demoted to f16 (`precision` "f16", codegen/precision.py: the results are within a tolerance anyway).

Floats: WGSL has no NaN/inf literals and constant-evaluated expressions may not produce them, so they come from
bit patterns held in private variables (`tg_nan()`, `tg_inf()`). NaN comparisons are unreliable on GPUs, so
isnan (`x != x` in the IR), x == +-inf, MAX and float->bool/int conversions test bits. SIN is a helper with Cody-Waite
reduction by pi/2 and minimax polynomials (absolute error ~1e-7 for |x| <= 1e5; the built-in `sin` may be off
by 2^-11 and more). POW handles negative bases with integral exponents and zero as C's pow does. WGSL lets
implementations assume arithmetic produces no NaN/inf (wgpu on lavapipe gives x*0.0 = 0 for x = inf or NaN): values
that are NaN/inf are handled, producing them by arithmetic is not guaranteed.

Limits (WebGPU defaults, as browsers ship them): at most `max_storage_buffers` (8) bindings per kernel, 256
invocations per work-group and (256, 256, 64) per dimension, `max_workgroups_per_dim` (65535) work-groups per
launch dimension (lowering splits wider ranges over free dimensions first). Violations raise ValueError naming
the kernel."""
from __future__ import annotations
import math
import copy
from dataclasses import dataclass, field
import numpy as np
from tgc.ir import Ops, UOp, DType, AxisType, dtypes, substitute
from tgc.ir.symbolic import simplify
from tgc.codegen.registry import TargetSpec
from tgc.codegen.render.cstyle import (CStyleRenderer, BASE_OPS, KernelParam, RenderedKernel, shared_bytes,
                                       variable_name, variables_of)
from tgc.codegen.render.gpu_vectors import GPUVectors, LANES, NATIVE, is_multiple
from tgc.codegen.target import Precision, Target, TargetLimitError

U32 = dtypes.uint32
_SMALL_INTS = (dtypes.int8, dtypes.int16, dtypes.uint8, dtypes.uint16)
_WIDE_INTS = (dtypes.int64, dtypes.uint64)
_WRAPPING_OPS = (Ops.ADD, Ops.SUB, Ops.MUL, Ops.MULACC, Ops.NEG, Ops.SHL, Ops.IDIV, Ops.MOD)
_BUILTINS = {Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SQRT: "sqrt", Ops.TRUNC: "trunc", Ops.RINT: "round"}
_DIMS = "xyz"


def _limit(detail: str) -> TargetLimitError: return TargetLimitError("webgpu", detail)

# helper functions and private variables: name -> (dependencies, WGSL source)
HELPERS: dict[str, tuple[tuple[str, ...], str]] = {
  "tg_bits": ((), "var<private> tg_nan_bits: u32 = 0x7fc00000u;\nvar<private> tg_inf_bits: u32 = 0x7f800000u;"),
  "tg_nan": (("tg_bits",), "fn tg_nan() -> f32 { return bitcast<f32>(tg_nan_bits); }"),
  "tg_inf": (("tg_bits",), "fn tg_inf() -> f32 { return bitcast<f32>(tg_inf_bits); }"),
  "tg_isnan": ((), "fn tg_isnan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }"),
  "tg_max": (("tg_isnan",), """// maximum that propagates NaN from either side without relying on NaN comparisons
fn tg_max(a: f32, b: f32) -> f32 {
  return select(select(select(b, a, a > b), a, tg_isnan(a)), b, tg_isnan(b));
}"""),
  "tg_isnan4": ((), "fn tg_isnan4(x: vec4<f32>) -> vec4<bool> {\n"
                    "  return (bitcast<vec4<u32>>(x) & vec4<u32>(0x7fffffffu)) > vec4<u32>(0x7f800000u);\n}"),
  "tg_max4": (("tg_isnan4",), """// tg_max of each lane
fn tg_max4(a: vec4<f32>, b: vec4<f32>) -> vec4<f32> {
  return select(select(select(b, a, a > b), a, tg_isnan4(a)), b, tg_isnan4(b));
}"""),
  "tg_sin": ((), """// sin: Cody-Waite reduction by pi/2 (pi/2 as three 8-bit pieces and a remainder, so
// k*piece is exact for |k| < 2^16) and minimax polynomials of sin and cos on [-pi/4, pi/4];
// absolute error ~1e-7 for |x| <= 1e5
fn tg_sin(x: f32) -> f32 {
  let k = round(x * 0.6366197466850281f);
  let r = (((x - k * 0x1.92p+0f) - k * 0x1.fap-12f) - k * 0x1.54p-20f) - k * 0x1.10b46p-30f;
  let z = r * r;
  let s = r + r * z * (-0.16666654611f + z * (0.0083321608736f + z * -0.00019515295891f));
  let c = 1.0f - 0.5f * z +
          z * z * (0.04166664568298827f + z * (-0.001388731625493765f + z * 2.443315711809948e-05f));
  let q = i32(k) & 3i;
  let v = select(s, c, (q & 1i) != 0i);
  return select(v, -v, (q & 2i) != 0i);
}"""),
  "tg_pow": (("tg_nan", "tg_inf"), """// C's pow: negative bases with integral exponents, pow(x, 0) = pow(1, y) = 1,
// zero bases
fn tg_pow(x: f32, y: f32) -> f32 {
  let t = trunc(y);
  let odd = t == y && abs(t) < 16777216.0f && (t - 2.0f * trunc(t * 0.5f)) != 0.0f;
  let ax = abs(x);
  var m = select(pow(ax, y), select(0.0f, tg_inf(), y < 0.0f), ax == 0.0f);
  m = select(m, -m, odd && (bitcast<u32>(x) >> 31u) != 0u);
  m = select(m, tg_nan(), x < 0.0f && t != y);
  return select(m, 1.0f, y == 0.0f || x == 1.0f);
}"""),
  "tg_f2i": ((), """// float -> int32 as numpy: truncate, NaN and inf give 0, out-of-range values wrap (low 32 bits)
fn tg_f2i(x: f32) -> i32 {
  let b = bitcast<u32>(x);
  let e = (b >> 23u) & 0xffu;
  if (e == 0xffu) { return 0i; }
  if (e < 158u) { return i32(x); }
  let k = e - 150u;
  let w = select(((b & 0x7fffffu) | 0x800000u) << k, 0u, k >= 32u);
  return select(i32(w), -i32(w), (b >> 31u) != 0u);
}"""),
  "tg_h2f": ((), """// IEEE half bits (low 16 bits of h) -> f32, exact (subnormals included)
fn tg_h2f(h: u32) -> f32 {
  let s = (h & 0x8000u) << 16u;
  let e = (h >> 10u) & 0x1fu;
  let m = h & 0x3ffu;
  if (e == 0u) {
    let v = f32(m) * 5.9604644775390625e-08f;
    return select(v, -v, s != 0u);
  }
  if (e == 31u) { return bitcast<f32>(s | 0x7f800000u | (m << 13u)); }
  return bitcast<f32>(s | ((e + 112u) << 23u) | (m << 13u));
}"""),
  "tg_f2h": ((), """// f32 -> IEEE half bits, round to nearest even, overflow to inf, NaN stays NaN
fn tg_f2h(f: f32) -> u32 {
  let u = bitcast<u32>(f);
  let s = (u >> 16u) & 0x8000u;
  let e = (u >> 23u) & 0xffu;
  var m = u & 0x7fffffu;
  if (e == 0xffu) { return s | 0x7c00u | select(0u, 0x200u, m != 0u); }
  if (e > 142u) { return s | 0x7c00u; }
  if (e < 113u) {
    if (e < 102u) { return s; }
    m = m | 0x800000u;
    let r = 126u - e;
    let hb = 1u << (r - 1u);
    let rm = m & ((1u << r) - 1u);
    var q = m >> r;
    if (rm > hb || (rm == hb && (q & 1u) != 0u)) { q = q + 1u; }
    return s | q;
  }
  var h = ((e - 112u) << 10u) | (m >> 13u);
  m = m & 0x1fffu;
  if (m > 0x1000u || (m == 0x1000u && (h & 1u) != 0u)) { h = h + 1u; }
  return s | h;
}"""),
}


@dataclass
class _KernelFacts:
  """What rendering one kernel needs to know about its buffers, and the helpers it used."""
  packed: set[str]          # names of the packed global buffers
  atomic: set[str]          # packed buffers the kernel stores to (array<atomic<u32>>)
  stored: set[UOp]          # global buffers the kernel stores to
  vec4: set[str]            # buffers declared array<vec4<...>>: read or written by vectors, every store a vector
  helpers: set[str] = field(default_factory=set)

  @staticmethod
  def of(program: list[UOp]) -> _KernelFacts:
    bufs = {s for u in program for s in (u,) + u.src if s.op is Ops.DEFINE_GLOBAL}
    stores = [u for u in program if u.op is Ops.STORE and u.src[0].op is Ops.DEFINE_GLOBAL]
    stored = {u.src[0] for u in stores}
    vector = {u.src[0] for u in program if u.op in (Ops.LOAD, Ops.STORE) and u.src[0].op is Ops.DEFINE_GLOBAL and
              (u.dtype if u.op is Ops.LOAD else u.src[2].dtype).count == LANES}
    scalar_stores = {u.src[0] for u in stores if u.src[2].dtype.count == 1}
    return _KernelFacts({f"data{b.arg[0]}" for b in bufs if is_packed(b.dtype)},
                        {f"data{b.arg[0]}" for b in stored if is_packed(b.dtype)}, stored,
                        {f"data{b.arg[0]}" for b in vector - scalar_stores})


@dataclass(frozen=True)
class Binding:
  """One storage-buffer binding of a WGSL kernel (what its `KernelParam` says, or an artifact's plan)."""
  index: int           # @binding(i): the kernel's argument i
  name: str
  read_only: bool      # var<storage, read>
  atomic: bool         # array<atomic<u32>>: packed output, must be zeroed before each launch
  element: str         # the WGSL element type


def element_size(d: DType) -> int:
  """Bytes per element in a buffer of `d` (storage-only types: their storage word)."""
  return dtypes.from_numpy(d.np).itemsize if d.storage_only else d.itemsize


def is_packed(d: DType) -> bool:
  """Buffers of `d` are held as array<u32> with several elements per word."""
  return element_size(d) < 4


class WGSLRenderer(GPUVectors, CStyleRenderer):
  language = "webgpu"
  barrier = "workgroupBarrier();"
  vector_ops = NATIVE | {Ops.MAX}     # MAX of 32-bit vectors: tg_max4 or max(), else lane by lane

  def __init__(self, target: Target | None = None):
    super().__init__(target)
    t = self.target
    self.narrow_int64, self.f16, self.narrow_f64 = t.narrow_int64, t.f16, t.narrow_f64
    self.max_storage_buffers = t.max_buffers
    self.max_workgroups_per_dim = t.max_groups_per_dim[0]
    self.max_workgroup_size, self.max_invocations = t.max_local_size, t.max_local_items
    narrow_int64, f16, narrow_f64 = self.narrow_int64, self.f16, self.narrow_f64
    half = "f16" if f16 else "f32"
    self.types = {dtypes.bool: "bool", dtypes.int8: "i32", dtypes.int16: "i32", dtypes.int32: "i32",
                  dtypes.uint8: "u32", dtypes.uint16: "u32", dtypes.uint32: "u32", dtypes.float16: half,
                  dtypes.float32: "f32", dtypes.index: "i32"}
    if narrow_int64: self.types.update({dtypes.int64: "i32", dtypes.uint64: "u32"})
    if narrow_f64: self.types[dtypes.float64] = "f32"
    self.kernel: _KernelFacts | None = None    # set only on the per-kernel copy `render_kernel` renders with

  # ---- types and constants ----
  def type_name(self, d: DType) -> str:
    if d.count > 1: return f"vec{d.count}<{self.type_name(d.scalar)}>"
    if d not in self.types: raise _limit(f"WGSL has no type for {d.name}")
    return self.types[d]

  # ---- vectors: array<vec4<T>> bindings (gpu_vectors.py) ----
  def vector_access(self, buf: UOp, base: UOp) -> bool:
    """Only storage buffers of 32-bit elements become array<vec4<T>> (a vec4 out of an array<T>, workgroup arrays
    included, would be four loads anyway), at multiples of 4 elements."""
    return buf.op is Ops.DEFINE_GLOBAL and not is_packed(buf.dtype) and is_multiple(base, LANES)

  def render_vector(self, lanes: list[str], d: DType) -> str: return f"{self.type_name(d)}({', '.join(lanes)})"
  def render_vector_load(self, buf: str, idx: str, d: DType) -> str: return f"{buf}[({idx}) / {LANES}i]"
  def render_vector_store(self, buf: str, idx: str, val: str, d: DType) -> str:
    return f"{buf}[({idx}) / {LANES}i] = {val};"

  def render_vector_alu(self, u: UOp, s: list[str]) -> str:
    d = u.src[0].dtype.scalar
    if u.op is Ops.MAX and u.dtype.count == LANES and not d.is_bool and not self._is_half(d):
      vec = self.type_name(u.dtype)
      a, b = (x if src.dtype.count > 1 else f"{vec}({x})" for x, src in zip(s, u.src))
      return f"{self._use('tg_max4')}({a}, {b})" if d.is_float else f"max({a}, {b})"
    return super().render_vector_alu(u, s)

  def render_load(self, buf: str, idx: str, d: DType) -> str:
    if buf in self.kernel.vec4: return f"{buf}[({idx}) / {LANES}i][({idx}) % {LANES}i]"
    return f"{buf}[{idx}]"

  def _use(self, helper: str) -> str:
    for dep in HELPERS[helper][0]: self._use(dep)
    self.kernel.helpers.add(helper)
    return helper

  def _is_half(self, d: DType) -> bool: return self.f16 and d == dtypes.float16

  def render_const(self, v, d: DType) -> str:
    if d.is_bool: return "true" if v else "false"
    if d.is_float:
      if self._is_half(d):
        v = float(np.float16(v))
        if math.isnan(v) or math.isinf(v): return f"f16({self.render_const(v, dtypes.float32)})"
        return f"{v!r}h" if v >= 0 else f"({v!r}h)"
      v = float(np.float32(v))
      if math.isnan(v): return f"{self._use('tg_nan')}()"
      if math.isinf(v): return f"({'-' if v < 0 else ''}{self._use('tg_inf')}())"
      lit = f"{v!r}f" if v == int(v) and abs(v) < 1e16 else f"{v.hex()}f"
      return lit if not lit.startswith("-") else f"({lit})"      # a-(-1.5f), never a--1.5f
    v = int(v)
    if self.type_name(d) == "u32":
      bits = 8 * d.itemsize if d in _SMALL_INTS else 32
      return f"{v % (1 << bits) if d != dtypes.uint64 else min(max(v, 0), (1 << 32) - 1)}u"
    if d in _SMALL_INTS: v = (v + (1 << (8 * d.itemsize - 1))) % (1 << 8 * d.itemsize) - (1 << (8 * d.itemsize - 1))
    if d == dtypes.int64: v = min(max(v, -(1 << 31)), (1 << 31) - 1)      # narrowed: saturate (reduce identities)
    if v == -(1 << 31): return "(-2147483647i - 1i)"
    return f"{v}i" if v >= 0 else f"({v}i)"

  # ---- conversions ----
  def _half_bits(self, x: str) -> str:
    """u32 holding the half bits of a float16 value."""
    return f"{self._use('tg_f2h')}({'f32(' + x + ')' if self.f16 else x})"

  def _from_half_bits(self, bits: str) -> str:
    v = f"{self._use('tg_h2f')}({bits})"
    return f"f16({v})" if self.f16 else v

  def _wrap(self, x: str, d: DType) -> str:
    """An i32/u32 value brought into the range of the narrow integer type `d` (two's complement wrap)."""
    if d not in _SMALL_INTS: return x
    bits = 8 * d.itemsize
    if d.is_unsigned: return f"(u32({x}) & {(1 << bits) - 1}u)"
    return f"((i32({x}) << {32 - bits}u) >> {32 - bits}u)"

  def _f32(self, x: str, d: DType) -> str: return f"f32({x})" if self._is_half(d) else x

  def render_cast(self, x: str, src: DType, dst: DType) -> str:
    if src == dst: return x
    if dst.is_bool:
      if src.is_float: return f"((bitcast<u32>({self._f32(x, src)}) & 0x7fffffffu) != 0u)"
      return f"({x} != {self.render_const(0, src)})"
    if src.is_bool: return f"{self.type_name(dst)}({x})"
    if dst.is_float:
      if dst == dtypes.float16 and self.target.precision is Precision.F16 and src == dtypes.float32: return f"f16({x})"
      if dst == dtypes.float16:
        return self._from_half_bits(self._half_bits(x if src.is_float else f"f32({x})"))
      return x if self.type_name(src) == "f32" else f"f32({x})"
    # integer destination
    if src.is_float: v = f"{self._use('tg_f2i')}({self._f32(x, src)})"
    else: v = x
    t, ts = self.type_name(dst), ("i32" if src.is_float else self.type_name(src))
    if dst in _SMALL_INTS: return self._wrap(v, dst)
    if t == ts: return v
    return f"bitcast<{t}>({v})" if src.is_float else f"{t}({v})"

  def render_bitcast(self, x: str, src: DType, dst: DType) -> str:
    if dst == dtypes.float16: return self._from_half_bits(x if src.is_unsigned else f"(u32({x}) & 0xffffu)")
    if src == dtypes.float16: return self._wrap(self._half_bits(x), dst)
    if src in _SMALL_INTS or dst in _SMALL_INTS: return self._wrap(x, dst)
    return f"bitcast<{self.type_name(dst)}>({x})"

  # ---- arithmetic ----
  def render_alu(self, u: UOp, s: list[str]) -> str:
    op, d, out = u.op, u.src[0].dtype, u.dtype
    if op in (Ops.CMPNE, Ops.CMPEQ) and d.is_float and u.src[0] is u.src[1]:
      nan = f"{self._use('tg_isnan')}({self._f32(s[0], d)})"
      return nan if op is Ops.CMPNE else f"(!{nan})"
    if op in (Ops.CMPNE, Ops.CMPEQ) and d.is_float and any(_is_inf(x) for x in u.src):
      # x == +-inf as a bit test: compilers may assume infinities absent and fold the comparison
      x, c = (s[1], u.src[0]) if _is_inf(u.src[0]) else (s[0], u.src[1])
      return f"(bitcast<u32>({self._f32(x, d)}) {'==' if op is Ops.CMPEQ else '!='} {_inf_bits(c.arg)})"
    if op is Ops.MAX:
      if d.is_bool: return f"({s[0]} || {s[1]})"
      if d.is_float:
        m = f"{self._use('tg_max')}({self._f32(s[0], d)}, {self._f32(s[1], d)})"
        return f"f16({m})" if self._is_half(d) else m
      return f"max({s[0]}, {s[1]})"
    if op in (Ops.IDIV, Ops.MOD):
      sym = "/" if op is Ops.IDIV else "%"
      zero = self.render_const(0, d)
      expr = f"({s[0]} {sym} {s[1]})"
      if d.is_int and u.src[1].vmin <= 0 <= u.src[1].vmax: expr = f"select({expr}, {zero}, {s[1]} == {zero})"
      return self._wrap(expr, out)
    if op in (Ops.SHL, Ops.SHR):
      bits = 8 * d.itemsize if d in _SMALL_INTS else 32
      expr = f"({s[0]} {'<<' if op is Ops.SHL else '>>'} (u32({s[1]}) & {bits - 1}u))"
      return self._wrap(expr, out) if op is Ops.SHL else expr
    if op is Ops.RECIP: return f"({self.render_const(1.0, d)} / {s[0]})"
    if op in _BUILTINS: return f"{_BUILTINS[op]}({s[0]})"
    if op in (Ops.SIN, Ops.POW):
      fn = self._use("tg_sin" if op is Ops.SIN else "tg_pow")
      v = f"{fn}({', '.join(self._f32(x, d) for x in s)})"
      return f"f16({v})" if self._is_half(d) else v
    if op is Ops.NEG:
      if d.is_bool: return f"(!{s[0]})"
      if d.is_unsigned: return self._wrap(f"(0u - {s[0]})", out)
      return self._wrap(f"(-{s[0]})", out)
    if d.is_bool and op in (Ops.AND, Ops.OR, Ops.XOR, Ops.CMPLT):
      return {Ops.AND: "({0} && {1})", Ops.OR: "({0} || {1})", Ops.XOR: "({0} != {1})",
              Ops.CMPLT: "((!{0}) && {1})"}[op].format(*s)
    if op is Ops.WHERE: return f"select({s[2]}, {s[1]}, {s[0]})"
    expr = BASE_OPS[op].format(*s)
    return self._wrap(expr, out) if op in _WRAPPING_OPS else expr

  # ---- memory ----
  def render_store(self, buf: str, idx: str, val: str, d: DType) -> str:
    if buf not in self.kernel.packed: return f"{buf}[{idx}] = {val};"
    size = element_size(d)
    k, mask = 4 // size, (1 << (8 * size)) - 1
    if d == dtypes.float16: bits = self._half_bits(val)
    elif d.is_bool: bits = f"select(0u, 1u, {val})"
    else: bits = f"(u32({val}) & {mask}u)"
    return f"atomicOr(&{buf}[({idx}) / {k}i], {bits} << (u32(({idx}) % {k}i) * {8 * size}u));"

  def render_gated_load(self, gate: str, load: str, d: DType) -> str:
    zero = self.render_const(0, d) if d.count == 1 else f"{self.type_name(d)}({self.render_const(0, d.scalar)})"
    return f"select({zero}, {load}, {gate})"

  def render_if(self, cond: str, stmt: str) -> str: return f"if ({cond}) {{ {stmt} }}"
  def render_local(self, name: str, d: DType, size: int) -> str | None: return None   # module scope (prefix)

  # ---- declarations and the grid ----
  def render_decl(self, name: str, d: DType, expr: str, mutable: bool = False) -> str:
    return f"{'var' if mutable else 'let'} {name}: {self.type_name(d)} = {expr};"

  def render_for(self, name: str, end: str, task: bool = False) -> str:
    return f"for (var {name}: i32 = 0i; {name} < {end}; {name}++) {{"

  def grid_index(self, r: UOp) -> str:
    return f"i32({'gid' if r.arg.kind is AxisType.GLOBAL else 'lid'}.{_DIMS[r.arg.dim]})"

  def render_grid_decl(self, name: str, r: UOp, size: str) -> str:
    return f"let {name}: i32 = {self.grid_index(r)};  // {r.src[0].arg if r.src[0].op is Ops.CONST else size}"

  def arg_decl(self, i: int, d: DType, mutable: bool) -> str:
    name = f"data{i}"
    return f"@group(0) @binding({i}) var<storage, {'read_write' if mutable else 'read'}> {name}: " \
           f"array<{self._element(i, d)}>;"

  def _element(self, i: int, d: DType) -> str:
    """The WGSL element type of buffer argument i."""
    if f"data{i}" in self.kernel.atomic: return "atomic<u32>"
    if f"data{i}" in self.kernel.vec4: return self.type_name(d.vec(LANES))
    return "u32" if is_packed(d) else self.type_name(d)

  def kernel_signature(self, name: str, args: list[str], local_size) -> str:
    x, y, z = local_size
    return (f"@compute @workgroup_size({x}, {y}, {z})\n"
            f"fn {name}(@builtin(workgroup_id) gid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>)")

  # ---- kernel-level rewrites, checks and the module prefix ----
  def prepare(self, ast: UOp) -> UOp:
    """Loads from packed buffers become a load of the u32 word holding the element (one shared UOp per word
    index) and the element's extraction."""
    sub = {}
    for n in ast.toposort():
      if n.op is Ops.LOAD and n.src[0].op is Ops.DEFINE_GLOBAL and is_packed(n.src[0].dtype): sub[n] = _unpack(n)
    return substitute(ast, sub) if sub else ast

  def render_kernel(self, name: str, program: list[UOp], local_size=(1, 1, 1), note: str = "") -> RenderedKernel:
    """The entry point, the module-scope declarations it needs and its bindings as data. The facts of one kernel
    (packed, atomic and written buffers, helpers used) live on a copy of this renderer, so rendering keeps no
    state from one call to the next. `note` heads the function as a comment."""
    self._check(name, program, local_size)
    k = copy.copy(self)
    k.kernel = _KernelFacts.of(program)
    function = k.comment(note) + CStyleRenderer.render(k, name, program, local_size)
    params = tuple(k.params(program))
    features = ("shader-f16",) if self.f16 and any(u.dtype.scalar == dtypes.float16 for u in program) else ()
    prefix = (["enable f16;"] if features else []) + [k.arg_decl(p.index, p.dtype, p.mutable) for p in params]
    prefix += [f"var<workgroup> {u.arg[0]}: array<{self.type_name(u.dtype)}, {u.arg[1]}>;"
               for u in program if u.op is Ops.DEFINE_LOCAL]
    prefix += [src for h, (_, src) in HELPERS.items() if h in k.kernel.helpers]
    variables = tuple(v.arg[0] for v in variables_of(program))
    prefix += [size_binding(j, name) for j, name in enumerate(variables)]
    return RenderedKernel(function, tuple(prefix), params, shared_bytes(program), features, variables)

  def render(self, name: str, program: list[UOp], local_size=(1, 1, 1)) -> str:
    return self.render_kernel(name, program, local_size).function

  def prefix(self, program: list[UOp]) -> list[str]: return list(self.render_kernel("tg_kernel", program).prefix)

  def params(self, program: list[UOp]) -> list[KernelParam]:
    """The bindings in binding order: `mutable` is read_write (the kernel stores to it), `spelled` the array's
    element type, `atomic` for packed outputs (array<atomic<u32>>: zero them before each launch)."""
    if self.kernel is None: return list(self.render_kernel("tg_kernel", program).params)
    bufs = sorted({s for u in program for s in (u,) + u.src if s.op is Ops.DEFINE_GLOBAL}, key=lambda b: b.arg[0])
    return [KernelParam(b.arg[0], b.dtype, b in self.kernel.stored, self._element(b.arg[0], b.dtype),
                        f"data{b.arg[0]}" in self.kernel.atomic) for b in bufs]

  def _check(self, name: str, program: list[UOp], local_size) -> None:
    where = f"kernel '{name}'"
    bufs = sorted({s for u in program for s in (u,) + u.src if s.op is Ops.DEFINE_GLOBAL}, key=lambda b: b.arg[0])
    for b in bufs:
      if b.dtype == dtypes.float64 and not self.narrow_f64:
        raise _limit(f"{where}: buffer data{b.arg[0]} is float64; WGSL has no 64-bit floats (use float32)")
      if b.dtype in _WIDE_INTS and not self.narrow_int64:
        raise _limit(f"{where}: buffer data{b.arg[0]} is {b.dtype.name}; WGSL has no 64-bit integers (store it "
                         f"as 32 bits and compile for a target with narrow_int64)")
    for u in program:
      if u.op is Ops.BITCAST and {u.dtype, u.src[0].dtype} & {dtypes.float64, *_WIDE_INTS}:
        raise _limit(f"{where}: a bitcast from {u.src[0].dtype.name} to {u.dtype.name} needs 64-bit words; "
                         f"WGSL has no 64-bit types")
      if (u.dtype == dtypes.float64 and not self.narrow_f64) or (u.dtype in _WIDE_INTS and not self.narrow_int64):
        raise _limit(f"{where}: {u.op.name} computes in {u.dtype.name}; WGSL has no 64-bit types")
    if len(bufs) > self.max_storage_buffers:
      raise _limit(f"{where} binds {len(bufs)} storage buffers; the limit is {self.max_storage_buffers} "
                       f"(the scheduler must split the kernel)")
    if any(s > m for s, m in zip(local_size, self.max_workgroup_size)) or math.prod(local_size) > self.max_invocations:
      raise _limit(f"{where}: work-group size {tuple(local_size)} exceeds the limits {self.max_workgroup_size} "
                       f"and {self.max_invocations} invocations")
    for u in program:
      if u.op is Ops.RANGE and u.arg.kind is AxisType.GLOBAL and u.src[0].vmax > self.max_workgroups_per_dim:
        raise _limit(f"{where} needs {int(u.src[0].vmax)} work-groups in launch dimension {_DIMS[u.arg.dim]}; "
                     f"the limit is {self.max_workgroups_per_dim} per dimension and no launch dimension is free to "
                     f"split it")
    stored = {u.src[0] for u in program if u.op is Ops.STORE and u.src[0].op is Ops.DEFINE_GLOBAL}
    for u in program:
      if u.op is Ops.LOAD and u.src[0] in stored and is_packed(u.src[0].dtype):
        raise _limit(f"{where} reads buffer data{u.src[0].arg[0]} ({u.src[0].dtype.name}) that it also writes; "
                         f"packed sub-32-bit outputs are write-only")


SIZES_GROUP = 1       # the bind group of the sizes known only at run time
SIZE_STRIDE = 256     # bytes between two sizes in the model's buffer of them (minUniformBufferOffsetAlignment)


def size_binding(j: int, name: str) -> str:
  """The declaration of a kernel's j-th size known only at run time (its sizes sorted by name): a uniform i32 bound
  at @group(SIZES_GROUP) @binding(j) from the model's one buffer of sizes (size k of the model at byte
  k * SIZE_STRIDE), so that a storage-buffer binding is spent on none of them."""
  return f"@group({SIZES_GROUP}) @binding({j}) var<uniform> {variable_name(name)}: i32;"


def _is_inf(u: UOp) -> bool: return u.op is Ops.CONST and u.dtype.is_float and math.isinf(u.arg)


def _inf_bits(v: float) -> str: return "0x7f800000u" if v > 0 else "0xff800000u"


def _unpack(ld: UOp) -> UOp:
  """The element `ld` loads from a packed buffer, from the u32 word holding it."""
  buf, idx, gate = ld.src[0], ld.src[1], ld.src[2:]
  size = element_size(buf.dtype)
  k = 4 // size
  word = UOp(Ops.LOAD, U32, (buf, simplify(idx // k)) + gate)
  shift = simplify((idx % k) * (8 * size))
  v = word if shift.op is Ops.CONST and shift.arg == 0 else word.alu(Ops.SHR, shift.cast(U32))
  if ld.dtype.is_bool: return v.alu(Ops.AND, UOp.const(U32, 0xff)).cast(dtypes.bool)
  if ld.dtype == dtypes.float16: return UOp(Ops.BITCAST, dtypes.float16, (v.cast(dtypes.uint16),))
  return v.cast(ld.dtype)


# WebGPU's default limits, as browsers ship them; artifacts hold 64-bit types as 32-bit words (the eager runtime
# refuses them instead) and carry quick variants for software adapters (a page compiles its shaders as it loads)
TARGET = TargetSpec("webgpu", "WebGPU", WGSLRenderer, "tgc.emit.webgpu:write_webgpu_bundle",
                    artifact="tgc.runtimes.artifact_webgpu:WebGPUArtifact", runtime="tgc.runtimes.webgpu:WebGPURuntime",
                    limits=dict(max_local_size=(256, 256, 64), max_local_items=256,
                                max_groups_per_dim=(65535, 65535, 65535), shared_bytes=16384, max_buffers=8,
                                fallbacks=True),
                    artifact_limits=dict(narrow_int64=True, narrow_f64=True, quick_fallbacks=True),
                    lacks_float64=True, aliases=("wgpu",),
                    emit_options=("npm_name", "npm_version", "weight_chunk_mb"), run_options=("variant",),
                    run_time_sizes=True, states=True)
