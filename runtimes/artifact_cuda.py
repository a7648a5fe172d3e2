"""Running a `cuda` artifact folder from Python: `CUDAArtifact` reads its manifest.json, checks model.cu and the
weights file against it (size, safetensors header, sha256: what the bundle's own init and verify_weights check),
compiles model.cu with NVRTC (the host library in it is left out under `__CUDACC_RTC__`) for the GPU's
architecture, loads the module through the CUDA driver API (cuda-python, `runtimes.cuda`) and runs the manifest's
launches in order on the bundle's buffer plan: the whole weights file in one device buffer (tensors at their file
offsets), the intermediates in one arena at the memory plan's offsets, a buffer per input and output.

`launch_plan(manifest)` turns the manifest into that list of launches without touching a GPU, so the same plan can
be checked elsewhere (the tests run it on the CPU through a shim of the CUDA built-ins). Validation and benchmarks
use this class; the interface is `runtimes.artifact.Artifact`'s (run, time, close, context manager). Problems with the
artifact or the caller's data raise `ArtifactError` naming the culprit; a machine without an NVIDIA GPU and driver
(or without NVRTC) raises `RuntimeUnavailable` saying so, after the folder itself has been checked."""
from __future__ import annotations
import os
from dataclasses import dataclass

import numpy as np

from tgc.runtimes.artifact import Artifact, ArtifactError, ArtifactFolder
from tgc.runtimes.base import Buffer, RuntimeUnavailable, cache_root

KERNEL_SOURCE = "model.cu"
GPU_NEEDED = "running a CUDA artifact needs an NVIDIA GPU and driver"


@dataclass(frozen=True)
class LaunchArg:
  region: str           # "weights" (the whole weights file), "arena", "input" or "output"
  index: int            # input/output position; 0 for weights and arena
  offset: int           # bytes from the start of the region
  nbytes: int


@dataclass(frozen=True)
class Launch:
  kernel: str
  global_size: tuple[int, int, int]    # threads per dimension (grid = global_size / local_size)
  local_size: tuple[int, int, int]     # block
  args: tuple[LaunchArg, ...]          # in kernel parameter order


def launch_plan(manifest: dict, where: str = "manifest.json") -> list[Launch]:
  """The launches of a cuda manifest in call order, each argument resolved to a region of device memory."""
  kernels = {k["name"]: k for k in manifest["kernels"]}
  tensors, slots = manifest["weights"]["tensors"], manifest["arena_buffers"]
  io = {"input": manifest["inputs"], "output": manifest["outputs"]}
  plan = []
  for n, call in enumerate(manifest["calls"]):
    k = kernels.get(call["kernel"])
    if k is None: raise ArtifactError(f"{where}: call {n} names kernel {call['kernel']!r}, which is not listed")
    glob, loc = tuple(k["global_size"]), tuple(k["local_size"])
    if any(s < 1 or g % s for g, s in zip(glob, loc)):
      raise ArtifactError(f"{where}: kernel {k['name']}: global size {list(glob)} is not a multiple of {list(loc)}")
    args = []
    for p in k["args"]:
      if p["index"] >= len(call["args"]):
        raise ArtifactError(f"{where}: call {n} of kernel {k['name']} has no argument {p['index']}")
      ref = call["args"][p["index"]]
      kind, i = ref["kind"], ref["index"]
      table = tensors if kind == "weight" else slots if kind == "arena" else io.get(kind)
      if table is None or not 0 <= i < len(table):
        raise ArtifactError(f"{where}: call {n} of kernel {k['name']}: no {kind} buffer {i}")
      entry = table[i]
      if kind == "weight": args.append(LaunchArg("weights", 0, entry["offset"], entry["nbytes"]))
      elif kind == "arena": args.append(LaunchArg("arena", 0, entry["offset"], entry["nbytes"]))
      else: args.append(LaunchArg(kind, i, 0, entry["nbytes"]))
    plan.append(Launch(k["name"], glob, loc, tuple(args)))
  return plan


class _View(Buffer):
  """A region of a CUDABuffer (a tensor inside the weights buffer or the arena); frees nothing."""

  def __init__(self, parent, offset: int, nbytes: int):
    super().__init__(parent.runtime, nbytes)
    self.parent, self.ptr = parent, int(parent.ptr) + offset


class CUDAArtifact(Artifact):
  """A loaded `cuda` artifact on the GPU of `runtime` (default: the shared CUDA runtime, device 0).
  `weights_path` overrides the folder's weights file. `close` releases the device memory."""
  TARGET = "cuda"
  KIND = "a CUDA artifact"

  def __init__(self, folder: str | ArtifactFolder, weights_path: str | None = None, *, runtime=None,
               cache_dir: str | None = None):
    self._buffers: dict = {}
    self._open(folder)
    self.source = self._checked(KERNEL_SOURCE).decode("utf-8")
    self.weights = self.files.weights(weights_path)
    self.launches = launch_plan(self.manifest, os.path.join(self.folder, "manifest.json"))
    self.cache_dir = cache_dir or os.path.join(cache_root(), "artifact_cuda")
    if runtime is None:
      from tgc.runtimes import get_runtime
      try:
        runtime = get_runtime("cuda")
      except RuntimeUnavailable as error:
        raise RuntimeUnavailable(f"cuda artifact {self.folder}: {GPU_NEEDED} ({error})") from None
    self.runtime = runtime
    self._setup()

  def _setup(self) -> None:
    from tgc.runtimes.cuda import CUDAProgram, compile_only
    rt = self.runtime
    image = compile_only(self.source, self.manifest["model"]["symbol"], rt.arch, self.cache_dir)
    self._programs = {k["name"]: CUDAProgram(rt, k["name"], image) for k in self.manifest["kernels"]}
    weights = rt.alloc(len(self.weights))
    rt.copyin(weights, np.frombuffer(self.weights, dtype=np.uint8))
    self._buffers = {("weights", 0): weights, ("arena", 0): rt.alloc(int(self.manifest["arena_bytes"]))}
    for kind, specs in (("input", self.inputs), ("output", self.outputs)):
      for i, spec in enumerate(specs): self._buffers[(kind, i)] = rt.alloc(int(spec["nbytes"]))
    self._calls = []
    for launch in self.launches:
      bufs = []
      for a in launch.args:
        base = self._buffers[(a.region, a.index)]
        bufs.append(_View(base, a.offset, a.nbytes) if a.region in ("weights", "arena") else base)
      self._calls.append((self._programs[launch.kernel], bufs, launch.global_size, launch.local_size))

  # ---- running ----
  @property
  def ready(self) -> bool: return bool(getattr(self, "_buffers", None))

  def _execute(self, arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Copy in, every launch in order, copy out."""
    rt = self.runtime
    for i, arr in enumerate(arrays): rt.copyin(self._buffers[("input", i)], arr)
    for program, bufs, glob, loc in self._calls: program(*bufs, global_size=glob, local_size=loc)
    rt.synchronize()
    out = {}
    for i, spec in enumerate(self.outputs):
      raw = rt.copyout(self._buffers[("output", i)])
      out[spec["name"]] = raw.view(np.dtype(spec["dtype"])).reshape(tuple(spec["shape"])).copy()
    return out

  def close(self) -> None:
    self._calls = []
    self._programs = {}
    self._buffers = {}      # CUDABuffer frees its memory when collected
