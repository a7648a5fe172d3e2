"""Scheduler edge cases that once went wrong: a buffer whose loads were all simplified away, size-1 reductions."""
import numpy as np
import pytest
from tgc.frontend import Tensor
from tgc.ir import dtypes


@pytest.mark.parametrize("device", ["c", "opencl"])
def test_unused_buffer_after_simplification(device):
  x = np.arange(1, 7, dtype=np.float32).reshape(2, 3) / 4
  t = Tensor(x, device=device)
  cond = Tensor.full((2, 3), False, dtypes.bool, device)
  z = Tensor(np.array([0.], np.float32), device=device).reshape(1, 1).expand(2, 3)
  np.testing.assert_allclose(cond.where(z, t.sum(-1, keepdim=True) + t).numpy(), x.sum(-1, keepdims=True) + x)


@pytest.mark.parametrize("device", ["c", "opencl"])
def test_reduce_over_size_one_axis(device):
  a = np.random.default_rng(0).standard_normal((3, 1), dtype=np.float32)
  b = np.random.default_rng(1).standard_normal((1, 2), dtype=np.float32)
  np.testing.assert_allclose((Tensor(a, device=device) @ Tensor(b, device=device)).numpy(), a @ b, rtol=1e-6)
  np.testing.assert_allclose(Tensor(a, device=device).max(axis=1).numpy(), a.max(axis=1))


def test_comparisons_with_nan_are_false():
  x = np.array([np.nan, 1, 2], np.float32)
  for op in ("__le__", "__ge__", "__lt__", "__gt__"):
    np.testing.assert_array_equal(getattr(Tensor(x, device="c"), op)(1.0).numpy(), getattr(x, op)(1.0))
