"""Tests of the OpenCL runtime on the first OpenCL device (PoCL on CPU-only machines): kernels, work-group sizes,
byte-exact copies, profiling-event timing, build errors and device information. Skipped only when pyopencl or an
OpenCL platform is missing (see the `opencl_runtime` fixture)."""
from __future__ import annotations

import numpy as np
import pytest

from tgc.runtimes import CompileError, LaunchError

VECTOR_ADD = """
__kernel void vector_add(__global float* restrict data0, __global const float* restrict data1,
                         __global const float* restrict data2) {
  int i = get_global_id(0);
  if (i < 1000) data0[i] = data1[i] + data2[i];
}
"""

LOCAL_SUM = """
__kernel void local_sum(__global float* restrict data0, __global const float* restrict data1) {
  __local float partial[64];
  int lid = get_local_id(0), group = get_group_id(0);
  partial[lid] = data1[group * 64 + lid];
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid == 0) {
    float acc = 0.0f;
    for (int i = 0; i < 64; i++) acc += partial[i];
    data0[group] = acc;
  }
}
"""

EMPTY_SIZES = """
__kernel void empty_sizes(__global float* restrict data0, __global const float* restrict data1,
                          __global int* restrict data2) {
  for (int i = 0; i < 0; i++) data0[i] = data1[i];
  data2[0] = 7;
}
"""

HALF_STORAGE = """
__kernel void half_storage(__global half* restrict data0, __global const half* restrict data1) {
  int i = get_global_id(0);
  vstore_half(vload_half(i, data1) * 2.0f, i, data0);
}
"""


def upload(runtime, array: np.ndarray):
  buf = runtime.alloc(array.nbytes)
  runtime.copyin(buf, array)
  return buf


def test_vector_add_matches_numpy(opencl_runtime):
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal(1000).astype(np.float32), rng.standard_normal(1000).astype(np.float32)
  out = opencl_runtime.alloc(4000)
  program = opencl_runtime.compile(VECTOR_ADD, "vector_add")
  assert program(out, upload(opencl_runtime, a), upload(opencl_runtime, b), global_size=(1024, 1, 1),
                 local_size=(64, 1, 1)) is None
  opencl_runtime.synchronize()
  np.testing.assert_array_equal(opencl_runtime.copyout(out).view(np.float32), a + b)


def test_global_size_counts_work_items_and_local_size_is_the_group(opencl_runtime):
  data = np.random.default_rng(1).standard_normal(256).astype(np.float32)
  out = opencl_runtime.alloc(16)
  opencl_runtime.compile(LOCAL_SUM, "local_sum")(out, upload(opencl_runtime, data), global_size=(256, 1, 1),
                                                 local_size=(64, 1, 1), wait=True)
  np.testing.assert_allclose(opencl_runtime.copyout(out).view(np.float32), data.reshape(4, 64).sum(1), rtol=1e-5)


def test_zero_size_buffers(opencl_runtime):
  empty_out, empty_in, flag = opencl_runtime.alloc(0), opencl_runtime.alloc(0), opencl_runtime.alloc(4)
  opencl_runtime.copyin(empty_in, np.zeros(0, np.float32))
  opencl_runtime.compile(EMPTY_SIZES, "empty_sizes")(empty_out, empty_in, flag, wait=True)
  result = opencl_runtime.copyout(empty_out)
  assert result.dtype == np.uint8 and result.shape == (0,)
  assert opencl_runtime.copyout(flag).view(np.int32)[0] == 7


@pytest.mark.parametrize("dtype", [np.uint8, np.float16, np.float32, np.int64])
@pytest.mark.parametrize("count", [1, 3, 1001])
def test_copy_round_trip(opencl_runtime, dtype, count):
  data = np.random.default_rng(count).integers(0, 256, count * np.dtype(dtype).itemsize, dtype=np.uint8).view(dtype)
  buf = upload(opencl_runtime, data)
  out = opencl_runtime.copyout(buf)
  assert out.dtype == np.uint8 and out.tobytes() == data.tobytes()


def test_copyin_accepts_memoryviews_and_checks_sizes(opencl_runtime):
  buf = opencl_runtime.alloc(8)
  opencl_runtime.copyin(buf, memoryview(b"abcdefgh"))
  assert opencl_runtime.copyout(buf).tobytes() == b"abcdefgh"
  opencl_runtime.copyin(buf, np.arange(4, dtype=np.int16).reshape(2, 2).T)
  assert opencl_runtime.copyout(buf).view(np.int16).tolist() == [0, 2, 1, 3]
  with pytest.raises(ValueError, match="4 bytes into a buffer of 8 bytes"):
    opencl_runtime.copyin(buf, np.zeros(1, np.float32))


def test_half_storage_with_float_math(opencl_runtime):
  data = np.linspace(-4, 4, 32).astype(np.float16)
  out = opencl_runtime.alloc(data.nbytes)
  opencl_runtime.compile(HALF_STORAGE, "half_storage")(out, upload(opencl_runtime, data), global_size=(32, 1, 1),
                                                       wait=True)
  np.testing.assert_array_equal(opencl_runtime.copyout(out).view(np.float16), data * 2)


def test_timing_is_a_positive_float(opencl_runtime):
  program = opencl_runtime.compile(VECTOR_ADD, "vector_add")
  bufs = [opencl_runtime.alloc(4000) for _ in range(3)]
  seconds = program(*bufs, global_size=(1000, 1, 1), local_size=(1, 1, 1), wait=True)
  assert isinstance(seconds, float) and seconds > 0


def test_programs_are_cached_in_memory(opencl_runtime):
  assert opencl_runtime.compile(VECTOR_ADD, "vector_add") is opencl_runtime.compile(VECTOR_ADD, "vector_add")


def test_compile_error_names_the_kernel(opencl_runtime):
  source = "__kernel void broken(__global float* data0) { data0[0] = undefined_name; }"
  with pytest.raises(CompileError, match="kernel 'broken' failed to compile") as info:
    opencl_runtime.compile(source, "broken")
  assert info.value.kernel_name == "broken"
  assert "undefined_name" in str(info.value)


def test_missing_kernel_is_a_compile_error(opencl_runtime):
  with pytest.raises(CompileError, match="'absent'"):
    opencl_runtime.compile(VECTOR_ADD, "absent")


def test_launch_errors_name_the_kernel(opencl_runtime):
  program = opencl_runtime.compile(VECTOR_ADD, "vector_add")
  bufs = [opencl_runtime.alloc(4000) for _ in range(3)]
  with pytest.raises(LaunchError, match="'vector_add' takes 3 arguments, got 2"):
    program(*bufs[:2])
  with pytest.raises(LaunchError, match="'vector_add' with global"):
    program(*bufs, global_size=(100, 1, 1), local_size=(64, 1, 1), wait=True)  # 64 does not divide 100


def test_device_information(opencl_runtime):
  info = opencl_runtime.device_info()
  assert opencl_runtime.device_name and info["name"] == opencl_runtime.device_name
  assert info["max_work_group_size"] >= 1 and info["local_mem_size"] > 0
  assert isinstance(info["has_fp16"], bool) and isinstance(info["has_fp64"], bool)
  assert opencl_runtime.name == "opencl"
