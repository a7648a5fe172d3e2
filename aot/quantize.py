"""`tgc compile --quantize int8 --calibration DIR`: post-training quantization of a float ONNX model by tgc itself.

1. The float model, made to return every activation that feeds a quantizable node as well
   (`frontend.onnx.quantize.with_outputs`), is compiled into a temporary C artifact and run on each calibration
   sample; each activation's range is its lowest and highest value (`minmax`, the default: measured on ResNet-18
   and a BERT encoder, clipping the rare largest values cost accuracy, 99.99th percentile 1.5% of the largest output
   against 0.7%) or the values at a percentile of all the samples' values (`percentile`, 99.99 by default), and its
   mean per channel (the weights' rounding shifts each output's mean by their error times that mean: subtracted
   from the bias, which brought ResNet-18's error from 2.1% of the largest output to 0.7%).
2. `frontend.onnx.quantize.quantize_model` rewrites the model with those ranges (int8 weights per output channel,
   uint8 activations per tensor) and the rewrite is compiled into the artifact folder like any model. The
   manifest's source records the float model and the ranges (`quantize`), so `tgc validate` rebuilds the same
   quantized model as its reference.
3. The artifact runs on the calibration samples; per output, the report gives its largest error relative to the
   float model's largest magnitude and the cosine similarity (the worst sample's) against the float artifact.

`--keep-float NAMES` (mixed precision): the named nodes keep their float weights and the named activations
are not quantized (`bench/quantize_budget.py --per-node` measures what each node and activation costs); the
manifest records the names, so the rebuilt reference leaves them float too.

Calibration data (`DIR`): either one `NAME.npy` per model input, holding one sample (the input's shape) or samples
stacked along a new leading axis, or one subfolder per sample (in name order) holding one `NAME.npy` per input.
A `/` in an input name is a `_` in its file name."""
from __future__ import annotations
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
import numpy as np
from tgc.ir.config import config
from tgc.aot import models
from tgc.aot.artifact import artifact_runtime, open_artifact, run_values
from tgc.aot.compile import CompileReport, compile_model
from tgc.aot.errors import UserError, describe

METHODS = ("minmax", "percentile")
DEFAULT_PERCENTILE = 99.99
CALIBRATION_TARGET = "c"       # the float model runs as a C artifact to calibrate
PROGRESS_AFTER_S = 2.0


@dataclass(frozen=True)
class QuantizeOptions:
  """`--quantize int8 --calibration DIR [--calibration-method M] [--percentile P]`."""
  calibration: str
  method: str = "minmax"
  percentile: float = DEFAULT_PERCENTILE
  dtype: str = "int8"
  keep_float: tuple[str, ...] = ()     # node names (their weights) and activation names that stay float


@dataclass
class OutputError:
  """One output of the quantized artifact against the float artifact on the calibration samples."""
  name: str
  max_abs: float
  largest: float          # the float outputs' largest magnitude
  cosine: float           # the worst sample's cosine similarity

  @property
  def relative(self) -> float: return self.max_abs / self.largest if self.largest > 0 else self.max_abs


@dataclass
class QuantizeReport:
  compiled: CompileReport
  samples: int
  method: str
  nodes: int              # Conv / MatMul / Gemm nodes with int8 weights
  activations: int        # activations quantized per tensor
  float_weights_bytes: int
  outputs: list[OutputError] = field(default_factory=list)
  calibrate_s: float = 0.0
  percentile: float = DEFAULT_PERCENTILE
  kept_float: tuple[str, ...] = ()


class _Steps:
  """Progress lines on stderr: with DEBUG>=1 always, else once the whole job has run for PROGRESS_AFTER_S."""

  def __init__(self, name: str):
    self.name, self.start = name, time.perf_counter()

  def __call__(self, text: str) -> None:
    elapsed = time.perf_counter() - self.start
    if config.debug >= 1 or elapsed >= PROGRESS_AFTER_S:
      print(f"tgc: {self.name}: {text} ({elapsed:.1f} s)", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- checks and calibration data
def check_request(model: str, target: str, options: QuantizeOptions) -> models.ModelSpec:
  """Everything that can be refused before compiling: the model kind, the target, the method, the data folder."""
  if options.dtype != "int8": raise UserError(f"--quantize {options.dtype}: only int8 is supported")
  if options.method not in METHODS:
    raise UserError(f"--calibration-method {options.method!r}: expected one of {', '.join(METHODS)}")
  if not 50.0 < options.percentile <= 100.0:
    raise UserError(f"--percentile {options.percentile:g}: expected a value above 50 and at most 100")
  if target != CALIBRATION_TARGET:
    raise UserError(f"--quantize: target {target} is not supported yet (target c only; the quantized model can be "
                    f"compiled for {target} once it is an ONNX file)")
  spec = models.parse_model_spec(model)
  if spec.kind != "onnx":
    raise UserError(f"--quantize applies to .onnx models only, not to {spec.text} (a Tensor-API model has no graph "
                    f"to rewrite yet; export it to ONNX)")
  folder = options.calibration
  if not os.path.isdir(folder): raise UserError(f"--calibration {folder}: no such folder")
  if not any(_entries(folder)):
    raise UserError(f"--calibration {folder}: the folder holds no .npy file and no subfolder")
  return spec


def _entries(folder: str) -> tuple[list[str], list[str]]:
  names = sorted(os.listdir(folder))
  subs = [n for n in names if os.path.isdir(os.path.join(folder, n)) and not n.startswith(".")]
  files = [n for n in names if n.endswith(".npy") and os.path.isfile(os.path.join(folder, n))]
  return files, subs


def file_name(input_name: str) -> str:
  return input_name.replace("/", "_").replace("\\", "_") + ".npy"


def _load(path: str, name: str, spec: dict, extra_axis: bool) -> np.ndarray:
  try: data = np.load(path, allow_pickle=False)
  except Exception as error: raise UserError(f"--calibration: cannot read {path} ({describe(error)})") from error
  shape, want = list(spec["shape"]), np.dtype(spec.get("npy_dtype") or spec["dtype"])
  fits = lambda s: len(s) == len(shape) and all(not isinstance(d, int) or d == g for d, g in zip(shape, s))  # noqa
  if not (fits(data.shape) or extra_axis and fits(data.shape[1:])):
    raise UserError(f"--calibration: {path} has shape {list(data.shape)}; input {name!r} takes {shape} "
                    f"{'(or samples stacked along a new first axis) ' if extra_axis else ''}of {want.name}")
  if data.dtype.kind != want.kind and not (data.dtype.kind in "iu" and want.kind in "iu"):
    raise UserError(f"--calibration: {path} holds {data.dtype.name}; input {name!r} takes {want.name}")
  return data.astype(want, copy=False)


def sample_files(folder: str, names: list[str]) -> tuple[bool, list[dict[str, str]]]:
  """The calibration files in DIR for the inputs `names`: (whether DIR holds the files itself (one sample or
  samples stacked), the files of each sample by input name); a missing file is a UserError naming it."""
  files, subs = _entries(folder)
  groups = [folder] if files else [os.path.join(folder, sub) for sub in subs]
  out = []
  for group in groups:
    paths = {name: os.path.join(group, file_name(name)) for name in names}
    for name, path in paths.items():
      if not os.path.isfile(path): raise UserError(f"--calibration: {path} is missing (input {name!r})")
    out.append(paths)
  return bool(files), out


def read_samples(folder: str, inputs: list[dict]) -> list[dict[str, np.ndarray]]:
  """The calibration samples in DIR for the artifact's inputs (manifest entries), each a dict name -> array."""
  flat, groups = sample_files(folder, [spec["name"] for spec in inputs])
  if not flat:
    return [{spec["name"]: _load(paths[spec["name"]], spec["name"], spec, False) for spec in inputs}
            for paths in groups]
  arrays = {spec["name"]: _load(groups[0][spec["name"]], spec["name"], spec, True) for spec in inputs}
  stacked = {spec["name"]: arrays[spec["name"]].ndim != len(spec["shape"]) for spec in inputs}
  counts = {len(v) if stacked[k] else 1 for k, v in arrays.items()}
  if len(counts) > 1: raise UserError(f"--calibration {folder}: the inputs' files hold different sample counts")
  count = counts.pop() if counts else 0
  return [{k: (v[i] if stacked[k] else v) for k, v in arrays.items()} for i in range(count)]


# ---------------------------------------------------------------- ranges
class RangeStats:
  """The lowest and highest values of one tensor over all samples, or the values at a percentile of them: the k
  smallest and largest values are kept (k from the percentile and the values expected), nothing else."""

  def __init__(self, percentile: float, expected: int):
    self.tail = 1.0 - percentile / 100.0
    self.keep = max(1, math.ceil(round(expected * self.tail, 6)) + 1)
    self.low = np.zeros(0, np.float32)
    self.high = np.zeros(0, np.float32)
    self.count = 0

  def add(self, values: np.ndarray) -> None:
    v = np.asarray(values, np.float32).ravel()
    v = v[np.isfinite(v)]
    self.count += v.size
    low, high = np.concatenate([self.low, v]), np.concatenate([self.high, v])
    k = min(self.keep, low.size)
    self.low = np.partition(low, k - 1)[:k] if low.size > k else low
    self.high = np.partition(high, high.size - k)[high.size - k:] if high.size > k else high

  def range(self) -> tuple[float, float]:
    if not self.count: return 0.0, 0.0
    k = min(math.floor(round(self.count * self.tail, 6)) + 1, self.low.size)   # nearest rank
    return float(np.sort(self.low)[k - 1]), float(np.sort(self.high)[::-1][k - 1])



def calibrate(run, samples: list[dict], axes: dict[str, int], outputs: list[str], options: QuantizeOptions,
              steps) -> tuple[dict, dict, list[dict[str, np.ndarray]]]:
  """Run the float model returning the activations too (`run`: sample -> values by name) on every sample: each
  activation's range and its mean per channel along `axes[name]` (the bias correction's), and the float model's
  `outputs` per sample. `steps(text)` reports progress."""
  percentile = 100.0 if options.method == "minmax" else options.percentile
  stats: dict[str, RangeStats] = {}
  sums: dict[str, np.ndarray] = {}
  counts: dict[str, int] = {}
  floats = []
  for i, sample in enumerate(samples):
    got = {**run(sample), **sample}      # an activation may be a model input
    for name, axis in axes.items():
      value = np.asarray(got[name], np.float32)
      if name not in stats: stats[name] = RangeStats(percentile, value.size * len(samples))
      stats[name].add(value)
      rows = np.moveaxis(value, axis, -1).reshape(-1, value.shape[axis]) if value.ndim else value.reshape(1, 1)
      sums[name] = sums.get(name, 0.0) + rows.sum(axis=0, dtype=np.float64)
      counts[name] = counts.get(name, 0) + rows.shape[0]
    floats.append({k: np.array(got[k]) for k in outputs})
    steps(f"calibration sample {i + 1}/{len(samples)}")
  means = {name: [float(f"{v:.6g}") for v in sums[name] / max(counts[name], 1)] for name in axes}
  return {name: stats[name].range() for name in axes}, means, floats


def output_errors(floats: list[dict], quantized: list[dict]) -> list[OutputError]:
  """Per output: the largest error over the samples, the float outputs' largest magnitude, the worst cosine."""
  out = []
  for name in floats[0]:
    ref = [np.asarray(f[name], np.float64).ravel() for f in floats]
    got = [np.asarray(q[name], np.float64).ravel() for q in quantized]
    max_abs = max(float(np.abs(g - r).max(initial=0.0)) for g, r in zip(got, ref))
    largest = max(float(np.abs(r).max(initial=0.0)) for r in ref)
    out.append(OutputError(name, max_abs, largest, min(_cosine(g, r) for g, r in zip(got, ref))))
  return out


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
  na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
  if na == 0.0 or nb == 0.0: return 1.0 if na == nb else 0.0
  return float(np.dot(a, b) / (na * nb))


def record(options: QuantizeOptions, ranges: dict[str, tuple[float, float]], means: dict[str, list[float]],
           samples: int) -> dict:
  """What the manifest's source keeps to rebuild the quantized model (`aot.reference.quantized_model`)."""
  info = {"dtype": options.dtype, "method": options.method, "samples": samples,
          "calibration": os.path.abspath(options.calibration),
          "ranges": {k: [float(lo), float(hi)] for k, (lo, hi) in ranges.items()}, "means": means}
  if options.method == "percentile": info["percentile"] = options.percentile
  if options.keep_float: info["keep_float"] = sorted(options.keep_float)
  return info


def kept_float(sites: list, keep: tuple[str, ...], what: str) -> list:
  """The sites whose weights are quantized: all but the nodes named in `keep` (mixed precision). A name in `keep`
  that is neither a quantizable node nor the activation one reads is a UserError naming it (`what`: the model)."""
  known = {s.node for s in sites} | {s.activation for s in sites}
  for name in keep:
    if name not in known:
      nodes = ", ".join(s.node for s in sites[:6]) + (", ..." if len(sites) > 6 else "")
      raise UserError(f"--keep-float {name!r}: {what} has no quantizable node or activation of that name "
                      f"(nodes: {nodes})")
  left = [s for s in sites if s.node not in keep]
  if not left: raise UserError(f"--keep-float: every quantizable node of {what} is kept float; nothing to quantize")
  return left


def quantize_and_compile(model: str, target: str, out_dir: str, options: QuantizeOptions,
                         **compile_options) -> QuantizeReport:
  """Calibrate the float ONNX `model` on the samples in `options.calibration`, quantize it and compile the result
  into `out_dir` (`compile_options`: those of `compile_model`); report each output's error against the float
  model on the samples. Nothing is written to `out_dir` when any step fails."""
  import onnx
  from tgc.frontend.onnx.quantize import QuantizeError, activation_axes, quantizable, quantize_model, with_outputs
  spec = check_request(model, target, options)
  steps = _Steps(spec.stem)
  try: float_model = onnx.load(spec.path)
  except Exception as error: raise UserError(f"{spec.text}: cannot read the ONNX model ({describe(error)})") from error
  sites = quantizable(float_model)
  if not sites: raise UserError(f"{spec.text}: nothing to quantize (no Conv, MatMul or Gemm with a float32 "
                                f"initializer as its weight)")
  sites = kept_float(sites, options.keep_float, spec.text)
  axes = activation_axes(sites)
  outputs = [o.name for o in float_model.graph.output]
  known = {t.name for t in float_model.graph.initializer} | set(compile_options.get("consts") or {})
  sample_files(options.calibration, [i.name for i in float_model.graph.input if i.name not in known])
  start = time.perf_counter()
  with tempfile.TemporaryDirectory(prefix="tgc-quantize-") as tmp:
    steps("compiling the float model for calibration")
    shared = {k: v for k, v in compile_options.items() if k in ("input_shapes", "consts", "const_files", "dims",
                                                                "max_bytes", "cpu")}
    calibration_model = with_outputs(float_model, list(axes))
    compile_model(model, CALIBRATION_TARGET, os.path.join(tmp, "float"), onnx_model=calibration_model, **shared)
    art = open_artifact(os.path.join(tmp, "float"))
    samples = read_samples(options.calibration, art.inputs)
    if not samples: raise UserError(f"--calibration {options.calibration}: no samples")
    with artifact_runtime(art) as runtime:
      ranges, means, floats = calibrate(lambda sample: run_values(runtime, sample), samples, axes, outputs, options,
                                        steps)
    float_bytes = int(art.weights_bytes)
  calibrate_s = time.perf_counter() - start
  ranges = {k: v for k, v in ranges.items() if k not in options.keep_float}
  try: quantized = quantize_model(float_model, ranges, sites, {k: np.asarray(v) for k, v in means.items()})
  except QuantizeError as error: raise UserError(f"{spec.text}: {error}") from error
  steps(f"quantized {len(sites)} nodes' weights and {len(ranges)} activations; compiling")
  report = compile_model(model, target, out_dir, onnx_model=quantized,
                         source_extra={"quantize": record(options, ranges, means, len(samples))}, **compile_options)
  with artifact_runtime(open_artifact(out_dir)) as runtime:
    got = [run_values(runtime, sample) for sample in samples]
  return QuantizeReport(report, len(samples), options.method, len(sites), len(ranges), float_bytes,
                        output_errors(floats, got), calibrate_s, options.percentile, options.keep_float)
