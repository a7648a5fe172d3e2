"""Vector loads and stores on GPU targets: float4 / vec4 accesses appear exactly where the access is contiguous and
its first element is provably a multiple of 4 (16-byte aligned), lanes elsewhere. The source of each GPU language
is inspected here; what the kernels compute is checked with the rest of the shared corpus (gpu_cases: vec_misaligned,
vec_mixed) on every target's runtime or CPU shim, plus on PoCL below."""
from __future__ import annotations
import re

import pytest

from gpu_cases import CASES, check, on_runtime, programs, run_case
from tgc.codegen.render.gpu_vectors import is_multiple
from tgc.ir import Ops, UOp, AxisType, RangeArg, dtypes

# how each language spells a 4-lane load of data1 and a 4-lane store into data0
VECTOR_LOAD = {"opencl": r"vload4\(0, data1\+", "cuda": r"\(\*\(const float4\*\)\(data1\+",
               "metal": r"\(\*\(const device float4\*\)\(data1\+", "webgpu": r"= data1\[\([^]]*\) / 4i\];"}
VECTOR_STORE = {"opencl": r"vstore4\(\w+, 0, data0\+", "cuda": r"\*\(\(float4\*\)\(data0\+",
                "metal": r"\*\(device float4\*\)\(data0\+", "webgpu": r"data0\[\([^]]*\) / 4i\] = "}
TARGETS = list(VECTOR_LOAD)


def case(name: str):
  return next(c for c in CASES if c.name == name)


@pytest.mark.parametrize("target", TARGETS)
def test_contiguous_aligned_accesses_are_vectors(target):
  (prg,) = programs(case("vec_mixed"), target)[2]
  assert re.search(VECTOR_LOAD[target], prg.function) and re.search(VECTOR_STORE[target], prg.function), prg.src
  if target == "webgpu":
    assert "data1: array<vec4<f32>>;" in prg.src and "data0: array<vec4<f32>>;" in prg.src
    assert re.search(r"data1\[\([^]]*\) / 4i\]\[\([^]]*\) % 4i\]", prg.function)     # the flip: components


@pytest.mark.parametrize("target", TARGETS)
def test_misaligned_loads_stay_lanes(target):
  (prg,) = programs(case("vec_misaligned"), target)[2]
  assert any(o.op == "VECTOR" for o in prg.opts)
  assert re.search(VECTOR_STORE[target], prg.function), prg.src            # the output starts at multiples of 4
  assert not re.search(VECTOR_LOAD[target], prg.function), prg.src         # x[:, 1:65] does not
  if target == "webgpu": assert "data1: array<f32>;" in prg.src


def test_alignment_proof():
  r = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, 16),), RangeArg(0, AxisType.GLOBAL))
  s = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, 3),), RangeArg(1, AxisType.REDUCE))
  assert is_multiple(r * 4 + s * 64 + 8, 4) and is_multiple(UOp.const(dtypes.index, 12), 4)
  assert not is_multiple(r * 4 + 1, 4) and not is_multiple(r * 2, 4) and not is_multiple(r * 4 + s * 66, 4)


@pytest.mark.parametrize("name", ["vec_misaligned", "vec_mixed", "elementwise", "matmul", "conv2d"])
def test_vector_kernels_on_opencl(opencl_runtime, name):
  check(case(name), run_case(case(name), "opencl", on_runtime(opencl_runtime)))
