"""Concatenations stored by one kernel per piece (codegen/pieces.py): each part computes only its piece, the parts
write disjoint parts of one buffer, and the values are numpy's."""
from __future__ import annotations
import numpy as np
import pytest
from tgc.frontend import Tensor
from tgc.frontend.realize import _alloc
from tgc.codegen.schedule import schedule
from tgc.ir import Ops

RNG = np.random.default_rng(0)


def _arr(*shape): return RNG.standard_normal(shape).astype(np.float32)


def _items(t: Tensor):
  items, _ = schedule([t.uop], _alloc("numpy"))
  return items


def test_each_piece_is_a_kernel_without_selects():
  """Three heads of a detector, each a sigmoid of its own map, concatenated along the rows: three kernels writing
  rows 0-15, 16-19 and 20 of one buffer, none evaluating another head's sigmoid."""
  heads = [Tensor(_arr(1, n, 6)).sigmoid() for n in (16, 4, 1)]
  items = _items(Tensor.cat(*heads, dim=1))
  assert len(items) == 3 and len({id(it.bufs[0]) for it in items}) == 1
  for it in items:
    assert not any(n.op is Ops.WHERE for n in it.ast.toposort())
    assert sum(n.op is Ops.EXP2 for n in it.ast.toposort()) == 1
    assert len(it.bufs) == 2      # the output and its own head's input only


def test_pads_are_not_cut():
  """A zero-padded map is one kernel (its gates select a constant, not another computed value)."""
  assert len(_items(Tensor(_arr(1, 4, 8, 8)).exp().pad(((0, 0), (0, 0), (1, 1), (1, 1))))) == 1


@pytest.mark.parametrize("device", ["numpy", "c"])
@pytest.mark.parametrize("dim", [0, 1, 2])
def test_concatenations_compute_what_numpy_computes(device, dim):
  shapes = [[4, 5, 6], [4, 5, 6], [4, 5, 6]]
  for s, extra in zip(shapes, (3, 1, 7)): s[dim] = extra
  arrays = [_arr(*s) for s in shapes]
  ts = [Tensor(a, device=device) for a in arrays]
  got = Tensor.cat(ts[0].exp(), ts[1] * 2, ts[2].relu(), dim=dim).numpy()
  want = np.concatenate([np.exp(arrays[0]), arrays[1] * 2, np.maximum(arrays[2], 0)], axis=dim)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _upsample2(x: Tensor) -> Tensor:
  """A linear upsampling by 2 along the last axis as a stack of its two phases (how Resize is imported)."""
  n = x.shape[-1]
  left = x.pad(((0, 0), (1, 0)), mode="edge")[:, :n]
  right = x.pad(((0, 0), (0, 1)), mode="edge")[:, 1:]
  return Tensor.stack([x * 0.75 + left * 0.25, x * 0.75 + right * 0.25], -1).reshape(x.shape[0], 2 * n)


def test_a_stack_of_phases_is_cut_by_phase():
  """Output x = 2q + r is phase r's value at q: one kernel per phase, storing every other element and computing
  only its own phase (three exps: the element, its neighbour or at the edge itself; not the six of both phases)."""
  items = _items(_upsample2(Tensor(_arr(3, 8)).exp()))
  assert len(items) == 2
  for it in items: assert sum(n.op is Ops.EXP2 for n in it.ast.toposort()) == 3


@pytest.mark.parametrize("device", ["numpy", "c"])
def test_phases_compute_what_numpy_computes(device):
  a = _arr(3, 8)
  got = _upsample2(Tensor(a, device=device).exp()).numpy()
  e = np.exp(a)
  left, right = np.concatenate([e[:, :1], e[:, :-1]], 1), np.concatenate([e[:, 1:], e[:, -1:]], 1)
  want = np.stack([e * 0.75 + left * 0.25, e * 0.75 + right * 0.25], -1).reshape(3, 16)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", ["numpy", "c"])
def test_a_concatenation_of_phases_and_a_value_is_cut_along_both(device):
  """An upsampled map (a stack of two phases) concatenated with another map along the rows: one kernel per phase of
  the first piece and one for the second (which has no phases: left whole), three in all, each computing its own
  values only; and numpy's values."""
  a, b = _arr(3, 8), _arr(2, 16)
  out = Tensor.cat(_upsample2(Tensor(a, device=device).exp()), Tensor(b, device=device).sigmoid(), dim=0)
  items, _ = schedule([out.uop], _alloc(device))
  assert len(items) == 3
  assert sorted(sum(n.op is Ops.EXP2 for n in it.ast.toposort()) for it in items) == [1, 3, 3]   # sigmoid: one
  e = np.exp(a)
  left, right = np.concatenate([e[:, :1], e[:, :-1]], 1), np.concatenate([e[:, 1:], e[:, -1:]], 1)
  up = np.stack([e * 0.75 + left * 0.25, e * 0.75 + right * 0.25], -1).reshape(3, 16)
  np.testing.assert_allclose(out.numpy(), np.concatenate([up, 1 / (1 + np.exp(-b))]), rtol=1e-5, atol=1e-6)
