"""CPU benchmark: tgc C artifacts against onnxruntime (CPU provider) with one and two threads, in one process, with
numpy's one-thread sgemm as the machine's roofline.

    python bench/bench_cpu.py                                  # every model, markdown
    python bench/bench_cpu.py resnet50 mlp_b1 --runs 30        # some of them
    python bench/bench_cpu.py --profile 6 --json               # plus the 6 slowest kernels per model, as JSON
    python bench/bench_cpu.py --other-cc gcc                   # and the artifacts built by gcc against clang's

Models (ONNX graphs, seeded random weights; both engines run the same file): the onnx wheel's light resnet50
(tests/onnx/light_models.py), ResNet-18 and MobileNetV2 with BatchNormalization kept as nodes and the transformer
encoder (bench/onnx_models.py), a 784-512-512-10 MLP at batch 1 and 64, and the example CNN of examples/mnist_cnn.py.

Per model: `tgc compile` wall time (target c, --cpu native unless `--cpu` says another level: `--cpu portable` is
what `tgc compile` gives without the option) and the C build time; the artifact's output against
onnxruntime's; then interleaved timing (one run of each engine in turn, after warm-up, so both see the same machine)
of tgc and onnxruntime on one thread, then tgc with 2 threads (the artifact's own thread pool) and onnxruntime with
2 intra-op threads, each in a block of its own (two spinning pools on two cores would slow each other); medians
and their ratios. GFLOP/s come from the kernels' op counts in the manifest. `--profile N` times each launch inside
the artifact (-DTG_PROFILE) and lists the N slowest kernels with their share, GFLOP/s and the fraction of the sgemm
roofline they reach. Measure on a quiet machine: the load average is printed with the results."""
from __future__ import annotations
import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")      # numpy's sgemm on one thread: the roofline
os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "onnx"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "examples"))
import numpy as np  # noqa: E402
import onnx  # noqa: E402

import onnx_models  # noqa: E402

MODELS = ("resnet50", "resnet18", "mobilenet_v2", "transformer", "mlp_b1", "mlp_b64", "mnist_cnn")
SEED = 0


def build_model(name: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray], str]:
  """(model, seeded inputs, description) of one benchmark model."""
  if name == "resnet50":
    import light_models as lm
    if not lm.available("resnet50"): raise FileNotFoundError(f"{lm.model_path('resnet50')} is not in this onnx wheel")
    model = lm.randomized(lm.load("resnet50"), SEED)
    return model, lm.random_inputs(model, SEED), "resnet50 (light, random weights, 1x3x224x224)"
  if name == "resnet18": model, what = onnx_models.resnet18(SEED), "ResNet-18 (BN kept, 1x3x224x224)"
  elif name == "mobilenet_v2": model, what = onnx_models.mobilenet_v2(SEED), "MobileNetV2 1.0 (BN kept, 1x3x224x224)"
  elif name == "transformer":
    model, what = onnx_models.transformer_encoder(SEED), "transformer encoder (4x256, seq 128)"
  elif name in ("mlp_b1", "mlp_b64"):
    batch = int(name.split("_b")[1])
    model, what = onnx_models.mlp(SEED, batch), f"MLP 784-512-512-10, batch {batch}"
  elif name == "mnist_cnn":
    import mnist_cnn
    model, what = onnx_models.mnist_cnn(mnist_cnn.SmallCNN()), "example CNN (examples/mnist_cnn.py, 1x1x28x28)"
  else: raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
  return model, onnx_models.random_feeds(model, SEED), what


def ort_session(model: onnx.ModelProto, threads: int):
  import onnxruntime as ort
  options = ort.SessionOptions()
  options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
  options.log_severity_level = 3
  return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def sgemm_roofline(n: int = 1024, runs: int = 10) -> float:
  """GFLOP/s of numpy's float32 matmul (its BLAS, one thread) on n x n: the machine's practical one-core peak."""
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
  a @ b
  best = min(_seconds(lambda: a @ b) for _ in range(runs))
  return 2 * n ** 3 / best / 1e9


def _seconds(fn) -> float:
  start = time.perf_counter()
  fn()
  return time.perf_counter() - start


def interleaved(fns: dict[str, callable], runs: int, warmup: int = 3) -> dict[str, tuple[float, float]]:
  """Per function: median wall seconds and median CPU seconds of the calling thread (a one-thread engine runs on
  it; steadier than wall time on a shared machine), timed in turn (one call of each per round) after warm-up."""
  for fn in fns.values():
    for _ in range(warmup): fn()
  wall: dict[str, list[float]] = {k: [] for k in fns}
  cpu: dict[str, list[float]] = {k: [] for k in fns}
  for _ in range(runs):
    for k, fn in fns.items():
      w, c = time.perf_counter(), time.thread_time()
      fn()
      cpu[k].append(time.thread_time() - c)
      wall[k].append(time.perf_counter() - w)
  return {k: (statistics.median(wall[k]), statistics.median(cpu[k])) for k in fns}


def measure(name: str, work: str, runs: int, profile: int, roofline: float, other_cc: str | None = None,
            cpu: str = "native") -> dict:
  from tgc.aot.compile import compile_model
  from tgc.runtimes.artifact_c import CArtifact
  model, feeds, description = build_model(name)
  path = os.path.join(work, f"{name}.onnx")
  onnx.save(model, path)
  row = {"model": name, "description": description, "nodes": len(model.graph.node)}
  start = time.perf_counter()
  report = compile_model(path, "c", os.path.join(work, f"{name}_c"), force=True, cpu=cpu)
  row.update(compile_s=time.perf_counter() - start, kernels=report.kernels, calls=report.calls,
             arena_bytes=report.arena_bytes, weights_bytes=report.weights_bytes)
  ort1, ort2 = ort_session(model, 1), ort_session(model, 2)
  ref = ort1.run(None, feeds)[0]
  libs = os.path.join(work, "libs")
  start = time.perf_counter()
  tgc1 = CArtifact(report.out_dir, cache_dir=libs)
  row["cc_s"] = time.perf_counter() - start
  tgc2 = CArtifact(report.out_dir, cache_dir=libs, threads=2)
  other = CArtifact(report.out_dir, cache_dir=libs, compiler=other_cc) if other_cc else None
  try:
    got = tgc1.run(feeds)[tgc1.outputs[0]["name"]]
    row["max_abs_err"], row["max_abs_ref"] = float(np.abs(got - ref).max()), float(np.abs(ref).max())
    row["ok"] = bool(np.allclose(got, ref, rtol=1e-3, atol=1e-4 * max(1.0, row["max_abs_ref"])))
    engines = {"tgc1": lambda: tgc1.run(feeds), "ort1": lambda: ort1.run(None, feeds)}
    if other is not None: engines["other"] = lambda: other.run(feeds)
    medians = interleaved(engines, runs)
    # each thread pool in a block of its own: on a machine with as many cores as threads, a pool that still spins
    # after its run (onnxruntime's does) takes the core the other engine's pool needs
    medians.update(interleaved({"tgc2": lambda: tgc2.run(feeds)}, runs))
    medians.update(interleaved({"ort2": lambda: ort2.run(None, feeds)}, runs))
  finally:
    for art in (tgc1, tgc2, other):
      if art is not None: art.close()
  row.update({f"{k}_s": v[0] for k, v in medians.items()})
  row["ratio1_cpu"] = medians["tgc1"][1] / medians["ort1"][1]
  if other is not None: row["other_cc_ratio"] = medians["other"][1] / medians["tgc1"][1]
  medians = {k: v[0] for k, v in medians.items()}
  manifest = json.load(open(os.path.join(report.out_dir, "manifest.json")))
  ops = {k["name"]: k["ops"] for k in manifest["kernels"]}
  row["gflop"] = sum(ops[c["kernel"]] for c in manifest["calls"]) / 1e9
  row["tgc1_gflops"] = row["gflop"] / medians["tgc1"]
  row["ratio1"], row["ratio2"] = medians["tgc1"] / medians["ort1"], medians["tgc2"] / medians["ort2"]
  row["speedup2"] = medians["tgc1"] / medians["tgc2"]
  if profile: row["profile"] = kernel_profile(report.out_dir, feeds, profile, roofline, libs)
  return row


def kernel_profile(folder: str, feeds: dict, top: int, roofline: float, libs: str) -> list[dict]:
  """The `top` slowest kernels of the artifact, from its own per-launch timing (one thread)."""
  from tgc.aot.bench import kernel_profile as per_kernel
  from tgc.runtimes.artifact_c import CArtifact
  runs = 5
  with CArtifact(folder, cache_dir=libs, profile=True) as art:
    for _ in range(2): art.run(feeds)
    art.profile_reset()
    for _ in range(runs): art.run(feeds)
    seconds = art.profile()
  out = []
  for k in per_kernel(art.manifest, seconds, runs)[:top]:
    out.append({"kernel": k.kernel, "launches": k.launches, "ms": k.seconds * 1e3, "share": k.share,
                "gflops": k.gflops, "roofline": k.gflops / roofline, "opts": " ".join(k.opts)})
  return out


def machine() -> dict:
  from tgc.codegen.target import host_cpu
  from tgc.ir.config import config
  import onnxruntime as ort
  cpu = platform.processor() or platform.machine()
  try:
    with open("/proc/cpuinfo") as f:
      cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
  except OSError:
    pass
  return {"date": datetime.date.today().isoformat(), "cpu": cpu, "cores": os.cpu_count(), "level": host_cpu().level,
          "load_1min": os.getloadavg()[0], "cc": config.cc, "onnxruntime": ort.__version__, "numpy": np.__version__,
          "python": platform.python_version()}


def markdown(rows: list[dict], info: dict) -> str:
  lines = ["| model | kernels (launches) | `tgc compile` s | C build s | tgc 1 thread ms | ort 1 thread ms | "
           "**tgc / ort 1t** | "
           "tgc / ort 1t (CPU time) | tgc 2 threads ms | ort 2 threads ms | **tgc / ort 2t** | tgc 2t speedup | "
           "tgc GFLOP/s (1t) | max abs err (max abs) |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
  other = next((r["other_cc"] for r in rows if r.get("other_cc")), None)
  if other:
    lines[0] += f" tgc built by {other} / by the default compiler (CPU time) |"
    lines[1] += "---|"
  for r in rows:
    if "error" in r:
      lines.append(f"| {r['description']} | ERROR: {r['error'][:120]} |" + " - |" * 12)
      continue
    flag = "" if r["ok"] else " **over tolerance**"
    lines.append(f"| {r['description']} | {r['kernels']} ({r['calls']}) | {r['compile_s']:.1f} | {r['cc_s']:.1f} | "
                 f"{r['tgc1_s'] * 1e3:.3f} | {r['ort1_s'] * 1e3:.3f} | **{r['ratio1']:.2f}** | {r['ratio1_cpu']:.2f} | "
                 f"{r['tgc2_s'] * 1e3:.3f} | "
                 f"{r['ort2_s'] * 1e3:.3f} | **{r['ratio2']:.2f}** | {r['speedup2']:.2f} | {r['tgc1_gflops']:.1f} | "
                 f"{r['max_abs_err']:.1e} ({r['max_abs_ref']:.2f}){flag} |"
                 + (f" {r['other_cc_ratio']:.2f} |" if "other_cc_ratio" in r else ""))
  level = next((r["cpu"] for r in rows if r.get("cpu")), "native")
  lines.append(f"\n{info['date']}; {info['cpu']} ({info['level']}; kernels for --cpu {level}), {info['cores']} cores, "
               f"1-minute load "
               f"{info['load_1min']:.2f} at the end; C compiler {info['cc']}; onnxruntime {info['onnxruntime']}; numpy "
               f"{info['numpy']} sgemm one thread {info['roofline']:.0f} GFLOP/s; Python {info['python']}")
  for r in rows:
    if not r.get("profile"): continue
    lines += [f"\n{r['description']}: slowest kernels (in-artifact timing, one thread)", "",
              "| kernel | launches | ms | share | GFLOP/s | of sgemm | opts |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {k['kernel']} | {k['launches']} | {k['ms']:.3f} | {k['share']:.0%} | {k['gflops']:.1f} | "
              f"{k['roofline']:.0%} | {k['opts']} |" for k in r["profile"]]
  return "\n".join(lines)


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("models", nargs="*", help=f"some of: {', '.join(MODELS)} (default: all)")
  ap.add_argument("--runs", type=int, default=20, help="timed rounds per model (each runs every engine once)")
  ap.add_argument("--profile", type=int, default=0, metavar="N", help="list the N slowest kernels of each model")
  ap.add_argument("--keep", metavar="DIR", help="write the ONNX files and artifacts here (default: a temp dir)")
  ap.add_argument("--other-cc", metavar="CC", help="also time the one-thread artifact built by this C compiler "
                  "(e.g. gcc when the default is clang), as a ratio to the default build")
  ap.add_argument("--json", action="store_true", help="print the rows and the machine as JSON")
  ap.add_argument("--cpu", default="native", help="--cpu level of the compiles (default: native)")
  args = ap.parse_args(argv)
  names = args.models or list(MODELS)
  unknown = [n for n in names if n not in MODELS]
  if unknown:
    print(f"unknown models: {', '.join(unknown)}; known: {', '.join(MODELS)}", file=sys.stderr)
    return 2
  warnings.simplefilter("ignore")
  work = args.keep or tempfile.mkdtemp(prefix="tgc-bench-cpu-")
  os.makedirs(work, exist_ok=True)
  roofline = sgemm_roofline()
  rows, start = [], time.perf_counter()
  for name in names:
    try: rows.append(dict(measure(name, work, args.runs, args.profile, roofline, args.other_cc, args.cpu),
                          other_cc=args.other_cc, cpu=args.cpu))
    except Exception as error:
      rows.append({"model": name, "description": name, "error": f"{type(error).__name__}: {error}".splitlines()[0]})
    print(f"{name}: done ({time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)
  info = dict(machine(), roofline=roofline)
  print(json.dumps({"machine": info, "rows": rows}, indent=1) if args.json else markdown(rows, info))
  return 0 if all(r.get("ok") for r in rows) else 1


if __name__ == "__main__":
  sys.exit(main())
