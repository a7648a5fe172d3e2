"""What every artifact runner shares (`runtimes/artifact_<target>.py`): reading an artifact folder's manifest.json
and its files against the manifest's sha256, checking the caller's inputs against the manifest, and the interface
validation and benchmarks use: `run(inputs)` -> outputs by name, `time(inputs, runs, warmup)` -> seconds per run,
`close`, a context manager. A runner subclasses `Artifact` and supplies `_execute` and `close`.

Problems with the artifact or the caller's data raise `ArtifactError` (a ValueError) with one line naming the
culprit (file, input, status)."""
from __future__ import annotations
import hashlib
import json
import os
import time as _time

import numpy as np

FORMAT_VERSION = 2


class ArtifactError(ValueError):
  """A problem with an artifact folder or with the data given to it."""


def read_file(path: str) -> bytes:
  """The bytes of `path`; an unreadable file is an ArtifactError naming it."""
  try:
    with open(path, "rb") as f: return f.read()
  except OSError as error:
    raise ArtifactError(f"{path}: cannot read ({error.strerror})") from None


def load_manifest(folder: str, target: str, what: str) -> dict:
  """The manifest of an artifact folder, checked for its format version and target (`what`: 'a C artifact')."""
  path = os.path.join(folder, "manifest.json")
  if not os.path.isfile(path): raise ArtifactError(f"{folder}: not an artifact folder (no manifest.json)")
  try:
    manifest = json.loads(read_file(path))
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
  data = read_file(path)
  if hashlib.sha256(data).hexdigest() != manifest["files"].get(name):
    raise ArtifactError(f"{path}: does not match manifest.json (sha256); the artifact was modified")
  return data


def checked_weights(folder: str, manifest: dict, weights_path: str | None = None) -> bytes:
  """The weights file of a device bundle (`weights_path`, or the folder's own), checked as the bundle's own loader
  checks it: present, its size, the safetensors header's length, and the manifest's sha256."""
  info = manifest["weights"]
  path = os.path.abspath(weights_path or os.path.join(folder, info["file"]))
  if not os.path.isfile(path): raise ArtifactError(f"{path}: cannot open the weights file")
  data = read_file(path)
  if len(data) < info["nbytes"]:
    raise ArtifactError(f"{path}: weights data is truncated ({len(data)} of {info['nbytes']} bytes)")
  if len(data) > info["nbytes"]:
    raise ArtifactError(f"{path}: weights data is longer than expected ({len(data)} bytes, not {info['nbytes']})")
  if int.from_bytes(data[:8], "little") + 8 != info["header_bytes"]:
    raise ArtifactError(f"{path}: weights header does not match this model (wrong or corrupted file)")
  if hashlib.sha256(data).hexdigest() != info["sha256"]:
    raise ArtifactError(f"{path}: weights data does not match this model (sha256 mismatch)")
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


class Artifact:
  """A loaded artifact of target TARGET (KIND names it in errors: 'a C artifact'). Subclasses call `_open`
  first, then set up their device state; `_execute(prepared)` runs once on what `_prepare` made of the inputs
  and returns the outputs; `ready` says whether the artifact is open."""
  TARGET = ""
  KIND = ""

  def _open(self, folder: str) -> None:
    self.folder = os.path.abspath(folder)
    self.manifest: dict = load_manifest(self.folder, self.TARGET, self.KIND)
    self.inputs: list[dict] = self.manifest["inputs"]
    self.outputs: list[dict] = self.manifest["outputs"]

  def _checked(self, name: str) -> bytes: return checked_file(self.folder, self.manifest, name)

  @property
  def ready(self) -> bool: raise NotImplementedError

  def _check_inputs(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The inputs in manifest order as C-contiguous arrays, each checked for name, dtype and shape."""
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
    """What `_execute` runs on: by default the checked input arrays."""
    if not self.ready: raise ArtifactError(f"{self.folder}: the artifact is closed")
    return self._check_inputs(inputs)

  def _execute(self, prepared) -> dict[str, np.ndarray]: raise NotImplementedError

  def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run once; returns the outputs by original name, in manifest order."""
    return self._execute(self._prepare(inputs))

  def time(self, inputs: dict[str, np.ndarray], runs: int = 10, warmup: int = 2) -> list[float]:
    """Seconds of each of `runs` whole runs (inputs in, the model, outputs out), after `warmup` untimed runs."""
    prepared = self._prepare(inputs)   # what the runs read must outlive them
    return time_runs(lambda: self._execute(prepared), runs, warmup)

  def close(self) -> None: raise NotImplementedError

  def __enter__(self): return self
  def __exit__(self, *exc) -> None: self.close()
  def __del__(self) -> None:
    try:
      self.close()
    except Exception:
      pass
