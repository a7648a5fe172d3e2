"""OpenCL C renderer: grid ranges are work-group and work-item ids; float16 uses vload_half/vstore_half
(half storage, float math) so it runs without cl_khr_fp16, or, with half arithmetic (`Target.f16`, `--precision
f16`), is `half` in registers too (the kernel enables cl_khr_fp16: the device must have it). Vectors are `float4`
& co. (gpu_vectors.py), loaded and stored with vload4/vstore4."""
from __future__ import annotations
from tgc.ir import Ops, UOp, DType, AxisType, dtypes
from tgc.codegen.registry import TargetSpec
from tgc.codegen.render.cstyle import CStyleRenderer
from tgc.codegen.render.gpu_vectors import GPUVectors

_FNS = ((Ops.EXP2, "exp2"), (Ops.LOG2, "log2"), (Ops.SIN, "sin"), (Ops.SQRT, "sqrt"), (Ops.TRUNC, "trunc"),
        (Ops.RINT, "rint"), (Ops.POW, "pow"))


class OpenCLRenderer(GPUVectors, CStyleRenderer):
  language = "opencl"
  kernel_prefix = "__kernel "
  global_qualifier = "__global "
  local_qualifier = "__local "
  barrier = "barrier(CLK_LOCAL_MEM_FENCE);"
  types = {dtypes.bool: "bool", dtypes.int8: "char", dtypes.int16: "short", dtypes.int32: "int", dtypes.int64: "long",
           dtypes.uint8: "uchar", dtypes.uint16: "ushort", dtypes.uint32: "uint", dtypes.uint64: "ulong",
           dtypes.float16: "float", dtypes.float32: "float", dtypes.float64: "double", dtypes.index: "int"}
  storage_types = {dtypes.bool: "uchar", dtypes.float16: "half"}
  math_fns = {(op, d): f for op, f in _FNS for d in (dtypes.float16, dtypes.float32, dtypes.float64)}

  def __init__(self, target=None):
    super().__init__(target)
    if self.target.f16: self.types = {**self.types, dtypes.float16: "half"}   # half arithmetic (cl_khr_fp16)

  def type_name(self, d: DType) -> str: return f"{self.types[d.scalar]}{d.count}" if d.count > 1 else self.types[d]
  def render_vector(self, lanes: list[str], d: DType) -> str: return f"(({self.type_name(d)})({', '.join(lanes)}))"
  def render_vector_load(self, buf: str, idx: str, d: DType) -> str: return f"vload{d.count}(0, {buf}+({idx}))"
  def render_vector_store(self, buf: str, idx: str, val: str, d: DType) -> str:
    return f"vstore{d.count}({val}, 0, {buf}+({idx}));"

  def nan(self, d): return "NAN" if d != dtypes.float64 else "((double)NAN)"
  def inf(self, d): return "INFINITY" if d != dtypes.float64 else "((double)INFINITY)"

  def grid_index(self, r: UOp) -> str:
    return f"get_{'group' if r.arg.kind is AxisType.GLOBAL else 'local'}_id({r.arg.dim})"   # local, group: work-items

  def prefix(self, program):
    return [f"#pragma OPENCL EXTENSION {ext} : enable" for ext in self.features(program)]

  def features(self, program):
    used = {u.dtype.scalar for u in program} | {s.dtype.scalar for u in program for s in u.src}
    return tuple(ext for ext, on in (("cl_khr_fp16", self.target.f16 and dtypes.float16 in used),
                                     ("cl_khr_fp64", dtypes.float64 in used)) if on)

  def render_const(self, v, d: DType) -> str:
    if d == dtypes.float16 and self.target.f16: return f"((half){super().render_const(v, dtypes.float32)})"
    return super().render_const(v, d)

  def kernel_signature(self, name, args, local_size):
    attr = f"__attribute__((reqd_work_group_size({local_size[0]}, {local_size[1]}, {local_size[2]}))) "
    return f"{self.kernel_prefix}{attr}void {name}({', '.join(args)})"

  def render_load(self, buf, idx, d):
    return f"vload_half({idx}, {buf})" if d == dtypes.float16 and not self.target.f16 else f"{buf}[{idx}]"

  def render_store(self, buf, idx, val, d):
    if d == dtypes.float16 and not self.target.f16: return f"vstore_half({val}, {idx}, {buf});"
    if d.is_bool: return f"{buf}[{idx}] = (uchar)({val});"
    return f"{buf}[{idx}] = {val};"

  def render_cast(self, x, src, dst):
    if dst.is_bool: return f"({x}!=0)"
    return f"convert_{self.type_name(dst)}({x})" if not src.is_bool else f"(({self.type_name(dst)})({x}))"

  def render_bitcast(self, x: str, src: DType, dst: DType) -> str:
    return f"as_{self.type_name(dst)}({x})"


# OpenCL 1.2 devices: the portable minimum work-group size is small; PoCL allows 4096
TARGET = TargetSpec("opencl", "OpenCL", OpenCLRenderer, "tgc.emit.opencl:write_opencl_bundle",
                    artifact="tgc.runtimes.artifact_opencl:OpenCLArtifact", runtime="tgc.runtimes.opencl:OpenCLRuntime",
                    limits=dict(max_local_size=(256, 256, 256), max_local_items=256, max_groups_per_dim=None,
                                shared_bytes=32768, fallbacks=True), aliases=("cl",), run_time_sizes=True,
                    states=True)
