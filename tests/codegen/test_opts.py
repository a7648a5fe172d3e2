"""Opt actions change the loop nest, never the result: every opt on C and OpenCL against the numpy reference."""
import numpy as np
import pytest
from tgc.frontend import Tensor, buffers
from tgc.frontend.realize import _alloc, to_numpy
from tgc.codegen.schedule import schedule
from tgc.codegen.lower import lower
from tgc.codegen.target import as_target
from tgc.codegen.opts import Opt, Kernel, OptError
from tgc.runtimes import get_runtime
from tgc.ir import Ops

A = np.random.default_rng(0).standard_normal((16, 48), dtype=np.float32)
B = np.random.default_rng(1).standard_normal((48, 24), dtype=np.float32)


def run_with(t: Tensor, device: str, opts) -> np.ndarray:
  items, outs = schedule([t.uop], _alloc(device))
  assert len(items) == 1
  prg = lower(items[0].ast, as_target(device), opts)
  fn = get_runtime(device).load(prg)
  fn(*[buffers.storage(b) for b in items[0].bufs], global_size=prg.global_size, local_size=prg.local_size)
  get_runtime(device).synchronize()
  return to_numpy(outs[0])


CASES = [
  ("matmul", [Opt("UPCAST", 0, 4)]), ("matmul", [Opt("UPCAST", 1, 8), Opt("UPCAST", 0, 2)]),
  ("matmul", [Opt("UNROLL", 0, 4)]), ("matmul", [Opt("UPCAST", 1, 4), Opt("UNROLL", 0, 3)]),
  ("matmul", [Opt("LOCAL", 1, 8)]), ("matmul", [Opt("LOCAL", 0, 16)]), ("matmul", [Opt("GROUP", 0, 16)]),
  ("sum", [Opt("GROUP", 0, 48)]), ("sum", [Opt("UNROLL", 0, 2), Opt("GROUP", 0, 8)]), ("sum", [Opt("UPCAST", 0, 16)]),
]


@pytest.mark.parametrize("device", ["c", "opencl"])
@pytest.mark.parametrize("what,opts", CASES, ids=[f"{w}-{o}" for w, o in CASES])
def test_opt_keeps_result(device, what, opts):
  a, b = Tensor(A, device=device), Tensor(B, device=device)
  t, ref = ((a @ b), A @ B) if what == "matmul" else (a.sum(axis=1), A.sum(axis=1))
  np.testing.assert_allclose(run_with(t, device, opts), ref, rtol=1e-4, atol=1e-4)


def test_bad_opts_raise():
  items, _ = schedule([(Tensor(A, device="numpy") @ Tensor(B, device="numpy")).uop], _alloc("numpy"))
  k = Kernel(items[0].ast)
  maxed = Kernel(schedule([Tensor(A, device="numpy").max(axis=1).uop], _alloc("numpy"))[0][0].ast)
  with pytest.raises(OptError): maxed.apply(Opt("UNROLL", 0, 5))   # 5 does not divide 48 (only sums are padded)
  with pytest.raises(OptError): k.apply(Opt("UNROLL", 3, 2))     # no such reduce axis
  with pytest.raises(OptError): k.apply(Opt("LOCAL", 0, 4)).apply(Opt("GROUP", 0, 4))


@pytest.mark.parametrize("opts", [[Opt("VECTOR", 1, 16)], [Opt("VECTOR", 1, 16), Opt("UPCAST", 0, 4)],
                                  [Opt("VECTOR", 1, 8), Opt("UPCAST", 1, 3)]])
def test_padded_vector_of_an_output_axis(opts):
  """A VECTOR need not divide an output axis (21 columns in vectors of 16 or 8): the last vector's extra lanes
  recompute the last column and store nothing."""
  a, b = Tensor(A, device="c"), Tensor(B[:, :21].copy(), device="c")
  np.testing.assert_allclose(run_with(a @ b, "c", opts), A @ B[:, :21], rtol=1e-4, atol=1e-4)


def test_padded_unroll_of_a_sum():
  """An UNROLL need not divide a sum's axis (48 in copies of 5 or 7): the copies past its end add zero."""
  a, b = Tensor(A, device="c"), Tensor(B, device="c")
  for n in (5, 7): np.testing.assert_allclose(run_with(a @ b, "c", [Opt("UNROLL", 0, n)]), A @ B, rtol=1e-4, atol=1e-4)


def test_padded_vector_of_a_reduce_axis():
  """A VECTOR need not divide a reduce axis (48 keys in vectors of 32, of 16 along the 24 of a max): the last
  vector's loads are masked and its lanes past the end take the reduction's identity (0 for a sum, -inf for a max)."""
  a, b = Tensor(A, device="c"), Tensor(B, device="c")
  np.testing.assert_allclose(run_with(a @ b, "c", [Opt("VECTOR", 2, 32)]), A @ B, rtol=1e-4, atol=1e-4)
  low = Tensor(-np.abs(B), device="c")      # every value below 0: a lane past the end taking 0 would win the max
  np.testing.assert_allclose(run_with(low.max(axis=1), "c", [Opt("VECTOR", 1, 16)]), (-np.abs(B)).max(axis=1))
  items, _ = schedule([(Tensor(A, device="numpy") @ Tensor(B, device="numpy")).uop], _alloc("numpy"))
  with pytest.raises(OptError): Kernel(items[0].ast).apply(Opt("VECTOR", 2, 24))     # lanes: a power of two


def test_padded_upcast_of_an_output_axis():
  """An UPCAST need not divide an output axis either (16 rows in blocks of 6): the last block's extra copies store
  nothing."""
  a, b = Tensor(A, device="c"), Tensor(B, device="c")
  opts = [Opt("VECTOR", 1, 8), Opt("UPCAST", 0, 6)]
  np.testing.assert_allclose(run_with(a @ b, "c", opts), A @ B, rtol=1e-4, atol=1e-4)


def test_merged_loops_step_as_one():
  """MERGE joins an NCHW image's height and width into one loop of 196 pixels when every access steps through them
  as one (a 1x1 conv): no division is left, the 196 pixels take vectors of 16 (the last padded), and the result is
  unchanged. A padded 3x3 conv gates its loads on the height and the width apart: the merge does not apply."""
  x = np.random.default_rng(2).standard_normal((1, 8, 14, 14), dtype=np.float32)
  w = np.random.default_rng(3).standard_normal((16, 8, 1, 1), dtype=np.float32)
  conv = Tensor(x, device="c").conv2d(Tensor(w, device="c"))
  items, _ = schedule([conv.uop], _alloc("c"))
  merged = Kernel(items[0].ast).apply(Opt("MERGE", 1, 2))
  assert [r.src[0].arg for r in merged.ranges()] == [16, 196, 8]
  assert not any(n.op in (Ops.IDIV, Ops.MOD) for n in merged.ast.toposort())
  want = np.einsum("oc,nchw->nohw", w[:, :, 0, 0], x)
  for opts in ([Opt("MERGE", 1, 2)], [Opt("MERGE", 1, 2), Opt("VECTOR", 1, 16), Opt("UPCAST", 0, 4)]):
    np.testing.assert_allclose(run_with(conv, "c", opts), want, rtol=1e-4, atol=1e-4)
  w3 = np.random.default_rng(4).standard_normal((16, 8, 3, 3), dtype=np.float32)
  items, _ = schedule([Tensor(x, device="c").conv2d(Tensor(w3, device="c"), padding=1).uop], _alloc("c"))
  with pytest.raises(OptError): Kernel(items[0].ast).apply(Opt("MERGE", 1, 2))
  with pytest.raises(OptError): Kernel(items[0].ast).apply(Opt("MERGE", 1, 1))      # no other axis
