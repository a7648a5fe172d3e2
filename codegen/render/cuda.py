"""CUDA C++ renderer (NVRTC or nvcc): `extern "C" __global__` kernels with `__launch_bounds__`; global ranges
are block indices and local/group ranges thread indices; float16 is `__half` in memory (cuda_fp16.h) and float in
registers; NaN and infinities come from bit patterns, so the source needs no header but cuda_fp16.h. With half
arithmetic (`Target.f16`, `--precision f16`) float16 values are `__half` in registers too: cuda_fp16.h's operators
and h-prefixed math (hexp2, hsqrt, ...; sm_53 and newer). Vectors are CUDA's `float4`/`int4`/`uint4` structs
(gpu_vectors.py): 16-byte loads and stores, arithmetic lane by lane."""
from __future__ import annotations
import math
from tgc.ir import Ops, UOp, DType, AxisType, dtypes
from tgc.codegen.registry import TargetSpec
from tgc.codegen.render.c import CRenderer
from tgc.codegen.render.cstyle import CStyleRenderer
from tgc.codegen.render.gpu_vectors import GPUVectors

_MATH = ((Ops.EXP2, "exp2"), (Ops.LOG2, "log2"), (Ops.SIN, "sin"), (Ops.SQRT, "sqrt"), (Ops.TRUNC, "trunc"),
         (Ops.RINT, "rint"), (Ops.POW, "pow"))
_F64_BITS = {"nan": "0x7ff8000000000000LL", "inf": "0x7ff0000000000000LL"}
_F32_BITS = {"nan": "0x7fc00000", "inf": "0x7f800000"}
# (src, dst) -> format: the bit-reinterpreting intrinsics; float16 values live in float registers
_BITCASTS = {
  (dtypes.float32, dtypes.int32): "__float_as_int({0})", (dtypes.float32, dtypes.uint32): "__float_as_uint({0})",
  (dtypes.int32, dtypes.float32): "__int_as_float({0})", (dtypes.uint32, dtypes.float32): "__uint_as_float({0})",
  (dtypes.float64, dtypes.int64): "__double_as_longlong({0})",
  (dtypes.float64, dtypes.uint64): "((unsigned long long)__double_as_longlong({0}))",
  (dtypes.int64, dtypes.float64): "__longlong_as_double({0})",
  (dtypes.uint64, dtypes.float64): "__longlong_as_double((long long)({0}))",
  (dtypes.float16, dtypes.int16): "__half_as_short(__float2half_rn({0}))",
  (dtypes.float16, dtypes.uint16): "__half_as_ushort(__float2half_rn({0}))",
  (dtypes.int16, dtypes.float16): "__half2float(__short_as_half({0}))",
  (dtypes.uint16, dtypes.float16): "__half2float(__ushort_as_half({0}))",
}
# integer -> half conversions that round once (int -> float -> half could round twice)
_TO_HALF = {dtypes.int32: "__int2half_rn", dtypes.uint32: "__uint2half_rn", dtypes.int64: "__ll2half_rn",
            dtypes.uint64: "__ull2half_rn", dtypes.float64: "__double2half"}
_VECTORS = {"float": "float", "int": "int", "unsigned int": "uint"}
_HALF_MATH = {Ops.EXP2: "hexp2", Ops.LOG2: "hlog2", Ops.SIN: "hsin", Ops.SQRT: "hsqrt", Ops.TRUNC: "htrunc",
              Ops.RINT: "hrint"}
BITCAST_HELPER = """template <typename D, typename S> __device__ __forceinline__ D tg_bitcast(S s) {
  union { S s; D d; } u;
  u.s = s;
  return u.d;
}"""


class CUDARenderer(GPUVectors, CStyleRenderer):
  language = "cuda"
  kernel_prefix = 'extern "C" __global__ '
  restrict = "__restrict__ "
  local_qualifier = "__shared__ "
  barrier = "__syncthreads();"
  types = {**CRenderer.types, dtypes.bool: "bool"}       # C's, with C++'s bool
  storage_types = {dtypes.bool: "unsigned char", dtypes.float16: "__half"}
  math_fns = {(op, d): name + ("f" if d != dtypes.float64 else "")
              for op, name in _MATH for d in (dtypes.float16, dtypes.float32, dtypes.float64)}

  operators = False      # float4 & co. are structs

  def __init__(self, target=None):
    super().__init__(target)
    if self.target.f16:    # half arithmetic: float16 values stay __half
      self.types = {**self.types, dtypes.float16: "__half"}
      self.math_fns = {**self.math_fns, **{(op, dtypes.float16): _HALF_MATH[op] for op in _HALF_MATH}}

  @property
  def half(self) -> bool: return self.target.f16

  def type_name(self, d: DType) -> str:
    return f"{_VECTORS[self.types[d.scalar]]}{d.count}" if d.count > 1 else self.types[d]
  def render_vector(self, lanes: list[str], d: DType) -> str: return f"make_{self.type_name(d)}({', '.join(lanes)})"
  def render_vector_load(self, buf: str, idx: str, d: DType) -> str:
    return f"(*(const {self.type_name(d)}*)({buf}+({idx})))"
  def render_vector_store(self, buf: str, idx: str, val: str, d: DType) -> str:
    return f"*(({self.type_name(d)}*)({buf}+({idx}))) = {val};"

  def nan(self, d): return f"__longlong_as_double({_F64_BITS['nan']})" if d == dtypes.float64 else \
    f"__int_as_float({_F32_BITS['nan']})"
  def inf(self, d): return f"__longlong_as_double({_F64_BITS['inf']})" if d == dtypes.float64 else \
    f"__int_as_float({_F32_BITS['inf']})"

  def render_const(self, v, d: DType) -> str:
    if d == dtypes.float16 and self.half: return f"__half({self.render_const(v, dtypes.float32)})"
    out = super().render_const(v, d)
    return f"({out})" if out.startswith("-") else out   # `x-(-1.5f)`, never `x--1.5f`

  def grid_index(self, r: UOp) -> str:
    return f"{'blockIdx' if r.arg.kind is AxisType.GLOBAL else 'threadIdx'}.{'xyz'[r.arg.dim]}"

  def features(self, program):
    """"cuda_fp16": the kernel needs cuda_fp16.h (NVRTC finds it in the CUDA include folder)."""
    used = {u.dtype.scalar for u in program} | {s.dtype.scalar for u in program for s in u.src}
    return ("cuda_fp16",) if dtypes.float16 in used else ()

  def prefix(self, program):
    out = ["#include <cuda_fp16.h>"] if "cuda_fp16" in self.features(program) else []
    if any(u.op is Ops.BITCAST and (u.src[0].dtype, u.dtype) not in _BITCASTS and
           not (u.src[0].dtype.is_int and u.dtype.is_int) for u in program):
      out.append(BITCAST_HELPER)
    return out

  def render(self, name: str, program: list[UOp], local_size=(1, 1, 1)) -> str:
    """The kernel, after checking CUDA's launch limits (lowering splits or folds grids to fit them)."""
    t = self.target
    if any(s > m for s, m in zip(local_size, t.max_local_size)) or math.prod(local_size) > t.max_local_items:
      raise ValueError(f"cuda: kernel '{name}': block size {tuple(local_size)} exceeds the limits {t.max_local_size} "
                       f"and {t.max_local_items} threads")
    for u in program:
      if u.op is Ops.RANGE and u.arg.kind is AxisType.GLOBAL and u.src[0].arg > t.max_groups_per_dim[u.arg.dim]:
        raise ValueError(f"cuda: kernel '{name}' needs {u.src[0].arg} blocks in grid dimension {'xyz'[u.arg.dim]}; the "
                         f"limit is {t.max_groups_per_dim[u.arg.dim]}")
    return super().render(name, program, local_size)

  def kernel_signature(self, name, args, local_size):
    return f"{self.kernel_prefix}void __launch_bounds__({math.prod(local_size)}) {name}({', '.join(args)})"

  def render_load(self, buf, idx, d):
    return f"__half2float({buf}[{idx}])" if d == dtypes.float16 and not self.half else f"{buf}[{idx}]"

  def render_store(self, buf, idx, val, d):
    if d == dtypes.float16: return f"{buf}[{idx}] = {val};" if self.half else f"{buf}[{idx}] = __float2half_rn({val});"
    if d.is_bool: return f"{buf}[{idx}] = (unsigned char)({val});"
    return f"{buf}[{idx}] = {val};"

  def render_cast(self, x, src, dst):
    if self.half and src == dtypes.float16: x, src = f"__half2float({x})", dtypes.float32   # through float
    if dst.is_bool: return f"({x}!=0)"
    if dst == dtypes.float16:   # round to half (and keep computing in float, without half arithmetic)
      half = f"{_TO_HALF[src]}({x})" if src in _TO_HALF else f"__float2half_rn((float)({x}))"
      return half if self.half else f"__half2float({half})"
    return f"(({self.type_name(dst)})({x}))"

  def render_alu(self, u: UOp, s: list[str]) -> str:
    if self.half and u.op is Ops.POW and u.dtype == dtypes.float16:
      return f"__float2half_rn(powf(__half2float({s[0]}), __half2float({s[1]})))"
    return super().render_alu(u, s)

  def render_bitcast(self, x: str, src: DType, dst: DType) -> str:
    if self.half and src == dtypes.float16 and dst in (dtypes.int16, dtypes.uint16):
      return f"__half_as_{'short' if dst == dtypes.int16 else 'ushort'}({x})"
    if self.half and dst == dtypes.float16 and src in (dtypes.int16, dtypes.uint16):
      return f"__{'short' if src == dtypes.int16 else 'ushort'}_as_half({x})"
    if (src, dst) in _BITCASTS: return _BITCASTS[(src, dst)].format(x)
    if src.is_int and dst.is_int: return f"(({self.type_name(dst)})({x}))"   # same size: two's complement
    return f"tg_bitcast<{self.type_name(dst)}>(({self.type_name(src)})({x}))"


TARGET = TargetSpec("cuda", "CUDA", CUDARenderer, "tgc.emit.cuda:write_cuda_bundle",
                    artifact="tgc.runtimes.artifact_cuda:CUDAArtifact", runtime="tgc.runtimes.cuda:CUDARuntime",
                    limits=dict(max_local_size=(1024, 1024, 64), max_local_items=1024,
                                max_groups_per_dim=(2**31 - 1, 65535, 65535), shared_bytes=49152))
