"""Where the error of `tgc compile --quantize int8` comes from: the int8 weights, the uint8 activations, each node.

    python bench/quantize_budget.py transformer                  # the bench's transformer encoder (onnx_models.py)
    python bench/quantize_budget.py resnet18 bert_minilm         # corpus models (python bench/corpus.py build)
    python bench/quantize_budget.py transformer --per-node       # also each node's weights and each activation alone

The model is rewritten by the same code as `--quantize int8` (frontend/onnx/quantize.py: per-channel int8 weights,
per-tensor uint8 activations with min/max ranges, the bias correction from the calibrated means) on `--samples`
calibration inputs, in several forms: everything quantized, the weights only, the activations only (weights float),
and with `--per-node` one node's weights or one activation at a time. Each form runs in onnxruntime on `--eval`
other inputs (seeds after the calibration's); per form: the largest error over the float model's largest output
magnitude and the worst cosine similarity, as the `--quantize` report gives them. Errors of independent parts add
about in quadrature (rms), so the per-node rows show how much of the total each part is. Inputs are drawn as the
corpus index says (bench/corpus.py `feeds`); the transformer's are standard normal embeddings."""
from __future__ import annotations
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))
import numpy as np  # noqa: E402
import onnx  # noqa: E402

import corpus  # noqa: E402
import onnx_models  # noqa: E402
from corpus import ort_session  # noqa: E402
from tgc.aot import quantize as calibration  # noqa: E402
from tgc.frontend.onnx import quantize as q  # noqa: E402


def load(name: str, corpus_dir: str):
  """(model, inputs(seed) -> feeds) of a corpus entry or of the bench transformer ('transformer')."""
  if name == "transformer":
    model = onnx_models.transformer_encoder()
    spec = model.graph.input[0]
    shape = tuple(d.dim_value for d in spec.type.tensor_type.shape.dim)
    return model, lambda seed: {spec.name: np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}
  e = corpus.entry(name, corpus_dir)
  return onnx.load(corpus.model_path(corpus_dir, e)), lambda seed: corpus.feeds(e, seed)


def calibrate(model, sites, samples: list[dict]) -> tuple[dict, dict]:
  """Each quantizable node's activation: its (lowest, highest) over the samples and its mean per channel, as
  `--quantize` calibrates them (`aot.quantize.calibrate`, min/max), the float model run by onnxruntime."""
  axes = q.activation_axes(sites)
  sess = ort_session(q.with_outputs(model, list(axes)).SerializeToString())
  names = [o.name for o in sess.get_outputs()]
  ranges, means, _ = calibration.calibrate(lambda feed: dict(zip(names, sess.run(None, feed))), samples, axes, [],
                                           calibration.QuantizeOptions(""), lambda text: None)
  return ranges, {k: np.asarray(v) for k, v in means.items()}


def errors(quantized, feeds: list[dict], floats: list[dict]) -> tuple[float, float]:
  """(largest error / the float output's largest magnitude, worst cosine) over all outputs and inputs, as the
  `--quantize` report measures them (`aot.quantize.output_errors`)."""
  sess = ort_session(quantized.SerializeToString())
  names = [o.name for o in sess.get_outputs()]
  outputs = calibration.output_errors(floats, [dict(zip(names, sess.run(None, feed))) for feed in feeds])
  return max(o.relative for o in outputs), min(o.cosine for o in outputs)


def budget(name: str, corpus_dir: str, samples: int, evals: int, per_node: bool) -> None:
  model, inputs = load(name, corpus_dir)
  sites = q.quantizable(model)
  cal = [inputs(seed) for seed in range(1, samples + 1)]
  feeds = [inputs(seed) for seed in range(samples + 1, samples + evals + 1)]
  ranges, means = calibrate(model, sites, cal)
  float_sess = ort_session(model.SerializeToString())
  float_names = [o.name for o in float_sess.get_outputs()]
  floats = [dict(zip(float_names, float_sess.run(None, feed))) for feed in feeds]
  print(f"\n{name}: {len(sites)} nodes with int8 weights, {len(ranges)} activations, {samples} calibration and "
        f"{evals} other inputs\n\n| form | max err / largest | cosine |\n|---|---|---|")
  forms = [("everything (as --quantize int8)", q.quantize_model(model, ranges, sites, means)),
           ("int8 weights only (bias corrected)", q.quantize_model(model, {}, sites, means)),
           ("uint8 activations only (weights float)", q.quantize_model(model, ranges, sites, weights=False))]
  if per_node:
    forms += [(f"weights of {s.node} only ({s.op} {s.weight})", q.quantize_model(model, {}, [s], means))
              for s in sites]
    forms += [(f"activation {a} only", q.quantize_model(model, {a: r}, sites, weights=False))
              for a, r in ranges.items()]
  for label, quantized in forms:
    err, cos = errors(quantized, feeds, floats)
    print(f"| {label} | {err * 100:.2f}% | {cos:.6f} |", flush=True)


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("models", nargs="+", help="'transformer' or corpus model names")
  ap.add_argument("--corpus", default=corpus.DEFAULT_OUT, help="the corpus folder (python bench/corpus.py build)")
  ap.add_argument("--samples", type=int, default=16, help="calibration inputs")
  ap.add_argument("--eval", type=int, default=4, help="other inputs the errors are measured on")
  ap.add_argument("--per-node", action="store_true", help="also one node's weights and one activation at a time")
  args = ap.parse_args(argv)
  for name in args.models: budget(name, args.corpus, args.samples, args.eval, args.per_node)
  return 0


if __name__ == "__main__":
  sys.exit(main())
