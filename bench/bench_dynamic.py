"""Sizes known only at run time: one artifact for every size against an artifact compiled for each size alone.

- `encoder`: examples/encoder_any_length.py (a transformer encoder layer, T = 1..256 tokens), compiled once with T
  as a `Variable` and once per measured length with T fixed (same weights: the model function is seeded).
- `corpus`: the corpus models with open dims (bench/corpus.py entries with `dims`: a BERT encoder of any sequence
  length, the PP-OCRv4 recognizer of any line width), compiled once with `--dim` and once per measured size with
  the dim pinned; both checked against onnxruntime at each size (max abs error over the largest reference value).

Both are C artifacts (--cpu native, one thread), timed in interleaved rounds on the same inputs; the tables give
each latency and the ratio dynamic / static (the issue's bar: within 1.15x).
Run: python bench/bench_dynamic.py [encoder|corpus ...] [--sizes 16 128 256] [--runs 100] [--rounds 3].
Prints markdown tables."""
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


def timed(arts: dict, feeds: dict, runs: int, rounds: int) -> dict[str, float]:
  """The best of `rounds` medians of `runs` runs of each artifact, the artifacts taking turns. A run is the
  library's run call (`Artifact.time`, as `tgc bench` times it): the Python loader's checks of the inputs, which
  cost a dynamic artifact some microseconds more per call, are made once, as a C program sets its sizes once."""
  times: dict[str, list[float]] = {name: [] for name in arts}
  for _ in range(rounds):
    for name, art in arts.items():
      times[name].append(statistics.median(art.time(feeds, runs, 5)))
  return {name: min(ts) for name, ts in times.items()}


def encoder(args) -> None:
  from tgc.aot.compile import compile_model
  from tgc.runtimes.artifact_c import CArtifact
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
      best = timed({"dynamic": dynamic, "fixed": fixed}, feeds, args.runs, args.rounds)
      d, s = best["dynamic"], best["fixed"]
      rows.append((t, d * 1e3, s * 1e3, d / s, same))
      fixed.close()
    dynamic.close()
  print("| T | one artifact, T = 1..256 (ms) | compiled for T alone (ms) | ratio | max difference |")
  print("|---|---|---|---|---|")
  for t, d, s, r, same in rows: print(f"| {t} | {d:.3f} | {s:.3f} | **{r:.2f}x** | {same:.1e} |")
  print(f"geometric mean of the ratios: {np.exp(np.mean(np.log([r[3] for r in rows]))):.2f}x")


def _sized_entry(e: dict, values: dict[str, int]) -> dict:
  """The corpus entry with its open dims set to `values` (inputs' shapes as the model gets them)."""
  from tgc.runtimes.dims import evaluate_size
  specs = []
  for spec in e["inputs"]:
    given = e.get("input_shapes", {}).get(spec["name"])     # sizes as multiples: 32*h
    if given: shape = [evaluate_size(d, values) for d in given]
    else:
      shape = list(spec["shape"])
      for axis, name in spec.get("open", {}).items(): shape[int(axis)] = values[name]
    specs.append({**spec, "shape": shape})
  return {**e, "inputs": specs}


def _error(got: dict, ref: dict) -> float:
  worst = 0.0
  for name, want in ref.items():
    want, have = np.asarray(want, np.float64), np.asarray(got[name], np.float64)
    worst = max(worst, float(np.abs(have - want).max()) / max(1.0, float(np.abs(want).max())))
  return worst


def corpus_models(args) -> None:
  sys.path.insert(0, os.path.join(ROOT, "bench"))
  import corpus
  from tgc.aot.compile import compile_model
  from tgc.runtimes.artifact_c import CArtifact
  folder = args.corpus or corpus.DEFAULT_OUT
  entries = [e for e in corpus.entries(folder) if e.get("dims") and (not args.only or e["name"] in args.only)]
  print("| model | sizes | one artifact (ms) | compiled for the size alone (ms) | ratio | error vs onnxruntime "
        "(one / alone) |")
  print("|---|---|---|---|---|---|")
  ratios = []
  for e in entries:
    path = corpus.model_path(folder, e)
    dims = {name: tuple(rng) for name, rng in e["dims"].items()}
    with tempfile.TemporaryDirectory() as tmp:
      compile_model(path, "c", os.path.join(tmp, "dynamic"), cpu="native", dims=dims,
                    input_shapes=e.get("input_shapes"))
      dynamic = CArtifact(os.path.join(tmp, "dynamic"))
      picks = [np.linspace(lo, hi, 3).round().astype(int).tolist() for lo, hi in dims.values()]
      for values in [dict(zip(dims, vals)) for vals in zip(*picks)]:
        sized = _sized_entry(e, values)
        feeds = corpus.feeds(sized)
        fixed_dir = os.path.join(tmp, "fixed_" + "_".join(map(str, values.values())))
        shapes = {spec["name"]: tuple(spec["shape"]) for spec in sized["inputs"]}
        compile_model(path, "c", fixed_dir, cpu="native", input_shapes=shapes)
        fixed = CArtifact(fixed_dir)
        session = corpus.ort_session(path, 1)
        ref = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
        errors = (_error(dynamic.run(feeds), ref), _error(fixed.run(feeds), ref))
        best = timed({"dynamic": dynamic, "fixed": fixed}, feeds, args.runs, args.rounds)
        fixed.close()
        ratio = best["dynamic"] / best["fixed"]
        ratios.append(ratio)
        text = ", ".join(f"{k}={v}" for k, v in values.items())
        print(f"| {e['name']} | {text} | {best['dynamic'] * 1e3:.3f} | {best['fixed'] * 1e3:.3f} | **{ratio:.2f}x** | "
              f"{errors[0]:.1e} / {errors[1]:.1e} |", flush=True)
      dynamic.close()
  if ratios: print(f"geometric mean of the ratios: {np.exp(np.mean(np.log(ratios))):.2f}x, worst {max(ratios):.2f}x")


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("parts", nargs="*", choices=["encoder", "corpus"], default=["encoder", "corpus"])
  ap.add_argument("--sizes", type=int, nargs="+", default=[16, 128, 256], help="encoder lengths")
  ap.add_argument("--only", nargs="+", metavar="NAME", help="corpus models to run (default: every open-dim one)")
  ap.add_argument("--corpus", default=None, help="corpus folder (default: bench/corpus.py's)")
  ap.add_argument("--runs", type=int, default=100)
  ap.add_argument("--rounds", type=int, default=3)
  args = ap.parse_args()
  print(f"load average: {os.getloadavg()[0]:.2f}", file=sys.stderr)
  if "encoder" in args.parts: encoder(args)
  if "corpus" in args.parts: corpus_models(args)


if __name__ == "__main__":
  main()
