"""OpenCL C renderer: grid ranges are work-group and work-item ids; float16 uses vload_half/vstore_half
(half storage, float math) so it runs without cl_khr_fp16."""
from __future__ import annotations
from tgc.ir import Ops, UOp, DType, AxisType, dtypes
from tgc.codegen.render.cstyle import CStyleRenderer

_FNS = ((Ops.EXP2, "exp2"), (Ops.LOG2, "log2"), (Ops.SIN, "sin"), (Ops.SQRT, "sqrt"), (Ops.TRUNC, "trunc"),
        (Ops.POW, "pow"))


class OpenCLRenderer(CStyleRenderer):
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

  def nan(self, d): return "NAN" if d != dtypes.float64 else "((double)NAN)"
  def inf(self, d): return "INFINITY" if d != dtypes.float64 else "((double)INFINITY)"

  def grid_index(self, r: UOp) -> str:
    return f"get_{'group' if r.arg.kind is AxisType.GLOBAL else 'local'}_id({r.arg.dim})"   # local, group: work-items

  def prefix(self, program):
    if any(u.dtype == dtypes.float64 for u in program): return ["#pragma OPENCL EXTENSION cl_khr_fp64 : enable"]
    return []

  def kernel_signature(self, name, args, local_size):
    attr = f"__attribute__((reqd_work_group_size({local_size[0]}, {local_size[1]}, {local_size[2]}))) "
    return f"{self.kernel_prefix}{attr}void {name}({', '.join(args)})"

  def render_load(self, buf, idx, d):
    return f"vload_half({idx}, {buf})" if d == dtypes.float16 else f"{buf}[{idx}]"

  def render_store(self, buf, idx, val, d):
    if d == dtypes.float16: return f"vstore_half({val}, {idx}, {buf});"
    if d.is_bool: return f"{buf}[{idx}] = (uchar)({val});"
    return f"{buf}[{idx}] = {val};"

  def render_cast(self, x, src, dst):
    if dst.is_bool: return f"({x}!=0)"
    return f"convert_{self.type_name(dst)}({x})" if not src.is_bool else f"(({self.type_name(dst)})({x}))"

  def render_bitcast(self, x: str, src: DType, dst: DType) -> str:
    return f"as_{self.type_name(dst)}({x})"
