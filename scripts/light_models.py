"""Compile and run the real-architecture ONNX models of the onnx wheel (onnx/backend/test/data/light) with tgc and
print a table: compile time, run time, and the error against the stored output and against onnxruntime.

    python scripts/light_models.py                       # all nine models, target c
    python scripts/light_models.py squeezenet resnet50   # some of them
    python scripts/light_models.py --runs 3 --markdown
    python scripts/light_models.py squeezenet --target webgpu   # WebGPU artifact through wgpu (lavapipe here)

Two rows per model (see tests/onnx/light_models.py): "stored" is the model as shipped (every weight 0.02, made by
ConstantOfShape) on onnx's own test input, compared with the stored light_*_output_0.pb and with onnxruntime;
"random" has seeded random weights and input and is compared with onnxruntime. Compile time covers the pipeline
(`tgc compile`: import, trace, lower, write; in brackets) and building the artifact's library; run time is the
median of --runs runs of the artifact (ort: one onnxruntime run). Targets: those the ONNX backend runs (c, opencl,
webgpu); OpenCL (PoCL) and WebGPU (lavapipe) each load LLVM, so run them in separate invocations."""
from __future__ import annotations
import argparse
import os
import sys
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "onnx"))

import light_models as lm  # noqa: E402


def _fmt(x: float | None, spec: str = ".2e") -> str:
  return "-" if x is None else format(x, spec)


def measure(name: str, target: str, runs: int, seed: int) -> list[dict]:
  rows = []
  model = lm.load(name)
  variants = [("stored", model, lm.dummy_inputs(model), lm.stored_output(name))]
  rm = lm.randomized(model, seed)
  variants.append(("random", rm, lm.random_inputs(rm, seed), None))
  for kind, m, feeds, stored in variants:
    row = {"model": name, "variant": kind}
    try:
      ort_out, ort_s = lm.run_onnxruntime(m, feeds)
      row["ort_s"] = ort_s
    except Exception as error:
      ort_out, row["ort_note"] = None, f"onnxruntime: {type(error).__name__}: {error}"
    try:
      r = lm.run_tgc(m, feeds, target, runs)
    except Exception as error:
      row["error"] = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
      rows.append(row)
      continue
    got = r.outputs[0]
    row.update(compile_s=r.compile_s, pipeline_s=r.pipeline_s, run_s=r.run_s, kernels=r.kernels)
    if stored is not None:
      row["vs_stored"] = lm.max_abs_error(got, stored)
      row["ok"] = lm.stored_ok(name, got, stored)
    if ort_out is not None:
      row["vs_ort"] = lm.max_abs_error(got, ort_out[0])
      row["scaled_vs_ort"] = lm.scaled_error(got, ort_out[0])
      if stored is None: row["ok"] = lm.random_ok(got, ort_out[0])
    rows.append(row)
  return rows


def table(rows: list[dict], markdown: bool) -> str:
  head = ["model", "variant", "kernels", "compile s (pipeline)", "run s", "ort s", "max err vs stored",
          "max err vs ort", "(/ max |ort|)", "ok"]
  body = []
  for r in rows:
    if "error" in r:
      body.append([r["model"], r["variant"], "-", "-", "-", _fmt(r.get("ort_s"), ".3f"), "-", "-", "-",
                   "ERROR " + r["error"][:80]])
      continue
    body.append([r["model"], r["variant"], str(r["kernels"]), f"{r['compile_s']:.1f} ({r['pipeline_s']:.1f})",
                 f"{r['run_s']:.3f}", _fmt(r.get("ort_s"), ".3f"), _fmt(r.get("vs_stored")), _fmt(r.get("vs_ort")),
                 _fmt(r.get("scaled_vs_ort")), "yes" if r.get("ok") else "NO"])
  if markdown:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(b) + " |" for b in body]
    return "\n".join(lines)
  widths = [max(len(x) for x in col) for col in zip(head, *body)]
  fmt = "  ".join(f"{{:<{w}}}" for w in widths)
  return "\n".join([fmt.format(*head), fmt.format(*("-" * w for w in widths))] + [fmt.format(*b) for b in body])


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("models", nargs="*", help=f"some of: {', '.join(lm.NAMES)} (default: all)")
  ap.add_argument("--target", default="c")
  ap.add_argument("--runs", type=int, default=1, help="timed runs of each artifact")
  ap.add_argument("--seed", type=int, default=0, help="seed of the random weights and input")
  ap.add_argument("--markdown", action="store_true")
  args = ap.parse_args(argv)
  names = args.models or list(lm.NAMES)
  unknown = [n for n in names if n not in lm.NAMES]
  if unknown:
    print(f"unknown models: {', '.join(unknown)}; known: {', '.join(lm.NAMES)}", file=sys.stderr)
    return 2
  warnings.simplefilter("ignore")
  rows, start = [], time.perf_counter()
  for name in names:
    if not lm.available(name):
      print(f"{name}: not in this onnx wheel ({lm.model_path(name)})", file=sys.stderr)
      continue
    rows.extend(measure(name, args.target, args.runs, args.seed))
    print(f"{name}: done ({time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)
  print(table(rows, args.markdown))
  print(f"\nerrors: stored = onnx's rtol {1e-3:g} (densenet121 {lm.STORED_RTOL['densenet121']:g}), atol "
        f"{lm.STORED_ATOL:g}; random = max abs error <= {lm.RANDOM_RTOL:g} * max |onnxruntime output|; "
        f"total {time.perf_counter() - start:.0f} s")
  return 0 if all(r.get("ok") for r in rows) else 1


if __name__ == "__main__":
  sys.exit(main())
