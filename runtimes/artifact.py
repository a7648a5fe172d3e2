"""Artifact folders from Python, read once: `ArtifactFolder` is a folder's manifest.json (parsed, its format version
checked) and its files, each checked against the manifest's sha256 at most once; `Artifact` is what every artifact
runner (`runtimes/artifact_<target>.py`) subclasses: the folder, inputs checked by name, dtype and shape, and the
interface `tgc run/validate/bench` and the ONNX backend use: `run(inputs)` -> outputs by name, `time(inputs, runs,
warmup)` -> seconds per run, `close`, a context manager. A runner supplies `_execute` and `close`.

Inputs and outputs are the storage arrays the artifact's API takes and fills; with `values=True` they are what
users hold instead (storage-only types as their values, `runtimes.io_arrays`), converted and checked once.

Problems with the artifact or the caller's data raise `ArtifactError` (a ValueError; `runtimes.base`) with one line
naming the culprit (file, input, status); `UnknownInput` and `MissingInput` say which input."""
from __future__ import annotations
import hashlib
import json
import os
import time as _time

import numpy as np

from tgc.runtimes.base import ArtifactError, MissingInput, UnknownInput
from tgc.runtimes.dims import DimsError, bind_dims, is_dynamic, shape_at
from tgc.runtimes.io_arrays import from_storage, to_storage

FORMAT_VERSION = 3        # the manifest format this tgc reads (emit.manifest writes it; a test checks they agree)
MANIFEST = "manifest.json"
SOURCE_SUFFIXES = (".c", ".h", ".cl", ".cu", ".metal", ".m", ".mm", ".swift", ".js", ".ts", ".wgsl", ".html")
_HASH_CHUNK = 1 << 20

__all__ = ["ArtifactError", "MissingInput", "UnknownInput", "ArtifactFolder", "Artifact", "FORMAT_VERSION",
           "MANIFEST", "is_artifact", "read_file", "checked_weights", "check_input_names", "time_runs"]


def read_file(path: str) -> bytes:
  """The bytes of `path`; an unreadable file is an ArtifactError naming it."""
  try:
    with open(path, "rb") as f: return f.read()
  except OSError as error:
    raise ArtifactError(f"{path}: cannot read ({error.strerror})") from None


def _file_sha256(path: str) -> str:
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for chunk in iter(lambda: f.read(_HASH_CHUNK), b""): digest.update(chunk)
  return digest.hexdigest()


def is_artifact(folder: str) -> bool:
  """A folder with a manifest.json that is a JSON object with a format_version."""
  try:
    with open(os.path.join(folder, MANIFEST), "rb") as f: manifest = json.loads(f.read())
  except (OSError, ValueError): return False
  return isinstance(manifest, dict) and "format_version" in manifest


class ArtifactFolder:
  """An artifact folder and its manifest, read once (`ArtifactFolder.read`). `folder` is the path as given, so
  messages name it as the user wrote it. Files are checked against the manifest's sha256 by `verify` (all of them)
  or `checked` (one, returning its bytes); a file is hashed at most once per ArtifactFolder."""

  def __init__(self, folder: str, manifest: dict):
    self.folder, self.manifest = folder, manifest
    self._verified: set[str] = set()

  @classmethod
  def read(cls, folder: str) -> ArtifactFolder:
    """The folder's manifest, parsed and its format version checked; ArtifactError naming the folder or file."""
    if not os.path.lexists(folder): raise ArtifactError(f"artifact folder not found: {folder}")
    if not os.path.isdir(folder): raise ArtifactError(f"{folder} is not a folder (expected a tgc artifact folder)")
    path = os.path.join(folder, MANIFEST)
    if not os.path.isfile(path): raise ArtifactError(f"{folder} is not a tgc artifact (no {MANIFEST})")
    try:
      with open(path, "rb") as f: manifest = json.loads(f.read())
    except ValueError as error: raise ArtifactError(f"{path} is not valid JSON ({error})") from error
    except OSError as error: raise ArtifactError(f"cannot read {path}: {error.strerror}") from error
    if not isinstance(manifest, dict) or "format_version" not in manifest:
      raise ArtifactError(f"{folder} is not a tgc artifact ({MANIFEST} has no format_version)")
    if manifest["format_version"] != FORMAT_VERSION:
      raise ArtifactError(f"{path}: format_version {manifest['format_version']} is not the one this tgc reads "
                          f"({FORMAT_VERSION}); compile the model again")
    return cls(folder, manifest)

  # ---- what the manifest says
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
    """The model the artifact was compiled from, as recorded for `tgc validate` (None when not recorded)."""
    source = self.manifest.get("source")
    return source if isinstance(source, dict) else None

  def path(self, name: str) -> str: return os.path.join(self.folder, name)

  def code_bytes(self) -> int:
    """Bytes of generated source (the files the manifest lists with a source-code suffix)."""
    return sum(os.path.getsize(self.path(name)) for name in self.manifest.get("files", {})
               if name.lower().endswith(SOURCE_SUFFIXES))

  # ---- files checked against the manifest
  def verify(self) -> None:
    """Every file the manifest lists is there, whole and unchanged (sha256); the weights file is checked first so
    a truncated one is reported as such."""
    weights = self.manifest.get("weights", {})
    wfile = weights.get("file")
    if weights.get("parts"):
      for part in weights["parts"]:
        if not os.path.isfile(self.path(part["file"])): raise ArtifactError(f"weights file {self.path(part['file'])} "
                                                                            f"is missing")
    elif wfile and not weights.get("embedded"):
      path = self.path(wfile)
      if not os.path.isfile(path): raise ArtifactError(f"weights file {path} is missing")
      size, want = os.path.getsize(path), int(weights.get("nbytes", -1))
      if 0 <= size < want: raise ArtifactError(f"weights file {path} is truncated ({size} of {want} bytes)")
      if want >= 0 and size != want:
        raise ArtifactError(f"weights file {path} has {size} bytes, the manifest says {want}")
    for name in sorted(self.manifest.get("files", {})):
      path = self.path(name)
      if not os.path.isfile(path): raise ArtifactError(f"{path} is missing (listed in {MANIFEST})")
      if name not in self._verified: self._check_digest(name, _file_sha256(path))

  def checked(self, name: str) -> bytes:
    """The bytes of a file the manifest lists, checked against its sha256 unless `verify` or an earlier call did."""
    data = read_file(self.path(name))
    if name not in self._verified: self._check_digest(name, hashlib.sha256(data).hexdigest())
    return data

  def weights(self, weights_path: str | None = None) -> bytes:
    """The weights file of a device bundle (`weights_path`, or the folder's own), checked as the bundle's own
    loader checks it (`checked_weights`); the folder's own file, once verified, is not hashed again."""
    own = self.manifest["weights"]["file"]
    parts = [p["file"] for p in self.manifest["weights"].get("parts", [])]
    if weights_path is None and parts and all(p in self._verified for p in parts):
      return b"".join(read_file(self.path(p)) for p in parts)
    if weights_path is None and own in self._verified: return read_file(self.path(own))
    return checked_weights(os.path.abspath(self.folder), self.manifest, weights_path)

  def _check_digest(self, name: str, digest: str) -> None:
    if digest != self.manifest.get("files", {}).get(name):
      what = "weights file" if name == self.manifest.get("weights", {}).get("file") else "file"
      raise ArtifactError(f"{what} {self.path(name)} differs from the one compiled (sha256 mismatch with "
                          f"{MANIFEST})")
    self._verified.add(name)


def read_weights(folder: str, manifest: dict, weights_path: str | None = None) -> bytes:
  """The bytes of an artifact's weights file (`weights_path`, or the folder's own: the file, or its parts joined)."""
  parts = [] if weights_path else [p["file"] for p in manifest["weights"].get("parts", [])]
  paths = [os.path.join(folder, p) for p in parts] or [os.path.abspath(weights_path or os.path.join(
    folder, manifest["weights"]["file"]))]
  for path in paths:
    if not os.path.isfile(path): raise ArtifactError(f"{path}: cannot open the weights file")
  return b"".join(read_file(path) for path in paths)


def checked_weights(folder: str, manifest: dict, weights_path: str | None = None) -> bytes:
  """The weights file of a device bundle (`weights_path`, or the folder's own), checked as the bundle's own loader
  checks it: present, its size, the safetensors header's length, and the manifest's sha256."""
  info = manifest["weights"]
  path = os.path.abspath(weights_path or os.path.join(folder, info["file"]))
  data = read_weights(folder, manifest, weights_path)
  if len(data) < info["nbytes"]:
    raise ArtifactError(f"{path}: weights data is truncated ({len(data)} of {info['nbytes']} bytes)")
  if len(data) > info["nbytes"]:
    raise ArtifactError(f"{path}: weights data is longer than expected ({len(data)} bytes, not {info['nbytes']})")
  if int.from_bytes(data[:8], "little") + 8 != info["header_bytes"]:
    raise ArtifactError(f"{path}: weights header does not match this model (wrong or corrupted file)")
  if hashlib.sha256(data).hexdigest() != info["sha256"]:
    raise ArtifactError(f"{path}: weights data does not match this model (sha256 mismatch)")
  return data


def check_input_names(specs: list[dict], inputs: dict) -> None:
  """UnknownInput for a name the model does not take, then MissingInput for one it takes that is not given."""
  if not isinstance(inputs, dict): raise ArtifactError(f"inputs must be a dict name -> array, not {type(inputs)}")
  names = [t["name"] for t in specs]
  for name in inputs:
    if name not in names: raise UnknownInput(name, names)
  for name in names:
    if name not in inputs: raise MissingInput(name)


def held_entries(st: dict, whole: np.ndarray, length: int) -> np.ndarray:
  """A copy of the first `length` entries along its axis of a state (a manifest `states` entry) whose whole buffer,
  its capacity, is `whole`."""
  return whole[tuple(slice(0, length) if k == st["axis"] else slice(None) for k in range(whole.ndim))].copy()


def filled_rows(outputs: dict[str, np.ndarray], specs: list[dict]) -> dict[str, np.ndarray]:
  """The outputs with those whose rows a run counts (manifest `rows`: a Loop's scan output, its condition computed
  on the device) cut to the rows it filled."""
  out = dict(outputs)
  for spec in specs:
    if spec.get("rows") and spec["name"] in out and spec["rows"] in out:
      out[spec["name"]] = out[spec["name"]][:int(np.asarray(out[spec["rows"]]).reshape(-1)[0])]
  return out


def time_runs(run_once, runs: int, warmup: int, before=None) -> list[float]:
  """Seconds of each of `runs` calls of `run_once()`, after `warmup` untimed calls; `before()` ahead of each call,
  untimed."""
  for _ in range(warmup):
    if before: before()
    run_once()
  times = []
  for _ in range(runs):
    if before: before()
    start = _time.perf_counter()
    run_once()
    times.append(_time.perf_counter() - start)
  return times


class _Values(dict):
  """Inputs by name as users hold them (`run(..., values=True)`): `Artifact._prepare` converts them to storage."""


def _as_values(inputs):
  return _Values(inputs) if isinstance(inputs, dict) else inputs


class Artifact:
  """A loaded artifact of target TARGET (KIND names it in errors: 'a C artifact'). Subclasses call `_open`
  first (with a folder path, or an `ArtifactFolder` already read and verified), then set up their device state;
  `_execute(prepared)` runs once on what `_prepare` made of the inputs and returns the outputs; `ready` says whether
  the artifact is open."""
  TARGET = ""
  KIND = ""
  stand_in: str | None = None     # the kernel variant its own loader runs first on this device while this one compiles

  def _open(self, folder: str | ArtifactFolder) -> None:
    self.files = folder if isinstance(folder, ArtifactFolder) else ArtifactFolder.read(os.path.abspath(folder))
    self.folder = os.path.abspath(self.files.folder)
    self.manifest: dict = self.files.manifest
    if self.manifest.get("target") != self.TARGET:
      raise ArtifactError(f"{self.files.path(MANIFEST)}: target {self.manifest.get('target')!r} is not {self.KIND}")
    self.inputs: list[dict] = self.manifest["inputs"]
    self.outputs: list[dict] = self.manifest["outputs"]

  def _checked(self, name: str) -> bytes: return self.files.checked(name)

  @property
  def ready(self) -> bool: raise NotImplementedError

  def _check_inputs(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The inputs in manifest order as C-contiguous storage arrays: names checked, then each array's dtype and
    shape (values, `_Values`, are converted by `io_arrays.to_storage`, which checks them)."""
    check_input_names(self.inputs, inputs)
    specs = self.specs_at(self.input_dims(inputs))[0]
    if isinstance(inputs, _Values):
      return [np.require(to_storage(spec["name"], inputs[spec["name"]], spec), requirements="C") for spec in specs]
    out = []
    for spec in specs:
      name, arr = spec["name"], np.asarray(inputs[spec["name"]])
      want = np.dtype(spec["dtype"])
      if arr.dtype != want:
        got = arr.dtype.name if arr.dtype.isnative else arr.dtype.str
        raise ArtifactError(f"input {name!r}: dtype {got}, expected {want.name}")
      if tuple(arr.shape) != tuple(spec["shape"]):
        raise ArtifactError(f"input {name!r}: shape {tuple(arr.shape)}, expected {tuple(spec['shape'])}")
      out.append(np.require(arr, requirements=["C", "A"]))
    return out

  def held_sizes(self) -> dict[str, int]:
    """The sizes the artifact tracks itself: each state's length now (none without states)."""
    return {}

  def input_dims(self, inputs: dict) -> dict[str, int]:
    """The sizes known only at run time, read off the inputs' shapes (none for an artifact of fixed shapes)."""
    if not is_dynamic(self.manifest): return {}
    check_input_names(self.inputs, inputs)
    held = self.held_sizes()
    shapes = tuple(np.shape(inputs[s["name"]]) for s in self.inputs)
    key = (shapes, tuple(held.items()))
    cache = self.__dict__.setdefault("_dims_of", {})      # each set of input shapes is worked out once
    if len(cache) > 256: cache.clear()
    if key not in cache:
      try: cache[key] = bind_dims(self.manifest, {s["name"]: sh for s, sh in zip(self.inputs, shapes)}, held)
      except DimsError as error: raise ArtifactError(str(error)) from None
    return cache[key]

  def specs_at(self, dims: dict[str, int]) -> tuple[list[dict], list[dict]]:
    """The input and output specs with the shapes they have for these sizes."""
    if not dims: return self.inputs, self.outputs
    cache, key = self.__dict__.setdefault("_specs_at", {}), tuple(dims.items())
    if len(cache) > 256: cache.clear()
    if key not in cache:
      cache[key] = tuple([{**s, "shape": list(shape_at(s["shape"], dims))} for s in specs]
                         for specs in (self.inputs, self.outputs))
    return cache[key]

  def _prepare(self, inputs: dict[str, np.ndarray]):
    """What `_execute` runs on: by default the checked input arrays."""
    if not self.ready: raise ArtifactError(f"{self.folder}: the artifact is closed")
    return self._check_inputs(inputs)

  def _execute(self, prepared) -> dict[str, np.ndarray]: raise NotImplementedError

  def run(self, inputs: dict[str, np.ndarray], *, values: bool = False) -> dict[str, np.ndarray]:
    """Run once; returns the outputs by original name, in manifest order. With `values`, inputs and outputs are
    what users hold (storage-only types as their values or, for inputs, raw bit patterns)."""
    out = filled_rows(self._execute(self._prepare(_as_values(inputs) if values else inputs)), self.outputs)
    if not values: return out
    return {spec["name"]: from_storage(np.asarray(out[spec["name"]]), spec) for spec in self.outputs}

  def time(self, inputs: dict[str, np.ndarray], runs: int = 10, warmup: int = 2, *,
           values: bool = False, before=None) -> list[float]:
    """Seconds of each of `runs` whole runs (inputs in, the model, outputs out), after `warmup` untimed runs;
    `before()` is called ahead of each run, untimed (resetting states)."""
    prepared = self._prepare(_as_values(inputs) if values else inputs)   # what the runs read must outlive them
    return time_runs(lambda: self._execute(prepared), runs, warmup, before)

  def close(self) -> None: raise NotImplementedError

  def __enter__(self): return self
  def __exit__(self, *exc) -> None: self.close()
  def __del__(self) -> None:
    try:
      self.close()
    except Exception:
      pass
