"""Tests of the C runtime: kernels compiled with cc and run through ctypes, byte-exact copies, the disk cache of
shared objects (reuse, and concurrent compiles of one source from several processes), and its errors."""
from __future__ import annotations
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tgc.runtimes import c
from tgc.runtimes import CompileError, LaunchError, RuntimeUnavailable, get_runtime
from tgc.runtimes.base import forget_runtime
from tgc.runtimes.c import C_FLAGS, CRuntime

REPO_ROOT = Path(__file__).resolve().parents[2]

VECTOR_ADD = """
void vector_add(float* restrict data0, const float* restrict data1, const float* restrict data2, int tg_lo, int tg_hi) {
  for (int i = tg_lo; i < tg_hi; i++) data0[i] = data1[i] + data2[i];
}
"""

MULTIPLY_ADD = """
void multiply_add(float* restrict data0, const float* restrict data1, const float* restrict data2,
                  const float* restrict data3, int tg_lo, int tg_hi) {
  (void)tg_lo; (void)tg_hi;
  for (int i = 0; i < 4096; i++) data0[i] = data1[i] * data2[i] + data3[i];
}
"""

WITH_LIBM = """
#include <math.h>
void with_libm(double* restrict data0, const double* restrict data1, int tg_lo, int tg_hi) {
  (void)tg_lo; (void)tg_hi;
  for (int i = 0; i < 64; i++) data0[i] = exp(data1[i]) + sqrt(fabs(data1[i]));
}
"""

EMPTY_SIZES = """
void empty_sizes(float* restrict data0, const float* restrict data1, int* restrict data2, int tg_lo, int tg_hi) {
  (void)tg_lo; (void)tg_hi;
  for (int i = 0; i < 0; i++) data0[i] = data1[i];
  data2[0] = 7;
}
"""

SCALE = """
void scale(float* restrict data0, const float* restrict data1, int tg_lo, int tg_hi) {
  (void)tg_lo; (void)tg_hi;
  for (int i = 0; i < 256; i++) data0[i] = data1[i] * 3.0f;
}
"""


def upload(runtime, array: np.ndarray):
  buf = runtime.alloc(array.nbytes)
  runtime.copyin(buf, array)
  return buf


def test_vector_add_matches_numpy(c_runtime):
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal(1000).astype(np.float32), rng.standard_normal(1000).astype(np.float32)
  out = c_runtime.alloc(4000)
  program = c_runtime.compile(VECTOR_ADD, "vector_add")
  assert program(out, upload(c_runtime, a), upload(c_runtime, b), global_size=(1000, 1, 1)) is None
  np.testing.assert_array_equal(c_runtime.copyout(out).view(np.float32), a + b)


def test_launch_runs_the_whole_task_loop(c_runtime):
  """A launch passes the task range [0, global_size[0]) after the buffers."""
  a = np.arange(1000, dtype=np.float32)
  out = c_runtime.alloc(4000)
  c_runtime.copyin(out, np.full(1000, -1, np.float32))
  program = c_runtime.compile(VECTOR_ADD, "vector_add")
  program(out, upload(c_runtime, a), upload(c_runtime, a), global_size=(600, 1, 1))
  got = c_runtime.copyout(out).view(np.float32)
  np.testing.assert_array_equal(got[:600], 2 * a[:600])
  assert (got[600:] == -1).all()


def test_no_fused_multiply_add(c_runtime):
  """-ffp-contract=off: a*b+c rounds twice, exactly as numpy computes it."""
  assert "-ffp-contract=off" in C_FLAGS
  rng = np.random.default_rng(1)
  a, b, c = (rng.standard_normal(4096).astype(np.float32) for _ in range(3))
  out = c_runtime.alloc(a.nbytes)
  c_runtime.compile(MULTIPLY_ADD, "multiply_add")(out, *(upload(c_runtime, x) for x in (a, b, c)))
  np.testing.assert_array_equal(c_runtime.copyout(out).view(np.float32), a * b + c)


def test_source_with_its_own_headers_links_libm(c_runtime):
  x = np.linspace(-3, 3, 64)
  out = c_runtime.alloc(x.nbytes)
  c_runtime.compile(WITH_LIBM, "with_libm")(out, upload(c_runtime, x))
  np.testing.assert_allclose(c_runtime.copyout(out).view(np.float64), np.exp(x) + np.sqrt(np.abs(x)), rtol=1e-15)


def test_zero_size_buffers(c_runtime):
  empty_out, empty_in, flag = c_runtime.alloc(0), c_runtime.alloc(0), c_runtime.alloc(4)
  assert empty_out.nbytes == 0
  c_runtime.copyin(empty_in, np.zeros(0, np.float32))
  c_runtime.copyin(empty_in, b"")
  c_runtime.compile(EMPTY_SIZES, "empty_sizes")(empty_out, empty_in, flag)
  result = c_runtime.copyout(empty_out)
  assert result.dtype == np.uint8 and result.shape == (0,)
  assert c_runtime.copyout(flag).view(np.int32)[0] == 7


@pytest.mark.parametrize("dtype", [np.uint8, np.float16, np.float32, np.float64, np.int64, np.bool_])
@pytest.mark.parametrize("count", [1, 3, 1001])
def test_copy_round_trip(c_runtime, dtype, count):
  rng = np.random.default_rng(count)
  data = rng.integers(0, 256, count * np.dtype(dtype).itemsize, dtype=np.uint8).view(dtype)
  if dtype == np.bool_:
    data = data.astype(np.uint8).view(np.bool_) & True
  buf = upload(c_runtime, data)
  out = c_runtime.copyout(buf)
  assert out.dtype == np.uint8 and out.shape == (data.nbytes,)
  assert out.tobytes() == data.tobytes()
  out[:] = 0  # copyout returns a copy, not the device memory
  assert c_runtime.copyout(buf).tobytes() == data.tobytes()


def test_copyin_accepts_memoryviews_and_non_contiguous_arrays(c_runtime):
  matrix = np.arange(24, dtype=np.int32).reshape(4, 6)
  transposed = upload(c_runtime, matrix.T)
  assert c_runtime.copyout(transposed).view(np.int32).tolist() == matrix.T.ravel().tolist()
  buf = c_runtime.alloc(8)
  c_runtime.copyin(buf, memoryview(b"abcdefgh"))
  assert c_runtime.copyout(buf).tobytes() == b"abcdefgh"
  c_runtime.copyin(buf, memoryview(np.array([1.5, -2.0], np.float32)))
  assert c_runtime.copyout(buf).view(np.float32).tolist() == [1.5, -2.0]


def test_copyin_size_must_match(c_runtime):
  buf = c_runtime.alloc(16)
  with pytest.raises(ValueError, match="12 bytes into a buffer of 16 bytes"):
    c_runtime.copyin(buf, np.zeros(3, np.float32))


def test_buffers_are_aligned(c_runtime):
  for nbytes in (0, 1, 7, 64, 1000):
    assert c_runtime.alloc(nbytes).array.ctypes.data % 64 == 0


def test_timing_is_a_positive_float(c_runtime):
  program = c_runtime.compile(SCALE, "scale")
  out, src = c_runtime.alloc(1024), upload(c_runtime, np.ones(256, np.float32))
  seconds = program(out, src, global_size=(4, 1, 1), local_size=(2, 1, 1), wait=True)
  assert isinstance(seconds, float) and seconds > 0
  c_runtime.synchronize()
  assert np.all(c_runtime.copyout(out).view(np.float32) == 3.0)


def test_compile_error_names_the_kernel(c_runtime):
  with pytest.raises(CompileError, match="kernel 'broken' failed to compile") as info:
    c_runtime.compile("void broken(float* restrict data0) { data0[0] = undefined_name; }", "broken")
  assert info.value.kernel_name == "broken"
  assert "undefined_name" in str(info.value)


def test_missing_function_is_a_compile_error(c_runtime):
  with pytest.raises(CompileError, match="'absent'"):
    c_runtime.compile(SCALE, "absent")


def test_kernel_name_must_be_an_identifier(c_runtime):
  with pytest.raises(ValueError, match="not a C identifier"):
    c_runtime.compile(SCALE, "scale; rm")


def test_foreign_buffers_are_refused(c_runtime, tmp_path):
  other = CRuntime(cache_dir=str(tmp_path))
  program = c_runtime.compile(SCALE, "scale")
  with pytest.raises(LaunchError, match="argument 1"):
    program(c_runtime.alloc(1024), other.alloc(1024))
  with pytest.raises(ValueError):
    c_runtime.copyout(other.alloc(4))


def test_disk_cache_is_reused_without_invoking_the_compiler(tmp_path, monkeypatch):
  first = CRuntime(cache_dir=str(tmp_path))
  first.compile(SCALE, "scale")
  [shared_object] = list(tmp_path.glob("*.so"))
  mtime = shared_object.stat().st_mtime_ns

  second = CRuntime(cache_dir=str(tmp_path))  # a fresh process-like instance: empty in-memory cache

  def no_compiler(*args, **kwargs):
    raise AssertionError(f"compiler invoked: {args}")
  monkeypatch.setattr(c.subprocess, "run", no_compiler)
  program = second.compile(SCALE, "scale")
  out = second.alloc(1024)
  program(out, upload(second, np.full(256, 2.0, np.float32)))
  assert np.all(second.copyout(out).view(np.float32) == 6.0)
  assert shared_object.stat().st_mtime_ns == mtime
  assert second.compile(SCALE, "scale") is program  # in-memory cache


def test_cache_key_depends_on_source_flags_and_compiler(tmp_path, monkeypatch):
  runtime = CRuntime(cache_dir=str(tmp_path))
  key = runtime.cache_key(SCALE)
  assert key == runtime.cache_key(SCALE) and len(key) == 64
  assert key != runtime.cache_key(SCALE + "\n")
  monkeypatch.setattr(c, "C_FLAGS", C_FLAGS + ("-g",))
  assert key != runtime.cache_key(SCALE)
  monkeypatch.setattr(c, "C_FLAGS", C_FLAGS)
  monkeypatch.setattr(runtime, "compiler_version", runtime.compiler_version + " patched")
  assert key != runtime.cache_key(SCALE)


def test_parallel_processes_compile_the_same_source(tmp_path):
  script = (
    "import sys, time\n"
    "import numpy as np\n"
    "from tgc.runtimes.c import CRuntime\n"
    "runtime = CRuntime(cache_dir=sys.argv[1])\n"
    "time.sleep(max(0.0, float(sys.argv[2]) - time.time()))\n"
    f"program = runtime.compile({SCALE!r}, 'scale')\n"
    "out, src = runtime.alloc(1024), runtime.alloc(1024)\n"
    "runtime.copyin(src, np.arange(256, dtype=np.float32))\n"
    "program(out, src)\n"
    "print(float(runtime.copyout(out).view(np.float32).sum()))\n"
  )
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
  start_at = str(time.time() + 1.5)
  workers = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path), start_at], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
  results = [worker.communicate(timeout=120) for worker in workers]
  for worker, (stdout, stderr) in zip(workers, results):
    assert worker.returncode == 0, stderr
    assert float(stdout) == 3.0 * sum(range(256))
  assert len(list(tmp_path.glob("*.so"))) == 1
  assert not list(tmp_path.glob(".*")), "temporary files left in the cache"


def test_get_runtime_is_a_cached_singleton(tgc_cache_dir):
  forget_runtime("c")    # made afresh under the session's cache root (a test before may have moved the root)
  runtime = get_runtime("c")
  assert runtime is get_runtime("c") and runtime.name == "c"
  assert runtime.cache_dir == os.path.join(tgc_cache_dir, "c")
  with pytest.raises(ValueError, match="unknown runtime 'fortran'"):
    get_runtime("fortran")


def test_a_forgotten_runtime_is_made_again_with_the_cache_root_of_then(tgc_cache_dir, tmp_path, monkeypatch):
  from tgc.ir.config import config
  from tgc.runtimes.base import forget_runtime
  old = get_runtime("c")
  monkeypatch.setattr(config, "cache_dir", str(tmp_path))
  forget_runtime("c")
  try:
    fresh = get_runtime("c")
    assert fresh is not old and fresh.cache_dir == os.path.join(str(tmp_path), "c")
  finally:
    monkeypatch.undo()
    forget_runtime("c")
  assert get_runtime("c").cache_dir == os.path.join(tgc_cache_dir, "c")


def test_missing_compiler_is_unavailable(tmp_path):
  with pytest.raises(RuntimeUnavailable, match="no-such-cc"):
    CRuntime(cache_dir=str(tmp_path), compiler="no-such-cc")
