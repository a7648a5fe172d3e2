"""The Metal renderer, checked on Linux: every kernel passes clang++ with the `metal_stdlib` shim (syntax, types,
address spaces), the shim rejects known-bad kernels (so passing means something), and the kernels run on the CPU
through the shim against the numpy interpreter. Apple's own compiler and GPUs are exercised only on macOS, by the
Metal runtime."""
import sys
import warnings

import pytest

import metal_check
from cpu_kernels import skip_without_cpu_compiler
from gpu_cases import CASES, check, on_runtime, programs, run_case
from tgc.codegen.render import get_renderer
from tgc.ir import dtypes
from tgc.runtimes import RuntimeUnavailable, get_runtime

needs_clang = pytest.mark.skipif(metal_check.clang() is None, reason="clang++ is not installed (apt-get install clang)")
METAL_CASES = [c for c in CASES if "f64" not in c.tags]


@needs_clang
@pytest.mark.parametrize("case", METAL_CASES, ids=[c.name for c in METAL_CASES])
def test_kernels_pass_the_shim(case):
  _, _, progs = programs(case, "metal")
  for prg in progs:
    assert prg.src.startswith("#include <metal_stdlib>\nusing namespace metal;\n")
    assert f"kernel void {prg.name}(" in prg.src
    errors = metal_check.syntax_errors(prg.src)
    assert errors == "", f"{prg.name}:\n{errors}\n--- source ---\n{prg.src}"


def test_group_reduction_uses_threadgroup_memory_and_barrier():
  case = next(c for c in CASES if c.name == "group_sum")
  (prg,) = programs(case, "metal")[2]
  assert "threadgroup float temp" in prg.src and "threadgroup_barrier(mem_flags::mem_threadgroup);" in prg.src
  assert "[[threadgroup_position_in_grid]]" in prg.src and "[[thread_position_in_threadgroup]]" in prg.src
  # threadgroup memory is declared at kernel function scope, before anything else
  assert prg.src.split("{", 1)[1].lstrip().startswith("threadgroup float temp")


def test_spelling():
  r = get_renderer("metal")
  assert r.render_bitcast("x", dtypes.float32, dtypes.int32) == "as_type<int>(x)"
  assert r.render_const(float("nan"), dtypes.float32) == "NAN" and r.render_const(-1.5, dtypes.float32) == "(-1.5f)"
  assert r.render_const(2.0, dtypes.float16) == "((half)2.0f)"
  assert r.render_const(0.1, dtypes.float32) == "0.10000000149011612f"   # decimal, the float32 value exactly
  assert r.render_const(-float("inf"), dtypes.float16) == "((half)(-INFINITY))"
  assert r.render_const(-(1 << 63), dtypes.int64) == "(-9223372036854775807L-1)"
  assert r.arg_decl(1, dtypes.float32, False) == "const device float* data1 [[buffer(1)]]"
  assert r.arg_decl(0, dtypes.bool, True) == "device uchar* data0 [[buffer(0)]]"


def test_float64_is_a_clear_error():
  case = next(c for c in CASES if "f64" in c.tags)
  with pytest.raises(ValueError, match="metal: float64 is not supported"):
    programs(case, "metal")


# ---- the shim is strict: each known-bad kernel is a one-line change to a good one ----

GOOD = """#include <metal_stdlib>
using namespace metal;
kernel void k(device float* data0 [[buffer(0)]], const device float* data1 [[buffer(1)]],
              uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  threadgroup float temp[16];
  int i = gid.x;
  float v = data1[i];
  half h = ((half)v);
  temp[lid.x] = metal::precise::exp2(v) + (float)sqrt(h);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  int bits = as_type<int>(v);
  data0[i] = temp[0] + (float)bits;
}
"""
BAD = [
  ("undeclared variable", ("float v = data1[i];", "float v = data1[j];"), "undeclared identifier 'j'"),
  ("pointer type mismatch", ("int i = gid.x;", "int i = gid.x; device float* p = (device int*)data0;"),
   "cannot initialize"),
  ("missing semicolon", ("float v = data1[i];", "float v = data1[i]"), "expected ';'"),
  ("undefined function", ("float v = data1[i];", "float v = frobnicate(data1[i]);"), "undeclared identifier"),
  ("double", ("float v = data1[i];", "double v = data1[i];"), "poisoned"),
  ("float promoted to double", ("float v = data1[i];", "float v = data1[i] * 1.5;"), "double"),
  ("device pointer into thread pointer", ("int i = gid.x;", "int i = gid.x; float* p = data0;"), "cannot initialize"),
  ("write through const device pointer", ("float v = data1[i];", "float v = data1[i]; data1[i] = 0.0f;"),
   "read-only"),
  ("as_type of different sizes", ("int bits = as_type<int>(v);", "int bits = as_type<int>(h);"), "differ in size"),
  ("barrier without flags", ("threadgroup_barrier(mem_flags::mem_threadgroup);", "threadgroup_barrier(2);"),
   "threadgroup_barrier"),
  ("returning a value from a kernel", ("data0[i] = temp[0] + (float)bits;", "return 1;"), "void function"),
  ("ambiguous math overload", ("half h = ((half)v);", "half h = ((half)v); float w = sin(1);"), "ambiguous"),
]


@needs_clang
def test_good_kernel_passes():
  assert metal_check.syntax_errors(GOOD) == ""


@needs_clang
@pytest.mark.parametrize("what,edit,message", BAD, ids=[b[0] for b in BAD])
def test_shim_rejects_bad_kernels(what, edit, message):
  old, new = edit
  assert GOOD.count(old) == 1
  errors = metal_check.syntax_errors(GOOD.replace(old, new))
  assert "error" in errors, f"{what}: accepted"
  assert message in errors, errors


# ---- CPU runs through the shim ----

@needs_clang
@pytest.mark.parametrize("case", METAL_CASES, ids=[c.name for c in METAL_CASES])
def test_kernels_run_on_cpu(case):
  skip_without_cpu_compiler()

  def execute(prg, arrays):
    metal_check.run_on_cpu(prg.src, prg.name, arrays, prg.global_size, prg.local_size)

  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)   # the numpy reference of log2(-1) and friends
    check(case, run_case(case, "metal", execute))


@needs_clang
def test_cpu_run_catches_a_wrong_kernel():
  """The CPU path compares for real: the sum kernel with its accumulation turned into a subtraction fails."""
  skip_without_cpu_compiler()
  case = next(c for c in CASES if c.name == "sum")

  def execute(prg, arrays):
    assert "+val" in prg.src
    metal_check.run_on_cpu(prg.src.replace("+val", "-val"), prg.name, arrays, prg.global_size, prg.local_size)

  with pytest.raises(AssertionError):
    check(case, run_case(case, "metal", execute))


@needs_clang
def test_cpu_build_of_a_model_without_kernels():
  """A model whose outputs are all empty has no kernels: its CPU library still builds (the driver needs the shim
  without the model's source) and has no runners."""
  skip_without_cpu_compiler()
  lib = metal_check.build_model_for_cpu("", {})
  assert not hasattr(lib, "tg_run_model_k0")


# ---- the Metal runtime: macOS only ----

@pytest.fixture(scope="module")
def metal_runtime():
  try:
    return get_runtime("metal")
  except RuntimeUnavailable as error:
    pytest.skip(str(error))


def test_runtime_unavailable_off_macos():
  if sys.platform == "darwin": pytest.skip("on macOS the Metal runtime can run")
  with pytest.raises(RuntimeUnavailable, match=r"^metal: needs macOS \(Metal framework\)$"):
    get_runtime("metal")


@pytest.mark.parametrize("case", METAL_CASES, ids=[c.name for c in METAL_CASES])
def test_kernels_run_on_metal(case, metal_runtime):
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)
    check(case, run_case(case, "metal", on_runtime(metal_runtime)))
