"""Gathers by a data-dependent index are indexed loads: the `where(index == range, value, 0)` sum the Tensor API
builds for take/Gather/embeddings/advanced indexing leaves no reduction over the table in the kernel, and the
values match numpy, negative indices and out-of-range ones (zeros) included."""
import numpy as np
import pytest
from tgc.frontend import Tensor
from tgc.frontend.realize import _alloc
from tgc.codegen.schedule import schedule
from tgc.ir import Ops, dtypes

TABLE = np.random.default_rng(0).standard_normal((50, 8)).astype(np.float32)
INDEX = np.array([[3, 0, -1], [49, 7, 12]], dtype=np.int32)


def reductions(t: Tensor) -> int:
  items, _ = schedule([t.uop], _alloc("numpy"))
  return sum(n.op is Ops.REDUCE for it in items for n in it.ast.toposort())


def test_embedding_lookup_has_no_reduction():
  t = Tensor(TABLE)[Tensor(INDEX)]
  assert reductions(t) == 0


@pytest.mark.parametrize("device", ["numpy", "c"])
def test_embedding_lookup_values(device):
  got = Tensor(TABLE, device=device)[Tensor(INDEX, device=device)] * 2
  np.testing.assert_array_equal(got.numpy(), TABLE[INDEX] * 2)


def test_out_of_range_indices_select_nothing():
  """A lazy graph cannot raise on data: an index past the end gives zeros, and the load stays in bounds."""
  idx = np.array([0, 50, -51, 1000], dtype=np.int32)
  got = Tensor(TABLE, device="c")[Tensor(idx, device="c")].numpy()
  np.testing.assert_array_equal(got[0], TABLE[0])
  assert not got[1:].any()


def test_gather_along_an_inner_axis():
  x = np.random.default_rng(1).standard_normal((4, 6, 5)).astype(np.float32)
  idx = np.random.default_rng(2).integers(0, 6, (4, 3, 5)).astype(np.int32)
  t = Tensor(x, device="c").gather(1, Tensor(idx, device="c"))
  assert reductions(t) == 0
  np.testing.assert_array_equal(t.numpy(), np.take_along_axis(x, idx, 1))


def test_arange_is_an_index_not_data():
  """Integer aranges carry no buffer: a kernel comparing against one sees its loop index."""
  a = Tensor.arange(2, 20, 3)
  assert a.uop.op is not Ops.BUFFER and Ops.ARANGE in {n.op for n in a.uop.toposort()}
  np.testing.assert_array_equal(a.numpy(), np.arange(2, 20, 3))
  assert Tensor.arange(5, dtype=dtypes.int64).numpy().dtype == np.int64
  np.testing.assert_array_equal(Tensor.arange(0.0, 1.0, 0.25).numpy(), np.arange(0, 1, 0.25, dtype=np.float32))
