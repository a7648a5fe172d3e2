"""BEAM search time against the speed it reaches: each model compiled with the heuristics, then tuned with growing
search budgets (`tgc tune --beam-budget S`, a fresh search cache and compiled-kernel cache each time so that no
budget inherits another's measurements or builds) and compiled with the tuning file; every artifact timed against
onnxruntime (one thread) in the same process, interleaved.

    python bench/bench_beam.py resnet18 --budgets 60 180 600
    python bench/bench_beam.py mnist_cnn mlp_b64 --budgets 30 60 --jobs 2

Models are bench_cpu.py's. Per row: the budget, the search's wall time, the kernels it changed, tgc and onnxruntime
medians (wall time) and the ratio of medians of wall and of CPU time (the calling thread's: steadier on a shared
machine). Measure on a quiet machine: the load average is printed."""
from __future__ import annotations
import argparse
import os
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_cpu  # noqa: E402  (puts the repository and the model builders on sys.path)
import onnx  # noqa: E402


def measure(name: str, budgets: list[float], jobs: int, runs: int, work: str) -> list[dict]:
  from tgc.aot.compile import compile_model
  from tgc.aot.tune import SearchOptions, tune_model
  from tgc.ir.config import config
  from tgc.runtimes import base as runtime_base
  from tgc.runtimes.artifact_c import CArtifact
  model, feeds, description = bench_cpu.build_model(name)
  path = os.path.join(work, f"{name}.onnx")
  onnx.save(model, path)
  ort = bench_cpu.ort_session(model, 1)
  rows = []
  for budget in [0.0] + budgets:
    out, tuning = os.path.join(work, f"{name}_{budget:g}"), None
    row = {"model": name, "description": description, "budget_s": budget, "search_s": 0.0, "tuned": 0}
    if budget:
      config.cache_dir = tempfile.mkdtemp(prefix="tgc-beam-cache-", dir=work)
      runtime_base.forget_runtime("c")     # and compiled candidates are not reused from an earlier search either
      tuning = out + ".json"
      start = time.perf_counter()
      report = tune_model(path, "c", tuning, "native", beam=2, search=SearchOptions(budget=budget, jobs=jobs))
      row["search_s"] = time.perf_counter() - start
      row["tuned"] = sum(1 for k in report.kernels if k.result is not None and k.result.seconds < k.result.baseline)
    start = time.perf_counter()
    compile_model(path, "c", out, force=True, cpu="native", search=SearchOptions(tuning=tuning))
    row["compile_s"] = time.perf_counter() - start
    art = CArtifact(out, cache_dir=os.path.join(work, "libs"))
    try: t = bench_cpu.interleaved({"tgc": lambda: art.run(feeds), "ort": lambda: ort.run(None, feeds)}, runs)
    finally: art.close()
    row.update(tgc_s=t["tgc"][0], ort_s=t["ort"][0], ratio=t["tgc"][0] / t["ort"][0],
               ratio_cpu=t["tgc"][1] / t["ort"][1])
    rows.append(row)
    print(f"{name}: budget {budget:g} s: {row['ratio']:.2f}x onnxruntime", file=sys.stderr, flush=True)
  return rows


def markdown(rows: list[dict]) -> str:
  lines = ["| model | search budget | search took s | kernels changed | `tgc compile` s | tgc ms | onnxruntime 1t ms | "
           "**tgc / ort** | tgc / ort (CPU time) |", "|---|---|---|---|---|---|---|---|---|"]
  for r in rows:
    budget = "heuristics" if not r["budget_s"] else f"{r['budget_s']:g} s"
    lines.append(f"| {r['description']} | {budget} | {r['search_s']:.0f} | {r['tuned']} | {r['compile_s']:.1f} | "
                 f"{r['tgc_s'] * 1e3:.3f} | {r['ort_s'] * 1e3:.3f} | **{r['ratio']:.2f}** | {r['ratio_cpu']:.2f} |")
  info = bench_cpu.machine()
  lines.append(f"\n{info['date']}; {info['cpu']} ({info['level']}), {info['cores']} cores, 1-minute load "
               f"{info['load_1min']:.2f} at the end; C compiler {info['cc']}; onnxruntime {info['onnxruntime']}")
  return "\n".join(lines)


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("models", nargs="*", help=f"some of: {', '.join(bench_cpu.MODELS)} (default: resnet18)")
  ap.add_argument("--budgets", type=float, nargs="+", default=[60, 180, 600], help="search budgets in seconds")
  ap.add_argument("--jobs", type=int, default=2, help="compiler calls at once while searching")
  ap.add_argument("--runs", type=int, default=20, help="timed rounds per artifact")
  ap.add_argument("--keep", metavar="DIR", help="write the ONNX files, tuning files and artifacts here")
  args = ap.parse_args(argv)
  warnings.simplefilter("ignore")
  work = args.keep or tempfile.mkdtemp(prefix="tgc-bench-beam-")
  os.makedirs(work, exist_ok=True)
  rows = [r for name in (args.models or ["resnet18"]) for r in measure(name, args.budgets, args.jobs, args.runs, work)]
  print(markdown(rows))
  return 0


if __name__ == "__main__":
  sys.exit(main())
