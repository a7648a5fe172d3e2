"""Browser benchmark: a tgc WebGPU artifact (its model.js) against onnxruntime-web's WebGPU execution provider on the
same ONNX model, in one headless Chromium session (SwiftShader WebGPU on a machine without a GPU), both served from
a local http server on 127.0.0.1; nothing is fetched from elsewhere at run time.

The models are the onnx wheel's light models (squeezenet by default) with seeded random weights
(tests/onnx/light_models.py); both engines get the same seeded normal input, and both outputs are checked against
onnxruntime (pip, CPU) on that input. Per engine: load time (import of the module + load of the weights/model:
tgc's `load()` builds every pipeline, onnxruntime-web compiles its shaders during the first run), the first run,
and the median of --runs further runs (each run uploads the input and reads the output back); printed as
tgc / onnxruntime-web ratios. For the tgc artifact also: its kernels and dispatches, and its intermediate memory:
the arena of the compile-time memory plan (manifest `arena_bytes`, codegen/memory.py `plan_memory`), the whole
GPUBuffers the WebGPU artifact allocates for intermediates (manifest `target_info.slot_buffers`,
`plan_slots`), against the sum of every intermediate tensor (manifest `arena_buffers`).

Install the peer once (into bench/web/node_modules, ignored by git):

    (cd bench/web && npm install)
    python bench/bench_webgpu_browser.py [squeezenet shufflenet ...] [--runs 5] [--seed 0] [--json]

Needs /usr/bin/chromium (Debian package chromium), playwright (pip; never `playwright install`) and onnxruntime."""
from __future__ import annotations
import argparse
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "tests", "onnx"))

import numpy as np  # noqa: E402

import headless_chromium as chromium  # noqa: E402
import light_models as lm  # noqa: E402
from tgc.aot.errors import UserError  # noqa: E402

ORT_DIST = os.path.join(ROOT, "bench", "web", "node_modules", "onnxruntime-web", "dist")
ORT_MODULE = "ort.webgpu.min.mjs"
BLANK_PAGE = "<!doctype html><meta charset=utf-8><title>tgc browser benchmark</title>\n"

# each returns {loadMs, firstMs, times: [ms], outputs: {name: [values]}, info}
TGC_JS = """async ({module, weights, input, data, shape, runs}) => {
  const t0 = performance.now();
  const m = await import(module);
  const model = await m.load(weights);
  const loadMs = performance.now() - t0;
  const feeds = {[input]: Float32Array.from(data)};
  let t = performance.now();
  const first = await model.run(feeds);
  const firstMs = performance.now() - t;
  const times = [];
  for (let i = 0; i < runs; i++) {
    t = performance.now();
    await model.run(feeds);
    times.push(performance.now() - t);
  }
  const outputs = Object.fromEntries(Object.entries(first).map(([k, v]) => [k, Array.from(v.data)]));
  const a = model.device.adapterInfo || {};
  const info = [a.vendor, a.architecture, a.description].filter(Boolean).join(" ");
  await model.dispose();
  return {loadMs, firstMs, times, outputs, info};
}"""

ORT_JS = """async ({module, wasm, modelUrl, input, data, shape, runs}) => {
  const t0 = performance.now();
  const ort = await import(module);
  ort.env.wasm.wasmPaths = wasm;
  ort.env.wasm.numThreads = 1;
  ort.env.logLevel = "error";
  const session = await ort.InferenceSession.create(modelUrl, {executionProviders: ["webgpu"]});
  const loadMs = performance.now() - t0;
  const feeds = {[input]: new ort.Tensor("float32", Float32Array.from(data), shape)};
  let t = performance.now();
  const first = await session.run(feeds);
  const firstMs = performance.now() - t;
  const times = [];
  for (let i = 0; i < runs; i++) {
    t = performance.now();
    await session.run(feeds);
    times.push(performance.now() - t);
  }
  const outputs = {};
  for (const [k, v] of Object.entries(first)) outputs[k] = Array.from(await v.getData());
  const device = await ort.env.webgpu.device;
  const a = (device && device.adapterInfo) || {};
  const info = [a.vendor, a.architecture, a.description].filter(Boolean).join(" ");
  await session.release();
  return {loadMs, firstMs, times, outputs, info: (device ? "webgpu " : "no webgpu device ") + info};
}"""


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
  """Kernels and intermediate memory of an artifact, from its manifest."""
  inter = [b["nbytes"] for b in manifest["arena_buffers"]]
  slots = manifest.get("target_info", {}).get("slot_buffers", [])
  return {"kernels": len(manifest["kernels"]), "dispatches": len(manifest["calls"]),
          "intermediates": len(inter), "intermediate_bytes_sum": int(sum(inter)),
          "largest_intermediate_bytes": int(max(inter, default=0)), "arena_bytes": int(manifest["arena_bytes"]),
          "webgpu_slot_buffers": len(slots), "webgpu_slot_bytes": int(sum(slots)),
          "weights_bytes": int(manifest["weights"]["nbytes"])}


def prepare(name: str, seed: int, site: str) -> dict:
  """The randomized model written to site/models/<name>.onnx, its tgc artifact in site/tgc/<name>, the input and
  onnxruntime's (CPU) output."""
  from tgc.aot.compile import compile_model
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    model = lm.randomized(lm.load(name), seed)
  path = os.path.join(site, "models", f"{name}.onnx")
  with open(path, "wb") as f: f.write(model.SerializeToString())
  start = time.perf_counter()
  folder = os.path.join(site, "tgc", name)
  compile_model(path, "webgpu", folder, name=name)
  compile_s = time.perf_counter() - start
  feeds = lm.random_inputs(model, seed)
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


def bench_model(context, url: str, prep: dict, runs: int) -> dict:
  name, feeds = prep["name"], prep["feeds"]
  (input_name, x), = feeds.items()
  common = {"input": input_name, "data": x.reshape(-1).astype(np.float64).tolist(), "shape": list(x.shape),
            "runs": runs}
  result = {"model": name, "compile_s": prep["compile_s"], "onnx_nodes": prep["onnx_nodes"],
            "input_shape": list(x.shape), **memory_stats(prep["manifest"])}
  engines = {"tgc": (TGC_JS, {"module": f"/tgc/{name}/model.js", "weights": f"/tgc/{name}/weights.safetensors"}),
             "ort": (ORT_JS, {"module": f"/ort/{ORT_MODULE}", "wasm": "/ort/", "modelUrl": f"/models/{name}.onnx"})}
  for engine, (script, args) in engines.items():
    got = run_engine(context, url, f"{name} on {engine}", script, {**common, **args})
    result[engine] = {"load_ms": got["loadMs"], "first_run_ms": got["firstMs"],
                      "median_run_ms": statistics.median(got["times"]) if got["times"] else got["firstMs"],
                      "runs": len(got["times"]), "scaled_error_vs_onnxruntime_cpu": errors(got["outputs"], prep["ref"]),
                      "device": got["info"]}
  t, o = result["tgc"], result["ort"]
  result["ratios"] = {"load": t["load_ms"] / o["load_ms"], "first_run": t["first_run_ms"] / o["first_run_ms"],
                      "load_plus_first_run": (t["load_ms"] + t["first_run_ms"]) / (o["load_ms"] + o["first_run_ms"]),
                      "median_run": t["median_run_ms"] / o["median_run_ms"]}
  return result


def _mib(n: int) -> str: return f"{n / 2 ** 20:.2f} MiB"


def markdown(results: list[dict], meta: dict) -> str:
  lines = [f"Chromium {meta['chromium']} headless, WebGPU adapter: tgc {meta['tgc_device'] or '?'}, "
           f"onnxruntime-web {meta['ort_version']} ({meta['ort_device'] or '?'}); seed {meta['seed']}, median of "
           f"{meta['runs']} runs after the first.", "",
           "| model | engine | load ms | first run ms | median run ms | max err vs ort CPU (scaled) |",
           "|---|---|---|---|---|---|"]
  for r in results:
    for engine, label in (("tgc", "tgc artifact (model.js)"), ("ort", "onnxruntime-web (webgpu EP)")):
      e = r[engine]
      lines.append(f"| {r['model']} | {label} | {e['load_ms']:.0f} | {e['first_run_ms']:.0f} | "
                   f"{e['median_run_ms']:.0f} | {e['scaled_error_vs_onnxruntime_cpu']:.1e} |")
    q = r["ratios"]
    lines.append(f"| {r['model']} | **tgc / ort** | {q['load']:.2f} | {q['first_run']:.2f} | {q['median_run']:.2f} | "
                 f"(load + first run: {q['load_plus_first_run']:.2f}) |")
  lines += ["", "| model | ONNX nodes | tgc kernels (dispatches) | intermediates: sum of all | arena (memory plan) | "
                "WebGPU slot buffers | arena / sum | weights |", "|---|---|---|---|---|---|---|---|"]
  for r in results:
    lines.append(f"| {r['model']} | {r['onnx_nodes']} | {r['kernels']} ({r['dispatches']}) | "
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
  ap.add_argument("models", nargs="*", default=["squeezenet"], help=f"some of: {', '.join(lm.NAMES)}")
  ap.add_argument("--runs", type=int, default=5, help="timed runs after the first (median)")
  ap.add_argument("--seed", type=int, default=0, help="seed of the random weights and input")
  ap.add_argument("--json", action="store_true", help="print the results as JSON")
  args = ap.parse_args(argv)
  unknown = [n for n in args.models if n not in lm.NAMES]
  if unknown:
    print(f"bench_webgpu_browser: unknown models: {', '.join(unknown)}; known: {', '.join(lm.NAMES)}",
          file=sys.stderr)
    return 2
  reason = missing_pieces()
  if reason:
    print(f"bench_webgpu_browser: {reason}", file=sys.stderr)
    return 2
  for name in args.models:
    if not lm.available(name):
      print(f"bench_webgpu_browser: {lm.model_path(name)} is not in this onnx wheel", file=sys.stderr)
      return 2
  with tempfile.TemporaryDirectory(prefix="tgc-bench-web-") as site:
    for sub in ("models", "tgc"): os.makedirs(os.path.join(site, sub))
    with open(os.path.join(site, "index.html"), "w", encoding="utf-8") as f: f.write(BLANK_PAGE)
    preps = []
    for name in args.models:
      try:
        preps.append(prepare(name, args.seed, site))
      except UserError as error:
        print(f"bench_webgpu_browser: {name}: {error}", file=sys.stderr)
        return 1
      print(f"{name}: compiled in {preps[-1]['compile_s']:.1f} s", file=sys.stderr, flush=True)
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
            results.append(bench_model(context, url, prep, args.runs))
            print(f"{prep['name']}: measured in {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
        finally:
          chromium.close(context, profile)
    except BenchError as error:
      print(f"bench_webgpu_browser: {error}", file=sys.stderr)
      return 1
  meta = {"chromium": browser_version(), "ort_version": _ort_version(), "seed": args.seed, "runs": args.runs,
          "tgc_device": results[0]["tgc"]["device"] if results else "",
          "ort_device": results[0]["ort"]["device"] if results else ""}
  if args.json: print(json.dumps({"meta": meta, "results": results}, indent=2))
  else: print(markdown(results, meta))
  return 0


if __name__ == "__main__":
  sys.exit(main())
