"""Sizes known only at run time: one artifact for every length against an artifact compiled for each length alone.
The model is examples/encoder_any_length.py (a transformer encoder layer, T = 1..256 tokens): compiled once with T
as a `Variable`, and once per measured length with T fixed (same weights: the model function is seeded). Both are
C artifacts (--cpu native, one thread), timed in interleaved rounds on the same inputs; the table gives each
latency and the ratio dynamic / static (the issue's bar: within 1.15x).
Run: python bench/bench_dynamic.py [--sizes 16 128 256] [--runs 100] [--rounds 3]. Prints a markdown table."""
from __future__ import annotations
import argparse
import os
import statistics
import sys
import tempfile
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "encoder_any_length.py")
FIXED = """import sys
sys.path.insert(0, {folder!r})
from encoder_any_length import DIM, EncoderLayer
from tgc import Tensor


def build():
  return EncoderLayer(), {{"tokens": Tensor.empty(1, {t}, DIM)}}
"""


def main():
  ap = argparse.ArgumentParser(description=__doc__)
  ap.add_argument("--sizes", type=int, nargs="+", default=[16, 128, 256])
  ap.add_argument("--runs", type=int, default=100)
  ap.add_argument("--rounds", type=int, default=3)
  args = ap.parse_args()
  from tgc.aot.compile import compile_model
  from tgc.runtimes.artifact import time_runs
  from tgc.runtimes.artifact_c import CArtifact
  print(f"load average: {os.getloadavg()[0]:.2f}", file=sys.stderr)
  with tempfile.TemporaryDirectory() as tmp:
    compile_model(f"{EXAMPLE}:build", "c", os.path.join(tmp, "dynamic"), cpu="native")
    dynamic = CArtifact(os.path.join(tmp, "dynamic"))
    rows = []
    for t in args.sizes:
      path = os.path.join(tmp, f"fixed_{t}.py")
      with open(path, "w", encoding="utf-8") as f: f.write(FIXED.format(folder=os.path.dirname(EXAMPLE), t=t))
      compile_model(f"{path}:build", "c", os.path.join(tmp, f"fixed_{t}"), name="encoder_fixed", cpu="native")
      fixed = CArtifact(os.path.join(tmp, f"fixed_{t}"))
      feeds = {"tokens": np.random.default_rng(t).standard_normal((1, t, 64)).astype(np.float32)}
      same = np.abs(dynamic.run(feeds)["output_0"] - fixed.run(feeds)["output_0"]).max()
      times = {"dynamic": [], "fixed": []}
      for _ in range(args.rounds):
        for name, art in (("dynamic", dynamic), ("fixed", fixed)):
          times[name].append(statistics.median(time_runs(lambda a=art: a.run(feeds), args.runs, 5)))
      d, s = min(times["dynamic"]), min(times["fixed"])
      rows.append((t, d * 1e3, s * 1e3, d / s, same))
      fixed.close()
    dynamic.close()
  print("| T | one artifact, T = 1..256 (ms) | compiled for T alone (ms) | ratio | max difference |")
  print("|---|---|---|---|---|")
  for t, d, s, r, same in rows: print(f"| {t} | {d:.3f} | {s:.3f} | **{r:.2f}x** | {same:.1e} |")
  print(f"geometric mean of the ratios: {np.exp(np.mean(np.log([r[3] for r in rows]))):.2f}x")


if __name__ == "__main__":
  main()
