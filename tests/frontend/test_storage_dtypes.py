"""Storage-only dtypes through the Tensor API on every device: held packed, computed in float32/int32, with the
same bits as ONNX's reference Cast (ir.lowp is checked against it bit for bit in tests/ir/test_lowp.py)."""
import numpy as np
import pytest
from tgc.frontend import Tensor
from tgc.ir import dtypes
from tgc.ir.lowp import encode_array, decode_array, storage_nbytes
from tgc.frontend.realize import raw_storage

LOWP = [dtypes.bfloat16, dtypes.float8e4m3fn, dtypes.float8e4m3fnuz, dtypes.float8e5m2, dtypes.float8e5m2fnuz,
        dtypes.int4, dtypes.uint4, dtypes.float4e2m1, dtypes.int2, dtypes.uint2]


def ref_roundtrip(x, d, saturate=True):
  return decode_array(encode_array(x, d, saturate), d).astype(np.float32)


@pytest.mark.parametrize("device", ["numpy", "c", "opencl"])
@pytest.mark.parametrize("dtype", LOWP, ids=lambda d: d.name)
def test_cast_in_kernel_matches_reference(device, dtype):
  x = (np.random.default_rng(3).standard_normal((5, 7)) * 3).astype(np.float32)    # 35 elements: odd
  t = Tensor(x, device=device)
  y = t.cast(dtype)
  got = (y.cast(dtypes.float32) * 2 + 1).numpy()
  np.testing.assert_array_equal(got, ref_roundtrip(x, dtype) * 2 + 1)
  # packed storage: a 4-bit tensor of 35 elements takes 18 bytes
  y.realize()
  assert raw_storage(y.uop).nbytes == storage_nbytes(dtype, 35)
  # movement on a storage-only tensor, then compute
  moved = y.permute(1, 0)[1:6:2].pad(((1, 0), (0, 2))).cast(dtypes.float32).numpy()
  expect = np.pad(ref_roundtrip(x, dtype).T[1:6:2], ((1, 0), (0, 2)))
  np.testing.assert_array_equal(moved, expect)


@pytest.mark.parametrize("device", ["numpy", "c"])
def test_host_encode_and_arithmetic_promotes(device):
  x = np.linspace(-3, 3, 11, dtype=np.float32)
  t = Tensor(x, device=device, dtype=dtypes.bfloat16)
  assert t.dtype == dtypes.bfloat16
  np.testing.assert_array_equal(t.numpy(), ref_roundtrip(x, dtypes.bfloat16))
  s = (t + 1.5)
  assert s.dtype == dtypes.float32
  np.testing.assert_array_equal(s.numpy(), ref_roundtrip(x, dtypes.bfloat16) + 1.5)


@pytest.mark.parametrize("device", ["numpy", "c"])
def test_float8_saturate_false(device):
  x = np.array([1e6, -1e6, 3.0, np.inf], np.float32)
  got = Tensor(x, device=device).cast(dtypes.float8e4m3fn, saturate=False).cast(dtypes.float32).numpy()
  np.testing.assert_array_equal(np.isnan(got), np.isnan(ref_roundtrip(x, dtypes.float8e4m3fn, saturate=False)))
