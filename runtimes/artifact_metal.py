"""Running a `metal` artifact folder from Python: `MetalArtifact` reads its manifest.json and the launch plan in it
(`target_info.launches`, the plan model.m's tables are generated from: each launch's kernel, threadgroups, threads
per threadgroup and buffers with binding index and byte offset), checks model.metal and the weights file against the
manifest (size, safetensors header, sha256), and runs the plan the way model.m does: the kernels of model.metal
compiled once with fast math off, one compute pipeline state per kernel, the whole weights file in one buffer, the
intermediates in one arena buffer bound at the memory plan's offsets, and per run one command buffer with a
dispatchThreadgroups per launch. The device work goes through a backend object; the default, `MetalBackend`, uses
`runtimes.metal` (PyObjC's Metal bindings, macOS only) and raises `RuntimeUnavailable` elsewhere, so
`tgc run/validate/bench` print one line. Tests on Linux pass a backend that runs the kernels on the CPU through the
`metal_stdlib` shim, which checks the plan, the kernels and the offsets everywhere; model.m itself runs only on
macOS.

The interface is `runtimes.artifact.Artifact`'s (run, time, close, context manager). Problems with the artifact or the
caller's data raise `ArtifactError` with one line naming the culprit."""
from __future__ import annotations
from typing import Any

import numpy as np

from tgc.runtimes.artifact import Artifact, ArtifactError, ArtifactFolder
from tgc.runtimes.base import get_runtime

KINDS = ("input", "output", "weight", "arena")


class MetalBackend:
  """Buffers, kernels and command buffers on the Metal device of `runtimes.metal` (shared-storage MTLBuffers)."""

  def __init__(self, runtime: Any = None):
    self.runtime = runtime if runtime is not None else get_runtime("metal")   # RuntimeUnavailable off macOS
    self.device_name: str = self.runtime.device_name
    self.programs: dict[str, Any] = {}

  def compile(self, source: str, kernels: list[str]) -> None:
    self.programs = {name: self.runtime.compile(source, name) for name in kernels}

  def max_threads(self, kernel: str) -> int: return int(self.programs[kernel].max_threads)

  def alloc(self, nbytes: int, data: bytes | None = None) -> Any:
    buf = self.runtime.alloc(nbytes)
    if data is not None and nbytes: self.write(buf, data)
    return buf

  def write(self, buf: Any, data: bytes) -> None:
    if len(data): buf.view()[:len(data)] = data

  def read(self, buf: Any, nbytes: int) -> np.ndarray:
    return np.frombuffer(buf.view(), np.uint8, count=nbytes).copy() if nbytes else np.empty(0, np.uint8)

  def run(self, launches: list[tuple[str, list[tuple[int, Any, int]], list[int], list[int]]]) -> None:
    """Every launch in one command buffer (one serial compute encoder), then wait for it."""
    from tgc.runtimes import metal
    rt = self.runtime
    rt.synchronize()
    commands = rt.queue.commandBuffer()
    encoder = commands.computeCommandEncoder()
    for kernel, binds, groups, threads in launches:
      encoder.setComputePipelineState_(self.programs[kernel].pipeline)
      for binding, buf, offset in binds: encoder.setBuffer_offset_atIndex_(buf.mtl, offset, binding)
      encoder.dispatchThreadgroups_threadsPerThreadgroup_(metal.Metal.MTLSizeMake(*groups),
                                                          metal.Metal.MTLSizeMake(*threads))
    encoder.endEncoding()
    commands.commit()
    rt.wait_for("the model's command buffer", commands)


def read_launches(manifest: dict) -> list[dict]:
  """`target_info.launches`, checked against the rest of the manifest (calls, kernels, buffer sizes)."""
  where = "manifest.json: target_info.launches"
  plan = manifest.get("target_info", {}).get("launches")
  calls = manifest["calls"]
  if not isinstance(plan, list) or len(plan) != len(calls):
    raise ArtifactError(f"{where}: expected a list of {len(calls)} launches (one per call)")
  sizes = {"input": [t["nbytes"] for t in manifest["inputs"]], "output": [t["nbytes"] for t in manifest["outputs"]],
           "weight": [t["nbytes"] for t in manifest["weights"]["tensors"]]}
  arena = {b["index"]: b for b in manifest["arena_buffers"]}
  tensors = manifest["weights"]["tensors"]
  for i, (launch, call) in enumerate(zip(plan, calls)):
    try:
      ok = launch["kernel"] == call["kernel"] and all(len(launch[k]) == 3 and all(isinstance(n, int) and n >= 1
                                                      for n in launch[k]) for k in ("threadgroups", "threads"))
      for b in launch["buffers"]:
        kind, index, offset = b["kind"], b["index"], b["offset"]
        if kind not in KINDS or not isinstance(b["binding"], int) or b["binding"] < 0: ok = False
        elif kind == "arena":
          ok = ok and index in arena and offset == arena[index]["offset"]
          ok = ok and offset + arena[index]["nbytes"] <= manifest["arena_bytes"]
        else:
          ok = ok and 0 <= index < len(sizes[kind])
          ok = ok and offset == (tensors[index]["offset"] if kind == "weight" else 0)
    except (KeyError, TypeError):
      ok = False
    if not ok: raise ArtifactError(f"{where}[{i}]: does not match the manifest's calls, kernels or buffers")
  return plan


class MetalArtifact(Artifact):
  """A loaded `metal` artifact. `weights_path` overrides the folder's weights file; `backend` the device
  (default: `MetalBackend`, macOS only). `close` releases the buffers."""
  TARGET = "metal"
  KIND = "a Metal artifact"

  def __init__(self, folder: str | ArtifactFolder, weights_path: str | None = None, *, backend: Any = None):
    self._ready = False
    self._open(folder)
    source = self._checked(self.manifest["target_info"].get("kernel_source", "model.metal"))
    self.plan = read_launches(self.manifest)
    self.backend = backend if backend is not None else MetalBackend()
    weights = self.files.weights(weights_path)
    kernels = [k["name"] for k in self.manifest["kernels"]]
    self.backend.compile(source.decode("utf-8"), kernels)
    for launch in self.plan:
      threads, limit = int(np.prod(launch["threads"])), self.backend.max_threads(launch["kernel"])
      if threads > limit:
        raise ArtifactError(f"{self.folder}: kernel {launch['kernel']}: a threadgroup of {threads} threads, the "
                            f"device allows {limit}")
    self._buffers = {"weight": self.backend.alloc(len(weights), weights),
                     "arena": self.backend.alloc(int(self.manifest["arena_bytes"]))}
    self._ins = [self.backend.alloc(int(t["nbytes"])) for t in self.inputs]
    self._outs = [self.backend.alloc(int(t["nbytes"])) for t in self.outputs]
    self._launches = [(launch["kernel"], [(b["binding"], self._buffer(b), b["offset"]) for b in launch["buffers"]],
                       launch["threadgroups"], launch["threads"]) for launch in self.plan]
    self._ready = True

  # ---- loading ----
  def _buffer(self, b: dict) -> Any:
    if b["kind"] == "input": return self._ins[b["index"]]
    if b["kind"] == "output": return self._outs[b["index"]]
    return self._buffers[b["kind"]]

  # ---- running ----
  @property
  def ready(self) -> bool: return getattr(self, "_ready", False)

  def _execute(self, ins: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Inputs written, the command buffer run and waited for, outputs read."""
    for buf, arr in zip(self._ins, ins): self.backend.write(buf, arr.tobytes())
    self.backend.run(self._launches)
    return {t["name"]: self.backend.read(buf, int(t["nbytes"])).view(np.dtype(t["dtype"])).reshape(t["shape"])
            for t, buf in zip(self.outputs, self._outs)}

  def close(self) -> None:
    if self.ready:
      self._ready = False
      self._buffers, self._ins, self._outs, self._launches = {}, [], [], []
