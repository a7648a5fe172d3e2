"""The main job on the bundled example: compile the example CNN for each available device, validate it against
the numpy interpreter on fresh seeded random inputs, and time it. Exit code 1 if an output is off tolerance."""
from __future__ import annotations
import os
import statistics
import sys
import time
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np  # noqa: E402
from tgc import Tensor  # noqa: E402
from tgc.frontend.jit import jit, trace  # noqa: E402
from tgc.frontend.nn import get_state_dict  # noqa: E402
from examples.mnist_cnn import build  # noqa: E402

RTOL, ATOL = 1e-4, 1e-4


def main() -> int:
  model, (x,) = build("c")
  cap = trace(model, x)
  print(f"example CNN: {len(cap.items)} kernels, {len(cap.weights)} weight tensors, "
        f"{sum(v.nbytes for v in cap.weights.values())} weight bytes")
  failed = False
  for device in ("c", "opencl"):
    try:
      for k, v in get_state_dict(model).items(): _set(model, k, v.to(device))
      step = jit(model)
      ts = []
      worst = 0.0
      for i in range(6):
        inp = np.random.default_rng(100 + i).standard_normal((1, 1, 28, 28), dtype=np.float32)
        t0 = time.perf_counter()
        out = step(Tensor(inp, device=device)).numpy()
        ts.append(time.perf_counter() - t0)
        ref = _reference(model, inp)
        worst = max(worst, float(np.abs(out - ref).max()))
        if not np.allclose(out, ref, rtol=RTOL, atol=ATOL): failed = True
      print(f"{device:7s} max abs error vs numpy interpreter {worst:.2e}  "
            f"replay median {statistics.median(ts[2:]) * 1e3:.3f} ms  {'OK' if not failed else 'FAIL'}")
    except Exception as e:  # a device that is not installed is reported, not fatal
      print(f"{device:7s} unavailable: {str(e).splitlines()[0]}")
  return 1 if failed else 0


def _set(obj, dotted: str, value):
  *path, last = dotted.split(".")
  for p in path: obj = getattr(obj, p)
  setattr(obj, last, value)


def _reference(model, inp: np.ndarray) -> np.ndarray:
  state = get_state_dict(model)
  saved = {k: v for k, v in state.items()}
  for k, v in saved.items(): _set(model, k, v.to("numpy"))
  try: return model(Tensor(inp, device="numpy")).numpy()
  finally:
    for k, v in saved.items(): _set(model, k, v)


if __name__ == "__main__":
  sys.exit(main())
