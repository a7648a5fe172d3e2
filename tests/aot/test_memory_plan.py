"""The arena memory plan of compiled models, checked from the outside: a chain of equal-size layers reuses memory
(the arena holds at most 3 of them), and an independent verifier (written here; it shares nothing with
codegen/memory.py) proves that no two buffers that are live at the same time overlap, over random graphs traced
through the Tensor API and over random call lists given to the planner directly."""
from __future__ import annotations
import numpy as np
import pytest
from hypothesis import given, settings, HealthCheck, strategies as st

from tgc.frontend import Tensor
from tgc.frontend.jit import trace
from tgc.codegen.compiled import BufferKind, CompiledModel, compile_schedule
from tgc.codegen.memory import plan_memory

DEVICE = "numpy"   # tracing needs no compiler; kernels are lowered for C but never compiled here


def compile_traced(fn, *inputs: Tensor) -> CompiledModel:
  cap = trace(fn, *inputs)
  return compile_schedule("plan", "c", cap.items, [(s.name, b) for s, b in cap.inputs],
                          [(s.name, b) for s, b in cap.outputs],
                          [(f"w{i}", b, a) for i, (b, a) in enumerate(cap.weights.items())])


def lifetimes(calls: list[list[int]], planned: set[int]) -> dict[int, tuple[int, int]]:
  """Buffer -> (first call, last call) that touches it, for the planned buffers."""
  out: dict[int, tuple[int, int]] = {}
  for i, bufs in enumerate(calls):
    for b in bufs:
      if b in planned: out[b] = (out[b][0], i) if b in out else (i, i)
  return out


def verify_plan(calls: list[list[int]], spans: dict[int, tuple[int, int]], arena_bytes: int) -> None:
  """`spans[b]` = (offset, nbytes). Every planned buffer lies inside the arena, and any two whose lifetimes
  intersect occupy disjoint byte ranges."""
  live = lifetimes(calls, set(spans))
  assert set(live) == set(spans), "a planned buffer is never used, or a used one is not planned"
  for b, (offset, nbytes) in spans.items():
    assert offset >= 0 and offset + nbytes <= arena_bytes, f"buffer {b} [{offset}, {offset + nbytes}) outside arena"
  keys = sorted(spans)
  for i, a in enumerate(keys):
    for b in keys[i + 1:]:
      (fa, la), (fb, lb) = live[a], live[b]
      if la < fb or lb < fa: continue          # never live together
      (oa, na), (ob, nb) = spans[a], spans[b]
      if na == 0 or nb == 0: continue
      assert oa + na <= ob or ob + nb <= oa, (f"buffers {a} (calls {fa}..{la}, bytes {oa}..{oa + na}) and {b} "
                                             f"(calls {fb}..{lb}, bytes {ob}..{ob + nb}) overlap while both live")


def verify_compiled(cm: CompiledModel) -> None:
  arena = {i: (b.offset, b.nbytes) for i, b in enumerate(cm.buffers) if b.kind is BufferKind.ARENA}
  calls = [c.buffers for c in cm.calls]
  for c in calls:
    assert all(0 <= i < len(cm.buffers) for i in c)
  verify_plan(calls, arena, cm.arena_bytes)
  peak = max((sum(arena[b][1] for b, (f, l) in lifetimes(calls, set(arena)).items() if f <= i <= l)
              for i in range(len(calls))), default=0)
  assert cm.arena_bytes >= peak


@pytest.mark.parametrize("layers", [4, 8, 16])
def test_chain_of_equal_layers_reuses_memory(layers):
  rng = np.random.default_rng(layers)
  width, batch = 64, 4
  ws = [Tensor(rng.standard_normal((width, width), dtype=np.float32), device=DEVICE) for _ in range(layers)]

  def model(x):
    for w in ws: x = (x @ w).relu()
    return x
  cm = compile_traced(model, Tensor(rng.standard_normal((batch, width), dtype=np.float32), device=DEVICE))
  layer_bytes = batch * width * 4
  arena = [b for b in cm.buffers if b.kind is BufferKind.ARENA]
  assert len(arena) >= layers - 1 and all(b.nbytes == layer_bytes for b in arena)
  assert cm.arena_bytes <= 3 * layer_bytes, f"arena {cm.arena_bytes} bytes for {layers} layers of {layer_bytes}"
  verify_compiled(cm)


@st.composite
def random_models(draw):
  """A random DAG of Tensor ops: matmuls that change the width, reductions broadcast back (kernel breaks),
  elementwise joins of earlier values and explicit contiguous() boundaries; several outputs."""
  batch = draw(st.sampled_from([1, 3, 8]))
  width0 = draw(st.sampled_from([4, 16, 40]))
  steps = draw(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 30), st.integers(0, 30),
                                  st.sampled_from([4, 8, 24, 64])), min_size=1, max_size=14))
  extra_outputs = draw(st.lists(st.integers(0, 30), max_size=2))
  seed = draw(st.integers(0, 1000))
  return batch, width0, steps, extra_outputs, seed


def build_random(batch, width0, steps, extra_outputs, seed):
  rng = np.random.default_rng(seed)

  def model(x):
    nodes = [x]
    for kind, i, j, width in steps:
      a, b = nodes[i % len(nodes)], nodes[j % len(nodes)]
      if kind == 0:
        w = Tensor(rng.standard_normal((a.shape[1], width), dtype=np.float32), device=DEVICE)
        nodes.append((a @ w).relu())
      elif kind == 1: nodes.append(a.sum(axis=1, keepdim=True) * b + 1.0)
      elif kind == 2: nodes.append((a * 0.5).contiguous() + 1.0)
      else: nodes.append(a + b if a.shape == b.shape else a.max(axis=1, keepdim=True) - b)
    outs = [nodes[-1]] + [nodes[k % len(nodes)] for k in extra_outputs]
    return outs
  return model, Tensor(rng.standard_normal((batch, width0), dtype=np.float32), device=DEVICE)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_models())
def test_random_graphs_never_overlap_live_buffers(case):
  model, x = build_random(*case)
  verify_compiled(compile_traced(model, x))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 40).flatmap(lambda n: st.tuples(
  st.lists(st.lists(st.integers(0, n - 1), min_size=1, max_size=5), min_size=1, max_size=30),
  st.lists(st.integers(0, 5000), min_size=n, max_size=n))))
def test_planner_on_random_call_lists(case):
  calls, sizes = case
  used = {b for c in calls for b in c}
  slots, arena = plan_memory(calls, {b: sizes[b] for b in used})
  assert {s.key for s in slots} == used
  verify_plan(calls, {s.key: (s.offset, s.nbytes) for s in slots}, arena)


def test_verifier_catches_an_overlap():
  with pytest.raises(AssertionError, match="overlap"):
    verify_plan([[0, 1], [1]], {0: (0, 100), 1: (64, 100)}, 200)
  verify_plan([[0], [1]], {0: (0, 100), 1: (0, 100)}, 100)   # not live together: reuse is fine
