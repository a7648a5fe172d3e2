"""`tgc validate`: run an artifact and an independent reference (`aot.reference`) on the same fresh seeded inputs
and compare every output within a tolerance (by default one fit for its dtype: `default_tolerance`)."""
from __future__ import annotations
from dataclasses import dataclass, field
import numpy as np
from tgc.aot import reference
from tgc.runtimes.dims import evaluate_size, sample_sizes
from tgc.aot.artifact import artifact_runtime, open_artifact, random_inputs, run_values
from tgc.aot.errors import UserError

# storage-only float types: about one unit in the last place of their values near 1
STORAGE_TOLERANCE = {"bfloat16": (2e-2, 1e-2), "float8e4m3fn": (0.13, 1e-2), "float8e4m3fnuz": (0.13, 1e-2),
                     "float8e5m2": (0.26, 1e-2), "float8e5m2fnuz": (0.26, 1e-2), "float4e2m1": (0.5, 0.5)}


F16_TOLERANCE = 1e-2      # --precision f16: |got - ref| <= 1e-2 |ref| + 1e-2 max |ref| (measured: up to 0.5e-2)
# --quantize int8 against its quantized model: the same form; a value on a rounding boundary may go either way and
# one activation's step carries through the layers (measured on ResNet-18, 4 seeds: up to 0.6e-2 of the largest)
QUANTIZED_TOLERANCE = 1e-2
# ONNX operators that round to integers inside a model (a QDQ or QOperator int8 model as a quantizer wrote it): its
# artifact is held to QUANTIZED_TOLERANCE too (tgc sums the exact integer products, the reference float ones)
QUANTIZING_OPS = frozenset({"QuantizeLinear", "DynamicQuantizeLinear", "QLinearConv", "QLinearMatMul", "QLinearAdd",
                            "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearConcat", "QLinearAveragePool",
                            "QLinearGlobalAveragePool", "QLinearSoftmax", "QGemm", "DynamicQuantizeMatMul",
                            "DynamicQuantizeLSTM", "MatMulIntegerToFloat"})


def default_tolerance(dtype: np.dtype, tgc_dtype: str | None = None, ref: np.ndarray | None = None,
                      precision: str = "f32") -> tuple[float, float]:
  """(rtol, atol) for an output dtype (and its tgc dtype, for storage-only types) when none is given. Artifacts
  computing in half precision (`precision` "f16") are held to F16_TOLERANCE relative to each element and to the
  output's largest magnitude (`ref`), those of a model quantized by `tgc compile --quantize` ("int8") to
  QUANTIZED_TOLERANCE likewise."""
  if tgc_dtype in STORAGE_TOLERANCE: return STORAGE_TOLERANCE[tgc_dtype]
  dtype = np.dtype(dtype)
  if dtype.kind == "f" and precision in ("f16", "int8") and ref is not None:
    scale = float(np.abs(ref[np.isfinite(ref)]).max()) if np.isfinite(ref).any() else 1.0
    tolerance = F16_TOLERANCE if precision == "f16" else QUANTIZED_TOLERANCE
    return tolerance, tolerance * max(scale, 1e-30)
  if dtype.kind == "f": return (1e-2, 1e-2) if dtype.itemsize <= 2 else (1e-4, 1e-4)
  return (0.0, 0.0)


@dataclass
class OutputCheck:
  name: str
  shape: tuple[int, ...]
  dtype: str
  max_abs: float
  max_rel: float
  rtol: float
  atol: float
  ok: bool
  note: str = ""


@dataclass
class ValidateReport:
  folder: str
  model: str
  reference: str
  seed: int
  checks: list[OutputCheck] = field(default_factory=list)

  @property
  def ok(self) -> bool: return all(c.ok for c in self.checks)


def compare(got: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> tuple[float, float, bool, str]:
  """(max abs error, max rel error over elements with |ref| >= atol (> 0 when atol is 0), within tolerance,
  note). NaN must match NaN and infinities must match exactly."""
  got, ref = np.asarray(got), np.asarray(ref)
  if got.shape != ref.shape:
    return float("inf"), float("inf"), False, f"shape {list(got.shape)}, reference {list(ref.shape)}"
  g, r = got.astype(np.float64), ref.astype(np.float64)
  same = (g == r) | (np.isnan(g) & np.isnan(r))
  with np.errstate(invalid="ignore", over="ignore"):
    diff = np.where(same, 0.0, np.abs(g - r))
  diff = np.where(np.isnan(diff), np.inf, diff)
  max_abs = float(diff.max()) if diff.size else 0.0
  scale = np.abs(r)
  mask = (scale >= atol) & (scale > 0) & np.isfinite(scale)
  max_rel = float((diff[mask] / scale[mask]).max()) if mask.any() else 0.0
  ok = bool(np.all(diff <= atol + rtol * np.where(np.isfinite(scale), scale, 0.0)))
  note = ""
  if not ok: note = f"{int(np.count_nonzero(diff > atol + rtol * np.nan_to_num(scale)))} of {diff.size} off"
  return max_abs, max_rel, ok, note


def validate_artifact(folder: str, model: str | None = None, seed: int = 0, rtol: float | None = None,
                      atol: float | None = None) -> ValidateReport:
  """Run the artifact and an independent reference on the same fresh seeded inputs; compare every output."""
  art = open_artifact(folder)
  spec, options = reference.spec_from_source(art.source, model)
  quantized = " quantized to int8 as compiled" if (options or {}).get("quantize") else ""
  report = ValidateReport(folder, spec.text + quantized, "", seed)
  below = reference.index_bounds(spec)      # integer inputs that index a table stay within it
  with artifact_runtime(art) as runtime:
    if art.manifest.get("states"):
      _validate_states(report, art, runtime, spec, options, seed, rtol, atol, below)
      return report
    stand_in = runtime.stand_in
    samples = []        # (sizes, inputs, reference outputs)
    for dims in sample_sizes(art.manifest):    # an artifact of sizes known at run time: smallest, middle, largest
      feeds = random_inputs(art, seed, dims, below)
      got = run_values(runtime, feeds)
      ref, report.reference = reference.reference_outputs(spec, feeds, options)
      _check_outputs(report, art, got, ref, dims, rtol, atol)
      samples.append((dims, feeds, ref))
  if stand_in:        # the kernels the artifact runs first on this device (model.js's quick ones) are checked too
    with artifact_runtime(art, variant=stand_in) as runtime:
      for dims, feeds, ref in samples:
        _check_outputs(report, art, run_values(runtime, feeds), ref, dims, rtol, atol, f" ({stand_in} kernels)")
  return report


def _validate_states(report: ValidateReport, art, runtime, spec, options: dict, seed: int, rtol, atol,
                     below: dict[str, int]) -> None:
  """An artifact keeping states (a KV cache): at each sample size, runs of the sampled sizes from empty states until
  the next would pass the sampled length or the capacity; the reference runs the model with the states passed in
  and returned. The last run's outputs and the states after it are compared."""
  states = art.manifest["states"]
  held = {st["length"] for st in states}
  for n, dims in enumerate(sample_sizes(art.manifest)):
    free = {k: v for k, v in dims.items() if k not in held}
    grows = {st["name"]: evaluate_size(st["grown"], {**free, st["length"]: 0}) for st in states}
    room = min(st["shape"][st["axis"]] - grows[st["name"]] for st in states)
    step = max(grows.values())
    if room < 0 or step < 1: continue            # these sizes do not fit one run: nothing to check
    runs = 1 + min(dims[st["length"]] for st in states) // step if room >= step else 1
    runs = min(runs, 1 + room // step)
    runtime.reset_state()
    cache = {st["name"]: np.zeros([0 if k == st["axis"] else d for k, d in enumerate(st["shape"])], st["dtype"])
             for st in states}
    for r in range(runs):
      sizes = {**free, **{st["length"]: cache[st["name"]].shape[st["axis"]] for st in states}}
      feeds = random_inputs(art, seed + 1000 * n + r, sizes, below)
      got = run_values(runtime, feeds)
      ref, report.reference = reference.reference_outputs(spec, {**feeds, **cache}, options)
      cache = {st["name"]: np.asarray(ref[st["output"]]) for st in states}
    _check_outputs(report, art, got, ref, sizes, rtol, atol)
    held_now = {st["name"]: runtime.state(i) for i, st in enumerate(states)}
    for st in states:
      default = default_tolerance(np.dtype(st["dtype"]), st.get("tgc_dtype"))
      rt, at = default[0] if rtol is None else rtol, default[1] if atol is None else atol
      max_abs, max_rel, ok, note = compare(held_now[st["name"]], cache[st["name"]], rt, at)
      where = ", ".join(f"{k}={v}" for k, v in sizes.items())
      report.checks.append(OutputCheck(f"state {st['name']} after {runs} runs at {where}",
                                       tuple(held_now[st["name"]].shape), st["dtype"], max_abs, max_rel, rt, at, ok,
                                       note))


def _check_outputs(report: ValidateReport, art, got: dict, ref: dict, dims: dict[str, int], rtol, atol,
                   label: str = "") -> None:
  precision = art.manifest.get("target_info", {}).get("precision", "f32")
  if isinstance(art.source, dict) and art.source.get("quantize"): precision = "int8"
  if any(n.get("op") in QUANTIZING_OPS for k in art.manifest.get("kernels", []) for n in k.get("nodes", [])):
    precision = "int8"
  at_sizes = " at " + ", ".join(f"{k}={v}" for k, v in dims.items()) if dims else ""
  counts = {o["rows"] for o in art.outputs if o.get("rows")}
  for o in art.outputs:
    name = o["name"]
    if name in counts: continue     # a row count: checked by the rows of the output it counts
    if name not in ref:
      raise UserError(f"the reference model has no output {name!r} (its outputs: {', '.join(map(repr, ref))}); is "
                      f"--model the model this artifact was compiled from?")
    default = default_tolerance(np.dtype(o["dtype"]), o.get("tgc_dtype"), np.asarray(ref[name], np.float64), precision)
    rt = default[0] if rtol is None else rtol
    at = default[1] if atol is None else atol
    max_abs, max_rel, ok, note = compare(got[name], ref[name], rt, at)
    report.checks.append(OutputCheck(name + at_sizes + label, tuple(np.shape(got[name])), o["dtype"], max_abs,
                                     max_rel, rt, at, ok, note))
