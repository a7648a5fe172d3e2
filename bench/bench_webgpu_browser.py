"""Browser benchmark: a tgc WebGPU artifact (its model.js) against onnxruntime-web's WebGPU execution provider on the
same ONNX model, in one headless Chromium session (SwiftShader WebGPU on a machine without a GPU), both served from
a local http server on 127.0.0.1; nothing is fetched from elsewhere at run time.

Models (positional, any number): a path to any .onnx file, or one of the named models of bench/bench_models.py: the
onnx wheel's light models (`resnet50`, `squeezenet`, ...: seeded random weights), `mobilenet_v2`, `transformer` and
`example_cnn` (examples/mnist_cnn.py written out as the same ONNX graph; tgc compiles that ONNX file, as
onnxruntime-web loads it). Default: the four benchmark models resnet50, mobilenet_v2, transformer, example_cnn.
Inputs with dynamic dimensions need `--input-shape name=1,3,224,224`. Both engines get the same seeded inputs
(normal floats, small integers), and both outputs are checked against onnxruntime (pip, CPU) on those inputs.

Per engine: load time (import of the module + load of the weights/model: tgc's `load()` builds every pipeline,
onnxruntime-web compiles its shaders during the first run), the first run, --warmup more runs, then the median of
--runs timed runs; every run uploads the inputs and reads the outputs back (onnxruntime-web's outputs are on the CPU).
Printed as tgc / onnxruntime-web ratios. For the tgc artifact also: its kernels and dispatches, its work-group sizes
(kernels of 64 or more work-items that run one work-item per work-group) and its intermediate memory: the arena of the
compile-time memory plan (manifest `arena_bytes`, codegen/memory.py `plan_memory`), the whole GPUBuffers the WebGPU
artifact allocates for intermediates (manifest `target_info.slot_buffers`, `plan_slots`), against the sum of every
intermediate tensor (manifest `arena_buffers`).

Install the peer once (into bench/web/node_modules, ignored by git):

    (cd bench/web && npm install)
    python bench/bench_webgpu_browser.py [MODEL ...] [--runs 5] [--warmup 2] [--seed 0] [--json]

Needs /usr/bin/chromium (Debian package chromium), playwright (pip; never `playwright install`) and onnxruntime."""
from __future__ import annotations
import argparse
import importlib.util
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "tests", "onnx"))

import numpy as np  # noqa: E402

import headless_chromium as chromium  # noqa: E402
import light_models as lm  # noqa: E402
from bench_models import DEFAULT_MODELS, ModelError, feeds_for, known_models, load_onnx, parse_shapes  # noqa: E402
from tgc.aot.errors import UserError  # noqa: E402

ORT_DIST = os.path.join(ROOT, "bench", "web", "node_modules", "onnxruntime-web", "dist")
ORT_MODULE = "ort.webgpu.min.mjs"
BLANK_PAGE = "<!doctype html><meta charset=utf-8><title>tgc browser benchmark</title>\n"

# the inputs as the page gets them: [{name, dtype, shape, data}]; each engine's TypedArrays made from them
FEEDS_JS = """const typed = (f) => f.dtype === "int64" ? BigInt64Array.from(f.data, (v) => BigInt(v))
  : f.dtype === "int32" ? Int32Array.from(f.data) : Float32Array.from(f.data);"""

# the bytes the page fetched (bodies, by file), from the resource timing entries (same origin: sizes are exposed)
DOWNLOADED_JS = """
  const downloaded = () => Object.fromEntries(performance.getEntriesByType("resource")
    .map((e) => [new URL(e.name).pathname.split("/").pop(), e.decodedBodySize]));"""

# each returns {loadMs, firstMs, times: [ms], outputs: {name: [values]} (of the first run), info}; tgc's also the
# milliseconds from load() until its quick kernels were replaced (`optimizedMs`; the timed runs come after) and the
# outputs of its last run
TGC_JS = """async ({module, weights, feeds, runs, warmup, wanted}) => {
  %s
  const t0 = performance.now();
  const m = await import(module);
  const model = await m.load(weights, wanted ? {variant: wanted} : {});
  const loadMs = performance.now() - t0;
  const inputs = Object.fromEntries(feeds.map((f) => [f.name, typed(f)]));
  let t = performance.now();
  const first = await model.run(inputs);
  const firstMs = performance.now() - t;
  const optimizedMs = await model.optimized;
  for (let i = 0; i < warmup; i++) await model.run(inputs);
  const times = [];
  let last = first;
  for (let i = 0; i < runs; i++) {
    t = performance.now();
    last = await model.run(inputs);
    times.push(performance.now() - t);
  }
  const plain = (outs) => Object.fromEntries(Object.entries(outs).map(([k, v]) => [k, Array.from(v.data, Number)]));
  const outputs = plain(first), optimizedOutputs = plain(last);
  const a = model.device.adapterInfo || {};
  const info = [a.vendor, a.architecture, a.description].filter(Boolean).join(" ");
  const variant = model.variant || "";
  const phases = model.loadTimings || null;
  await model.dispose();
  return {loadMs, firstMs, optimizedMs, times, outputs, optimizedOutputs, info, variant, phases,
          downloaded: downloaded()};
}""" % (FEEDS_JS + DOWNLOADED_JS)

ORT_JS = """async ({module, wasm, modelUrl, feeds, runs, warmup}) => {
  %s
  const t0 = performance.now();
  const ort = await import(module);
  ort.env.wasm.wasmPaths = wasm;
  ort.env.wasm.numThreads = 1;
  ort.env.logLevel = "error";
  const session = await ort.InferenceSession.create(modelUrl, {executionProviders: ["webgpu"]});
  const loadMs = performance.now() - t0;
  const inputs = Object.fromEntries(feeds.map((f) => [f.name, new ort.Tensor(f.dtype, typed(f), f.shape)]));
  let t = performance.now();
  const first = await session.run(inputs);
  const firstMs = performance.now() - t;
  const outputs = {};
  for (const [k, v] of Object.entries(first)) outputs[k] = Array.from(await v.getData(), Number);
  for (let i = 0; i < warmup; i++) await session.run(inputs);
  const times = [];
  for (let i = 0; i < runs; i++) {
    t = performance.now();
    const out = await session.run(inputs);
    for (const v of Object.values(out)) await v.getData();
    times.push(performance.now() - t);
  }
  const device = await ort.env.webgpu.device;
  const a = (device && device.adapterInfo) || {};
  const info = [a.vendor, a.architecture, a.description].filter(Boolean).join(" ");
  await session.release();
  return {loadMs, firstMs, times, outputs, info: (device ? "webgpu " : "no webgpu device ") + info, variant: "",
          phases: null, downloaded: downloaded()};
}""" % (FEEDS_JS + DOWNLOADED_JS)


class BenchError(Exception):
  """A missing piece or a failed engine: one line for the user."""


def missing_pieces() -> str | None:
  reason = chromium.missing_browser()
  if reason: return reason
  if not os.path.isfile(os.path.join(ORT_DIST, ORT_MODULE)):
    return (f"onnxruntime-web is not installed ({os.path.relpath(ORT_DIST, ROOT)}/{ORT_MODULE} is missing): run "
            f"`npm install` in bench/web")
  if importlib.util.find_spec("onnxruntime") is None:
    return "onnxruntime (pip) is missing: pip install onnxruntime (it checks both engines' outputs)"
  return None


def memory_stats(manifest: dict) -> dict:
  """Kernels, work-group sizes and intermediate memory of an artifact, from its manifest."""
  inter = [b["nbytes"] for b in manifest["arena_buffers"]]
  slots = manifest.get("target_info", {}).get("slot_buffers", [])
  sizes = [math.prod(k["local_size"]) for k in manifest["kernels"]]
  single = sum(1 for k, wg in zip(manifest["kernels"], sizes) if wg == 1 and math.prod(k["global_size"]) >= 64)
  return {"kernels": len(manifest["kernels"]), "dispatches": len(manifest["calls"]),
          "one_item_workgroups": single, "median_workgroup": statistics.median(sizes) if sizes else 0,
          "intermediates": len(inter), "intermediate_bytes_sum": int(sum(inter)),
          "largest_intermediate_bytes": int(max(inter, default=0)), "arena_bytes": int(manifest["arena_bytes"]),
          "webgpu_slot_buffers": len(slots), "webgpu_slot_bytes": int(sum(slots)),
          "weights_bytes": int(manifest["weights"]["nbytes"])}


def prepare(spec: str, seed: int, site: str, shapes: dict) -> dict:
  """The model written to site/models/<name>.onnx, its tgc artifact in site/tgc/<name>, the inputs and
  onnxruntime's (CPU) outputs."""
  from tgc.aot.compile import compile_model
  name, model = load_onnx(spec, seed)
  path = os.path.join(site, "models", f"{name}.onnx")
  with open(path, "wb") as f: f.write(model.SerializeToString())
  start = time.perf_counter()
  folder = os.path.join(site, "tgc", name)
  compile_model(path, "webgpu", folder, name=name, input_shapes=shapes or None)
  compile_s = time.perf_counter() - start
  feeds = feeds_for(model, seed, shapes)
  ref = lm.run_onnxruntime(model, feeds)[0]
  outputs = [o.name for o in model.graph.output]
  manifest = chromium.manifest_of(folder)
  return {"name": name, "model": model, "feeds": feeds, "ref": dict(zip(outputs, ref)), "compile_s": compile_s,
          "manifest": manifest, "onnx_nodes": len(model.graph.node)}


def run_engine(context, url: str, what: str, script: str, args: dict) -> dict:
  page = context.new_page()
  try:
    page.goto(f"{url}/index.html")
    return page.evaluate(script, args)
  except Exception as error:
    raise BenchError(f"{what}: {(str(error).strip().splitlines() or [type(error).__name__])[0]}") from None
  finally:
    page.close()


def browser_version() -> str:
  try:
    text = subprocess.run([chromium.CHROMIUM, "--version"], capture_output=True, text=True, timeout=60).stdout
  except (OSError, subprocess.SubprocessError):
    return "?"
  found = re.search(r"[0-9]+(\.[0-9]+)+", text)
  return found.group(0) if found else "?"


def errors(outputs: dict, ref: dict) -> float:
  """The largest scaled error (max abs error / max |reference|) over the outputs."""
  worst = 0.0
  for name, want in ref.items():
    if name not in outputs: raise BenchError(f"output {name!r} is missing")
    got = np.asarray(outputs[name], np.float32).reshape(want.shape)
    worst = max(worst, lm.scaled_error(got, want))
  return worst


def bench_model(context, url: str, prep: dict, runs: int, warmup: int, only: str | None = None,
                variant: str | None = None) -> dict:
  name = prep["name"]
  feeds = [{"name": k, "dtype": str(v.dtype), "shape": list(v.shape),
            "data": v.reshape(-1).astype(np.float64 if v.dtype.kind == "f" else np.int64).tolist()}
           for k, v in prep["feeds"].items()]
  common = {"feeds": feeds, "runs": runs, "warmup": warmup}
  result = {"model": name, "compile_s": prep["compile_s"], "onnx_nodes": prep["onnx_nodes"],
            "inputs": {k: list(v.shape) for k, v in prep["feeds"].items()}, **memory_stats(prep["manifest"])}
  engines = {"tgc": (TGC_JS, {"module": f"/tgc/{name}/model.js", "weights": f"/tgc/{name}/weights.safetensors",
                              "wanted": variant}),
             "ort": (ORT_JS, {"module": f"/ort/{ORT_MODULE}", "wasm": "/ort/", "modelUrl": f"/models/{name}.onnx"})}
  for engine, (script, args) in engines.items():
    if only and engine != only: continue
    got = run_engine(context, url, f"{name} on {engine}", script, {**common, **args})
    result[engine] = {"load_ms": got["loadMs"], "first_run_ms": got["firstMs"],
                      "median_run_ms": statistics.median(got["times"]) if got["times"] else got["firstMs"],
                      "runs": len(got["times"]),
                      "scaled_error_vs_onnxruntime_cpu": max(errors(got.get(o) or got["outputs"], prep["ref"])
                                                             for o in ("outputs", "optimizedOutputs")),
                      "device": got["info"], "variant": got.get("variant", ""), "load_phases": got.get("phases"),
                      "optimized_ms": got.get("optimizedMs"), "downloaded": got.get("downloaded") or {}}
  if only: return result
  t, o = result["tgc"], result["ort"]
  result["ratios"] = {"load": t["load_ms"] / o["load_ms"], "first_run": t["first_run_ms"] / o["first_run_ms"],
                      "load_plus_first_run": (t["load_ms"] + t["first_run_ms"]) / (o["load_ms"] + o["first_run_ms"]),
                      "median_run": t["median_run_ms"] / o["median_run_ms"]}
  return result


def _mib(n: int) -> str: return f"{n / 2 ** 20:.2f} MiB"


def _downloads(files: dict) -> str:
  """The bytes a page fetched: the total and the largest files."""
  top = sorted(files.items(), key=lambda kv: -kv[1])[:3]
  return f"{_mib(sum(files.values()))} (" + ", ".join(f"{name} {_mib(n)}" for name, n in top) + ")"


def markdown(results: list[dict], meta: dict) -> str:
  lines = [f"Chromium {meta['chromium']} headless, WebGPU adapter: tgc {meta['tgc_device'] or '?'}, "
           f"onnxruntime-web {meta['ort_version']} ({meta['ort_device'] or '?'}); seed {meta['seed']}, median of "
           f"{meta['runs']} runs after the first and {meta['warmup']} warm-up runs; 1-minute load "
           f"{meta['load_before']:.1f} before, {meta['load_after']:.1f} after.", "",
           "| model | engine | load ms | first run ms | median run ms | max err vs ort CPU (scaled) |",
           "|---|---|---|---|---|---|"]
  for r in results:
    for engine, label in (("tgc", "tgc artifact (model.js)"), ("ort", "onnxruntime-web (webgpu EP)")):
      e = r[engine]
      if e.get("variant"): label += f", kernel variant {e['variant']}"
      lines.append(f"| {r['model']} | {label} | {e['load_ms']:.0f} | {e['first_run_ms']:.0f} | "
                   f"{e['median_run_ms']:.0f} | {e['scaled_error_vs_onnxruntime_cpu']:.1e} |")
    q = r["ratios"]
    lines.append(f"| {r['model']} | **tgc / ort** | {q['load']:.2f} | {q['first_run']:.2f} | {q['median_run']:.2f} | "
                 f"(load + first run: {q['load_plus_first_run']:.2f}) |")
  lines += ["", "| model | tgc load(): device ms | pipelines compiled, ms (pipelines / kernels, quick; during load() "
                "and the first run) | weights ms (load()) | quick kernels replaced, ms after load() began | downloaded "
                "by the page: tgc | onnxruntime-web |", "|---|---|---|---|---|---|---|"]
  for r in results:
    p = r["tgc"].get("load_phases") or {}
    phases = (f"{p['deviceMs']:.0f} | {p['pipelinesMs']:.0f} ({p['pipelines']} / {p['kernels']}, "
              f"{p.get('quickKernels', 0)}) | {p['weightsMs']:.0f} | {r['tgc'].get('optimized_ms') or 0:.0f}"
              ) if p else "- | - | - | -"
    lines.append(f"| {r['model']} | {phases} | {_downloads(r['tgc']['downloaded'])} | "
                 f"{_downloads(r['ort']['downloaded'])} |")
  lines += ["", "| model | ONNX nodes | tgc kernels (dispatches) | median work-group | one-item work-groups (>= 64 "
                "items) | intermediates: sum of all | arena (memory plan) | WebGPU slot buffers | arena / sum | "
                "weights |",
            "|---|---|---|---|---|---|---|---|---|---|"]
  for r in results:
    lines.append(f"| {r['model']} | {r['onnx_nodes']} | {r['kernels']} ({r['dispatches']}) | "
                 f"{r['median_workgroup']:g} | {r['one_item_workgroups']} | "
                 f"{_mib(r['intermediate_bytes_sum'])} ({r['intermediates']} tensors) | {_mib(r['arena_bytes'])} | "
                 f"{_mib(r['webgpu_slot_bytes'])} ({r['webgpu_slot_buffers']}) | "
                 f"{r['arena_bytes'] / max(1, r['intermediate_bytes_sum']):.2f} | {_mib(r['weights_bytes'])} |")
  return "\n".join(lines)


def _ort_version() -> str:
  try:
    with open(os.path.join(os.path.dirname(ORT_DIST), "package.json"), encoding="utf-8") as f:
      return json.load(f).get("version", "?")
  except OSError:
    return "?"


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("models", nargs="*", default=list(DEFAULT_MODELS),
                  help=f".onnx files or some of: {', '.join(known_models())}")
  ap.add_argument("--runs", type=int, default=5, help="timed runs after the warm-up (median)")
  ap.add_argument("--warmup", type=int, default=2, help="untimed runs after the first")
  ap.add_argument("--seed", type=int, default=0, help="seed of the random weights and inputs")
  ap.add_argument("--input-shape", action="append", default=[], metavar="NAME=D0,D1,...",
                  help="the shape of an input with dynamic dimensions")
  ap.add_argument("--only", choices=("tgc", "ort"), help="run one engine only (JSON output, no ratios)")
  ap.add_argument("--variant", help="run this kernel variant of the tgc artifact (e.g. gpu: the workgroup-tiled "
                                    "kernels hardware adapters get) instead of the one model.js picks")
  ap.add_argument("--json", action="store_true", help="print the results as JSON")
  args = ap.parse_args(argv)
  reason = missing_pieces()
  if reason:
    print(f"bench_webgpu_browser: {reason}", file=sys.stderr)
    return 2
  load_before = os.getloadavg()[0]
  with tempfile.TemporaryDirectory(prefix="tgc-bench-web-") as site:
    for sub in ("models", "tgc"): os.makedirs(os.path.join(site, sub))
    with open(os.path.join(site, "index.html"), "w", encoding="utf-8") as f: f.write(BLANK_PAGE)
    preps = []
    try:
      shapes = parse_shapes(args.input_shape)
      for spec in args.models:
        preps.append(prepare(spec, args.seed, site, shapes))
        print(f"{preps[-1]['name']}: compiled in {preps[-1]['compile_s']:.1f} s", file=sys.stderr, flush=True)
    except (BenchError, ModelError, UserError) as error:
      print(f"bench_webgpu_browser: {error}", file=sys.stderr)
      return 2
    results = []
    routes = {"/": site, "/ort": ORT_DIST}
    try:
      with chromium.serve(routes) as url, chromium.playwright_session() as playwright:
        context, profile = chromium.launch(playwright)
        try:
          if not chromium.has_webgpu_adapter(context, f"{url}/index.html"):
            raise BenchError("Chromium offers no WebGPU adapter (SwiftShader or a Vulkan driver is needed)")
          for prep in preps:
            start = time.perf_counter()
            results.append(bench_model(context, url, prep, args.runs, args.warmup, args.only, args.variant))
            print(f"{prep['name']}: measured in {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
        finally:
          chromium.close(context, profile)
    except BenchError as error:
      print(f"bench_webgpu_browser: {error}", file=sys.stderr)
      return 1
  if args.only: args.json = True
  meta = {"chromium": browser_version(), "ort_version": _ort_version(), "seed": args.seed, "runs": args.runs,
          "warmup": args.warmup, "load_before": load_before, "load_after": os.getloadavg()[0],
          "tgc_device": results[0].get("tgc", {}).get("device", "") if results else "",
          "ort_device": results[0].get("ort", {}).get("device", "") if results else ""}
  if args.json: print(json.dumps({"meta": meta, "results": results}, indent=2))
  else: print(markdown(results, meta))
  return 0


if __name__ == "__main__":
  sys.exit(main())
