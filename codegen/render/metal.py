"""Metal Shading Language renderer: `kernel void` functions whose buffers are `device` pointers bound by index and
whose grid ranges are the threadgroup position (`gid`) and the thread position in the threadgroup (`lid`); `half`
is native; Metal has no double, so float64 is refused. Float math uses `metal::precise` so results do not depend
on the host's fast-math setting. Vectors are `float4` & co. (gpu_vectors.py); a vector load or store reads a
`device` buffer through a pointer to the vector type (threadgroup arrays are read lane by lane)."""
from __future__ import annotations
import math
import struct
from tgc.ir import Ops, UOp, DType, AxisType, dtypes
from tgc.codegen.registry import TargetSpec
from tgc.codegen.target import TargetLimitError
from tgc.codegen.render.cstyle import CStyleRenderer
from tgc.codegen.render.gpu_vectors import GPUVectors

def _round_to(v: float, d: DType) -> float:
  """`v` rounded once to float32 or float16 (the repr of the result parses back to exactly that value)."""
  if not math.isfinite(v): return v
  fmt = "<e" if d == dtypes.float16 else "<f"
  try:
    return struct.unpack(fmt, struct.pack(fmt, v))[0]
  except OverflowError:
    return math.copysign(math.inf, v)


_PRECISE = ((Ops.EXP2, "exp2"), (Ops.LOG2, "log2"), (Ops.SIN, "sin"), (Ops.SQRT, "sqrt"), (Ops.POW, "pow"))


class MetalRenderer(GPUVectors, CStyleRenderer):
  language = "metal"
  kernel_prefix = "kernel "
  global_qualifier = "device "
  restrict = ""
  local_qualifier = "threadgroup "
  barrier = "threadgroup_barrier(mem_flags::mem_threadgroup);"
  float_suffix = {dtypes.float32: "f", dtypes.float16: "f"}
  types = {dtypes.bool: "bool", dtypes.int8: "char", dtypes.int16: "short", dtypes.int32: "int", dtypes.int64: "long",
           dtypes.uint8: "uchar", dtypes.uint16: "ushort", dtypes.uint32: "uint", dtypes.uint64: "ulong",
           dtypes.float16: "half", dtypes.float32: "float", dtypes.index: "int"}
  storage_types = {dtypes.bool: "uchar"}
  math_fns = {**{(op, dtypes.float32): f"metal::precise::{name}" for op, name in _PRECISE},
              **{(op, dtypes.float16): name for op, name in _PRECISE},
              (Ops.TRUNC, dtypes.float32): "trunc", (Ops.TRUNC, dtypes.float16): "trunc",
              (Ops.RINT, dtypes.float32): "rint", (Ops.RINT, dtypes.float16): "rint"}

  def type_name(self, d: DType) -> str:
    if d.scalar == dtypes.float64: raise TargetLimitError("metal", "float64 is not supported (Metal has no double)")
    return f"{self.types[d.scalar]}{d.count}" if d.count > 1 else self.types[d]

  def render_vector(self, lanes: list[str], d: DType) -> str: return f"{self.type_name(d)}({', '.join(lanes)})"
  def vector_access(self, buf: UOp, base: UOp) -> bool:
    """Vector accesses of `device` buffers only (threadgroup arrays are read lane by lane)."""
    return buf.op is Ops.DEFINE_GLOBAL and super().vector_access(buf, base)
  def _vector_pointer(self, buf: str, d: DType, const: bool) -> str:
    return f"({'const ' if const else ''}device {self.type_name(d)}*)"
  def render_vector_load(self, buf: str, idx: str, d: DType) -> str:
    return f"(*{self._vector_pointer(buf, d, True)}({buf}+({idx})))"
  def render_vector_store(self, buf: str, idx: str, val: str, d: DType) -> str:
    return f"*{self._vector_pointer(buf, d, False)}({buf}+({idx})) = {val};"

  def render_const(self, v, d: DType) -> str:
    if d.is_float:   # decimal: hexadecimal float literals are C++17 (MSL is C++14-based)
      x = _round_to(v, d)
      out = self.nan(d) if math.isnan(x) else ("-" if x < 0 else "") + self.inf(d) if math.isinf(x) else f"{x!r}f"
      if out.startswith("-"): out = f"({out})"   # `x-(-1.5f)`, never `x--1.5f`
      return f"((half){out})" if d == dtypes.float16 else out
    if d == dtypes.int64: return f"{v}L" if v >= 0 else f"({v}L)" if v != -(1 << 63) else "(-9223372036854775807L-1)"
    if d == dtypes.uint64: return f"{v}UL"
    out = super().render_const(v, d)
    return f"({out})" if out.startswith("-") else out

  def prefix(self, program): return ["#include <metal_stdlib>", "using namespace metal;"]

  def arg_decl(self, i: int, d: DType, mutable: bool) -> str:
    return f"{'' if mutable else 'const '}device {self.storage_type(d)}* data{i} [[buffer({i})]]"

  def kernel_signature(self, name, args, local_size):
    ids = ["uint3 gid [[threadgroup_position_in_grid]]", "uint3 lid [[thread_position_in_threadgroup]]"]
    return f"{self.kernel_prefix}void {name}({', '.join(args + ids)})"

  def grid_index(self, r: UOp) -> str:
    return f"{'gid' if r.arg.kind is AxisType.GLOBAL else 'lid'}.{'xyz'[r.arg.dim]}"

  def render_store(self, buf, idx, val, d):
    return f"{buf}[{idx}] = (uchar)({val});" if d.is_bool else f"{buf}[{idx}] = {val};"

  def render_bitcast(self, x: str, src: DType, dst: DType) -> str: return f"as_type<{self.type_name(dst)}>({x})"

  def render(self, name: str, program: list[UOp], local_size=(1, 1, 1)) -> str:
    for u in program:
      for n in (u, *u.src):
        if n.dtype == dtypes.float64:
          raise TargetLimitError("metal", f"float64 is not supported (Metal has no double): kernel {name}, "
                                 f"{n.op.name}")
    return super().render(name, program, local_size)   # threadgroup memory is declared first (cstyle)


TARGET = TargetSpec("metal", "Metal", MetalRenderer, "tgc.emit.metal:write_metal_bundle",
                    artifact="tgc.runtimes.artifact_metal:MetalArtifact", runtime="tgc.runtimes.metal:MetalRuntime",
                    limits=dict(max_local_size=(1024, 1024, 1024), max_local_items=1024, max_groups_per_dim=None,
                                shared_bytes=32768), lacks_float64=True)
