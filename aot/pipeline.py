"""The ahead-of-time pipeline: model -> trace -> `compile_schedule` -> artifact writer, written into a fresh folder
next to the output folder and renamed into place (a failed compile leaves nothing behind), and the Python side of
artifacts: reading and checking a folder, running it, validating it against a reference, timing it, and
describing models and artifacts for `tgc inspect`."""
from __future__ import annotations
import json
import os
import secrets
import shutil
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Callable
import numpy as np
from tgc.ir import viz
from tgc.ir.config import config
from tgc.codegen.compiled import CompiledModel, compile_schedule
from tgc.codegen.target import Target
from tgc.codegen.names import symbol
from tgc.frontend.limits import DEFAULT_MAX_BYTES, SizeLimits
from tgc.aot.errors import UserError, describe
from tgc.aot import models

SUPPORTED_TARGETS = ("c", "opencl", "webgpu", "metal", "cuda")
# target -> (module, class) of the Python runtime that loads its artifacts (the CArtifact interface)
ARTIFACT_RUNTIMES = {"c": ("tgc.runtimes.artifact_c", "CArtifact"),
                     "opencl": ("tgc.runtimes.artifact_opencl", "OpenCLArtifact"),
                     "webgpu": ("tgc.runtimes.artifact_webgpu", "WebGPUArtifact"),
                     "metal": ("tgc.runtimes.artifact_metal", "MetalArtifact"),
                     "cuda": ("tgc.runtimes.artifact_cuda", "CUDAArtifact")}
MANIFEST = "manifest.json"
SOURCE_SUFFIXES = (".c", ".h", ".cl", ".cu", ".metal", ".m", ".mm", ".swift", ".js", ".ts", ".wgsl", ".html")
PROGRESS_AFTER_S = 2.0     # without DEBUG, per-kernel progress appears once a compile has run this long


def check_target(target: str) -> str:
  t = str(target).strip().lower()
  if t not in SUPPORTED_TARGETS:
    raise UserError(f"target {target} is not supported yet; supported: {', '.join(SUPPORTED_TARGETS)}")
  return t


def make_target(target: str, cpu: str | None = None) -> Target:
  """The Target of a --target name and --cpu level (C only; default: the machine that compiles)."""
  name = check_target(target)
  if cpu is not None and name != "c": raise UserError(f"--cpu applies to target c only, not {name}")
  try: return Target.make(name, cpu=cpu or "native")
  except ValueError as error: raise UserError(str(error)) from None


def model_name(text: str) -> str:
  """A C identifier for the model (file stem or --name), lower case."""
  return symbol(text.lower(), None, "model")


@dataclass
class CompileReport:
  name: str
  target: str
  out_dir: str
  kernels: int                 # distinct kernels
  calls: int                   # kernel launches per run
  arena_bytes: int
  weights_bytes: int
  weights: int                 # weight tensors
  inputs: list[tuple[str, tuple[int, ...], str]]
  outputs: list[tuple[str, tuple[int, ...], str]]
  files: list[str]
  seconds: float


class _Progress:
  """compile_schedule's per-kernel callback: a line per kernel on stderr with DEBUG>=1, otherwise about one line a
  second once the compile has taken longer than PROGRESS_AFTER_S."""

  def __init__(self, name: str, stream=None):
    self.name, self.stream = name, stream
    self.start = time.perf_counter()
    self.last = float("-inf")
    self.printed = False

  def __call__(self, i: int, n: int) -> None:
    now = time.perf_counter()
    verbose = config.debug >= 1
    if not verbose and (now - self.start < PROGRESS_AFTER_S or now - self.last < 1.0): return
    self.last, self.printed = now, True
    print(f"tgc: {self.name}: lowering kernel {i + 1}/{n} ({now - self.start:.1f} s)", file=self.stream or sys.stderr)


def compile_model(model: str, target: str, out_dir: str, name: str | None = None, force: bool = False,
                  embed_weights: bool = False, input_shapes: dict | None = None, consts: dict | None = None,
                  const_files: dict | None = None, beam: int = 0, cpu: str | None = None,
                  search: SearchOptions | None = None, max_bytes: int = DEFAULT_MAX_BYTES) -> CompileReport:
  """Compile MODEL (`file.py:function` or `model.onnx`) for `target` (`cpu`: the --cpu level of a C target) into
  the artifact folder `out_dir`. An existing tgc artifact there is replaced; any other existing folder only with
  `force`. A tensor of more than `max_bytes` bytes, or more elements than kernels can index, is refused before
  anything of its size is allocated."""
  start = time.perf_counter()
  tgt = make_target(target, cpu)
  target = tgt.name
  if embed_weights and target != "c": raise UserError(f"--embed-weights is supported for target c only, not {target}")
  spec = models.parse_model_spec(model)
  final = os.path.abspath(out_dir)
  _check_out_dir(out_dir, final, force)
  cm, loaded = build_compiled(spec, tgt, name, input_shapes, consts, const_files, beam, search, max_bytes=max_bytes)
  cm.meta["source"] = loaded.source_info()
  writer = _artifact_writer()
  staging = _staging_dir(final)
  try:
    try: written = writer(cm, staging, embed_weights=embed_weights)
    except ValueError as error: raise _target_error(spec, target, error)
    _check_out_dir(out_dir, final, force)
    _move_into_place(staging, final)
  except BaseException:
    shutil.rmtree(staging, ignore_errors=True)
    raise
  if config.viz: _viz_note(artifact=final)
  files = sorted(os.path.relpath(p, staging) for p in written)
  weights_bytes = sum(int(a.nbytes) for a in cm.weights.values())
  return CompileReport(cm.name, target, final, len(cm.kernels), len(cm.calls), cm.arena_bytes, weights_bytes,
                       len(cm.weights), _specs(cm.inputs), _specs(cm.outputs), files, time.perf_counter() - start)


def build_compiled(spec: models.ModelSpec, target: Target | str, name: str | None = None,
                   input_shapes: dict | None = None,
                   consts: dict | None = None, const_files: dict | None = None, beam: int = 0,
                   search: SearchOptions | None = None, opts_for: Callable | None = None,
                   max_bytes: int = DEFAULT_MAX_BYTES) -> tuple[CompiledModel, models.LoadedModel]:
  """Load, trace and lower a model (nothing written). `beam` > 0 searches the kernels' opts on this machine's
  runtime for the target (or a Ray cluster), within `search.budget` seconds, results cached on disk; a tuning file
  (`search.tuning`) gives opts without searching; `opts_for(item)` gives them directly (None: the heuristics).
  Tensors are checked against `SizeLimits(max_bytes)`. With `ir.viz.recording` on, the tracing and scheduling and
  the lowering of each kernel are recorded as sections."""
  if not isinstance(target, Target): target = make_target(target)
  if max_bytes < 1: raise UserError(f"--max-bytes must be at least 1, got {max_bytes}")
  search = search or SearchOptions()
  start = time.perf_counter()
  loaded = models.load_model(spec, input_shapes, consts, const_files, limits=SizeLimits(max_bytes))
  imported = time.perf_counter()
  with viz.section("trace and schedule", "schedule"): capture = models.trace_model(loaded)
  name = model_name(name or spec.stem)
  weights = models.named_weights(capture, loaded)
  searched = time.perf_counter()
  if opts_for is None: opts_for = _searched_opts(capture.items, weights, target, beam, search)
  progress = _Progress(name)
  searched = time.perf_counter() - searched
  try:
    cm = compile_schedule(name, target, capture.items, [(s.name, b) for s, b in capture.inputs],
                          [(s.name, b) for s, b in capture.outputs], weights, opts_for=opts_for, progress=progress)
  except ValueError as error:
    raise _target_error(spec, target.name, error)
  if config.viz: _viz_note(compiled=(cm, spec))
  if progress.printed or config.debug >= 1:
    print(f"tgc: {name}: {len(cm.kernels)} kernels lowered in {time.perf_counter() - progress.start:.1f} s",
          file=sys.stderr)
  if config.debug >= 1:
    phases = {"import": imported - start, **capture.seconds, **({"search": searched} if opts_for else {}),
              "lower+render": time.perf_counter() - progress.start}
    print(f"tgc: {name}: phases " + ", ".join(f"{k} {v:.2f} s" for k, v in phases.items()), file=sys.stderr)
  return cm, loaded


def _viz_note(compiled: tuple | None = None, artifact: str | None = None) -> None:
  """Under VIZ=1: tell the command's viz session what it compiled or which artifact folder it wrote or read."""
  from tgc.aot import viz as viz_page
  if compiled is not None: viz_page.note_compiled(*compiled)
  if artifact is not None: viz_page.note_artifact(artifact)


def _target_error(spec: models.ModelSpec, target: str, error: ValueError) -> BaseException:
  """A limit of the target language the model runs into (WGSL: no float64, 64-bit integers only as 32-bit words,
  buffer and work-group limits; Metal: no float64) is the user's to know: those messages start with the target's
  name."""
  if target in ("webgpu", "metal") and str(error).startswith(f"{target}:"):
    return UserError(f"{spec.text}: cannot compile for {target}: {str(error)[len(target) + 1:].strip()}")
  return error


@dataclass
class SearchOptions:
  """How `--beam` searches: a time budget for the whole model (seconds; None: no limit), parallel compiler calls,
  a Ray cluster address ("auto" or host:port; None: this machine); or a tuning file to apply instead."""
  budget: float | None = None
  jobs: int = 1
  cluster: str | None = None
  tuning: str | None = None


def _searched_opts(items: list, weights: list, target: Target, beam: int, search: SearchOptions):
  """opts_for(item) from a BEAM search (`beam` > 0) or a tuning file; None: the heuristics decide."""
  from tgc.aot import tune
  from tgc.codegen.search import Tuning
  if search.tuning is not None:
    if beam: raise UserError("--tuning and --beam exclude each other: a tuning file is a finished search")
    try:
      with open(search.tuning, encoding="utf-8") as f: tuning = Tuning.from_json(f.read(), search.tuning)
    except OSError as error: raise UserError(f"--tuning {search.tuning}: cannot read ({error.strerror})") from None
    except ValueError as error: raise UserError(str(error)) from None
    return tune.opts_from_tuning(tuning, target, tune.local_device(target))
  if not beam: return None
  if beam < 1 or search.jobs < 1: raise UserError("--beam and --jobs must be at least 1")
  if search.budget is not None and search.budget <= 0: raise UserError("--beam-budget must be positive")
  measurer = tune.cluster_measure(search.cluster, target) if search.cluster else tune.LocalMeasure(target, search.jobs)
  found, _ = tune.tune(items, weights, target, beam, search.budget, search.jobs, measurer)
  return lambda item: found.get(item.ast.key)


def tune_model(model: str, target: str, out: str, cpu: str | None = None, beam: int = 2,
               search: SearchOptions | None = None, input_shapes: dict | None = None,
               consts: dict | None = None, const_files: dict | None = None):
  """`tgc tune`: search the kernels of MODEL for the target and write a tuning file (nothing else is written)."""
  from tgc.aot import tune
  search = search or SearchOptions()
  tgt = make_target(target, cpu)
  if beam < 1 or search.jobs < 1: raise UserError("--beam and --jobs must be at least 1")
  if search.budget is not None and search.budget <= 0: raise UserError("--beam-budget must be positive")
  spec = models.parse_model_spec(model)
  loaded = models.load_model(spec, input_shapes, consts, const_files)
  capture = models.trace_model(loaded)
  measurer = tune.cluster_measure(search.cluster, tgt) if search.cluster else tune.LocalMeasure(tgt, search.jobs)
  found, report = tune.tune(capture.items, models.named_weights(capture, loaded), tgt, beam, search.budget,
                            search.jobs, measurer)
  text = tune.tuning_of(found, tgt, report.device).to_json()
  tmp = f"{out}.tmp-{os.getpid()}"
  try:
    with open(tmp, "w", encoding="utf-8") as f: f.write(text)
    os.replace(tmp, out)
  except OSError as error:
    raise UserError(f"-o {out}: cannot write ({error.strerror})") from None
  return report


def _specs(bufs) -> list[tuple[str, tuple[int, ...], str]]:
  return [(b.name, tuple(b.shape), np.dtype(b.dtype.numpy).name) for b in bufs]


def _artifact_writer() -> Callable:
  from tgc import emit
  writer = getattr(emit, "write_artifact", None)
  if writer is None: raise RuntimeError("emit.write_artifact is missing: this build of tgc has no artifact writer")
  return writer


# ---------------------------------------------------------------- the output folder
def is_artifact(folder: str) -> bool:
  """A folder with a manifest.json that is a JSON object with a format_version."""
  try:
    with open(os.path.join(folder, MANIFEST), encoding="utf-8") as f: manifest = json.load(f)
  except (OSError, ValueError): return False
  return isinstance(manifest, dict) and "format_version" in manifest


def _protected(path: str) -> bool:
  """Folders never replaced, even with force: the root, the home folder, the current folder and its parents."""
  cwd = os.path.abspath(os.getcwd())
  if path in (os.path.abspath(os.sep), os.path.abspath(os.path.expanduser("~"))): return True
  return cwd == path or cwd.startswith(path.rstrip(os.sep) + os.sep)


def _check_out_dir(shown: str, path: str, force: bool) -> None:
  if not os.path.lexists(path) or is_artifact(path): return
  if os.path.isdir(path) and not os.path.islink(path) and not os.listdir(path): return
  what = "folder" if os.path.isdir(path) else "file"
  if not force:
    raise UserError(f"output {what} {shown} exists and is not a tgc artifact (no {MANIFEST} with format_version); "
                    f"use --force to replace it")
  if _protected(path): raise UserError(f"refusing to replace {shown}: it is /, the home folder or holds the current "
                                       f"folder")


def _sibling_name(path: str, tag: str) -> str:
  parent, base = os.path.split(path)
  while True:
    candidate = os.path.join(parent, f".{base}.{tag}-{secrets.token_hex(4)}")
    if not os.path.lexists(candidate): return candidate


def _staging_dir(final: str) -> str:
  """A new empty folder next to `final` (same file system, so the final rename is atomic)."""
  parent = os.path.dirname(final)
  try: os.makedirs(parent, exist_ok=True)
  except OSError as error: raise UserError(f"cannot create the output folder's parent {parent}: {error.strerror}")
  if not os.path.isdir(parent): raise UserError(f"output folder's parent {parent} is not a folder")
  while True:
    staging = _sibling_name(final, "tgc-tmp")
    try:
      os.mkdir(staging)
      return staging
    except FileExistsError: continue
    except OSError as error: raise UserError(f"cannot write into {parent}: {error.strerror}") from error


def _move_into_place(staging: str, final: str) -> None:
  if not os.path.lexists(final):
    os.rename(staging, final)
    return
  old = _sibling_name(final, "tgc-old")
  os.rename(final, old)
  try: os.rename(staging, final)
  except BaseException:
    os.rename(old, final)
    raise
  if os.path.isdir(old) and not os.path.islink(old): shutil.rmtree(old, ignore_errors=True)
  else: os.unlink(old)


# ---------------------------------------------------------------- artifacts
@dataclass
class Artifact:
  """An artifact folder and its manifest."""
  folder: str
  manifest: dict

  @property
  def target(self) -> str: return str(self.manifest.get("target", ""))
  @property
  def name(self) -> str:
    model = self.manifest.get("model")
    return str(model.get("name", "")) if isinstance(model, dict) else str(model or "")
  @property
  def inputs(self) -> list[dict]: return list(self.manifest.get("inputs", []))
  @property
  def outputs(self) -> list[dict]: return list(self.manifest.get("outputs", []))
  @property
  def weights_bytes(self) -> int:
    return sum(int(t.get("nbytes", 0)) for t in self.manifest.get("weights", {}).get("tensors", []))
  @property
  def source(self) -> dict | None:
    source = self.manifest.get("source")
    return source if isinstance(source, dict) else None

  def code_bytes(self) -> int:
    """Bytes of generated source (the files the manifest lists with a source-code suffix)."""
    total = 0
    for name in self.manifest.get("files", {}):
      if name.lower().endswith(SOURCE_SUFFIXES): total += os.path.getsize(os.path.join(self.folder, name))
    return total


def open_artifact(folder: str, check_files: bool = True) -> Artifact:
  """Read and check an artifact folder; every problem is a UserError naming the folder or file."""
  if not os.path.lexists(folder): raise UserError(f"artifact folder not found: {folder}")
  if not os.path.isdir(folder): raise UserError(f"{folder} is not a folder (expected a tgc artifact folder)")
  path = os.path.join(folder, MANIFEST)
  if not os.path.isfile(path): raise UserError(f"{folder} is not a tgc artifact (no {MANIFEST})")
  try:
    with open(path, encoding="utf-8") as f: manifest = json.load(f)
  except ValueError as error: raise UserError(f"{path} is not valid JSON ({error})") from error
  except OSError as error: raise UserError(f"cannot read {path}: {error.strerror}") from error
  if not isinstance(manifest, dict) or "format_version" not in manifest:
    raise UserError(f"{folder} is not a tgc artifact ({MANIFEST} has no format_version)")
  from tgc.emit import manifest as emitted
  if manifest["format_version"] != emitted.FORMAT_VERSION:
    raise UserError(f"{path}: format_version {manifest['format_version']} is not the one this tgc reads "
                    f"({emitted.FORMAT_VERSION}); compile the model again")
  try: emitted.validate_manifest(manifest)
  except ValueError as error: raise UserError(f"{folder}: {error}") from error
  art = Artifact(folder, manifest)
  if check_files: verify_files(art)
  if config.viz: _viz_note(artifact=folder)
  return art


def verify_files(art: Artifact) -> None:
  """Every file the manifest lists is there, whole and unchanged (sha256); the weights file is checked first so a
  truncated one is reported as such."""
  weights = art.manifest.get("weights", {})
  wfile = weights.get("file")
  if wfile and not weights.get("embedded"):
    path = os.path.join(art.folder, wfile)
    if not os.path.isfile(path): raise UserError(f"weights file {path} is missing")
    size, want = os.path.getsize(path), int(weights.get("nbytes", -1))
    if 0 <= size < want: raise UserError(f"weights file {path} is truncated ({size} of {want} bytes)")
    if want >= 0 and size != want: raise UserError(f"weights file {path} has {size} bytes, the manifest says {want}")
  for name, digest in sorted(art.manifest.get("files", {}).items()):
    path = os.path.join(art.folder, name)
    if not os.path.isfile(path): raise UserError(f"{path} is missing (listed in {MANIFEST})")
    if models.file_sha256(path) != digest:
      what = "weights file" if name == wfile else "file"
      raise UserError(f"{what} {path} differs from the one compiled (sha256 mismatch with {MANIFEST})")


def artifact_runtime(art: Artifact, threads: int = 1, profile: bool = False):
  """The Python runtime that loads this artifact (the caller closes it); C artifacts can run on `threads` threads
  (their thread pool) and be built to time each launch (`profile`)."""
  if art.target not in ARTIFACT_RUNTIMES:
    raise UserError(f"running {art.target or 'unknown'} artifacts is not supported yet; supported: "
                    f"{', '.join(ARTIFACT_RUNTIMES)}")
  if threads < 1: raise UserError(f"--threads must be at least 1, got {threads}")
  if (threads > 1 or profile) and art.target != "c":
    raise UserError(f"--threads and --profile apply to c artifacts, not {art.target}")
  import importlib
  from tgc.runtimes.artifact import ArtifactError
  module, name = ARTIFACT_RUNTIMES[art.target]
  kwargs = {"threads": threads, "profile": profile} if art.target == "c" else {}
  try: return getattr(importlib.import_module(module), name)(art.folder, **kwargs)
  except ArtifactError as error:
    # the folder was checked against its manifest already: only a missing C compiler is the user's to fix
    if "C compiler" in str(error): raise UserError(f"cannot load {art.folder}: {error}") from error
    raise


def check_feeds(art: Artifact, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """Inputs by original name as the artifact takes them: every name known, none missing, shapes exactly the
  model's, dtypes the model's or, for storage-only types, their values (converted as ONNX Cast does; integers
  range-checked) or raw bit patterns (`runtimes.io_arrays.to_storage`)."""
  from tgc.runtimes.artifact import ArtifactError
  from tgc.runtimes.io_arrays import to_storage
  expected = {i["name"]: i for i in art.inputs}
  for name in arrays:
    if name not in expected:
      known = ", ".join(repr(n) for n in expected) or "none"
      raise UserError(f"unknown input {name!r}; the model's inputs are: {known}")
  for name in expected:
    if name not in arrays: raise UserError(f"missing input {name!r} (give it with --input {name}=file.npy)")
  out = {}
  for name, spec in expected.items():
    try: out[name] = np.require(to_storage(name, arrays[name], spec), requirements="C")
    except ArtifactError as error: raise UserError(str(error)) from None
  return out


def output_values(art: Artifact, got: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """The artifact's outputs by original name, in manifest order, as values (storage-only types decoded)."""
  from tgc.runtimes.io_arrays import from_storage
  return {o["name"]: from_storage(np.asarray(got[o["name"]]), o) for o in art.outputs}


def run_artifact(folder: str, arrays: dict[str, np.ndarray], threads: int = 1) -> dict[str, np.ndarray]:
  """Run the artifact once; outputs by original name, in manifest order (storage-only types as values)."""
  art = open_artifact(folder)
  feeds = check_feeds(art, arrays)
  runtime = artifact_runtime(art, threads)
  try: got = runtime.run(feeds)
  finally: runtime.close()
  return output_values(art, got)


def random_inputs(art: Artifact, seed: int) -> dict[str, np.ndarray]:
  """Fresh seeded input values: normal floats (never all zeros), small non-negative integers (for int4/int2 anywhere
  in their range), random booleans; storage-only types as their values (`io_arrays.value_dtype`)."""
  from tgc.ir import lowp
  from tgc.runtimes.io_arrays import storage_type, value_dtype
  rng = np.random.default_rng(seed)
  out = {}
  for i in art.inputs:
    shape, dt = tuple(i["shape"]), storage_type(i)
    if dt is not None and dt in lowp.INT_RANGES:
      lo, hi = lowp.INT_RANGES[dt]
      out[i["name"]] = rng.integers(lo, hi + 1, shape).astype(value_dtype(i))
    else: out[i["name"]] = models.example_array(shape, value_dtype(i), rng)
  return out


# storage-only float types: about one unit in the last place of their values near 1
STORAGE_TOLERANCE = {"bfloat16": (2e-2, 1e-2), "float8e4m3fn": (0.13, 1e-2), "float8e4m3fnuz": (0.13, 1e-2),
                     "float8e5m2": (0.26, 1e-2), "float8e5m2fnuz": (0.26, 1e-2), "float4e2m1": (0.5, 0.5)}


def default_tolerance(dtype: np.dtype, tgc_dtype: str | None = None) -> tuple[float, float]:
  """(rtol, atol) for an output dtype (and its tgc dtype, for storage-only types) when none is given."""
  if tgc_dtype in STORAGE_TOLERANCE: return STORAGE_TOLERANCE[tgc_dtype]
  dtype = np.dtype(dtype)
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
  from tgc.aot import reference
  art = open_artifact(folder)
  spec, options = reference.spec_from_source(art.source, model)
  feeds = random_inputs(art, seed)
  runtime = artifact_runtime(art)
  try: got = output_values(art, runtime.run(check_feeds(art, feeds)))
  finally: runtime.close()
  ref, kind = reference.reference_outputs(spec, feeds, options)
  report = ValidateReport(folder, spec.text, kind, seed)
  for o in art.outputs:
    name = o["name"]
    default = default_tolerance(np.dtype(o["dtype"]), o.get("tgc_dtype"))
    rt = default[0] if rtol is None else rtol
    at = default[1] if atol is None else atol
    if name not in ref:
      raise UserError(f"the reference model has no output {name!r} (its outputs: {', '.join(map(repr, ref))}); is "
                      f"--model the model this artifact was compiled from?")
    max_abs, max_rel, ok, note = compare(got[name], ref[name], rt, at)
    report.checks.append(OutputCheck(name, tuple(o["shape"]), o["dtype"], max_abs, max_rel, rt, at, ok, note))
  return report


@dataclass
class BenchReport:
  folder: str
  runs: int
  warmup: int
  median_s: float
  p90_s: float
  min_s: float
  arena_bytes: int
  weights_bytes: int
  code_bytes: int
  threads: int = 1
  profile: list[KernelProfile] | None = None     # with --profile: per kernel, slowest first


@dataclass
class KernelProfile:
  """One kernel of a profiled artifact: its launches per run and their time per run, share of the profiled total,
  and rates from the manifest's op and byte counts."""
  kernel: str
  launches: int
  seconds: float
  share: float
  gflops: float
  gbytes: float
  opts: list[str]
  nodes: list[str]


def bench_artifact(folder: str, runs: int = 50, warmup: int = 5, seed: int = 0, threads: int = 1,
                   profile: bool = False) -> BenchReport:
  """Time whole runs of the artifact itself (its own loader, not tgc's kernels); `profile` (C) also times each
  kernel launch inside those runs."""
  if runs < 1: raise UserError(f"--runs must be at least 1, got {runs}")
  if warmup < 0: raise UserError(f"--warmup must be at least 0, got {warmup}")
  art = open_artifact(folder)
  feeds = check_feeds(art, random_inputs(art, seed))
  runtime = artifact_runtime(art, threads, profile)
  try:
    for _ in range(warmup): runtime.run(feeds)
    if profile: runtime.profile_reset()
    times = [float(t) for t in runtime.time(feeds, runs, 0)]
    per_call = runtime.profile() if profile else None
  finally: runtime.close()
  if not times: raise RuntimeError("the artifact runtime returned no timings")
  kernels = kernel_profile(art.manifest, per_call, len(times)) if per_call is not None else None
  return BenchReport(folder, len(times), warmup, statistics.median(times), float(np.percentile(times, 90)),
                     min(times), int(art.manifest.get("arena_bytes", 0)), art.weights_bytes, art.code_bytes(),
                     threads, kernels)


def node_text(node) -> str:
  """A manifest node entry ({"name", "op"}) as one line of text."""
  return f"{node.get('name', '?')} ({node.get('op', '?')})" if isinstance(node, dict) else str(node)


def kernel_profile(manifest: dict, per_call: list[float], runs: int) -> list[KernelProfile]:
  """Launch times (seconds summed over `runs` runs, manifest call order) gathered per kernel, slowest first."""
  info = {k["name"]: k for k in manifest["kernels"]}
  seconds: dict[str, float] = {}
  launches: dict[str, int] = {}
  for call, s in zip(manifest["calls"], per_call):
    seconds[call["kernel"]] = seconds.get(call["kernel"], 0.0) + s / runs
    launches[call["kernel"]] = launches.get(call["kernel"], 0) + 1
  total = sum(seconds.values()) or 1.0
  out = []
  for name, s in sorted(seconds.items(), key=lambda kv: -kv[1]):
    k, n = info[name], launches[name]
    rate = (lambda x: x * n / s / 1e9) if s > 0 else (lambda x: 0.0)
    out.append(KernelProfile(name, n, s, s / total, rate(k.get("ops", 0)), rate(k.get("bytes", 0)),
                             list(k.get("opts", [])), [node_text(o) for o in k.get("nodes", [])]))
  return out


# ---------------------------------------------------------------- inspect
def inspect_model(model: str, target: str = "c", input_shapes: dict | None = None, consts: dict | None = None
                  ) -> CompiledModel:
  """Trace and lower a Tensor-API model without writing anything (for `tgc inspect`)."""
  spec = models.parse_model_spec(model)
  cm, _ = build_compiled(spec, make_target(target), None, input_shapes, consts)
  return cm


@dataclass
class OnnxNodeInfo:
  index: int
  name: str
  op: str
  supported: bool
  inputs: list[tuple[str, list | None]]
  outputs: list[tuple[str, list | None]]


def inspect_onnx(path: str) -> tuple[list[tuple[str, list | None, str]], list[OnnxNodeInfo]]:
  """The graph inputs (name, shape, dtype) and every node with the shapes ONNX shape inference gives and
  whether tgc's importer has a handler for its operator."""
  models.onnx_importer()
  import onnx
  from onnx import shape_inference
  from tgc.frontend.onnx.registry import OPS
  try: model = onnx.load(path)
  except Exception as error: raise UserError(f"{path}: cannot read the ONNX model ({describe(error)})") from error
  try: model = shape_inference.infer_shapes(model)
  except Exception: pass   # shapes are then shown as unknown
  shapes: dict[str, tuple[list | None, str]] = {}
  for vi in list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output):
    shapes[vi.name] = _value_info_shape(vi)
  for init in model.graph.initializer:
    shapes[init.name] = (list(init.dims), onnx.helper.tensor_dtype_to_np_dtype(init.data_type).name)
  initialized = {i.name for i in model.graph.initializer}
  graph_inputs = [(i.name, *shapes[i.name]) for i in model.graph.input if i.name not in initialized]
  nodes = []
  for k, node in enumerate(model.graph.node):
    key = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}:{node.op_type}"
    nodes.append(OnnxNodeInfo(k, node.name or f"#{k}", key, key in OPS or node.op_type in OPS and not node.domain,
                              [(n, shapes.get(n, (None, ""))[0]) for n in node.input if n],
                              [(n, shapes.get(n, (None, ""))[0]) for n in node.output if n]))
  return graph_inputs, nodes


def _value_info_shape(vi) -> tuple[list | None, str]:
  import onnx
  t = vi.type.tensor_type
  dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name if t.elem_type else ""
  if not t.HasField("shape"): return None, dtype
  return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in t.shape.dim], dtype
