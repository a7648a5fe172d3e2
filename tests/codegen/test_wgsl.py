"""The WGSL renderer. Every kernel of the shared GPU corpus (gpu_cases) and of the WGSL-specific cases here is
validated by naga (wgpu, at shader-module and pipeline creation in the WebGPU runtime) and by Tint (Dawn's compiler
through wgpudawn on its Null backend: as strict as Chrome), and run on the WebGPU runtime (lavapipe, a software
Vulkan, on CPU-only machines) against the numpy interpreter. Also checked on the generated source: packed
sub-32-bit buffers (one load per u32 word, atomicOr stores into zeroed words), no NaN/inf constants, 64-bit types
refused or narrowed, f16 behind its option, and the WebGPU limits (work-group size, storage buffers, work-groups
per dimension) as errors naming the kernel, or as a split of wide grids over free launch dimensions.

Skips name the missing piece: wgpudawn for the Tint checks, a WebGPU adapter (mesa-vulkan-drivers) for naga and
for running, the shader-f16 feature for f16 runs."""
from __future__ import annotations
import math
import re

import numpy as np
import pytest

from gpu_cases import CASES, Case, check, data, elementwise_ast, programs, run_case, t
from tgc.frontend import Tensor
from tgc.frontend.realize import _alloc
from tgc.codegen.schedule import schedule
from tgc.codegen.lower import lower
from tgc.codegen.opts import Opt
from tgc.codegen.render import get_renderer
from tgc.codegen.render.wgsl import WGSLRenderer
from tgc.codegen.target import Target, as_target
from tgc.ir import dtypes
from tgc.runtimes import RuntimeUnavailable, get_runtime
from wgsl_source import declared_bindings, reported_bindings, workgroup_sizes

def tint_check(device, src: str) -> None:
  try:
    module = device.create_shader_module(code=src)
    device.create_compute_pipeline(layout="auto", compute={"module": module})
  except Exception as error:
    pytest.fail(f"Tint rejects the kernel: {error}\n{src}")


@pytest.fixture(scope="session")
def webgpu():
  try:
    return get_runtime("webgpu")
  except RuntimeUnavailable as error:
    pytest.skip(str(error))


def execute_on(rt):
  """An `execute(program, host arrays)` for gpu_cases.run_case: upload, launch, download every buffer."""
  def execute(prg, arrays):
    bufs = []
    for a in arrays:
      b = rt.alloc(a.nbytes)
      rt.copyin(b, a)
      bufs.append(b)
    rt.load(prg)(*bufs, global_size=prg.global_size, local_size=prg.local_size)
    rt.synchronize()
    for a, b in zip(arrays, bufs): a[:] = rt.copyout(b)
  return execute


def run_programs(rt, case: Case, target) -> None:
  check(case, run_case(case, target, execute_on(rt)))


# ---------------------------------------------------------------- the shared GPU corpus
NARROW = WGSLRenderer(Target.make("webgpu", artifact=False, narrow_int64=True))
REFUSED = {"int64": "data0 is int64", "float64": "float64"}      # 64-bit buffers: errors naming the buffer
RUNNABLE = [c for c in CASES if c.name not in REFUSED]


def _target(case: Case):
  return NARROW if case.name == "casts" else "webgpu"    # "casts" goes through int64 values (no int64 buffer)


@pytest.mark.parametrize("case", RUNNABLE, ids=[c.name for c in RUNNABLE])
def test_corpus_validates_with_tint(tint, case):
  for prg in programs(case, _target(case))[2]: tint_check(tint, prg.src)


@pytest.mark.parametrize("case", RUNNABLE, ids=[c.name for c in RUNNABLE])
def test_corpus_runs_on_webgpu(webgpu, case):
  run_programs(webgpu, case, _target(case))          # compiling is naga's validation


HALF_CASES = [c for c in RUNNABLE if "half" in c.tags]


@pytest.mark.parametrize("case", HALF_CASES, ids=[c.name for c in HALF_CASES])
def test_corpus_f16_compute(webgpu, tint, case):
  if not webgpu.device_info()["has_f16"]: pytest.skip(f"{webgpu.device_name} has no shader-f16 feature")
  target = WGSLRenderer(Target.make("webgpu", artifact=False, f16=True, narrow_int64=case.name == "casts"))
  progs = programs(case, target)[2]
  assert any(p.src.startswith("enable f16;") and re.search(r"\bf16\b", p.function) for p in progs)
  for prg in progs: tint_check(tint, prg.src)
  run_programs(webgpu, case, target)


@pytest.mark.parametrize("name", REFUSED)
def test_64bit_buffers_are_refused_naming_the_buffer(name):
  case = next(c for c in CASES if c.name == name)
  with pytest.raises(ValueError, match=REFUSED[name]) as info: programs(case, "webgpu")
  assert "webgpu: kernel '" in str(info.value)


def test_int64_case_narrowed_validates_with_tint(tint):
  """With narrow_int64 the int64 corpus kernel is i32 code (its values beyond 32 bits are the caller's problem)."""
  for prg in programs(next(c for c in CASES if c.name == "int64"), NARROW)[2]:
    assert "array<i32>" in prg.src
    tint_check(tint, prg.src)


def test_f16_is_off_by_default():
  case = next(c for c in CASES if c.name == "half")
  for prg in programs(case, "webgpu")[2]:
    assert "enable f16" not in prg.src and not re.search(r"\bf16\b", prg.src)


# ---------------------------------------------------------------- WGSL-specific kernels
def one_kernel(tensor: Tensor, target="webgpu", opts=None):
  items, outs = schedule([tensor.uop], _alloc("numpy"))
  assert len(items) == 1
  return lower(items[0].ast, as_target(target), opts), items[0], outs[0]


def loads_of(src: str, buf: str) -> int: return len(re.findall(rf"\b{buf}\[", src))


NAN_ROWS = np.array([[1, np.nan, 3, -np.inf, 0, -0.0, np.inf, 2], [np.nan, -5, 2, 7, np.nan, 1, -1, 4]], np.float32)
SPECIAL = [
  # name, tensor builder, opts, tolerance (None: exact; NaN compares equal to NaN)
  ("int8_upcast", lambda: t(data(4, 36, dtype=np.int8, low=-128, high=127)) * 3 - 7, [Opt("UPCAST", 1, 4)], None),
  ("int8_unroll_sum", lambda: t(data(9, 12, dtype=np.int8, low=-128, high=127)).cast(dtypes.int32).sum(axis=1),
   [Opt("UNROLL", 0, 4)], None),
  ("uint8_odd", lambda: t(data(37, dtype=np.uint8, low=0, high=255)) * 7 + 200, None, None),
  ("int16_odd", lambda: t(data(3, 11, dtype=np.int16, low=-30000, high=30000)) * 5, None, None),
  ("bool_odd", lambda: (t(data(5, 13)) > 0) ^ (t(data(13, seed=1)) > 0.5), None, None),
  ("half_odd", lambda: (t(data(3, 7, dtype=np.float16)) * 1.5 + 0.25).maximum(t(data(7, dtype=np.float16, seed=2))),
   None, 1e-3),
  ("half_padded", lambda: t(data(5, 7, dtype=np.float16)).pad(((1, 2), (3, 0))) + 1, None, 1e-3),
  ("nan_max_reduce", lambda: t(np.array([[1, np.nan, 3], [-np.inf, -5, 2], [np.inf, 0, -1]], np.float32)).max(axis=1),
   None, 0.0),
  ("nan_max_vec4", lambda: t(NAN_ROWS).maximum(t(NAN_ROWS[::-1].copy())), [Opt("VECTOR", 1, 4)], 0.0),
  ("int_max_vec4", lambda: t(data(3, 8, dtype=np.int32, low=-99, high=99)).maximum(-5), [Opt("VECTOR", 1, 4)], None),
  ("isnan_isinf", lambda: t(np.array([0, np.nan, np.inf, -np.inf, 1e38, -0.0], np.float32)).isnan() |
   (t(np.array([0, np.nan, np.inf, -np.inf, 1e38, -0.0], np.float32)).isinf()), None, None),
  ("inf_constants", lambda: t(data(9)).maximum(-math.inf) + t(data(9)).where(math.inf, 1.0), None, 0.0),
  ("int_div_by_zero", lambda: t(data(11, dtype=np.int32, low=-50, high=50)).idiv(t(data(11, dtype=np.int32, seed=1,
                                                                                         low=-2, high=3))), None, None),
  ("shifts", lambda: t(data(9, dtype=np.int32, low=-999, high=999)) << t(data(9, dtype=np.int32, seed=3, high=40)),
   None, None),
]


@pytest.mark.parametrize("name,make,opts,tol", SPECIAL, ids=[s[0] for s in SPECIAL])
def test_special_kernels_validate_and_run(tint, webgpu, name, make, opts, tol):
  prg, _, _ = one_kernel(make(), opts=opts)
  tint_check(tint, prg.src)
  run_programs(webgpu, Case(name, make, tuple(opts) if opts else None, rtol=tol or 0.0, atol=tol or 0.0), "webgpu")


def _matmul_12x20x16():
  return t(data(12, 20)) @ t(data(20, 16, seed=1))


MATMUL_BLOCK = (Opt("UPCAST", 0, 4), Opt("UPCAST", 1, 2), Opt("UNROLL", 0, 4))


@pytest.mark.parametrize("kept,accumulators", [(None, 1), (0, 4), (1, 2)])
def test_quick_forms_keep_one_axis_of_the_block(tint, webgpu, kept, accumulators):
  """Quick kernels (register blocks as loops) of a 4x2-blocked matmul: the block looped whole (one accumulator), or
  all but its longest (4 copies) or its other axis (2): the same launch and bindings as the blocked kernel, less
  WGSL, and the product's values."""
  quick = Target.make("webgpu", artifact=False, workgroup_tiles=False, register_blocks=False, kept_block_axis=kept)
  blocked, _, _ = one_kernel(_matmul_12x20x16(), Target.make("webgpu", artifact=False, workgroup_tiles=False),
                             list(MATMUL_BLOCK))
  prg, _, _ = one_kernel(_matmul_12x20x16(), quick, list(MATMUL_BLOCK))
  assert len(re.findall(r"\bvar acc", prg.src)) == accumulators < len(re.findall(r"\bvar acc", blocked.src)) == 8
  assert (prg.global_size, prg.local_size, prg.params) == (blocked.global_size, blocked.local_size, blocked.params)
  assert len(prg.src) < len(blocked.src)
  tint_check(tint, prg.src)
  run_programs(webgpu, Case("quick_matmul", _matmul_12x20x16, MATMUL_BLOCK, rtol=1e-5, atol=1e-5), quick)


def test_packed_word_is_loaded_once():
  """Four int8 elements of one word (UPCAST by 4 along the contiguous axis) are one u32 load and four shifts."""
  prg, _, _ = one_kernel(t(data(4, 36, dtype=np.int8, low=-128, high=127)) * 3 - 7, opts=[Opt("UPCAST", 1, 4)])
  assert "var<storage, read> data1: array<u32>;" in prg.src
  assert loads_of(prg.function, "data1") == 1, prg.function
  assert prg.function.count("atomicOr(&data0[") == 4
  prg, _, _ = one_kernel(t(data(9, 12, dtype=np.int8)).cast(dtypes.int32).sum(axis=1), opts=[Opt("UNROLL", 0, 4)])
  assert loads_of(prg.function, "data1") == 1, prg.function    # the word does not depend on the unrolled range


def test_packed_outputs_are_atomic_and_listed():
  prg, _, _ = one_kernel(t(data(7, dtype=np.float16)) * 2)
  assert reported_bindings(prg) == declared_bindings(prg.src) == [[0, False, True, "atomic<u32>"],
                                                                  [1, True, False, "u32"]]
  assert "atomicOr(&data0[" in prg.function and "tg_f2h(" in prg.function
  assert workgroup_sizes(prg.src) == {prg.name: prg.local_size}


def test_kernel_layout_and_spelling():
  prg, _, _ = one_kernel(t(data(330, 64)).sum(axis=1) + t(data(330, seed=1)))
  assert prg.src.index("@group(0) @binding(0) var<storage, read_write> data0: array<f32>;") < \
    prg.src.index("@compute @workgroup_size(")
  assert f"fn {prg.name}(@builtin(workgroup_id) gid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>)" \
    in prg.function
  assert re.search(r"for \(var ridx\d+: i32 = 0i; ridx\d+ < \d+i; ridx\d+\+\+\) \{", prg.function)
  assert re.search(r"var acc\d+: f32 = 0.0f;", prg.function) and re.search(r"let gidx\d+: i32 = i32\(gid\.x\);",
                                                                         prg.function)
  group, _, _ = one_kernel(t(data(4, 1024)).sum(axis=1))
  assert "workgroupBarrier();" in group.function and re.search(r"^var<workgroup> temp\d+: array<f32, \d+>;$",
                                                               group.src, re.M)


def test_no_nan_or_inf_constants():
  """Tint refuses constant expressions that evaluate to NaN/inf: they come from bits in private variables."""
  prg, _, _ = one_kernel(t(data(9)).maximum(-math.inf) + t(data(9)).where(math.inf, math.nan))
  assert "tg_inf()" in prg.function and "tg_nan()" in prg.function
  assert not re.search(r"bitcast<f32>\(0x7f", prg.src) and "inf" not in prg.function.replace("tg_inf", "")


def test_max_of_vectors_is_one_call():
  """MAX of vec4 values is one call of the lane-wise helper (NaN from either side, by bits), not four scalar ones."""
  prg, _, _ = one_kernel(t(NAN_ROWS).maximum(t(NAN_ROWS[::-1].copy())), opts=[Opt("VECTOR", 1, 4)])
  assert "tg_max4(" in prg.function and "tg_max(" not in prg.function, prg.function
  ints, _, _ = one_kernel(t(data(3, 8, dtype=np.int32)).maximum(-5), opts=[Opt("VECTOR", 1, 4)])
  assert re.search(r"vec4<i32> = max\(val\d+, alu\d+\);", ints.function), ints.function


def test_nan_and_inf_tests_use_bits():
  prg, _, _ = one_kernel(t(data(9)).isnan() | t(data(9)).isinf() | (t(data(9)).maximum(t(data(9, seed=1))) > 0))
  assert "tg_isnan(" in prg.function and "tg_max(" in prg.function and " == 0x7f800000u)" in prg.function
  assert "(bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u" in prg.src


def test_sin_is_the_accurate_helper():
  prg, _, _ = one_kernel(t(data(9)).sin())
  assert "tg_sin(" in prg.function and not re.search(r"(?<!tg_)\bsin\(", prg.src)


# ---------------------------------------------------------------- 64-bit types
def int64_kernel():
  return (t(data(7, dtype=np.int64, low=-100, high=100)) * 3).uop


def test_int64_refused_naming_the_buffer():
  items, _ = schedule([int64_kernel()], _alloc("numpy"))
  with pytest.raises(ValueError, match=r"buffer data\d is int64.*narrow_int64"):
    lower(items[0].ast, as_target("webgpu"))


def test_int64_narrowed_to_i32():
  items, _ = schedule([int64_kernel()], _alloc("numpy"))
  prg = lower(items[0].ast, Target.make("webgpu", artifact=False, narrow_int64=True))
  assert "array<i32>" in prg.src and "i64" not in prg.src
  assert "3i" in prg.function


def test_renderer_options_name_the_target():
  assert str(WGSLRenderer()) == "webgpu"
  assert str(WGSLRenderer(Target.make("webgpu", artifact=False, narrow_int64=True, f16=True))) == \
    "webgpu+narrow_int64+f16"
  r = WGSLRenderer()
  assert get_renderer(r) is r and isinstance(get_renderer("webgpu"), WGSLRenderer)


# ---------------------------------------------------------------- limits
def gsum(n: int) -> Tensor:
  out = t(data(5, seed=0))
  for i in range(1, n): out = out + t(data(5, seed=i))
  return out


def test_storage_buffer_limit_names_the_kernel():
  items, _ = schedule([gsum(8).uop], _alloc("numpy"))     # 8 inputs + the output
  with pytest.raises(ValueError, match=r"webgpu: kernel 'k9' binds 9 storage buffers; the limit is 8"):
    lower(items[0].ast, as_target("webgpu"), name="k9")
  prg = lower(items[0].ast, Target.make("webgpu", artifact=False, max_buffers=10), name="k9")
  assert len(prg.params) == len(declared_bindings(prg.src)) == 9


def test_workgroup_size_limit_names_the_kernel():
  items, _ = schedule([(t(data(4, 1024)) + 1).uop], _alloc("numpy"))
  with pytest.raises(ValueError, match=r"kernel 'wide_wg': work-group size \(512, 1, 1\) exceeds"):
    lower(items[0].ast, as_target("webgpu"), [Opt("LOCAL", 1, 512)], name="wide_wg")
  lower(items[0].ast, as_target("webgpu"), [Opt("LOCAL", 1, 256)], name="ok_wg")


@pytest.mark.parametrize("size,exact", [(1 << 22, True), (70001, False), (65536 * 3 + 2, True)])
def test_wide_grid_is_split_over_free_dimensions(tint, size, exact):
  prg = lower(elementwise_ast(size), as_target("webgpu"), [])    # no work-group: one work-group per element
  groups = [g // l for g, l in zip(prg.global_size, prg.local_size)]
  assert max(groups) <= 65535 and math.prod(prg.global_size) >= size
  assert (math.prod(prg.global_size) == size) == exact
  assert ("if (" in prg.function) == (not exact)      # rounded-up grids gate their stores
  tint_check(tint, prg.src)


def test_wide_grid_is_not_split_for_opencl():
  assert lower(elementwise_ast(1 << 22), as_target("opencl"), []).global_size == (1 << 22, 1, 1)


def test_too_many_workgroups_names_the_kernel():
  with pytest.raises(ValueError, match=r"webgpu: kernel 'huge' needs 70001 work-groups in launch dimension"):
    lower(elementwise_ast(70001, 70001, 70001), as_target("webgpu"), [], name="huge")
