"""Text generation with the KV cache kept by the artifact: tokens per second against onnxruntime, and the tokens
against PyTorch's greedy decode.

The model is bench/corpus.py's GPT-2 architecture (transformers GPT2LMHeadModel, random init: 4 layers, d 192, 3
heads of 64, the real vocabulary of 50257), exported by torch.onnx with its cache as optimum lays it out: inputs
input_ids, attention_mask (past + sequence), position_ids and past_key_values.N.key/value; outputs logits and
present.N.key/value (needs torch and transformers: bench/corpus-requirements.txt). It is compiled once for the C
target with `--dim sequence_length=1..512 --max-context 640`.

- Tokens: a seeded 8-token prompt and 64 greedy steps on the artifact (prompt in one call, then one call per
  token) must equal `GPT2LMHeadModel.generate(do_sample=False)`'s tokens.
- Speed at contexts of 16, 128 and 512 tokens: prefill (the prompt of that many tokens in one call, from an empty
  cache) and decode (one token with that many in the cache) for the C artifact (its Python runner, 1 and 2
  threads of its pool) and onnxruntime (intra-op threads 1 and 2, the cache passed in and out as its API does);
  medians of interleaved rounds, reported as tokens per second and the ratio tgc / onnxruntime (> 1: tgc faster).

Run: python bench/bench_generate.py [--contexts 16 128 512] [--rounds 3] [--cpu native]. Prints markdown."""
from __future__ import annotations
import argparse
import os
import statistics
import sys
import tempfile
import time
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np  # noqa: E402

CONFIG = dict(n_layer=4, n_embd=192, n_head=3, vocab_size=50257, n_positions=1024)
PAST, SEQ = "past_sequence_length", "sequence_length"
MAX_SEQ, MAX_CONTEXT = 512, 640
PROMPT, STEPS = 8, 64


def export(path: str):
  """The GPT-2 model (seeded) and its ONNX export with the cache; returns the torch model."""
  import torch
  import transformers
  torch.manual_seed(0)
  cfg = transformers.GPT2Config(**CONFIG)
  cfg._attn_implementation = "eager"
  model = transformers.GPT2LMHeadModel(cfg).eval()
  layers = cfg.n_layer

  class WithCache(torch.nn.Module):
    """The model with its cache as flat tensors (the layout onnxruntime-genai and optimum export)."""
    def __init__(self, m):
      super().__init__()
      self.m = m

    def forward(self, ids, mask, positions, *past):
      cache = transformers.DynamicCache(config=cfg)
      for i in range(layers): cache.update(past[2 * i], past[2 * i + 1], i)
      out = self.m(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True)
      return (out.logits, *[t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)])
  past_names = [f"past_key_values.{i}.{k}" for i in range(layers) for k in ("key", "value")]
  present_names = [n.replace("past_key_values", "present") for n in past_names]
  p, s, head = 3, 2, CONFIG["n_embd"] // CONFIG["n_head"]
  example = (torch.randint(0, CONFIG["vocab_size"], (1, s)), torch.ones(1, p + s, dtype=torch.int64),
             torch.arange(p, p + s)[None], *[torch.randn(1, CONFIG["n_head"], p, head) for _ in past_names])
  axes = {"input_ids": {1: SEQ}, "position_ids": {1: SEQ}, "attention_mask": {1: f"{PAST} + {SEQ}"},
          "logits": {1: SEQ}, **{n: {2: PAST} for n in past_names},
          **{n: {2: f"{PAST} + {SEQ}"} for n in present_names}}
  torch.onnx.export(WithCache(model), example, path, input_names=["input_ids", "attention_mask", "position_ids"] +
                    past_names, output_names=["logits"] + present_names, dynamic_axes=axes, opset_version=17,
                    dynamo=False)
  return model


def torch_tokens(model, prompt: list[int]) -> list[int]:
  import torch
  with torch.no_grad():
    out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.int64),
                         do_sample=False, max_new_tokens=STEPS, min_new_tokens=STEPS, pad_token_id=0)
  return out[0, len(prompt):].tolist()


def _feeds(tokens: list[int], held: int) -> dict[str, np.ndarray]:
  n = len(tokens)
  return {"input_ids": np.array([tokens], np.int64), "attention_mask": np.ones((1, held + n), np.int64),
          "position_ids": np.arange(held, held + n, dtype=np.int64)[None]}


def tgc_tokens(art, prompt: list[int]) -> list[int]:
  art.reset_state()
  feed, out = prompt, []
  for _ in range(STEPS):
    logits = art.run(_feeds(feed, art.held_sizes()[PAST]))["logits"]
    feed = [int(logits[0, -1].argmax())]
    out.append(feed[0])
  return out


class OrtDecoder:
  """onnxruntime with the cache passed in and returned, as its API runs a decoder."""

  def __init__(self, path: str, threads: int):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    self.past = [i.name for i in self.session.get_inputs() if i.name.startswith("past_key_values")]
    self.reset()

  def reset(self) -> None:
    head = CONFIG["n_embd"] // CONFIG["n_head"]
    self.cache = {n: np.zeros((1, CONFIG["n_head"], 0, head), np.float32) for n in self.past}
    self.held = 0

  def run(self, tokens: list[int]) -> np.ndarray:
    logits, *present = self.session.run(None, {**_feeds(tokens, self.held), **self.cache})
    self.cache = dict(zip(self.past, present))
    self.held += len(tokens)
    return logits


def _time(fn) -> float:
  start = time.perf_counter()
  fn()
  return time.perf_counter() - start


def measure(reset, run, context: int, rng, decode_steps: int = 8) -> tuple[float, float]:
  """(prefill seconds for `context` tokens from empty, median seconds of one decode step at `context` entries)."""
  prompt = rng.integers(0, CONFIG["vocab_size"], context).tolist()
  reset()
  prefill = _time(lambda: run(prompt))
  steps = []
  for _ in range(decode_steps):
    steps.append(_time(lambda: run([int(rng.integers(0, CONFIG["vocab_size"]))])))
  return prefill, statistics.median(steps)


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--contexts", type=int, nargs="+", default=[16, 128, 512])
  ap.add_argument("--rounds", type=int, default=3)
  ap.add_argument("--cpu", default="native")
  args = ap.parse_args(argv)
  from tgc.aot.compile import compile_model
  from tgc.runtimes.artifact_c import CArtifact
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "gpt2_kv.onnx")
    model = export(path)
    out = os.path.join(tmp, "gpt2_c")
    start = time.perf_counter()
    compile_model(path, "c", out, dims={SEQ: (1, MAX_SEQ)}, max_context=MAX_CONTEXT, cpu=args.cpu)
    print(f"compiled in {time.perf_counter() - start:.1f} s (--dim {SEQ}=1..{MAX_SEQ} --max-context {MAX_CONTEXT})\n")
    prompt = np.random.default_rng(0).integers(0, CONFIG["vocab_size"], PROMPT).tolist()
    expected = torch_tokens(model, prompt)
    runners = {f"tgc {t}t": CArtifact(out, threads=t) for t in (1, 2)}
    got = tgc_tokens(runners["tgc 1t"], prompt)
    same = sum(a == b for a, b in zip(got, expected))
    print(f"greedy tokens ({STEPS} steps after an {PROMPT}-token prompt) equal to PyTorch's generate: "
          f"{'yes' if got == expected else f'NO ({same}/{STEPS})'}\n")
    ort_runners = {f"onnxruntime {t}t": OrtDecoder(path, t) for t in (1, 2)}
    tgc_calls = {name: (art.reset_state, lambda tokens, a=art: a.run(_feeds(tokens, a.held_sizes()[PAST])))
                 for name, art in runners.items()}
    ort_calls = {name: (o.reset, o.run) for name, o in ort_runners.items()}
    calls = {**tgc_calls, **ort_calls}
    print("| context | runtime | prefill tokens/s | decode tokens/s |\n|---|---|---|---|")
    summary = []
    for context in args.contexts:
      best: dict[str, list[tuple[float, float]]] = {name: [] for name in calls}
      for r in range(args.rounds):
        for name, (reset, run) in calls.items():
          best[name].append(measure(reset, run, context, np.random.default_rng(r)))
      rates = {name: (context / statistics.median(p for p, _ in ts), 1 / statistics.median(d for _, d in ts))
               for name, ts in best.items()}
      for name, (pre, dec) in rates.items(): print(f"| {context} | {name} | {pre:.0f} | {dec:.0f} |")
      for t in (1, 2):
        a, b = rates[f"tgc {t}t"], rates[f"onnxruntime {t}t"]
        summary.append((context, t, a[0] / b[0], a[1] / b[1]))
    print("\n| context | threads | prefill tgc / onnxruntime | decode tgc / onnxruntime |\n|---|---|---|---|")
    for context, t, pre, dec in summary: print(f"| {context} | {t} | {pre:.2f}x | {dec:.2f}x |")
    for art in runners.values(): art.close()
  return 0 if got == expected else 1


if __name__ == "__main__":
  sys.exit(main())
