"""Running a `c` artifact folder from Python: `CArtifact` reads its manifest.json, builds the folder's own model.c
(plus weights.S when the weights are embedded) into a shared library with the system C compiler (cached on disk
by the sha256 of the sources, flags and compiler), and calls the bundle's public C API through ctypes: init
(from the weights file, or the embedded copy), verify_weights, run, free. Validation and benchmarks use this, so
they exercise exactly the code a user links.

Errors about the artifact or the caller's data raise `ArtifactError` (a ValueError) with one line naming the
culprit (file, input, status)."""
from __future__ import annotations
import ctypes
import hashlib
import json
import os
import subprocess
import tempfile
import time as _time

import numpy as np
from ir.config import config

from runtimes.base import cache_root

FORMAT_VERSION = 1
DEFAULT_CFLAGS = ("-O3",)
ARENA_ALIGN = 64
_compiler_ids: dict[str, str] = {}


class ArtifactError(ValueError):
  """A problem with an artifact folder or with the data given to it."""


def _compiler_id(compiler: str) -> str:
  if compiler not in _compiler_ids:
    try:
      out = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as error:
      raise ArtifactError(f"C compiler {compiler!r} is not usable ({error}); install gcc or set CC") from None
    _compiler_ids[compiler] = out.strip()
  return _compiler_ids[compiler]


def _read(path: str) -> bytes:
  try:
    with open(path, "rb") as f: return f.read()
  except OSError as error:
    raise ArtifactError(f"{path}: cannot read ({error.strerror})") from None


def load_manifest(folder: str, target: str, what: str) -> dict:
  """The manifest of an artifact folder, checked for its format version and target (`what`: 'a C artifact')."""
  path = os.path.join(folder, "manifest.json")
  if not os.path.isfile(path): raise ArtifactError(f"{folder}: not an artifact folder (no manifest.json)")
  try:
    manifest = json.loads(_read(path))
  except ValueError as error:
    raise ArtifactError(f"{path}: invalid JSON ({error})") from None
  if not isinstance(manifest, dict) or manifest.get("format_version") != FORMAT_VERSION:
    got = manifest.get("format_version") if isinstance(manifest, dict) else None
    raise ArtifactError(f"{path}: format_version {got!r} is not supported (expected {FORMAT_VERSION})")
  if manifest.get("target") != target:
    raise ArtifactError(f"{path}: target {manifest.get('target')!r} is not {what}")
  return manifest


def checked_file(folder: str, manifest: dict, name: str) -> bytes:
  """The bytes of a file of the folder, which must match the manifest's sha256."""
  path = os.path.join(folder, name)
  data = _read(path)
  if hashlib.sha256(data).hexdigest() != manifest["files"].get(name):
    raise ArtifactError(f"{path}: does not match manifest.json (sha256); the artifact was modified")
  return data


def time_runs(run_once, runs: int, warmup: int) -> list[float]:
  """Seconds of each of `runs` calls of `run_once()`, after `warmup` untimed calls."""
  for _ in range(warmup): run_once()
  times = []
  for _ in range(runs):
    start = _time.perf_counter()
    run_once()
    times.append(_time.perf_counter() - start)
  return times


class CArtifact:
  """A loaded `c` artifact. `weights_path` overrides the folder's weights file (embedded bundles otherwise use
  the copy linked into the library). One instance owns one model context; `close` releases it."""

  def __init__(self, folder: str, weights_path: str | None = None, *, compiler: str | None = None,
               cflags: tuple[str, ...] | None = None, cache_dir: str | None = None):
    self.folder = os.path.abspath(folder)
    self.manifest: dict = self._load_manifest()
    self.compiler = compiler or config.cc
    self.cflags = tuple(cflags) if cflags is not None else DEFAULT_CFLAGS
    self.cache_dir = cache_dir or os.path.join(cache_root(), "artifact_c")
    self.symbol: str = self.manifest["target_info"]["api_prefix"]
    self.inputs: list[dict] = self.manifest["inputs"]
    self.outputs: list[dict] = self.manifest["outputs"]
    self.embedded = bool(self.manifest["weights"]["embedded"])
    self.library_path = self._build()
    self._lib = ctypes.CDLL(self.library_path)
    self._bind()
    self._ctx = None
    ctx = (ctypes.c_uint64 * ((self._fn("ctx_size")() + 7) // 8))()
    arena_bytes = int(self._fn("arena_bytes")())
    raw = np.zeros(arena_bytes + ARENA_ALIGN, dtype=np.uint8)
    start = -raw.ctypes.data % ARENA_ALIGN
    self._arena = raw[start:start + arena_bytes]
    arena_ptr = ctypes.c_void_p(self._arena.ctypes.data if arena_bytes else None)
    if weights_path is None and self.embedded:
      source = f"{self.folder}/weights.S (embedded)"
      status = self._fn("init_embedded")(ctx, arena_ptr)
    else:
      source = os.path.abspath(weights_path or os.path.join(self.folder, self.manifest["weights"]["file"]))
      status = self._fn("init")(ctx, os.fsencode(source), arena_ptr)
    if status == 0: status = self._fn("verify_weights")(ctx)
    if status != 0:
      self._fn("free")(ctx)
      raise ArtifactError(f"{source}: {self.strerror(status)} (status {status})")
    self._ctx = ctx

  # ---- loading ----
  def _load_manifest(self) -> dict: return load_manifest(self.folder, "c", "a C artifact")

  def _sources(self) -> dict[str, bytes]:
    """The C sources, checked against the manifest's sha256."""
    files = {}
    for name in ["model.c", "model.h"] + (["weights.S"] if self.embedded else []):
      data = _read(os.path.join(self.folder, name))
      if hashlib.sha256(data).hexdigest() != self.manifest["files"].get(name):
        raise ArtifactError(f"{os.path.join(self.folder, name)}: does not match manifest.json (sha256); "
                            f"the artifact was modified")
      files[name] = data
    return files

  def _build(self) -> str:
    """The shared library of this folder's sources; built once per content (embedded weights: identified by the
    manifest's sha256, so a cached library needs no weights file)."""
    files = self._sources()
    flags = ("-std=c99", *self.cflags, "-shared", "-fPIC")
    material = hashlib.sha256()
    for part in [self.compiler, _compiler_id(self.compiler), " ".join(flags)]:
      material.update(part.encode() + b"\0")
    for name in sorted(files): material.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    if self.embedded: material.update(b"weights\0" + self.manifest["weights"]["sha256"].encode())
    path = os.path.join(self.cache_dir, f"{material.hexdigest()}.so")
    if os.path.exists(path): return path
    if self.embedded:
      weights = os.path.join(self.folder, self.manifest["weights"]["file"])
      if hashlib.sha256(_read(weights)).hexdigest() != self.manifest["weights"]["sha256"]:
        raise ArtifactError(f"{weights}: does not match manifest.json (sha256); the artifact was modified")
    os.makedirs(self.cache_dir, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=self.cache_dir, prefix=".artifact.", suffix=".so.tmp")
    os.close(fd)
    try:
      sources = ["model.c"] + (["weights.S"] if self.embedded else [])
      command = [self.compiler, *flags, *sources, "-o", tmp, "-lm"]
      result = subprocess.run(command, cwd=self.folder, capture_output=True, text=True)
      if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise ArtifactError(f"{self.folder}/model.c: does not compile with {self.compiler} "
                            f"({detail[0] if detail else f'exit status {result.returncode}'})")
      os.replace(tmp, path)
    finally:
      if os.path.exists(tmp): os.unlink(tmp)
    return path

  def _fn(self, name: str):
    return getattr(self._lib, f"{self.symbol}_{name}")

  def _bind(self) -> None:
    p, size, i = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
    sigs = {"ctx_size": (size, []), "arena_bytes": (size, []), "init": (i, [p, ctypes.c_char_p, p]),
            "verify_weights": (i, [p]), "run": (i, [p, p, p]), "free": (None, [p]), "strerror": (ctypes.c_char_p, [i])}
    if self.embedded: sigs["init_embedded"] = (i, [p, p])
    for name, (res, args) in sigs.items():
      try:
        fn = self._fn(name)
      except AttributeError:
        raise ArtifactError(f"{self.library_path}: the library has no function {self.symbol}_{name}") from None
      fn.restype, fn.argtypes = res, args

  def strerror(self, status: int) -> str: return self._fn("strerror")(status).decode()

  # ---- running ----
  def _check_inputs(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    if not isinstance(inputs, dict): raise ArtifactError(f"inputs must be a dict name -> array, not {type(inputs)}")
    names = [t["name"] for t in self.inputs]
    for name in inputs:
      if name not in names:
        raise ArtifactError(f"unknown input {name!r}; the model's inputs are {', '.join(repr(n) for n in names)}")
    out = []
    for spec in self.inputs:
      name = spec["name"]
      if name not in inputs: raise ArtifactError(f"missing input {name!r}")
      arr = np.asarray(inputs[name])
      want = np.dtype(spec["dtype"])
      if arr.dtype != want:
        got = arr.dtype.name if arr.dtype.isnative else arr.dtype.str
        raise ArtifactError(f"input {name!r}: dtype {got}, expected {want.name}")
      if tuple(arr.shape) != tuple(spec["shape"]):
        raise ArtifactError(f"input {name!r}: shape {tuple(arr.shape)}, expected {tuple(spec['shape'])}")
      out.append(np.require(arr, requirements=["C", "A"]))
    return out

  def _prepare(self, inputs: dict[str, np.ndarray]):
    if self._ctx is None: raise ArtifactError(f"{self.folder}: the artifact is closed")
    ins = self._check_inputs(inputs)
    outs = [np.empty(tuple(t["shape"]), dtype=np.dtype(t["dtype"])) for t in self.outputs]
    in_ptrs = (ctypes.c_void_p * max(len(ins), 1))(*[a.ctypes.data for a in ins])
    out_ptrs = (ctypes.c_void_p * len(outs))(*[a.ctypes.data for a in outs])
    return ins, outs, in_ptrs, out_ptrs

  def _call(self, in_ptrs, out_ptrs) -> None:
    status = self._fn("run")(self._ctx, in_ptrs, out_ptrs)
    if status != 0: raise ArtifactError(f"{self.folder}: run failed: {self.strerror(status)} (status {status})")

  def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run once; returns the outputs by original name, in manifest order."""
    _, outs, in_ptrs, out_ptrs = self._prepare(inputs)
    self._call(in_ptrs, out_ptrs)
    return {t["name"]: a for t, a in zip(self.outputs, outs)}

  def time(self, inputs: dict[str, np.ndarray], runs: int = 10, warmup: int = 2) -> list[float]:
    """Seconds of each of `runs` calls of the C run function, after `warmup` untimed calls."""
    ins, outs, in_ptrs, out_ptrs = self._prepare(inputs)   # the arrays must outlive the calls
    times = time_runs(lambda: self._call(in_ptrs, out_ptrs), runs, warmup)
    del ins, outs
    return times

  def close(self) -> None:
    if getattr(self, "_ctx", None) is not None:
      self._fn("free")(self._ctx)
      self._ctx = None

  def __enter__(self) -> CArtifact: return self
  def __exit__(self, *exc) -> None: self.close()
  def __del__(self) -> None:
    try:
      self.close()
    except Exception:
      pass
