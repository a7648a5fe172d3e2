"""Running an `opencl` artifact folder from Python: `OpenCLArtifact` reads its manifest.json, builds the folder's own
host loader (model.c, which embeds the kernels of model.cl) into a shared library linked with -lOpenCL (cached on
disk by the sha256 of the sources, flags and compiler), and calls the bundle's public C API through ctypes: init
(weights file, device), verify_weights, run, free, and for an artifact keeping states (a KV cache) their lengths and
state_read. Validation and benchmarks use this, so they exercise exactly
the code a user links, on whatever OpenCL platform the ICD loader offers (PoCL on a CPU-only machine).

The interface is `runtimes.artifact.Artifact`'s (run, time, close, context manager). Errors about the artifact or the
caller's data raise `ArtifactError` with one line naming the culprit; a machine without the OpenCL headers, library,
platform or device raises `RuntimeUnavailable` naming the missing piece."""
from __future__ import annotations
import ctypes
import os

import numpy as np

from tgc.codegen.compiled import Variant
from tgc.runtimes.artifact import ArtifactError, ArtifactFolder
from tgc.runtimes.artifact_c import CArtifact
from tgc.runtimes.base import RuntimeUnavailable
from tgc.runtimes.dims import is_dynamic

DEFAULT_CFLAGS = ("-O2",)
DEFAULT_DEVICE = -1
NO_PLATFORM, NO_DEVICE = 11, 12        # status codes of the generated API (model.h)
PACKAGES = "install the Debian packages ocl-icd-opencl-dev and pocl-opencl-icd (or another OpenCL driver)"


class OpenCLArtifact(CArtifact):
  """A loaded `opencl` artifact on device `device_index` (model.h's numbering; -1: the first GPU, else the first
  device). `weights_path` overrides the folder's weights file. One instance owns one model context."""
  TARGET = "opencl"
  KIND = "an OpenCL artifact"
  CACHE = "artifact_opencl"
  LIBS = ("-lOpenCL",)

  def __init__(self, folder: str | ArtifactFolder, weights_path: str | None = None, *,
               device_index: int = DEFAULT_DEVICE, compiler: str | None = None, cflags: tuple[str, ...] | None = None,
               cache_dir: str | None = None):
    self._load_library(folder, compiler, cflags, DEFAULT_CFLAGS, cache_dir)
    ctx = self._new_context()
    source = self._weights_path(weights_path)
    status = self._fn("init")(ctx, os.fsencode(source), int(device_index), None)
    if status == 0: status = self._fn("verify_weights")(ctx)
    if status != 0:
      message = self._describe(status, ctx)
      self._fn("free")(ctx)
      if status in (NO_PLATFORM, NO_DEVICE):
        raise RuntimeUnavailable(f"opencl artifact {self.folder}: {message}")
      raise ArtifactError(f"{source}: {message}")
    self._ctx = ctx

  # ---- loading ----
  def _check_toolchain(self, first_error: str) -> None:
    if "CL/cl.h" in first_error or "lOpenCL" in first_error:
      raise RuntimeUnavailable(f"opencl artifact: the OpenCL headers or library are missing ({first_error}); "
                               f"{PACKAGES}")

  def _signatures(self) -> dict[str, tuple]:
    p, size, i, s = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_char_p
    sigs = {"ctx_size": (size, []), "arena_bytes": (size, []), "init": (i, [p, s, i, p]),
            "init_from_memory": (i, [p, p, size, i, p]), "verify_weights": (i, [p]), "run": (i, [p, p, p]),
            "free": (None, [p]), "strerror": (s, [i]), "error_detail": (s, [p]), "command_queue": (p, [p]),
            "arena_sub_buffers": (i, [p]), "kernel_variant": (s, [p])}
    if is_dynamic(self.manifest): sigs["set_dims"] = (i, [p, p])     # sizes known only at run time
    return {**sigs, **self._state_signatures()}

  def _state_access(self) -> dict[str, tuple]:
    """How state i's entries are reached: `state_read`, a copy from device memory to the host."""
    return {"state_read": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p])}

  def _describe(self, status: int, ctx=None) -> str:
    detail = self._fn("error_detail")(self._ctx if ctx is None else ctx).decode(errors="replace")
    return f"{self.strerror(status)}{f' ({detail})' if detail else ''} (status {status})"

  # ---- running ----
  def state(self, i: int) -> np.ndarray:
    """A copy of the entries state i holds now (its length along its growing dim), read from the device."""
    st = self.manifest["states"][i]
    length = self.held_sizes()[st["length"]]
    out = np.empty([length if k == st["axis"] else d for k, d in enumerate(st["shape"])], np.dtype(st["dtype"]))
    status = self._fn("state_read")(self._ctx, i, out.ctypes.data)
    if status != 0: raise ArtifactError(f"{self.folder}: state_read({i}): {self._describe(status)}")
    return out

  @property
  def sub_buffers(self) -> bool:
    """Whether the context placed the intermediates as sub-buffers of one arena buffer."""
    if not self.ready: raise ArtifactError(f"{self.folder}: the artifact is closed")
    return bool(self._fn("arena_sub_buffers")(self._ctx))

  @property
  def variant(self) -> Variant:
    """The kernel variant the context built: GPU (workgroup-memory tiles) or CPU (CPU devices such as PoCL)."""
    if not self.ready: raise ArtifactError(f"{self.folder}: the artifact is closed")
    return Variant(self._fn("kernel_variant")(self._ctx).decode())
