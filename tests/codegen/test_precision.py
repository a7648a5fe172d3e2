"""`--precision f16`: float32 arithmetic computed in float16, accumulations in float32 (codegen/precision.py), on
every GPU language. The shared GPU corpus is lowered with half precision and checked against the numpy interpreter
within the f16 tolerance (aot.validate.F16_TOLERANCE, relative to each output's largest magnitude) on the CUDA and
Metal CPU shims and (webgpu run) on lavapipe, whose shader-f16 runs f16 WGSL; NVRTC, Tint and clang's OpenCL C
front end (cl_khr_fp16: no device here has it) compile the kernels. The f16 results must also differ from float32
ones: the tolerance is not met by float32 arithmetic in disguise."""
from __future__ import annotations
import re
import warnings

import numpy as np
import pytest

import cuda_cpu
import metal_check
import opencl_c
from cpu_kernels import skip_without_cpu_compiler
from gpu_cases import CASES, Case, programs, run_case
from tgc.aot.validate import F16_TOLERANCE
from tgc.codegen.precision import half_precision
from tgc.codegen.target import Target
from tgc.ir import Ops, dtypes
from tgc.runtimes import RuntimeUnavailable, get_runtime
from tgc.runtimes import cuda as cuda_rt

# float32 cases whose values stay finite (the float16 range) and whose outputs are float32
F32_CASES = [c for c in CASES if c.name in ("elementwise", "sum", "max_axis0", "matmul", "matmul_tiles", "softmax",
                                            "group_sum", "group_heuristic", "conv2d", "conv_tiles", "vec_mixed")]


def f16(language: str) -> Target: return Target.make(language, artifact=False, precision="f16")


def within_f16(case: Case, got: np.ndarray) -> float:
  """The scaled error (max |got - want| / max |want|), asserted within the f16 tolerance."""
  want = case.make().numpy().astype(np.float64)
  diff = np.abs(got.astype(np.float64) - want)
  scale = np.abs(want).max()
  assert (diff <= F16_TOLERANCE * np.abs(want) + F16_TOLERANCE * scale).all(), (case.name, diff.max() / scale)
  return float(diff.max() / scale)


def test_the_translation():
  """Loads are read as stored and converted, arithmetic is float16, reductions accumulate float32, stores float32."""
  case = next(c for c in CASES if c.name == "softmax")
  from tgc.frontend.realize import _alloc
  from tgc.codegen.schedule import schedule
  items, _ = schedule([case.make().uop], _alloc("numpy"))
  alu = []
  for it in items:
    half = half_precision(it.ast)
    nodes = half.toposort()
    assert all(n.dtype == dtypes.float32 for n in nodes if n.op in (Ops.LOAD, Ops.REDUCE, Ops.DEFINE_GLOBAL))
    assert all(st.src[2].dtype == dtypes.float32 for st in half.src)
    alu += [n for n in nodes if n.op in (Ops.ADD, Ops.MUL, Ops.EXP2, Ops.MAX, Ops.RECIP) and n.dtype.is_float]
    for red in (n for n in nodes if n.op is Ops.REDUCE):
      assert red.src[0].op is Ops.CAST and red.src[0].src[0].dtype == dtypes.float16   # float16 terms, widened
  assert alu and all(n.dtype == dtypes.float16 for n in alu)


def test_c_refuses_f16():
  with pytest.raises(ValueError, match=r"--precision f16 applies to GPU targets .*not c"):
    Target.make("c", precision="f16")
  with pytest.raises(ValueError, match=r"unknown --precision 'f8'"): Target.make("webgpu", precision="f8")


@pytest.mark.parametrize("case", F32_CASES, ids=[c.name for c in F32_CASES])
def test_f16_on_the_cuda_shim_and_nvrtc(case):
  progs = programs(case, f16("cuda"))[2]
  assert any("__half" in p.function and "#include <cuda_fp16.h>" in p.src for p in progs)
  if cuda_rt.nvrtc is not None:
    for p in progs: assert cuda_rt.compile_only(p.src, p.name, "sm_80")[:4] == b"\x7fELF"
  skip_without_cpu_compiler()
  got = run_case(case, f16("cuda"), lambda p, a: cuda_cpu.run_on_cpu(p.src, p.name, a, p.global_size, p.local_size))
  err = within_f16(case, got)
  if case.name not in ("max_axis0",): assert err > 1e-6, "float16 arithmetic should round more than float32"


@pytest.mark.parametrize("case", F32_CASES, ids=[c.name for c in F32_CASES])
def test_f16_on_the_metal_shim(case):
  if metal_check.clang() is None: pytest.skip("clang++ is not installed (apt-get install clang)")
  progs = programs(case, f16("metal"))[2]
  assert any(re.search(r"\bhalf\b", p.function) for p in progs)
  for p in progs: assert metal_check.syntax_errors(p.src) == "", p.src
  skip_without_cpu_compiler()
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)
    within_f16(case, run_case(case, f16("metal"),
                              lambda p, a: metal_check.run_on_cpu(p.src, p.name, a, p.global_size, p.local_size)))


@pytest.mark.parametrize("case", F32_CASES, ids=[c.name for c in F32_CASES])
def test_f16_opencl_c_compiles(case):
  if opencl_c.clang() is None: pytest.skip("clang is not installed (apt-get install clang)")
  progs = programs(case, f16("opencl"))[2]
  assert any("#pragma OPENCL EXTENSION cl_khr_fp16 : enable" in p.src and re.search(r"\bhalf\b", p.function)
             for p in progs)
  for p in progs: assert opencl_c.opencl_c_errors(p.src) == "", p.src


@pytest.mark.parametrize("case", F32_CASES, ids=[c.name for c in F32_CASES])
def test_f16_on_webgpu(tint, case):
  try: rt = get_runtime("webgpu")
  except RuntimeUnavailable as error: pytest.skip(str(error))
  if not rt.device_info()["has_f16"]: pytest.skip(f"{rt.device_name} has no shader-f16 feature")
  target = Target.make("webgpu", artifact=False, precision="f16")
  progs = programs(case, target)[2]
  for p in progs:
    assert p.src.startswith("enable f16;") and p.features == ("shader-f16",)
    tint.create_shader_module(code=p.src)

  def execute(prg, arrays):
    bufs = [rt.alloc(a.nbytes) for a in arrays]
    for b, a in zip(bufs, arrays): rt.copyin(b, a)
    rt.load(prg)(*bufs, global_size=prg.global_size, local_size=prg.local_size)
    rt.synchronize()
    for b, a in zip(bufs, arrays): a[:] = rt.copyout(b)
  within_f16(case, run_case(case, target, execute))
