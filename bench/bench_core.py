"""Core benchmark: float32 matmul through the C and OpenCL devices as a ratio to numpy's one-thread matmul in the
same process, and the Python overhead of building and scheduling a 10-op elementwise chain.
Run: python bench/bench_core.py [--sizes 512 1024] [--runs 5]. Prints a markdown table."""
from __future__ import annotations
import argparse
import os
import statistics
import sys
import time
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# numpy's matmul on one thread: its BLAS reads these when numpy is imported
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"): os.environ[_var] = "1"
import numpy as np  # noqa: E402
from tgc.frontend import Tensor  # noqa: E402
from tgc.frontend.realize import _alloc, get_kernel, run_items  # noqa: E402
from tgc.codegen.schedule import schedule  # noqa: E402


def time_tgc_matmul(n: int, device: str, runs: int) -> tuple[float, list]:
  rng = np.random.default_rng(0)
  a, b = (Tensor(rng.standard_normal((n, n), dtype=np.float32), device=device) for _ in range(2))
  items, outs = schedule([(a @ b).uop], _alloc(device))
  for it in items: get_kernel(it.ast, device)   # compile outside the timing
  run_items(items, device)                      # warm-up
  ts = [run_items(items, device, timing=True) for _ in range(runs)]
  got = _read(outs[0], device)
  ref = a.numpy() @ b.numpy()
  assert np.allclose(got, ref, rtol=1e-3, atol=1e-3), "matmul result mismatch"
  return min(ts), [get_kernel(it.ast, device)[0].opts for it in items]


def _read(buf, device):
  from tgc.frontend.realize import to_numpy
  return to_numpy(buf)


def time_numpy_matmul(n: int, runs: int) -> float:
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
  a @ b
  ts = []
  for _ in range(runs):
    st = time.perf_counter()
    a @ b
    ts.append(time.perf_counter() - st)
  return min(ts)


def schedule_overhead(runs: int = 50) -> float:
  """Seconds to build and schedule a 10-op elementwise chain (no kernel runs)."""
  x = Tensor(np.ones((64, 64), np.float32) * 0.5, device="c")
  ts = []
  for _ in range(runs):
    st = time.perf_counter()
    y = x
    for i in range(10): y = (y * 1.01 + 0.5) if i % 2 == 0 else y.relu()
    schedule([y.uop], _alloc("c"))
    ts.append(time.perf_counter() - st)
  return statistics.median(ts)


def main():
  ap = argparse.ArgumentParser(description=__doc__)
  ap.add_argument("--sizes", type=int, nargs="+", default=[512, 1024])
  ap.add_argument("--devices", nargs="+", default=["c", "opencl"])
  ap.add_argument("--runs", type=int, default=5)
  args = ap.parse_args()
  print("| matmul | device | tgc GFLOP/s | numpy 1-thread GFLOP/s | tgc / numpy | opts |")
  print("|---|---|---|---|---|---|")
  for n in args.sizes:
    tn = time_numpy_matmul(n, args.runs)
    for dev in args.devices:
      t, opts = time_tgc_matmul(n, dev, args.runs)
      flops = 2 * n ** 3
      print(f"| {n}x{n} | {dev} | {flops / t / 1e9:.1f} | {flops / tn / 1e9:.1f} | {tn / t:.2f} | "
            f"{'; '.join(' '.join(map(repr, o)) for o in opts)} |")
  print(f"\nbuild + schedule of a 10-op elementwise chain: {schedule_overhead() * 1e3:.2f} ms")


if __name__ == "__main__":
  main()
