"""GPU-language artifacts on CPU-backed devices against onnxruntime (CPU): tgc's OpenCL artifact on PoCL (its C host
loader, built and called through runtimes/artifact_opencl.py) and its WebGPU artifact on wgpu/Mesa lavapipe (the
plan of its model.js, runtimes/artifact_webgpu.py), on the benchmark models of bench/bench_models.py (or any ONNX
file). Both devices pick their kernel variant as the artifacts do on a CPU (no workgroup-memory tiles: "cpu").

Each target runs in a process of its own (PoCL and lavapipe each load LLVM and cannot share one); in it, the
artifact's runs (inputs uploaded, every kernel, outputs read back) and onnxruntime's runs (default threads: all
cores, as PoCL and lavapipe use) alternate after a warm-up, and the medians are reported as tgc / onnxruntime, with
the output's largest error scaled by the largest reference value.

    python bench/bench_gpu_cpu.py [MODEL ...] [--targets opencl webgpu] [--runs 5] [--json]"""
from __future__ import annotations
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))


from bench_models import DEFAULT_MODELS, ModelError, feeds_for, load_onnx  # noqa: E402

TARGETS = ("opencl", "webgpu")


def _artifact(target: str, folder: str):
  if target == "opencl":
    from tgc.runtimes.artifact_opencl import OpenCLArtifact
    return OpenCLArtifact(folder)
  from tgc.runtimes.artifact_webgpu import WebGPUArtifact
  return WebGPUArtifact(folder)


def worker(target: str, specs: list[str], runs: int, warmup: int, seed: int) -> list[dict]:
  """In this process: each model compiled for `target`, timed against onnxruntime (alternating runs)."""
  import onnxruntime as ort
  import light_models as lm
  from tgc.aot.compile import compile_model
  rows = []
  with tempfile.TemporaryDirectory(prefix="tgc-bench-gpu-cpu-") as work:
    for spec in specs:
      name, model = load_onnx(spec, seed)
      path = os.path.join(work, f"{name}.onnx")
      with open(path, "wb") as f: f.write(model.SerializeToString())
      start = time.perf_counter()
      compile_model(path, target, os.path.join(work, f"{name}_{target}"), name=name)
      compile_s = time.perf_counter() - start
      feeds = feeds_for(model, seed, {})
      options = ort.SessionOptions()
      options.log_severity_level = 3
      session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
      with _artifact(target, os.path.join(work, f"{name}_{target}")) as art:
        got = art.run(feeds)
        ref = session.run(None, feeds)
        error = max(lm.scaled_error(got[o.name], r) for o, r in zip(model.graph.output, ref))
        for _ in range(warmup): art.run(feeds), session.run(None, feeds)
        tgc_times, ort_times = [], []
        for _ in range(runs):
          t = time.perf_counter(); art.run(feeds); tgc_times.append(time.perf_counter() - t)
          t = time.perf_counter(); session.run(None, feeds); ort_times.append(time.perf_counter() - t)
        variant = getattr(art, "variant", "")
      tgc_ms, ort_ms = 1e3 * statistics.median(tgc_times), 1e3 * statistics.median(ort_times)
      rows.append({"model": name, "target": target, "variant": variant, "compile_s": compile_s, "tgc_ms": tgc_ms,
                   "ort_ms": ort_ms, "ratio": tgc_ms / ort_ms, "scaled_error": error, "runs": runs})
      print(f"{name} on {target}: {tgc_ms:.1f} ms vs onnxruntime {ort_ms:.1f} ms", file=sys.stderr, flush=True)
  return rows


def markdown(rows: list[dict], meta: dict) -> str:
  lines = [f"1-minute load {meta['load_before']:.1f} before, {meta['load_after']:.1f} after; median of {meta['runs']} "
           f"runs after {meta['warmup']} warm-up runs, alternating with onnxruntime {meta['ort']} (CPU, all cores).",
           "", "| model | target (device) | kernel variant | tgc ms | onnxruntime ms | tgc / ort | max err (scaled) |",
           "|---|---|---|---|---|---|---|"]
  devices = {"opencl": "OpenCL (PoCL)", "webgpu": "WebGPU (wgpu, lavapipe)"}
  for r in rows:
    lines.append(f"| {r['model']} | {devices[r['target']]} | {r['variant']} | {r['tgc_ms']:.1f} | {r['ort_ms']:.1f} | "
                 f"{r['ratio']:.2f} | {r['scaled_error']:.1e} |")
  return "\n".join(lines)


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("models", nargs="*", default=list(DEFAULT_MODELS), help="model names or .onnx files")
  ap.add_argument("--targets", nargs="+", default=list(TARGETS), choices=TARGETS)
  ap.add_argument("--runs", type=int, default=5)
  ap.add_argument("--warmup", type=int, default=1)
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--json", action="store_true")
  ap.add_argument("--worker", choices=TARGETS, help=argparse.SUPPRESS)
  args = ap.parse_args(argv)
  try:
    if args.worker:
      print(json.dumps(worker(args.worker, args.models, args.runs, args.warmup, args.seed)))
      return 0
  except ModelError as error:
    print(f"bench_gpu_cpu: {error}", file=sys.stderr)
    return 2
  import onnxruntime
  load_before, rows = os.getloadavg()[0], []
  for target in args.targets:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", target, *args.models, "--runs", str(args.runs),
           "--warmup", str(args.warmup), "--seed", str(args.seed)]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
      print(f"bench_gpu_cpu: the {target} run failed (exit {done.returncode})", file=sys.stderr)
      return done.returncode
    rows += json.loads(done.stdout)
  meta = {"load_before": load_before, "load_after": os.getloadavg()[0], "runs": args.runs, "warmup": args.warmup,
          "ort": onnxruntime.__version__}
  print(json.dumps({"meta": meta, "rows": rows}, indent=2) if args.json else markdown(rows, meta))
  return 0


if __name__ == "__main__":
  sys.exit(main())
