"""jit: call 1 eager, call 2 captures, 3+ replay without building graph; errors as users know them; trace."""
import math
import numpy as np
import pytest
from tgc.frontend import Tensor
from tgc.frontend.jit import jit, trace, JitError
from tgc.ir import UOp


def rnd(*shape, seed=0, device="c"):
  return Tensor(np.random.default_rng(seed).standard_normal(shape, dtype=np.float32) + 0.5, device=device)


@pytest.mark.parametrize("device", ["c", "opencl"])
def test_replay_matches_and_builds_no_graph(device):
  if device == "opencl": pytest.importorskip("pyopencl")
  w = rnd(8, 4, seed=9, device=device)
  f = jit(lambda x: (x @ w).relu())
  for i in range(4):
    x = rnd(3, 8, seed=i, device=device)
    before = UOp.created
    out = f(x)
    if i >= 2: assert UOp.created == before, "replay built new UOps"
    np.testing.assert_allclose(out.numpy(), np.maximum(x.numpy() @ w.numpy(), 0), rtol=1e-5, atol=1e-5)


def test_lazy_input_refused():
  f = jit(lambda x: x * 2)
  x = rnd(4)
  f(x); f(rnd(4, seed=1))
  with pytest.raises(JitError, match=r"JIT inputs must be real buffers; use \.clone\(\)"):
    f(rnd(4) + 1)


def test_duplicate_inputs():
  f = jit(lambda a, b: a + b)
  x = rnd(4)
  with pytest.raises(JitError, match="duplicate inputs to JIT"): f(x, x)


def test_nested_jit_refused():
  inner = jit(lambda x: x + 1)
  outer = jit(lambda x: inner(x) * 2)
  with pytest.raises(JitError, match="nested jit"): outer(rnd(4))


def test_nothing_to_jit():
  f = jit(lambda x: 3)
  f(rnd(4))
  with pytest.raises(JitError, match="didn't JIT anything!"): f(rnd(4, seed=2))


@pytest.mark.parametrize("bad", [lambda: rnd(5), lambda: rnd(4).cast(__import__("ir").dtypes.int32).realize()])
def test_args_mismatch_on_replay(bad):
  f = jit(lambda x: x * 2)
  f(rnd(4)); f(rnd(4, seed=1))
  with pytest.raises(JitError, match="mismatch"): f(bad())


def test_trace_is_target_independent_and_folds_weights():
  w = rnd(8, 4, seed=3)
  cap = trace(lambda x: (x @ (w.exp() * 2)).relu(), rnd(2, 8))
  assert [s.name for s, _ in cap.inputs] == ["input_0"] and [s.shape for s, _ in cap.outputs] == [(2, 4)]
  assert len(cap.weights) == 1 and len(cap.items) == 1
  from tgc.codegen.lower import lower
  from tgc.codegen.target import as_target
  for target in ("c", "opencl"): assert "void" in lower(cap.items[0].ast, as_target(target)).src


def test_dtype_a_device_lacks_is_a_clear_error(monkeypatch):
  pytest.importorskip("pyopencl")
  from tgc.frontend import realize
  x = rnd(4, device="opencl")
  monkeypatch.setattr(realize, "unsupported_dtypes", lambda device: {__import__("ir").dtypes.float64})
  with pytest.raises(TypeError, match="dtype float64 is not supported on device opencl"):
    x.cast(__import__("ir").dtypes.float64).numpy()


def test_trace_gives_every_output_its_own_buffer():
  """Outputs that hash-cons to one graph (x+1 twice), or that are an input, still get distinct output buffers."""
  x = Tensor(np.arange(3, dtype=np.float32), device="numpy")
  cap = trace(lambda x: [x + 1, x + 1, x], x)
  bufs = [b for _, b in cap.outputs]
  assert len(set(bufs)) == 3 and cap.inputs[0][1] not in bufs
  assert len(cap.items) == 3        # one kernel for x+1, a copy for its second use, a copy of the input


def test_matmul_broadcast_over_batch_packs_the_weights_once():
  """x (T, 1, K) @ w (K, M), as an RNN's input projection over T steps: w's panels are packed once, at trace time,
  and broadcast over T as index math; no buffer holds a copy of w per step. Checked against numpy."""
  from tgc.codegen.knobs import MATMUL_PACK_MIN, MATMUL_PANEL
  k, m, steps = MATMUL_PACK_MIN, 2 * MATMUL_PANEL * 4, 9
  wn = np.random.default_rng(5).standard_normal((k, m), dtype=np.float32)
  w = Tensor(wn, device="c")
  x = rnd(steps, 1, k, seed=6)
  cap = trace(lambda x: x @ w, x)
  assert all(math.prod(b.arg[1]) < steps * k * m for b in cap.intermediates())
  assert [v.size for v in cap.weights.values()] == [k * m]
  f = jit(lambda x: (x @ w).realize())
  for seed in (7, 8, 9):
    xs = rnd(steps, 1, k, seed=seed)
    np.testing.assert_allclose(f(xs).numpy(), xs.numpy() @ wn, rtol=1e-4, atol=1e-4)


def test_weights_with_the_same_contents_are_one_buffer():
  """Two weight tensors holding the same values (a loop that carries its weights as state hands each unrolled step
  a copy) are stored once; a weight with other values stays apart."""
  a = np.random.default_rng(11).standard_normal((16, 8)).astype(np.float32)
  w1, w2, w3 = Tensor(a, device="c"), Tensor(a.copy(), device="c"), Tensor(a + 1, device="c")
  x = rnd(4, 16, seed=12)
  cap = trace(lambda x: [(x @ w1).relu() @ w2.T, x @ w3], x)
  assert sorted(v.size for v in cap.weights.values()) == [16 * 8, 16 * 8]
  f = jit(lambda x: [((x @ w1).relu() @ w2.T).realize(), (x @ w3).realize()])
  for seed in (13, 14, 15):
    xs = rnd(4, 16, seed=seed)
    y1, y2 = f(xs)
    np.testing.assert_allclose(y1.numpy(), np.maximum(xs.numpy() @ a, 0) @ a.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(y2.numpy(), xs.numpy() @ (a + 1), rtol=1e-4, atol=1e-4)
