"""CUDA launch limits in lowering: grid dimension x takes up to 2^31-1 blocks, y and z 65535, a block 1024 threads
(1024, 1024, 64 per dimension). A range too wide for y or z is split over a free dimension or, with none free,
every global range is folded into x; what the folded and split kernels compute is checked on the CPU through the
CUDA shim (tests/cuda_cpu.py) against numpy, and NVRTC compiles them."""
import math

import numpy as np
import pytest

import cuda_cpu
from cpu_kernels import skip_without_cpu_compiler
from gpu_cases import elementwise_ast
from tgc.codegen.lower import lower
from tgc.codegen.opts import Opt
from tgc.codegen.target import Target, as_target
from tgc.runtimes import cuda as cuda_rt

LIMITS = Target.make("cuda").max_groups_per_dim
CUDA = as_target("cuda")      # the target of the cuda device


def grid_of(prg) -> list[int]:
  return [g // l for g, l in zip(prg.global_size, prg.local_size)]


def within_limits(prg) -> bool:
  return all(g <= m for g, m in zip(grid_of(prg), LIMITS)) and math.prod(prg.local_size) <= 1024


@pytest.mark.parametrize("sizes", [(70000, 30000), (200000, 3, 3000), (3, 70001, 10000), (70001, 30001)])
def test_huge_shapes_fit_cudas_grid(sizes):
  """Shapes whose natural grid puts more than 65535 blocks in y or z (about 2^31 elements, the most a kernel's
  32-bit index reaches; lowering allocates nothing)."""
  prg = lower(elementwise_ast(*sizes), CUDA)
  assert within_limits(prg), (prg.global_size, prg.local_size)
  lanes = math.prod(o.amount for o in prg.opts if o.op == "VECTOR")       # work-items of 4 lanes each
  assert math.prod(prg.global_size) * lanes >= math.prod(sizes)


@pytest.mark.parametrize("sizes,opts,how", [((70000, 64), [Opt("LOCAL", 1, 32)], "split"),
                                            ((100000, 2, 8), [Opt("LOCAL", 2, 8)], "fold"), ((70001, 3, 5), [], "fold"),
                                            ((2, 3, 4, 5), [], "as is")])
def test_wide_grids_compute_right(sizes, opts, how):
  prg = lower(elementwise_ast(*sizes), CUDA, opts)
  grid = grid_of(prg)
  assert within_limits(prg), (prg.global_size, prg.local_size)
  if how == "split": assert sum(g > 1 for g in grid) == 3              # y was too wide: part of it went to z
  if how == "fold": assert grid[0] >= 65536 and grid[1] == grid[2] == 1 and max(sizes) > 65535
  if how == "as is": assert grid == [5, 4, 6]                          # nothing over a limit: 4 dims fold as before
  if cuda_rt.nvrtc is not None: assert cuda_rt.compile_only(prg.src, prg.name, "sm_80")[:4] == b"\x7fELF"
  skip_without_cpu_compiler()
  n = math.prod(sizes)
  x = np.random.default_rng(7).standard_normal(n, dtype=np.float32)
  out = np.full(n, np.nan, np.float32)
  cuda_cpu.run_on_cpu(prg.src, prg.name, [out, x], prg.global_size, prg.local_size)
  np.testing.assert_allclose(out, x * 2 + np.arange(n, dtype=np.float32), rtol=1e-6)


def test_grids_within_limits_are_unchanged():
  """y up to 65535 blocks stays where it is (no split, no fold)."""
  prg = lower(elementwise_ast(65535, 64), CUDA, [Opt("LOCAL", 1, 32)])
  assert grid_of(prg) == [2, 65535, 1]
  prg = lower(elementwise_ast(65535, 64), CUDA)        # the heuristics: blocks of many threads, within limits
  assert within_limits(prg) and math.prod(prg.local_size) >= 64


def test_block_over_1024_threads_is_refused():
  with pytest.raises(ValueError, match=r"cuda: kernel 'big_block': block size \(2048, 1, 1\) exceeds the limits"):
    lower(elementwise_ast(4096), CUDA, [Opt("LOCAL", 0, 2048)], name="big_block")
  assert lower(elementwise_ast(4096), CUDA, [Opt("LOCAL", 0, 1024)]).local_size == (1024, 1, 1)
