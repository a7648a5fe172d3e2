"""Real-architecture benchmark: tgc C artifacts against onnxruntime (one intra-op and one inter-op thread) on
resnet50 (the light model of the onnx wheel with seeded random weights, scripts/light_models.py's helpers), a
MobileNetV2 and a small transformer encoder (bench/onnx_models.py), as latency ratios measured in one process,
plus `tgc compile` wall time (the pipeline: import, trace, lower, write) and the time to build the artifact's
library (cc -O3 -march=native). Each model's output is compared once with onnxruntime's (max abs error).

    python bench/bench_onnx.py                          # all three, markdown table
    python bench/bench_onnx.py mobilenet_v2 --runs 20   # some of them
    python bench/bench_onnx.py --json                   # the rows as JSON

The C artifact is timed for at most --runs runs and about --max-seconds per model (at least 3 runs): resnet50
takes seconds per inference. Each timed C run is followed by a few onnxruntime runs (interleaved, so both see the
same background load); medians of wall time and of the process's CPU time are reported."""
from __future__ import annotations
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "onnx"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import numpy as np  # noqa: E402
import onnx  # noqa: E402

import light_models as lm  # noqa: E402
import onnx_models  # noqa: E402

MODELS = ("resnet50", "mobilenet_v2", "transformer")
CFLAGS = ("-O3", "-march=native")
SEED = 0


def build_model(name: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray], str]:
  """(model, seeded inputs, description) of one benchmark model."""
  if name == "resnet50":
    if not lm.available("resnet50"): raise FileNotFoundError(f"{lm.model_path('resnet50')} is not in this onnx wheel")
    model = lm.randomized(lm.load("resnet50"), SEED)
    return model, lm.random_inputs(model, SEED), "resnet50 (light, random weights, 1x3x224x224)"
  if name == "mobilenet_v2":
    model = onnx_models.mobilenet_v2(SEED)
    return model, onnx_models.random_feeds(model, SEED), "MobileNetV2 1.0 (full, BN kept, 1x3x224x224)"
  model = onnx_models.transformer_encoder(SEED)
  description = "transformer encoder (4 layers, d 256, 4 heads, FFN 1024, seq 128)"
  return model, onnx_models.random_feeds(model, SEED), description


def ort_session(model: onnx.ModelProto):
  import onnxruntime as ort
  options = ort.SessionOptions()
  options.intra_op_num_threads, options.inter_op_num_threads = 1, 1
  options.log_severity_level = 3
  return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _clocks(fn) -> tuple[float, float]:
  """(wall seconds, CPU seconds of this process) of one call of `fn`."""
  wall, cpu = time.perf_counter(), time.process_time()
  fn()
  return time.perf_counter() - wall, time.process_time() - cpu


def interleaved(tgc_fn, ort_fn, tgc_runs: int, ort_per_round: int) -> dict:
  """Medians of `tgc_runs` rounds of one tgc call followed by `ort_per_round` onnxruntime calls, so both see the
  same background load; wall time and process CPU time (less sensitive to other work on a shared machine)."""
  tgc, ort = [], []
  for _ in range(tgc_runs):
    tgc.append(_clocks(tgc_fn))
    ort.extend(_clocks(ort_fn) for _ in range(ort_per_round))
  med = lambda xs, i: statistics.median(x[i] for x in xs)  # noqa: E731
  return {"tgc_s": med(tgc, 0), "tgc_cpu_s": med(tgc, 1), "ort_s": med(ort, 0), "ort_cpu_s": med(ort, 1),
          "tgc_runs": len(tgc), "ort_runs": len(ort)}


def measure(name: str, work: str, compilers: list[str], runs: int, max_seconds: float) -> list[dict]:
  """One row per C compiler: compile once, build the artifact's library with each compiler, check it against
  onnxruntime once, then time both interleaved."""
  from tgc.aot.compile import compile_model
  from tgc.runtimes.artifact_c import CArtifact
  model, feeds, description = build_model(name)
  path = os.path.join(work, f"{name}.onnx")
  onnx.save(model, path)
  base = {"model": name, "description": description, "nodes": len(model.graph.node)}
  start = time.perf_counter()
  report = compile_model(path, "c", os.path.join(work, f"{name}_c"), force=True)
  base["compile_s"] = time.perf_counter() - start
  base.update(kernels=report.kernels, calls=report.calls, arena_bytes=report.arena_bytes,
              weights_bytes=report.weights_bytes)
  session = ort_session(model)
  ref = session.run(None, feeds)[0]
  for _ in range(2): session.run(None, feeds)                     # warm-up
  ort_once = min(_clocks(lambda: session.run(None, feeds))[0] for _ in range(3))
  rows = []
  for compiler in compilers:
    row = dict(base, cc=compiler)
    start = time.perf_counter()      # a fresh library cache: the C compiler really runs
    art = CArtifact(report.out_dir, compiler=compiler, cflags=CFLAGS, cache_dir=os.path.join(work, f"libs-{compiler}"))
    row["cc_s"] = time.perf_counter() - start
    try:
      out_name = art.outputs[0]["name"]
      first_s, _ = _clocks(lambda: art.run(feeds))                 # the first warm-up run
      got = art.run(feeds)[out_name]
      row["max_abs_err"] = lm.max_abs_error(got, ref)
      row["max_abs_ref"] = float(np.abs(ref).max())
      row["ok"] = lm.random_ok(got, ref)
      tgc_runs = max(3, min(runs, int(max_seconds / max(first_s, 1e-9))))
      ort_per_round = max(1, min(runs, int(max_seconds / max(ort_once, 1e-9))) // tgc_runs)
      row.update(interleaved(lambda: art.run(feeds), lambda: session.run(None, feeds), tgc_runs, ort_per_round))
      row["ratio"] = row["tgc_s"] / row["ort_s"]
      row["cpu_ratio"] = row["tgc_cpu_s"] / row["ort_cpu_s"]
    finally:
      art.close()
    rows.append(row)
  return rows


def profile(name: str, work: str, top: int) -> str:
  """Per-kernel times of the model in `work` (written by `measure`): every launch of the compiled model timed alone
  on the C runtime (scratch buffers of the launch's sizes), summed per kernel; the `top` kernels by total time, with
  GFLOP/s from the kernel's op count, its output shape and its weights' shapes."""
  from tgc.aot import models as aot_models
  from tgc.aot.compile import build_compiled
  from tgc.runtimes.c import CRuntime
  from tgc.runtimes.timing import kernel_timer
  cm, _ = build_compiled(aot_models.parse_model_spec(os.path.join(work, f"{name}.onnx")), "c")
  rt = CRuntime()
  per_kernel: dict[str, list] = {}
  for call in cm.calls:
    bufs = [cm.buffers[i] for i in call.buffers]
    seconds = kernel_timer(rt, [b.nbytes for b in bufs], runs=1)(cm.kernels[call.kernel])
    entry = per_kernel.setdefault(call.kernel, [0.0, 0, bufs])
    entry[0] += seconds
    entry[1] += 1
  total = sum(e[0] for e in per_kernel.values())
  lines = [f"{name}: {len(cm.calls)} launches, {total * 1e3:.0f} ms summed ({rt.compiler}); top kernels:",
           "| kernel | launches | ms | share | GFLOP/s | output (bytes) | weights |", "|---|---|---|---|---|---|---|"]
  for kernel, (seconds, launches, bufs) in sorted(per_kernel.items(), key=lambda kv: -kv[1][0])[:top]:
    flops = cm.kernels[kernel].ops * launches
    weights = " ".join("x".join(map(str, b.shape)) or "scalar" for b in bufs if b.kind == "weight")
    lines.append(f"| {kernel} | {launches} | {seconds * 1e3:.1f} | {seconds / total:.0%} | "
                 f"{flops / seconds / 1e9:.2f} | {'x'.join(map(str, bufs[0].shape))} ({bufs[0].nbytes / 1e6:.2f} MB) | "
                 f"{weights} |")
  return "\n".join(lines)


def _compiler_version(compiler: str) -> str:
  try:
    return subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
  except (OSError, IndexError):
    return compiler


def machine(compilers: list[str]) -> dict:
  cpu = platform.processor() or platform.machine()
  try:
    with open("/proc/cpuinfo") as f:
      cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
  except OSError:
    pass
  import onnxruntime as ort
  load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
  return {"date": datetime.date.today().isoformat(), "cpu": cpu, "cores": os.cpu_count(), "load_1min": load,
          "compilers": {c: _compiler_version(c) for c in compilers}, "cflags": " ".join(CFLAGS),
          "onnxruntime": ort.__version__, "onnx": onnx.__version__, "python": platform.python_version()}


def markdown(rows: list[dict], info: dict) -> str:
  lines = ["| model | nodes | kernels (launches) | `tgc compile` s | C compiler: build s | tgc C artifact ms | "
           "onnxruntime 1 thread ms | tgc / ort (wall) | tgc / ort (CPU time) | max abs err vs ort (max abs ort) |",
           "|---|---|---|---|---|---|---|---|---|---|"]
  for r in rows:
    if "error" in r:
      cc = r.get("cc", "-")
      lines.append(f"| {r['description']} | - | - | - | {cc} | - | - | - | - | ERROR {r['error'][:100]} |")
      continue
    flag = "" if r["ok"] else " **over tolerance**"
    lines.append(f"| {r['description']} | {r['nodes']} | {r['kernels']} ({r['calls']}) | {r['compile_s']:.1f} | "
                 f"{r['cc']}: {r['cc_s']:.1f} | {r['tgc_s'] * 1e3:.1f} ({r['tgc_runs']} runs) | "
                 f"{r['ort_s'] * 1e3:.2f} ({r['ort_runs']} runs) | {r['ratio']:.1f} | {r['cpu_ratio']:.1f} | "
                 f"{r['max_abs_err']:.1e} ({r['max_abs_ref']:.2f}){flag} |")
  compilers = "; ".join(f"{c} = {v}" for c, v in info["compilers"].items())
  lines.append(f"\n{info['date']}; {info['cpu']}, {info['cores']} cores, 1-minute load {info['load_1min']:.1f} at the "
               f"end; {compilers}; flags {info['cflags']}; onnxruntime {info['onnxruntime']}, onnx {info['onnx']}, "
               f"Python {info['python']}")
  return "\n".join(lines)


def main(argv=None) -> int:
  from tgc.ir.config import config
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("models", nargs="*", help=f"some of: {', '.join(MODELS)} (default: all)")
  ap.add_argument("--cc", nargs="+", default=[config.cc], help=f"C compilers to build the artifact with, one row "
                  f"each (default: {config.cc}, the CC setting)")
  ap.add_argument("--runs", type=int, default=20, help="most timed runs per model and runtime")
  ap.add_argument("--max-seconds", type=float, default=30.0, help="about this long timing each C artifact")
  ap.add_argument("--keep", metavar="DIR", help="write the ONNX files and artifacts here (default: a temp dir)")
  ap.add_argument("--json", action="store_true", help="print the rows and the machine as JSON")
  ap.add_argument("--profile", type=int, default=0, metavar="N", help="also time each kernel alone on the C runtime "
                  "and print the N kernels that take longest per model")
  args = ap.parse_args(argv)
  names = args.models or list(MODELS)
  unknown = [n for n in names if n not in MODELS]
  if unknown:
    print(f"unknown models: {', '.join(unknown)}; known: {', '.join(MODELS)}", file=sys.stderr)
    return 2
  warnings.simplefilter("ignore")
  work = args.keep or tempfile.mkdtemp(prefix="tgc-bench-onnx-")
  os.makedirs(work, exist_ok=True)
  rows, start = [], time.perf_counter()
  for name in names:
    try:
      rows.extend(measure(name, work, args.cc, args.runs, args.max_seconds))
    except Exception as error:
      rows.append({"model": name, "description": name, "error": f"{type(error).__name__}: {error}".splitlines()[0]})
    print(f"{name}: done ({time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)
  info = machine(args.cc)
  print(json.dumps({"machine": info, "rows": rows}, indent=1) if args.json else markdown(rows, info))
  for name in names if args.profile else []:
    if any(r["model"] == name and "error" not in r for r in rows): print("\n" + profile(name, work, args.profile))
  return 0 if all(r.get("ok") for r in rows) else 1


if __name__ == "__main__":
  sys.exit(main())
