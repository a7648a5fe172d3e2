"""Text generation in the browser: a tgc WebGPU artifact that keeps its KV cache on the GPU against onnxruntime-web's
WebGPU execution provider on the same ONNX model, tokens per second in one headless Chromium page.

The model is bench/bench_generate.py's GPT-2 export (transformers GPT2LMHeadModel, random init: 4 layers, d 192, 3
heads of 64, the real vocabulary of 50257; inputs input_ids, attention_mask, position_ids, past_key_values.N.key/
value; outputs logits, present.N.key/value), compiled for `--target webgpu --dim sequence_length=1..512
--max-context 640`. Both engines run in one page (bench/web/bench_generate.js) of headless Chromium with
SwiftShader's WebGPU, served from 127.0.0.1 (tests/headless_chromium.py):

- tgc: the artifact's model.js; the cache stays in its GPU buffers, its length is the artifact's
  (`model.resetState(0)` starts a sequence), each call uploads only its tokens.
- onnxruntime-web (bench/web/package.json's version): the cache passed in and out as its API does; by default
  `preferredOutputLocation: "gpu-buffer"` for the present.* outputs (IO binding: they stay in GPU buffers and are fed
  back as the next call's past_key_values), `--ort-cache cpu` reads them back and uploads them again. The first call
  gets empty (1, 3, 0, 64) caches.

Both read all the logits back to the page. Per context (16, 128, 512 by default): prefill (a prompt of that many
tokens in one call from an empty cache) and decode (one token per call after it, --decode-steps calls, the cache
holding context, context + 1, ... entries); an untimed warm-up round first (onnxruntime-web compiles its shaders on
first use), then --rounds interleaved rounds (tgc, onnxruntime-web, with the same tokens); medians of the rounds
(decode: of every call) as tokens per second and the ratio tgc / onnxruntime-web (> 1: tgc faster). Each call's
time is printed to stderr as it comes (SwiftShader is slow: a 512-token prefill takes about a minute, the default
run about 15 minutes on 2 cores). Checks, in the page: a seeded 8-token prompt and --steps greedy tokens from each
engine against PyTorch's `generate(do_sample=False)` (the random-init model tends to repeat one token, so also:) the
last-token logits of a prompt call and 4 decode calls against onnxruntime (pip, CPU) fed the same tokens.

Run (needs /usr/bin/chromium, playwright, torch and transformers; install the peer once):

    (cd bench/web && npm install)
    python bench/bench_generate_web.py [--contexts 16 128 512] [--rounds 3] [--decode-steps 4] [--ort-cache gpu|cpu]
                                       [--only tgc|ort] [--variant cpu|gpu]

Prints markdown (the 1-minute load average before and after included); exit status 1 when the tokens differ."""
from __future__ import annotations
import argparse
import os
import statistics
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
from bench_generate import CONFIG, MAX_CONTEXT, MAX_SEQ, PROMPT, SEQ, export  # noqa: E402
from bench_webgpu_browser import ORT_DIST, ORT_MODULE, _ort_version, browser_version, missing_pieces  # noqa: E402

PAGE_MODULE = "/web/bench_generate.js"
NAMES = {"tgc": "tgc (model.js)", "ort": "onnxruntime-web (webgpu EP)"}


def log(message: str) -> None:
  print(message, file=sys.stderr, flush=True)


def call(page, function: str, *args):
  """`function(...args)` of the page module, awaited in the page."""
  return page.evaluate(f"async (args) => (await import({PAGE_MODULE!r})).{function}(...args)", list(args))


def torch_tokens(model, prompt: list[int], steps: int) -> list[int]:
  import torch
  with torch.no_grad():
    out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.int64),
                         do_sample=False, max_new_tokens=steps, min_new_tokens=steps, pad_token_id=0)
  return out[0, len(prompt):].tolist()


def prepare(site: str) -> tuple[object, str, float]:
  """The ONNX export in site/models and its WebGPU artifact in site/tgc; (the torch model, the ONNX file, compile
  seconds)."""
  from tgc.aot.compile import compile_model
  path = os.path.join(site, "models", "gpt2_kv.onnx")
  log("exporting GPT-2 with its cache ...")
  model = export(path)
  log(f"compiling for webgpu (--dim {SEQ}=1..{MAX_SEQ} --max-context {MAX_CONTEXT}) ...")
  start = time.perf_counter()
  compile_model(path, "webgpu", os.path.join(site, "tgc", "gpt2_web"), name="gpt2_web", dims={SEQ: (1, MAX_SEQ)},
                max_context=MAX_CONTEXT)
  seconds = time.perf_counter() - start
  log(f"compiled in {seconds:.1f} s")
  return model, path, seconds


def setup_args(ort_cache: str, only: str | None, variant: str | None = None) -> dict:
  head = CONFIG["n_embd"] // CONFIG["n_head"]
  present = [f"present.{i}.{k}" for i in range(CONFIG["n_layer"]) for k in ("key", "value")]
  return {"tgcModule": "/tgc/gpt2_web/model.js", "tgcWeights": "/tgc/gpt2_web/weights.safetensors",
          "tgcVariant": variant,
          "ortModule": f"/ort/{ORT_MODULE}", "ortWasm": "/ort/", "modelUrl": "/models/gpt2_kv.onnx",
          "cacheOnGpu": ort_cache == "gpu", "cacheShape": [CONFIG["n_head"], head], "present": present, "only": only}


def measure_context(page, engines: list[str], context: int, rounds: int, decode_steps: int) -> dict:
  """{engine: (prefill tokens/s, decode tokens/s)}: medians over the rounds after an untimed warm-up round."""
  times: dict[str, tuple[list, list]] = {e: ([], []) for e in engines}
  for r in range(-1, rounds):
    rng = np.random.default_rng(1000 * context + max(r, 0))
    prompt = rng.integers(0, CONFIG["vocab_size"], context).tolist()
    following = rng.integers(0, CONFIG["vocab_size"], decode_steps).tolist()
    for engine in engines:
      start = time.perf_counter()
      got = call(page, "measure", engine, prompt, following)
      label = "warm-up" if r < 0 else f"round {r + 1}/{rounds}"
      log(f"  context {context} {label} {engine}: prefill {got['prefillMs']:.0f} ms, decode "
          f"{' '.join(f'{ms:.0f}' for ms in got['decodeMs'])} ms ({time.perf_counter() - start:.0f} s)")
      if got["held"] != context + decode_steps: raise RuntimeError(f"{engine} holds {got['held']} entries")
      if r >= 0:
        times[engine][0].append(got["prefillMs"])
        times[engine][1].extend(got["decodeMs"])
  return {e: (context * 1e3 / statistics.median(p), 1e3 / statistics.median(d)) for e, (p, d) in times.items()}


def markdown(rates: dict, meta: dict) -> str:
  lines = [f"Chromium {meta['chromium']} headless, WebGPU adapter: tgc {meta['devices'].get('tgc', '-')}, "
           f"onnxruntime-web {meta['ort_version']} ({meta['devices'].get('ort', '-')}; {meta['ort_cache']}); "
           f"tgc kernel variant {meta['variant']}; compile {meta['compile_s']:.1f} s; load tgc "
           f"{meta['load_ms'].get('tgc', 0):.0f} ms, onnxruntime-web {meta['load_ms'].get('ort', 0):.0f} ms; "
           f"medians of {meta['rounds']} interleaved rounds after a warm-up round, {meta['decode_steps']} decode "
           f"calls each; 1-minute load average {meta['load_before']:.2f} before, {meta['load_after']:.2f} after.", "",
           "| context | engine | prefill tokens/s | decode tokens/s |", "|---|---|---|---|"]
  for context, by in rates.items():
    for engine, (pre, dec) in by.items(): lines.append(f"| {context} | {NAMES[engine]} | {pre:.1f} | {dec:.1f} |")
  if all(len(by) == 2 for by in rates.values()):
    lines += ["", "| context | prefill tgc / onnxruntime-web | decode tgc / onnxruntime-web |", "|---|---|---|"]
    for context, by in rates.items():
      (tp, td), (op, od) = by["tgc"], by["ort"]
      lines.append(f"| {context} | {tp / op:.2f}x | {td / od:.2f}x |")
  lines += ["", meta["tokens"]]
  return "\n".join(lines)


def check_tokens(page, engines: list[str], model, steps: int) -> tuple[bool, str]:
  """Greedy tokens of each engine in the page against PyTorch's (and so each other's)."""
  prompt = np.random.default_rng(0).integers(0, CONFIG["vocab_size"], PROMPT).tolist()
  expected = torch_tokens(model, prompt, steps)
  got = {}
  for engine in engines:
    log(f"greedy: {steps} tokens on {engine} ...")
    got[engine] = call(page, "greedy", engine, prompt, steps, CONFIG["vocab_size"])
  same = all(tokens == expected for tokens in got.values())
  parts = [f"{NAMES[e]} {'equal' if t == expected else 'DIFFERENT: ' + ' '.join(map(str, t))}"
           for e, t in got.items()]
  text = (f"Greedy tokens ({steps} after a seeded {PROMPT}-token prompt) against PyTorch's generate "
          f"({' '.join(map(str, expected))}): {'; '.join(parts)}.")
  return same, text


def check_logits(page, engines: list[str], onnx_path: str, calls: int = 4) -> str:
  """The last-token logits of a prompt call and `calls` decode calls on each engine against onnxruntime's (pip,
  CPU, the cache passed in and out): the largest max |error| / max |reference| over the calls."""
  from bench_generate import OrtDecoder
  rng = np.random.default_rng(1)
  prompt = rng.integers(0, CONFIG["vocab_size"], PROMPT).tolist()
  following = rng.integers(0, CONFIG["vocab_size"], calls).tolist()
  ref = OrtDecoder(onnx_path, 1)
  want = [ref.run(prompt)[0, -1]] + [ref.run([t])[0, -1] for t in following]
  parts = []
  for engine in engines:
    rows = call(page, "trace", engine, prompt, following, CONFIG["vocab_size"])
    worst = max(float(np.abs(np.asarray(g, np.float32) - w).max() / np.abs(w).max()) for g, w in zip(rows, want))
    parts.append(f"{NAMES[engine]} {worst:.1e}")
  return (f"Logits of the last token ({PROMPT}-token prompt, then {calls} decode calls) against onnxruntime on the "
          f"CPU, max |error| / max |reference|: {'; '.join(parts)}.")


def run_page(context, url: str, args, model, onnx_path: str) -> tuple[dict, dict, bool, str]:
  page = context.new_page()
  page.on("console", lambda m: m.type == "error" and log(f"  page console: {m.text}"))
  try:
    page.goto(f"{url}/index.html")
    log("loading the engines in the page ...")
    info = call(page, "setup", setup_args(args.ort_cache, args.only, args.variant))
    for engine, i in info.items(): log(f"  {engine}: loaded in {i['loadMs']:.0f} ms ({i['variant']})")
    engines = list(info)
    same, text = check_tokens(page, engines, model, args.steps)
    log(text)
    text += "\n\n" + check_logits(page, engines, onnx_path)
    log(text.splitlines()[-1])
    rates = {}
    for ctx in args.contexts:
      rates[ctx] = measure_context(page, engines, ctx, args.rounds, args.decode_steps)
      log("  " + ", ".join(f"{e}: prefill {p:.1f} / decode {d:.1f} tokens/s" for e, (p, d) in rates[ctx].items()))
    call(page, "dispose")
    return info, rates, same, text
  finally:
    page.close()


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--contexts", type=int, nargs="+", default=[16, 128, 512])
  ap.add_argument("--rounds", type=int, default=3)
  ap.add_argument("--decode-steps", type=int, default=4, help="decode calls per round after the prefill")
  ap.add_argument("--steps", type=int, default=16, help="greedy tokens compared between the engines")
  ap.add_argument("--ort-cache", choices=("gpu", "cpu"), default="gpu",
                  help="onnxruntime-web's present.* outputs: kept in GPU buffers (IO binding) or read back")
  ap.add_argument("--only", choices=("tgc", "ort"), help="run one engine only")
  ap.add_argument("--variant", help="run this kernel variant of the tgc artifact (e.g. gpu: the workgroup-tiled "
                                    "kernels hardware adapters get) instead of the one model.js picks")
  args = ap.parse_args(argv)
  if max(args.contexts) > MAX_SEQ or max(args.contexts) + max(args.decode_steps, args.steps) > MAX_CONTEXT:
    ap.error(f"contexts are 1..{MAX_SEQ}, and with the decode steps at most {MAX_CONTEXT}")
  reason = missing_pieces()
  if reason:
    log(f"bench_generate_web: {reason}")
    return 2
  load_before = os.getloadavg()[0]
  log(f"1-minute load average: {load_before:.2f}")
  with tempfile.TemporaryDirectory(prefix="tgc-bench-gen-web-") as site:
    for sub in ("models", "tgc"): os.makedirs(os.path.join(site, sub))
    with open(os.path.join(site, "index.html"), "w", encoding="utf-8") as f:
      f.write("<!doctype html><meta charset=utf-8><title>tgc generation benchmark</title>\n")
    model, onnx_path, compile_s = prepare(site)
    from playwright.sync_api import Error as PlaywrightError
    routes = {"/": site, "/ort": ORT_DIST, "/web": os.path.join(ROOT, "bench", "web")}
    with chromium.serve(routes) as url, chromium.playwright_session() as playwright:
      context, profile = chromium.launch(playwright)
      try:
        if not chromium.has_webgpu_adapter(context, f"{url}/index.html"):
          log(f"bench_generate_web: {chromium.NO_ADAPTER}")
          return 2
        info, rates, same, text = run_page(context, url, args, model, onnx_path)
      except PlaywrightError as error:     # an engine failed in the page: its message, not numbers
        log(f"bench_generate_web: the page failed: {str(error).strip()}")
        return 1
      finally:
        chromium.close(context, profile)
  meta = {"chromium": browser_version(), "ort_version": _ort_version(), "compile_s": compile_s,
          "devices": {e: i["device"] for e, i in info.items()}, "load_ms": {e: i["loadMs"] for e, i in info.items()},
          "variant": info.get("tgc", {}).get("variant", "-"), "ort_cache": info.get("ort", {}).get("variant", "-"),
          "rounds": args.rounds, "decode_steps": args.decode_steps, "load_before": load_before,
          "load_after": os.getloadavg()[0], "tokens": text}
  print(markdown(rates, meta))
  return 0 if same else 1


if __name__ == "__main__":
  sys.exit(main())
