"""The machine's roofline, measured: the peak rate of vector multiply-adds on one core at a vector width (a C loop of
independent FMA chains built by the C runtime) and the bandwidth of a large copy. A kernel's attainable time is the
larger of its arithmetic at the peak and its traffic at the bandwidth; the fraction of the roofline it reaches is
that time over the time it took."""
from __future__ import annotations
import ctypes
import functools
import time
from dataclasses import dataclass
import numpy as np

CHAINS = 12          # independent accumulators: enough to hide the FMA latency on every core measured
_PEAK_SOURCE = """
#if defined(__clang__)
#pragma clang fp contract(fast)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=fast")
#endif
typedef float tg_v __attribute__((vector_size({vector_bytes})));
void tg_peak(float *out, int n) {{
  tg_v b = out[0] + (tg_v){{0}}, c = out[1] + (tg_v){{0}};
  {declare}
  for (int i = 0; i < n; i++) {{
    {step}
  }}
  tg_v s = (tg_v){{0}};
  {total}
  for (int l = 0; l < (int)(sizeof(tg_v) / sizeof(float)); l++) out[2] += s[l];
}}
"""


@dataclass(frozen=True)
class Roofline:
  """Peak GFLOP/s of one core at a vector width and the copy bandwidth in GB/s."""
  gflops: float
  gbytes: float

  def fraction(self, ops: float, nbytes: float, seconds: float) -> float:
    """The fraction of the roofline a kernel doing `ops` operations and moving `nbytes` bytes in `seconds` reaches."""
    if seconds <= 0: return 0.0
    best = max(ops / (self.gflops * 1e9), nbytes / (self.gbytes * 1e9))
    return min(1.0, best / seconds)


def _peak_source(vector_bytes: int) -> str:
  names = [f"a{i}" for i in range(CHAINS)]
  return _PEAK_SOURCE.format(
    vector_bytes=vector_bytes,
    declare=" ".join(f"tg_v {a} = b * (float){i + 1};" for i, a in enumerate(names)),
    step=" ".join(f"{a} = {a} * b + c;" for a in names),
    total=" ".join(f"s += {a};" for a in names))


def peak_gflops(vector_bytes: int, flags: tuple[str, ...] = (), runtime=None, seconds: float = 0.05) -> float:
  """GFLOP/s of independent vector FMA chains of `vector_bytes` on the calling thread (best of five), built with the
  compiler `flags` of the kernels it is compared with: without -mprefer-vector-width=512, clang splits 64-byte
  vectors into two 32-byte halves, and an AVX-512 core with two FMA ports then measures half its peak."""
  from tgc.runtimes.c import CRuntime
  runtime = runtime or CRuntime()
  program = runtime.compile(_peak_source(vector_bytes), "tg_peak", flags)
  out = np.array([1.0000001, 1e-7, 0.0], dtype=np.float32)
  fn = program.function
  fn.argtypes = [ctypes.c_void_p, ctypes.c_int]
  n = 1 << 16
  while True:     # a loop long enough to time
    start = time.perf_counter()
    fn(out.ctypes.data, n)
    if time.perf_counter() - start > seconds / 5 or n > 1 << 30: break
    n *= 4
  best = min(_timed(lambda: fn(out.ctypes.data, n)) for _ in range(5))
  return 2 * CHAINS * (vector_bytes // 4) * n / best / 1e9


def copy_gbytes(nbytes: int = 64 << 20) -> float:
  """GB/s moved (read plus write) by copying an array larger than the caches (best of five)."""
  src = np.ones(nbytes // 4, dtype=np.float32)
  dst = np.empty_like(src)
  np.copyto(dst, src)
  best = min(_timed(lambda: np.copyto(dst, src)) for _ in range(5))
  return 2 * nbytes / best / 1e9


@functools.lru_cache(maxsize=None)
def measure(vector_bytes: int, flags: tuple[str, ...] = ()) -> Roofline:
  """The roofline of this machine's core at `vector_bytes` for code built with `flags` (measured once per
  process)."""
  return Roofline(peak_gflops(vector_bytes, flags), copy_gbytes())


def _timed(fn) -> float:
  start = time.perf_counter()
  fn()
  return time.perf_counter() - start
