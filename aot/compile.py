"""`tgc compile`: model -> trace -> `compile_schedule` -> artifact writer. The bundle is written into a fresh folder
next to the output folder and renamed into place, so a failed compile leaves nothing behind; an existing folder is
replaced only when it is a tgc artifact (or with `force`, never /, the home folder or one holding the current
folder). `build_compiled` is the part that writes nothing (`tgc inspect`, `tgc viz`, the tests use it)."""
from __future__ import annotations
import os
import secrets
import shutil
import sys
import time
from dataclasses import dataclass, field
from typing import Callable
import numpy as np
from tgc.ir import viz
from tgc.ir.sint import dims_text, is_static, scaled_variable, variables
from tgc.ir.config import config
from tgc.codegen.compiled import CompiledModel, compile_schedule
from tgc.codegen.names import symbol
from tgc.codegen.registry import target_names, target_spec
from tgc.codegen.target import Target, TargetLimitError
from tgc.frontend.limits import DEFAULT_MAX_BYTES, SizeLimits
from tgc.runtimes.artifact import MANIFEST, is_artifact
from tgc import emit
from tgc.emit import npm
from tgc.aot import models, viz_session
from tgc.aot.errors import UserError
from tgc.aot.targets import make_target
from tgc.aot.tune import SearchOptions, searched_opts

PROGRESS_AFTER_S = 2.0     # without DEBUG, per-kernel progress appears once a compile has run this long


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
  states: list[tuple[str, str, tuple[int, ...], str]] = field(default_factory=list)   # input, output, capacity, dtype


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
                  search: SearchOptions | None = None, max_bytes: int = DEFAULT_MAX_BYTES,
                  precision: str | None = None, emit_options: dict | None = None,
                  dims: dict | None = None, states: dict | None = None, max_context: int | None = None,
                  onnx_model=None, source_extra: dict | None = None) -> CompileReport:
  """Compile MODEL (`file.py:function` or `model.onnx`) for `target` (`cpu`: the --cpu level of a C target;
  `precision`: f32 or f16, GPU targets; `emit_options`: more options of the target's emitter, webgpu: `npm_name`,
  `npm_version`, `weight_chunk_mb`) into the artifact folder `out_dir`. An existing tgc artifact there is
  replaced; any other existing folder only with `force`. A tensor of more than `max_bytes` bytes, or more elements
  than kernels can index, is refused before anything of its size is allocated. `dims` (name -> (lowest,
  highest)) keeps ONNX input dims of those names as sizes known only at run time; `max_context` keeps the model's
  states (a KV cache; `states`: input -> output names, else found by name) in the artifact. `onnx_model` is a
  ModelProto compiled in place of the ONNX file's contents (its quantized form: `aot.quantize`), `source_extra`
  what the manifest's source records beside the file to rebuild it."""
  start = time.perf_counter()
  tgt = make_target(target, cpu, precision)
  target = tgt.name
  options = {"embed_weights": embed_weights, **(emit_options or {})}
  options = {k: v for k, v in options.items() if v is not None and v is not False}
  _check_emit_options(target, options)
  spec = models.parse_model_spec(model)
  final = os.path.abspath(out_dir)
  _check_out_dir(out_dir, final, force)
  cm, loaded = build_compiled(spec, tgt, name, input_shapes, consts, const_files, beam, search, max_bytes=max_bytes,
                              dims=dims, states=states, max_context=max_context, onnx_model=onnx_model)
  cm.meta["source"] = {**loaded.source_info(), **(source_extra or {})}
  if loaded.output_rows: cm.meta["output_rows"] = dict(loaded.output_rows)
  staging = _staging_dir(final)
  try:
    try: written = emit.write_artifact(cm, staging, **options)
    except ValueError as error: raise _target_limit(spec, target, error)
    _check_out_dir(out_dir, final, force)
    _move_into_place(staging, final)
  except BaseException:
    shutil.rmtree(staging, ignore_errors=True)
    raise
  if config.viz: viz_session.note_artifact(final)
  files = sorted(os.path.relpath(p, staging) for p in written)
  weights_bytes = sum(int(a.nbytes) for a in cm.weights.values())
  return CompileReport(cm.name, target, final, len(cm.kernels), len(cm.calls), cm.arena_bytes, weights_bytes,
                       len(cm.weights), _specs(cm.inputs), _specs(cm.outputs), files, time.perf_counter() - start,
                       [(st.input, st.output, tuple(st.shape), np.dtype(st.dtype.numpy).name) for st in cm.states])


def build_compiled(spec: models.ModelSpec, target: Target | str, name: str | None = None,
                   input_shapes: dict | None = None,
                   consts: dict | None = None, const_files: dict | None = None, beam: int = 0,
                   search: SearchOptions | None = None, opts_for: Callable | None = None,
                   max_bytes: int = DEFAULT_MAX_BYTES, dims: dict | None = None, states: dict | None = None,
                   max_context: int | None = None, onnx_model=None) -> tuple[CompiledModel, models.LoadedModel]:
  """Load, trace and lower a model (nothing written). `beam` > 0 searches the kernels' opts on this machine's
  runtime for the target (or a Ray cluster), within `search.budget` seconds, results cached on disk; a tuning file
  (`search.tuning`) gives opts without searching; `opts_for(item)` gives them directly (None: the heuristics).
  Tensors are checked against `SizeLimits(max_bytes)`. With `ir.viz.recording` on, the tracing and scheduling and
  the lowering of each kernel are recorded as sections."""
  if not isinstance(target, Target): target = make_target(target)
  if max_bytes < 1: raise UserError(f"--max-bytes must be at least 1, got {max_bytes}")
  search = search or SearchOptions()
  start = time.perf_counter()
  if max_context is not None and not target_spec(target.name).states:
    able = ", ".join(n for n in target_names() if target_spec(n).states)
    raise UserError(f"--max-context: states kept between runs are not supported for target {target.name} yet "
                    f"(targets that keep them: {able})")
  loaded = models.load_model(spec, input_shapes, consts, const_files, limits=SizeLimits(max_bytes), dims=dims,
                             states=states, max_context=max_context, onnx_model=onnx_model)
  imported = time.perf_counter()
  with viz.section("trace and schedule", "schedule"): capture = models.trace_model(loaded, target)
  name = model_name(name or spec.stem)
  weights = models.named_weights(capture)
  searched = time.perf_counter()
  if opts_for is None: opts_for = searched_opts(capture.items, weights, target, beam, search)
  _check_sizes(spec, target, capture)
  progress = _Progress(name)
  searched = time.perf_counter() - searched
  try:
    cm = compile_schedule(name, target, capture.items, [(s.name, b) for s, b in capture.inputs],
                          [(s.name, b) for s, b in capture.outputs], weights, opts_for=opts_for, progress=progress,
                          states=capture.states)
  except ValueError as error:
    raise _target_limit(spec, target.name, error)
  if config.viz: viz_session.note_compiled(cm, spec)
  if progress.printed or config.debug >= 1:
    print(f"tgc: {name}: {len(cm.kernels)} kernels lowered in {time.perf_counter() - progress.start:.1f} s",
          file=sys.stderr)
  if config.debug >= 1:
    phases = {"import": imported - start, **capture.seconds, **({"search": searched} if opts_for else {}),
              "lower+render": time.perf_counter() - progress.start}
    print(f"tgc: {name}: phases " + ", ".join(f"{k} {v:.2f} s" for k, v in phases.items()), file=sys.stderr)
  return cm, loaded


def _check_sizes(spec: models.ModelSpec, target: Target, capture) -> None:
  """A model with sizes known only at run time: the target must take them, and each must be a dim of an input of
  its own (the runners read its value off the inputs' shapes)."""
  dims = variables(*(it.ast for it in capture.items), *(ts.shape for ts, _ in capture.inputs))
  if not dims: return
  if not target_spec(target.name).run_time_sizes:
    able = ", ".join(n for n in target_names() if target_spec(n).run_time_sizes)
    raise UserError(f"{spec.text}: sizes known only at run time ({', '.join(dims)}) are not supported for target "
                    f"{target.name} yet ({able} support them); give the inputs fixed shapes")
  for ts, _ in capture.inputs + capture.outputs:
    if ts.dtype.storage_only and not is_static(ts.shape):
      raise UserError(f"{spec.text}: {ts.name!r} is {ts.dtype.name} with sizes known only at run time; tensors of "
                      f"packed types need fixed shapes")
  given = {scaled[0].arg[0] for ts, _ in capture.inputs for scaled in map(scaled_variable, ts.shape) if scaled}
  given |= {st.length.arg[0] for st, _ in capture.states}       # a state's length: tracked by the artifact
  for name in dims:
    if name not in given:
      raise UserError(f"{spec.text}: size {name} is no dim of any input on its own (an input's shape must name it "
                      f"or a multiple of it, so that a run can tell its value)")


def _check_emit_options(target: str, options: dict) -> None:
  """Options the target's emitter does not take, or an npm name or version npm would refuse, before compiling."""
  for option in options:
    if option not in target_spec(target).emit_options:
      raise UserError(f"--{option.replace('_', '-')} is not supported for target {target}")
  for option, check in (("npm_name", npm.check_package_name), ("npm_version", npm.check_version)):
    try:
      if options.get(option): check(options[option])
    except ValueError as error:
      raise UserError(f"--{option.replace('_', '-')}: {error}") from None
  chunk = options.get("weight_chunk_mb")
  if chunk is not None and not chunk > 0: raise UserError(f"--weight-chunk-mb must be positive, not {chunk}")


def _target_limit(spec: models.ModelSpec, target: str, error: ValueError) -> BaseException:
  """A limit of the target language the model runs into (`TargetLimitError`) is the user's to know: a UserError
  naming the model and the target. Anything else is a bug and passes on unchanged."""
  if not isinstance(error, TargetLimitError): return error
  return UserError(f"{spec.text}: cannot compile for {target}: {error.detail}")


def _specs(bufs) -> list[tuple[str, tuple, str]]:
  """Name, shape (a size known only at run time as its text, `(W+1)/2`) and numpy dtype name of each buffer."""
  return [(b.name, tuple(dims_text(b.shape)), np.dtype(b.dtype.numpy).name) for b in bufs]


# ---------------------------------------------------------------- the output folder
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
  """Rename `staging` to `final`, replacing what is there (renamed aside first, removed once the new one is in)."""
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
