"""The corpus benchmark: every model of the benchmark corpus (bench/corpus.py: torch, transformers, paddle2onnx,
tf2onnx, quantized, recurrent, detection and zoo graphs) compiled to a C artifact and timed against onnxruntime on
the same inputs, with one and two threads; the geometric mean, the worst model, and each model's slowest kernel with
the fraction of this machine's roofline it reaches (runtimes/roofline.py).

    python bench/corpus.py build                      # once: writes bench/.corpus (see corpus-requirements.txt)
    python bench/bench_corpus.py                      # every model, markdown
    python bench/bench_corpus.py gpt2 ppocr_det       # some of them
    python bench/bench_corpus.py --cpu x86-64-v3      # kernels for another CPU level
    python bench/bench_corpus.py --mask-cpuid         # ... and onnxruntime as on an AVX2 machine too
    python bench/bench_corpus.py --json rows.json     # the rows as JSON too

Per model: `tgc compile` (target c, heuristics), every output against onnxruntime's (max abs error relative to the
largest reference value), then interleaved timing of the one-thread engines (one run of each in turn, after warm-up;
medians), then each two-thread engine in blocks of its own (TWO_THREAD_BLOCKS each, in turn: the fastest block of
each), then profiled runs of the artifact (-DTG_PROFILE, each launch's median over 3-7 runs): its slowest kernel,
and the kernels below 10% of the roofline that take 5% of the run or more. With `--mask-cpuid` the whole run sees
x86-64-v3's CPUID (bench/cpuid_mask.py): onnxruntime runs its AVX2 kernels, not the AVX-512 or VNNI ones of a newer
machine, against artifacts compiled with `--cpu x86-64-v3`. A model that fails to compile or run is listed with its
error and left out of the means. Measure on a quiet machine: the load average is printed with the results."""
from __future__ import annotations
import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))
import numpy as np  # noqa: E402

import corpus  # noqa: E402
import cpuid_mask  # noqa: E402
from bench_cpu import interleaved, machine  # noqa: E402
from corpus import ort_session  # noqa: E402

TWO_THREAD_BLOCKS = 4     # blocks of half the one-thread rounds per two-thread engine, in turn


def _runs_for(seconds: float, budget: float, lo: int = 5, hi: int = 30) -> int:
  """Rounds that fit `budget` seconds per engine for a run of `seconds`."""
  return max(lo, min(hi, int(budget / max(seconds, 1e-6))))


def measure(e: dict, corpus_dir: str, work: str, cpu: str | None, budget: float, threads: int) -> dict:
  """One corpus model: compile, check against onnxruntime, time both engines, profile the artifact."""
  import onnxruntime  # noqa: F401  (fail early with the import error, not inside a session)
  from tgc.aot.bench import SLOW_SHARE, kernel_profile, machine_roofline
  from tgc.aot.compile import compile_model
  from tgc.runtimes.artifact_c import CArtifact
  path = corpus.model_path(corpus_dir, e)
  ort_feeds = corpus.feeds(e)
  # inputs pinned as constants (`--const`, the entry's `consts`: a Loop's trip count) are not fed to tgc
  consts = {name: ort_feeds[name] for name in e.get("consts", [])}
  feeds = {name: value for name, value in ort_feeds.items() if name not in consts}
  row: dict = {"model": e["name"], "source": e["source"]}
  start = time.perf_counter()
  dims = {name: tuple(rng) for name, rng in e.get("dims", {}).items()} or None    # open dims stay open
  report = compile_model(path, "c", os.path.join(work, e["name"]), force=True, cpu=cpu, dims=dims,
                         input_shapes=e.get("input_shapes"), consts=consts or None)
  row.update(compile_s=time.perf_counter() - start, kernels=report.kernels, calls=report.calls)
  ort1 = ort_session(path, 1)
  libs = os.path.join(work, "libs")
  tgc1 = CArtifact(report.out_dir, cache_dir=libs)
  try:
    ref = dict(zip([o.name for o in ort1.get_outputs()], ort1.run(None, ort_feeds)))
    got = tgc1.run(feeds)
    errors = []
    for name, want in ref.items():
      have = np.asarray(got[name], dtype=np.float64)
      want = np.asarray(want, dtype=np.float64)
      scale = max(1.0, float(np.abs(want).max())) if want.size else 1.0
      errors.append(float(np.abs(have - want).max()) / scale if want.size else 0.0)
    row["rel_err"] = max(errors)
    once = min(_once(lambda: ort1.run(None, ort_feeds)) for _ in range(2))
    runs = _runs_for(once, budget)
    medians = interleaved({"tgc1": lambda: tgc1.run(feeds), "ort1": lambda: ort1.run(None, ort_feeds)}, runs)
    row.update(tgc1_s=medians["tgc1"][0], ort1_s=medians["ort1"][0], runs=runs)
    if threads > 1:
      # blocks of each engine in turn (not run by run: onnxruntime's threads spin on after a run), the fastest
      # block of each kept: on a shared machine the other core's pace changes from one second to the next, and a
      # block that falls on a slow second is not the engine's speed (two blocks each still read convnext_nano
      # 0.59x in one run and 0.87x in the next)
      ort2, seconds = ort_session(path, threads), {"tgc2": [], "ort2": []}
      block = max(5, runs // 2)
      with CArtifact(report.out_dir, cache_dir=libs, threads=threads) as tgc2:
        for _ in range(TWO_THREAD_BLOCKS):
          seconds["tgc2"].append(interleaved({"tgc2": lambda: tgc2.run(feeds)}, block)["tgc2"][0])
          seconds["ort2"].append(interleaved({"ort2": lambda: ort2.run(None, ort_feeds)}, block)["ort2"][0])
      row.update(tgc2_s=min(seconds["tgc2"]), ort2_s=min(seconds["ort2"]))
  finally:
    tgc1.close()
  with CArtifact(report.out_dir, cache_dir=libs, profile=True) as art:
    art.run(feeds)
    # each launch's median over the profiled runs: one run the machine slowed (a page fault, the other core's
    # job) does not mark a kernel of a short run slow
    per_run = []
    for _ in range(max(3, min(7, runs))):
      art.profile_reset()
      art.run(feeds)
      per_run.append(art.profile())
    per_call = [statistics.median(times) for times in zip(*per_run)]
    kernels = kernel_profile(art.manifest, per_call, 1, machine_roofline(art.manifest))
  top = kernels[0]
  row["slowest"] = {"kernel": top.kernel, "share": top.share, "roofline": top.roofline, "gflops": top.gflops,
                    "opts": " ".join(top.opts)}
  row["slow_kernels"] = [{"kernel": k.kernel, "share": k.share, "roofline": k.roofline} for k in kernels
                         if k.slow and k.share >= SLOW_SHARE]
  return row


def _once(fn) -> float:
  start = time.perf_counter()
  fn()
  return time.perf_counter() - start


def geomean(values: list[float]) -> float:
  return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def summary(rows: list[dict]) -> dict:
  ok = [r for r in rows if "error" not in r]
  r1 = {r["model"]: r["tgc1_s"] / r["ort1_s"] for r in ok}
  r2 = {r["model"]: r["tgc2_s"] / r["ort2_s"] for r in ok if "tgc2_s" in r}
  worst = max(r1, key=r1.get) if r1 else None
  return {"models": len(rows), "measured": len(ok), "geomean1": geomean(list(r1.values())),
          "geomean2": geomean(list(r2.values())), "worst": worst, "worst_ratio": r1.get(worst, float("nan")),
          "within_1_5": sum(v <= 1.5 for v in r1.values()), "at_or_under_1": sum(v <= 1.0 for v in r1.values()),
          "slow_kernels": sum(len(r["slow_kernels"]) for r in ok)}


def markdown(rows: list[dict], s: dict, info: dict) -> str:
  lines = ["| model | source | kernels (launches) | compile s | tgc 1t ms | ort 1t ms | **tgc / ort 1t** | "
           "tgc / ort 2t | max rel err | slowest kernel: share, roofline | kernels < 10% roofline, >= 5% of run |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
  for r in rows:
    if "error" in r:
      lines.append(f"| {r['model']} | {r['source']} | ERROR: {r['error'][:150]} |" + " - |" * 8)
      continue
    ratio2 = f"{r['tgc2_s'] / r['ort2_s']:.2f}" if "tgc2_s" in r else "-"
    top = r["slowest"]
    slow = ", ".join(f"{k['kernel']} ({k['share']:.0%}, {k['roofline']:.1%})" for k in r["slow_kernels"]) or "-"
    lines.append(f"| {r['model']} | {r['source']} | {r['kernels']} ({r['calls']}) | {r['compile_s']:.1f} | "
                 f"{r['tgc1_s'] * 1e3:.3f} | {r['ort1_s'] * 1e3:.3f} | **{r['tgc1_s'] / r['ort1_s']:.2f}** | "
                 f"{ratio2} | {r['rel_err']:.1e} | {top['kernel']}: {top['share']:.0%}, {top['roofline']:.0%} | "
                 f"{slow} |")
  lines.append("")
  two = "" if math.isnan(s["geomean2"]) else f", {s['geomean2']:.2f}x with two"     # --threads 1: not measured
  lines.append(f"**{s['measured']} of {s['models']} models measured; geometric mean tgc / onnxruntime "
               f"{s['geomean1']:.2f}x with one thread{two}; worst {s['worst']} "
               f"{s['worst_ratio']:.2f}x; {s['within_1_5']} within 1.5x, {s['at_or_under_1']} at or under 1.0x; "
               f"{s['slow_kernels']} kernels under 10% of the roofline taking 5% of a run or more.**")
  lines.append(f"\n{info['date']}; {info['cpu']}; kernels for {info['kernel_level']}; {info['cores']} cores, "
               f"1-minute load {info['load_1min']:.2f} at the end; roofline: {info['peak_gflops']:.0f} GFLOP/s, "
               f"{info['copy_gbs']:.1f} GB/s; C compiler {info['cc']}; onnxruntime {info['onnxruntime']}; "
               f"numpy {info['numpy']}; Python {info['python']}; CPUID seen: {info['cpuid']}; "
               f"{info['wall_s']:.0f} s in all")
  return "\n".join(lines)


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("models", nargs="*", help="corpus model names (default: all)")
  ap.add_argument("--corpus", default=corpus.DEFAULT_OUT, metavar="DIR", help="the built corpus (bench/corpus.py)")
  ap.add_argument("--cpu", default=None, help="--cpu level of the compiles (default: native)")
  ap.add_argument("--threads", type=int, default=2, help="the second comparison's thread count (1: skip it)")
  ap.add_argument("--budget", type=float, default=1.5, help="seconds of timed runs per engine and model")
  ap.add_argument("--keep", metavar="DIR", help="write the artifacts here (default: a temp dir)")
  ap.add_argument("--json", metavar="FILE", help="also write the rows, summary and machine as JSON")
  ap.add_argument("--mask-cpuid", action="store_true",
                  help=f"run everything as on an {cpuid_mask.LEVEL} machine (implies --cpu {cpuid_mask.LEVEL})")
  args = ap.parse_args(argv)
  if args.mask_cpuid:
    if args.cpu not in (None, cpuid_mask.LEVEL):
      ap.error(f"--mask-cpuid reports {cpuid_mask.LEVEL}: it goes with --cpu {cpuid_mask.LEVEL}, not {args.cpu}")
    args.cpu = cpuid_mask.LEVEL
    cpuid_mask.masked_process(os.path.join(tempfile.gettempdir(), "tgc-bench-cpuid"))
  entries = corpus.entries(args.corpus)
  if not entries:
    print(f"no corpus in {args.corpus}: run `python bench/corpus.py build` first", file=sys.stderr)
    return 2
  known = {e["name"]: e for e in entries}
  unknown = [n for n in args.models if n not in known]
  if unknown:
    print(f"unknown models: {', '.join(unknown)}; the corpus has: {', '.join(known)}", file=sys.stderr)
    return 2
  warnings.simplefilter("ignore")
  work = args.keep or tempfile.mkdtemp(prefix="tgc-bench-corpus-")
  os.makedirs(work, exist_ok=True)
  rows, start = [], time.perf_counter()
  for e in [known[n] for n in args.models] or entries:
    try: rows.append(measure(e, args.corpus, work, args.cpu or "native", args.budget, args.threads))
    except Exception as error:
      rows.append({"model": e["name"], "source": e["source"],
                   "error": f"{type(error).__name__}: {error}".splitlines()[0]})
    r = rows[-1]
    what = r["error"] if "error" in r else f"{r['tgc1_s'] / r['ort1_s']:.2f}x onnxruntime (1 thread)"
    print(f"{e['name']}: {what} ({time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)
  from tgc.codegen.target import cpu_level
  from tgc.runtimes import roofline
  level = cpu_level(args.cpu or "native")
  peak = roofline.measure(level.vector_bytes, level.cc_flags)
  info = dict(machine(), kernel_level=level.level, peak_gflops=peak.gflops, copy_gbs=peak.gbytes,
              wall_s=time.perf_counter() - start, cpuid=cpuid_mask.level_seen())
  s = summary(rows)
  print(markdown(rows, s, info))
  if args.json:
    with open(args.json, "w") as f: json.dump({"machine": info, "summary": s, "rows": rows}, f, indent=1)
  return 0


if __name__ == "__main__":
  sys.exit(main())
