"""The vectorize pass: what each access becomes (contiguous vector load/store, gather, broadcast, horizontal reduce,
lane-by-lane ops), and the vector kernels the C renderer writes compute what numpy computes; the vector exp2 is
within one ulp of the exact result, subnormals, infinities and NaN included; the vector rint is numpy's rint on every
CPU level; 8-bit integers load, convert and store as vectors, byte masks lane by lane."""
from __future__ import annotations
import ctypes
import platform
import re
import subprocess

import numpy as np
import pytest

from tgc.frontend import Tensor, buffers
from tgc.frontend.realize import _alloc, to_numpy
from tgc.codegen.schedule import schedule
from tgc.codegen.opts import Kernel, Opt
from tgc.codegen.expand import expand
from tgc.codegen.vectorize import vectorize
from tgc.codegen.lower import lower
from tgc.codegen.target import as_target
from tgc.codegen.render.c import CRenderer, SIMD_PRELUDE, _exp2_helper, _lanewise_helper, _typedefs
from tgc.ir import Ops, dtypes
from tgc.runtimes import get_runtime

RNG = np.random.default_rng(0)


def kernel(t: Tensor):
  items, outs = schedule([t.uop], _alloc("c"))
  return items[-1], outs[0], items[:-1]


def vectorized(t: Tensor, opts: list[Opt], native=CRenderer.vector_ops):
  it, _, _ = kernel(t)
  return vectorize(expand(Kernel(it.ast).apply_all(opts).ast), native)


def run_on_c(t: Tensor, opts: list[Opt]):
  """The kernels of `t` run on the C runtime, the last one with `opts`: (its KernelProgram, the output buffer)."""
  it, out, before = kernel(t)
  rt = get_runtime("c")
  for prev in before:
    p = lower(prev.ast, as_target("c"))
    rt.compile(p.src, p.name)(*[buffers.storage(b) for b in prev.bufs], global_size=p.global_size)
  prg = lower(it.ast, as_target("c"), opts)
  rt.compile(prg.src, prg.name)(*[buffers.storage(b) for b in it.bufs], global_size=prg.global_size)
  return prg, out


def ops(ast, op):
  return [n for n in ast.toposort() if n.op is op]


def c(a: np.ndarray) -> Tensor: return Tensor(a, device="c")


def test_contiguous_access_is_one_vector_load_and_store():
  a, b = RNG.standard_normal((4, 32), dtype=np.float32), RNG.standard_normal((4, 32), dtype=np.float32)
  ast = vectorized(c(a) + c(b), [Opt("VECTOR", 1, 16)])
  loads = ops(ast, Ops.LOAD)
  assert len(loads) == 2 and all(ld.dtype.count == 16 for ld in loads)
  (st,) = ops(ast, Ops.STORE)
  assert st.src[2].dtype.count == 16 and not ops(ast, Ops.VECTORIZE)


def test_strided_access_is_a_gather_and_a_scalar_is_broadcast():
  a = RNG.standard_normal((32, 8), dtype=np.float32)
  ast = vectorized(c(a).transpose(0, 1) * 3.0, [Opt("VECTOR", 1, 16)])
  gathers = [v for v in ops(ast, Ops.VECTORIZE) if len(v.src) == 16]
  assert gathers and all(s.op is Ops.LOAD and s.dtype.count == 1 for s in gathers[0].src)
  broadcasts = [v for v in ops(ast, Ops.VECTORIZE) if len(v.src) == 1]
  assert broadcasts and broadcasts[0].src[0].op is Ops.CONST


def test_vectorized_reduce_axis_ends_in_a_horizontal_sum():
  a = RNG.standard_normal((4, 64), dtype=np.float32)
  ast = vectorized(c(a).sum(1), [Opt("VECTOR", 1, 16)])
  (red,) = ops(ast, Ops.REDUCE)
  assert red.dtype.count == 16 and len(ops(ast, Ops.GEP)) == 16
  (st,) = ops(ast, Ops.STORE)
  assert st.src[2].dtype.count == 1


def test_ops_without_vector_form_go_lane_by_lane():
  a = RNG.standard_normal((2, 16), dtype=np.float32)
  native = vectorized(c(a).exp(), [Opt("VECTOR", 1, 16)])
  assert any(n.dtype.count == 16 for n in ops(native, Ops.EXP2))
  lanes = vectorized(c(a).exp(), [Opt("VECTOR", 1, 16)], native=CRenderer.vector_ops - {Ops.EXP2})
  assert len(ops(lanes, Ops.EXP2)) == 16 and all(n.dtype.count == 1 for n in ops(lanes, Ops.EXP2))


CASES = {
  "matmul": (lambda a, b: a @ b, [(24, 32), (32, 48)],
             [Opt("VECTOR", 1, 16), Opt("UPCAST", 1, 3), Opt("UPCAST", 0, 4)]),
  "where_max": (lambda a, b: (a < b).where(a.maximum(b), -a) * 2.0, [(8, 32), (8, 32)], [Opt("VECTOR", 1, 8)]),
  "row_softmax": (lambda a, b: (a - b).exp(), [(6, 64), (6, 1)], [Opt("VECTOR", 1, 16)]),
  "sum_rows": (lambda a, b: (a * b).sum(1), [(5, 64), (5, 64)], [Opt("VECTOR", 1, 16), Opt("UPCAST", 0, 5)]),
  "max_rows": (lambda a, b: (a + b).max(1), [(3, 32), (3, 32)], [Opt("VECTOR", 1, 8)]),
  "int_cast": (lambda a, b: (a * 4.0).cast(__import__("tgc").dtypes.int32).cast(__import__("tgc").dtypes.float32)
               + b, [(2, 16), (2, 16)], [Opt("VECTOR", 1, 16)]),
  "gather": (lambda a, b: a.transpose(0, 1) + b, [(16, 4), (4, 16)], [Opt("VECTOR", 1, 16)]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_vector_kernels_compute_what_numpy_computes(name):
  fn, shapes, opts = CASES[name]
  arrays = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
  want = fn(*[Tensor(x, device="numpy") for x in arrays]).numpy()
  prg, out = run_on_c(fn(*[c(x) for x in arrays]), opts)
  assert re.search(r"tg_[fiu]32x\d", prg.function), "the kernel was not vectorized"
  # float32 sums in another order than numpy's: a few roundings of the terms' size apart (32 terms of about 1)
  np.testing.assert_allclose(to_numpy(out), want, rtol=2e-6, atol=1e-5)


@pytest.mark.parametrize("opts", [[Opt("VECTOR", 1, 8)], []], ids=["vector", "scalar"])
def test_max_against_a_constant_keeps_nan_without_testing_for_it(opts):
  """A ReLU's or a clip's bound is a number: `k > x ? k : x` is max(x, k) and lets a NaN x through, with no x != x."""
  x = RNG.standard_normal((4, 32)).astype(np.float32)
  x[0, :5] = [np.nan, -np.nan, np.inf, -np.inf, -0.0]
  x[3, 7] = np.nan
  fn = lambda t: t.maximum(0.0) + (-t).maximum(-1.5) + t.clip(-0.25, 0.75)  # noqa: E731
  want = fn(Tensor(x, device="numpy")).numpy()
  prg, out = run_on_c(fn(c(x)), opts)
  assert "!=" not in prg.function
  np.testing.assert_array_equal(np.isnan(to_numpy(out)), np.isnan(want))
  np.testing.assert_allclose(to_numpy(out), want, rtol=1e-6)


@pytest.mark.parametrize("opts", [[Opt("VECTOR", 1, 8)], []], ids=["vector", "scalar"])
def test_max_of_converted_integers_needs_no_nan_test(opts):
  """A max of 8-bit values converted to float (a max pooling of dequantized values) cannot meet a NaN: no x != x;
  a max of a float input beside them keeps its test and lets the input's NaN through."""
  q = RNG.integers(0, 256, (4, 3, 32)).astype(np.uint8)
  x = RNG.standard_normal((4, 32)).astype(np.float32)
  x[1, 3] = np.nan
  pooled = lambda t: t.cast(dtypes.float32).max(axis=1)  # noqa: E731
  want = pooled(Tensor(q, device="numpy")).numpy()
  prg, out = run_on_c(pooled(c(q)), opts)
  assert "!=" not in prg.function
  np.testing.assert_array_equal(to_numpy(out), want)
  mixed = lambda t, u: t.cast(dtypes.float32).max(axis=1).maximum(u)  # noqa: E731
  want = mixed(Tensor(q, device="numpy"), Tensor(x, device="numpy")).numpy()
  prg, out = run_on_c(mixed(c(q), c(x)), opts)
  np.testing.assert_array_equal(np.isnan(to_numpy(out)), np.isnan(want))
  np.testing.assert_array_equal(to_numpy(out)[~np.isnan(want)], want[~np.isnan(want)])


DRIVER = """
void run(float *o, const float *x, int n) {
  int i;
  for (i = 0; i < n; i += %(n)d) *(tg_f32x%(n)du *)(o + i) = %(fn)s(*(const tg_f32x%(n)du *)(x + i));
}
"""


def run_helper(tmp_path, helpers: list[str], fn: str, lanes: int, compile_cmd: list[str],
               x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """`fn` (a vector helper of `lanes` float32 lanes, defined by `helpers`) applied to `x` in a shared object built
  strictly by `compile_cmd` (compiler and flags): (x padded with zeros to whole vectors, the results)."""
  src = "\n".join(["#include <math.h>", SIMD_PRELUDE, _typedefs("f32", lanes), _typedefs("i32", lanes), *helpers,
                   DRIVER % {"n": lanes, "fn": fn}])
  (tmp_path / "h.c").write_text(src)
  lib = tmp_path / "h.so"
  subprocess.run([*compile_cmd, "-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror", "-O2", "-shared", "-fPIC",
                  str(tmp_path / "h.c"), "-o", str(lib), "-lm"], check=True, capture_output=True)
  x = np.concatenate([x, np.zeros(-len(x) % lanes)]).astype(np.float32)
  out = np.empty_like(x)
  ctypes.CDLL(str(lib)).run(out.ctypes.data_as(ctypes.c_void_p), x.ctypes.data_as(ctypes.c_void_p), len(x))
  return x, out


@pytest.mark.parametrize("compiler", ["gcc", "clang"])
def test_vector_exp2_is_within_one_ulp(tmp_path, compiler):
  x, out = run_helper(tmp_path, [_exp2_helper(16)], "tg_exp2_f32x16", 16, [compiler],
                      np.concatenate([np.linspace(-160, 140, 4000), RNG.uniform(-30, 30, 4000),
                                      [np.nan, np.inf, -np.inf, 0.0, -0.0, 127.99, 128, -126, -149, -150, -149.5, 300,
                                       -300]]))
  with np.errstate(over="ignore"): want = np.exp2(x.astype(np.float64)).astype(np.float32)
  finite = np.isfinite(want) & (want != 0)
  ulps = np.abs(out[finite].view(np.int32).astype(np.int64) - want[finite].view(np.int32).astype(np.int64))
  assert ulps.max() <= 1
  np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
  np.testing.assert_array_equal(out[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="the -march levels are x86's")
@pytest.mark.parametrize("lanes, march", [(4, "x86-64"), (4, "x86-64-v2"), (8, "x86-64"), (8, "x86-64-v3")])
def test_vector_rint_rounds_half_to_even_like_rintf(tmp_path, lanes, march):
  """The vector rounding of a quantization (one vroundps where the CPU has SSE4.1 or AVX, rintf lane by lane
  elsewhere) gives numpy's rint on every lane: ties to even, the sign of zero, values too large to have a fraction,
  infinities and NaN."""
  x, out = run_helper(tmp_path, [_lanewise_helper(Ops.RINT, lanes)], f"tg_rint_f32x{lanes}", lanes,
                      ["gcc", f"-march={march}"],
                      np.concatenate([np.arange(-6, 6.5, 0.5), RNG.uniform(-300, 300, 4000), RNG.uniform(-2, 2, 1000),
                                      [np.nan, np.inf, -np.inf, 0.0, -0.0, -0.25, 2 ** 23 - 0.5, 2 ** 23 + 1,
                                       -2 ** 24, 3e38]]))
  np.testing.assert_array_equal(out.view(np.int32)[~np.isnan(x)], np.rint(x).view(np.int32)[~np.isnan(x)])
  assert np.isnan(out[np.isnan(x)]).all()


F32, U8 = dtypes.float32, dtypes.uint8
NARROW_CASES = {
  # int8 weights converted on load: one vector load of 16 bytes, one conversion
  "int8_matmul": (lambda a, w, m: a @ w.cast(F32), [Opt("VECTOR", 1, 16), Opt("UPCAST", 0, 3)]),
  # a uint8 activation written from float lanes: one conversion, one 16-byte store
  "uint8_store": (lambda a, w, m: (a * 40.0).round().clip(0, 255).cast(U8), [Opt("VECTOR", 1, 16)]),
  # a byte mask compared lane by lane (masks are 32-bit lanes)
  "byte_mask": (lambda a, w, m: (m.cast(dtypes.bool)).where(a, -1e9), [Opt("VECTOR", 1, 16)]),
}


@pytest.mark.parametrize("name", list(NARROW_CASES))
def test_narrow_integer_vectors_compute_what_numpy_computes(name):
  fn, opts = NARROW_CASES[name]
  a = RNG.standard_normal((6, 16)).astype(np.float32)
  w = RNG.integers(-128, 128, (16, 32)).astype(np.int8)
  m = RNG.integers(0, 2, (6, 16)).astype(np.uint8)
  want = fn(*[Tensor(x, device="numpy") for x in (a, w, m)]).numpy()
  prg, out = run_on_c(fn(*[c(x) for x in (a, w, m)]), opts)
  assert re.search(r"tg_[fiu]32x\d", prg.function), "the kernel was not vectorized"
  if name != "byte_mask": assert "__builtin_convertvector" in prg.function and ("x16u *)" in prg.function)
  if name == "uint8_store": assert "tg_rint_f32x16(" in prg.function and "rintf(" not in prg.function
  # sums of 16 products in another order: float32 rounding relative to the largest value
  np.testing.assert_allclose(to_numpy(out), want, rtol=2e-6, atol=1e-6 * max(1.0, float(np.abs(want).max())))


def test_gather_by_loaded_indices_reads_lane_by_lane():
  """A table indexed by values loaded as a vector (contiguous int32 indices): each lane reads its own element (the
  index is a vector value, not a function of the VECTOR range)."""
  table = np.linspace(0, 1, 256).astype(np.float32)
  idx = RNG.integers(0, 256, (4, 16)).astype(np.int32)
  t, i = c(table), c(idx)
  _, out = run_on_c(t[i], [Opt("VECTOR", 1, 8)])
  np.testing.assert_array_equal(to_numpy(out), table[idx])


def test_a_register_block_copies_its_longest_axis_outermost():
  """A matmul block of 4 rows x 2 weight vectors: the expanded stores (whose order is the order of the block's
  multiply-adds) go row by row, each row's broadcast used by both weight vectors at once, so the 2 weight vectors are
  what stays in registers, not 4 broadcast rows (codegen/expand.py)."""
  a, b = RNG.standard_normal((8, 16), dtype=np.float32), RNG.standard_normal((16, 32), dtype=np.float32)
  it, _, _ = kernel(c(a) @ c(b))
  ast = expand(Kernel(it.ast).apply_all([Opt("VECTOR", 1, 16), Opt("UPCAST", 1, 2), Opt("UPCAST", 0, 4)]).ast)
  stores = [s for s in ast.toposort() if s.op is Ops.STORE]
  rows = [next(ld for ld in s.src[2].toposort() if ld.op is Ops.LOAD and ld.src[0].arg[0] == 1) for s in stores]
  assert len(stores) == 8 and [rows.index(r) for r in rows] == [0, 0, 2, 2, 4, 4, 6, 6]
