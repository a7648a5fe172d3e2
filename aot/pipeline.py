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
from ir.config import config
from codegen.compiled import CompiledModel, compile_schedule
from codegen.names import symbol
from aot.errors import UserError, describe
from aot import models

SUPPORTED_TARGETS = ("c",)
MANIFEST = "manifest.json"
SOURCE_SUFFIXES = (".c", ".h", ".cl", ".cu", ".metal", ".m", ".mm", ".swift", ".js", ".ts", ".wgsl", ".html")
PROGRESS_AFTER_S = 2.0     # without DEBUG, per-kernel progress appears once a compile has run this long


def check_target(target: str) -> str:
  t = str(target).strip().lower()
  if t not in SUPPORTED_TARGETS:
    raise UserError(f"target {target} is not supported yet; supported: {', '.join(SUPPORTED_TARGETS)}")
  return t


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
    self.start = self.last = time.perf_counter()
    self.printed = False

  def __call__(self, i: int, n: int) -> None:
    now = time.perf_counter()
    verbose = config.debug >= 1
    if not verbose and (now - self.start < PROGRESS_AFTER_S or now - self.last < 1.0): return
    self.last, self.printed = now, True
    print(f"tgc: {self.name}: lowering kernel {i + 1}/{n} ({now - self.start:.1f} s)", file=self.stream or sys.stderr)


def compile_model(model: str, target: str, out_dir: str, name: str | None = None, force: bool = False,
                  embed_weights: bool = False, input_shapes: dict | None = None, consts: dict | None = None,
                  const_files: dict | None = None) -> CompileReport:
  """Compile MODEL (`file.py:function` or `model.onnx`) for `target` into the artifact folder `out_dir`.
  An existing tgc artifact there is replaced; any other existing folder only with `force`."""
  start = time.perf_counter()
  target = check_target(target)
  spec = models.parse_model_spec(model)
  final = os.path.abspath(out_dir)
  _check_out_dir(out_dir, final, force)
  cm, loaded = build_compiled(spec, target, name, input_shapes, consts, const_files)
  cm.meta["source"] = loaded.source_info()
  writer = _artifact_writer()
  staging = _staging_dir(final)
  try:
    written = writer(cm, staging, embed_weights=embed_weights)
    _check_out_dir(out_dir, final, force)
    _move_into_place(staging, final)
  except BaseException:
    shutil.rmtree(staging, ignore_errors=True)
    raise
  files = sorted(os.path.relpath(p, staging) for p in written)
  weights_bytes = sum(int(a.nbytes) for a in cm.weights.values())
  return CompileReport(cm.name, target, final, len(cm.kernels), len(cm.calls), cm.arena_bytes, weights_bytes,
                       len(cm.weights), _specs(cm.inputs), _specs(cm.outputs), files, time.perf_counter() - start)


def build_compiled(spec: models.ModelSpec, target: str, name: str | None = None, input_shapes: dict | None = None,
                   consts: dict | None = None, const_files: dict | None = None
                   ) -> tuple[CompiledModel, models.LoadedModel]:
  """Load, trace and lower a model (nothing written)."""
  loaded = models.load_model(spec, input_shapes, consts, const_files)
  capture = models.trace_model(loaded)
  name = model_name(name or spec.stem)
  progress = _Progress(name)
  cm = compile_schedule(name, target, capture.items, [(s.name, b) for s, b in capture.inputs],
                        [(s.name, b) for s, b in capture.outputs], models.named_weights(capture, loaded.weight_names),
                        progress=progress)
  if progress.printed or config.debug >= 1:
    print(f"tgc: {name}: {len(cm.kernels)} kernels lowered in {time.perf_counter() - progress.start:.1f} s",
          file=sys.stderr)
  return cm, loaded


def _specs(bufs) -> list[tuple[str, tuple[int, ...], str]]:
  return [(b.name, tuple(b.shape), np.dtype(b.dtype.numpy).name) for b in bufs]


def _artifact_writer() -> Callable:
  import emit
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
