"""The CUDA renderer and runtime: every kernel compiles with NVRTC for sm_80 and sm_90 on any machine (no driver
needed), also with nvcc where it is on PATH; what the kernels compute is checked everywhere by running them on the
CPU through a shim of the CUDA built-ins (tests/cuda_cpu.py); on the GPU they run against the numpy interpreter
only where an NVIDIA GPU and driver exist (skipped otherwise, never the compile checks)."""
import os
import shutil
import subprocess
import warnings

import numpy as np
import pytest

import cuda_cpu
from gpu_cases import CASES, check, on_runtime, programs, run_case
from cpu_kernels import skip_without_cpu_compiler
from tgc.codegen.render import get_renderer
from tgc.ir import Ops, dtypes
from tgc.runtimes import CompileError, LaunchError, RuntimeUnavailable, get_runtime
from tgc.runtimes import cuda as cuda_rt

needs_nvrtc = pytest.mark.skipif(cuda_rt.nvrtc is None, reason="NVRTC is not installed (pip install cuda-python "
                                 "nvidia-cuda-nvrtc nvidia-cuda-runtime, or the tgc[cuda] extra)")
ARCHS = ["sm_80", "sm_90"]


@pytest.fixture(scope="module")
def cuda_runtime():
  try:
    return get_runtime("cuda")
  except RuntimeUnavailable as error:
    pytest.skip(f"no NVIDIA GPU: {error}")


# ---- the source ----

def test_kernel_shape():
  case = next(c for c in CASES if c.name == "group_sum")
  (prg,) = programs(case, "cuda")[2]
  assert prg.src.startswith(f'extern "C" __global__ void __launch_bounds__(16) {prg.name}(float* __restrict__ data0, '
                            f'const float* __restrict__ data1)')
  assert "blockIdx.y" in prg.src and "threadIdx.x" in prg.src     # the split reduction is launch dimension x
  assert "__shared__ float temp" in prg.src and "__syncthreads();" in prg.src


def test_half_and_bool_storage():
  half = programs(next(c for c in CASES if c.name == "half_out"), "cuda")[2][0]
  assert half.src.startswith("#include <cuda_fp16.h>\n") and "__half* __restrict__ data0" in half.src
  assert "__float2half_rn(" in half.src
  boolean = programs(next(c for c in CASES if c.name == "bool"), "cuda")[2][0]
  assert "unsigned char* __restrict__ data0" in boolean.src and "cuda_fp16.h" not in boolean.src


def test_spelling():
  r = get_renderer("cuda")
  assert r.render_const(float("nan"), dtypes.float32) == "__int_as_float(0x7fc00000)"
  assert r.render_const(-float("inf"), dtypes.float32) == "(-__int_as_float(0x7f800000))"
  assert r.render_const(float("inf"), dtypes.float64) == "__longlong_as_double(0x7ff0000000000000LL)"
  assert r.render_const(-1.5, dtypes.float32).startswith("(-")
  assert r.render_bitcast("x", dtypes.float32, dtypes.int32) == "__float_as_int(x)"
  assert r.render_bitcast("x", dtypes.uint32, dtypes.float32) == "__uint_as_float(x)"
  assert r.render_bitcast("x", dtypes.int32, dtypes.uint32) == "((unsigned int)(x))"
  assert r.render_cast("x", dtypes.float32, dtypes.float16) == "__half2float(__float2half_rn((float)(x)))"
  assert r.render_cast("x", dtypes.int64, dtypes.float16) == "__half2float(__ll2half_rn(x))"
  assert r.fn(Ops.EXP2, dtypes.float32) == "exp2f" and r.fn(Ops.SIN, dtypes.float64) == "sin"


# ---- compiling: everywhere ----

@needs_nvrtc
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_kernels_compile_with_nvrtc(case, arch):
  for prg in programs(case, "cuda")[2]:
    image = cuda_rt.compile_only(prg.src, prg.name, arch)
    assert image[:4] == b"\x7fELF", f"{prg.name}: not a cubin"


@needs_nvrtc
def test_ptx_for_compute_arch():
  prg = programs(next(c for c in CASES if c.name == "softmax"), "cuda")[2][0]
  ptx = cuda_rt.compile_only(prg.src, prg.name, "compute_90")
  assert b".target sm_90" in ptx and f".entry {prg.name}(".encode() in ptx and ptx.endswith(b"\0")


@needs_nvrtc
def test_compile_error_carries_the_log():
  with pytest.raises(CompileError, match=r"cuda: kernel 'broken' failed to compile:\n.*identifier \"y\" is undefined"):
    cuda_rt.compile_only('extern "C" __global__ void broken(float* a) { a[0] = y; }', "broken")
  with pytest.raises(ValueError, match="sm_XX"):
    cuda_rt.compile_only('extern "C" __global__ void k(float* a) {}', "k", "80")


@needs_nvrtc
def test_compile_cache(tmp_path):
  prg = programs(CASES[0], "cuda")[2][0]
  first = cuda_rt.compile_only(prg.src, prg.name, "sm_80", str(tmp_path))
  assert len(os.listdir(tmp_path)) == 1
  assert cuda_rt.compile_only(prg.src, prg.name, "sm_80", str(tmp_path)) == first


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
def test_all_kernels_compile_with_nvcc(tmp_path):
  """The same kernels as one .cu translation unit (as an artifact ships them), through nvcc and ptxas."""
  prefix, functions = [], {}
  for case in CASES:
    for prg in programs(case, "cuda")[2]:
      prefix += [p for p in prg.prefix if p not in prefix]
      functions[prg.name] = prg.function
  src = tmp_path / "kernels.cu"
  src.write_text("\n".join(prefix + list(functions.values())))
  proc = subprocess.run(["nvcc", "-arch=sm_80", "--cubin", "-o", str(tmp_path / "k.cubin"), str(src)],
                        capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr


# ---- running on the CPU through a shim of the CUDA built-ins: what the kernels compute, everywhere ----

@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_kernels_compute_right_on_cpu(case):
  skip_without_cpu_compiler()

  def execute(prg, arrays):
    cuda_cpu.run_on_cpu(prg.src, prg.name, arrays, prg.global_size, prg.local_size)

  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)   # the numpy reference of log2(-1) and friends
    check(case, run_case(case, "cuda", execute))


def test_cpu_emulation_catches_a_wrong_kernel():
  """The CPU path compares for real: the sum kernel with its accumulation turned into a subtraction fails."""
  skip_without_cpu_compiler()
  case = next(c for c in CASES if c.name == "sum")

  def execute(prg, arrays):
    assert "+val" in prg.src
    cuda_cpu.run_on_cpu(prg.src.replace("+val", "-val"), prg.name, arrays, prg.global_size, prg.local_size)

  with pytest.raises(AssertionError):
    check(case, run_case(case, "cuda", execute))


# ---- running: only with a GPU ----

def test_runtime_unavailable_is_one_clear_line():
  try:
    get_runtime("cuda")
  except RuntimeUnavailable as error:
    message = str(error)
    assert "\n" not in message
    assert message.startswith("cuda: no NVIDIA driver/GPU (cuInit failed: ") or message.startswith("cuda: NVRTC")
    return
  pytest.skip("an NVIDIA GPU is present: the runtime is available")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_kernels_run_on_gpu(case, cuda_runtime):
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)   # the numpy reference of log2(-1) and friends
    check(case, run_case(case, "cuda", on_runtime(cuda_runtime)))


def test_gpu_timing_and_launch_errors(cuda_runtime):
  rt = cuda_runtime
  prg = programs(next(c for c in CASES if c.name == "sum"), "cuda")[2][0]
  fn = rt.compile(prg.src, prg.name)
  out, inp = rt.alloc(24 * 4), rt.alloc(24 * 40 * 4)
  rt.copyin(inp, np.ones(24 * 40, np.float32))
  elapsed = fn(out, inp, global_size=prg.global_size, local_size=prg.local_size, wait=True)
  assert isinstance(elapsed, float) and 0 <= elapsed < 10
  np.testing.assert_array_equal(rt.copyout(out).view(np.float32), np.full(24, 40, np.float32))
  with pytest.raises(LaunchError, match="not a multiple"):
    fn(out, inp, global_size=(25, 1, 1), local_size=(8, 1, 1))
  if fn.num_args is not None:
    with pytest.raises(LaunchError, match="takes 2 arguments"):
      fn(out, global_size=prg.global_size, local_size=prg.local_size)
  with pytest.raises(CompileError, match="does not define a kernel named 'nope'"):
    rt.compile(prg.src, "nope")
