"""Running an `opencl` artifact folder from Python: `OpenCLArtifact` reads its manifest.json, builds the folder's own
host loader (model.c, which embeds the kernels of model.cl) into a shared library linked with -lOpenCL (cached on
disk by the sha256 of the sources, flags and compiler), and calls the bundle's public C API through ctypes: init
(weights file, device), verify_weights, run, free. Validation and benchmarks use this, so they exercise exactly
the code a user links, on whatever OpenCL platform the ICD loader offers (PoCL on a CPU-only machine).

The interface is `CArtifact`'s (manifest, run, time, close, context manager). Errors about the artifact or the
caller's data raise `ArtifactError` with one line naming the culprit; a machine without the OpenCL headers, library,
platform or device raises `RuntimeUnavailable` naming the missing piece."""
from __future__ import annotations
import ctypes
import hashlib
import os
import subprocess
import tempfile

from ir.config import config

from runtimes.artifact_c import ArtifactError, CArtifact, _compiler_id, load_manifest
from runtimes.base import RuntimeUnavailable, cache_root

DEFAULT_CFLAGS = ("-O2",)
DEFAULT_DEVICE = -1
NO_PLATFORM, NO_DEVICE = 11, 12        # status codes of the generated API (model.h)
PACKAGES = "install the Debian packages ocl-icd-opencl-dev and pocl-opencl-icd (or another OpenCL driver)"


class OpenCLArtifact(CArtifact):
  """A loaded `opencl` artifact on device `device_index` (model.h's numbering; -1: the first GPU, else the first
  device). `weights_path` overrides the folder's weights file. One instance owns one model context."""

  def __init__(self, folder: str, weights_path: str | None = None, *, device_index: int = DEFAULT_DEVICE,
               compiler: str | None = None, cflags: tuple[str, ...] | None = None, cache_dir: str | None = None):
    self._ctx = None
    self.folder = os.path.abspath(folder)
    self.manifest: dict = self._load_manifest()
    self.compiler = compiler or config.cc
    self.cflags = tuple(cflags) if cflags is not None else DEFAULT_CFLAGS
    self.cache_dir = cache_dir or os.path.join(cache_root(), "artifact_opencl")
    self.symbol: str = self.manifest["target_info"]["api_prefix"]
    self.inputs: list[dict] = self.manifest["inputs"]
    self.outputs: list[dict] = self.manifest["outputs"]
    self.embedded = False
    self.library_path = self._build()
    self._lib = ctypes.CDLL(self.library_path)
    self._bind()
    ctx = (ctypes.c_uint64 * ((self._fn("ctx_size")() + 7) // 8))()
    source = os.path.abspath(weights_path or os.path.join(self.folder, self.manifest["weights"]["file"]))
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
  def _load_manifest(self) -> dict: return load_manifest(self.folder, "opencl", "an OpenCL artifact")

  def _build(self) -> str:
    """The shared library of this folder's host loader, built once per content."""
    files = self._sources()
    flags = ("-std=c99", *self.cflags, "-shared", "-fPIC")
    material = hashlib.sha256()
    for part in [self.compiler, _compiler_id(self.compiler), " ".join(flags), "-lOpenCL"]:
      material.update(part.encode() + b"\0")
    for name in sorted(files): material.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    path = os.path.join(self.cache_dir, f"{material.hexdigest()}.so")
    if os.path.exists(path): return path
    os.makedirs(self.cache_dir, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=self.cache_dir, prefix=".artifact.", suffix=".so.tmp")
    os.close(fd)
    try:
      command = [self.compiler, *flags, "model.c", "-o", tmp, "-lOpenCL"]
      result = subprocess.run(command, cwd=self.folder, capture_output=True, text=True)
      if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        first = next((line for line in detail if "error" in line), detail[0] if detail else "")
        if "CL/cl.h" in first or "lOpenCL" in first:
          raise RuntimeUnavailable(f"opencl artifact: the OpenCL headers or library are missing ({first.strip()}); "
                                   f"{PACKAGES}")
        raise ArtifactError(f"{self.folder}/model.c: does not compile with {self.compiler} "
                            f"({first.strip() or f'exit status {result.returncode}'})")
      os.replace(tmp, path)
    finally:
      if os.path.exists(tmp): os.unlink(tmp)
    return path

  def _bind(self) -> None:
    p, size, i, s = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_char_p
    sigs = {"ctx_size": (size, []), "arena_bytes": (size, []), "init": (i, [p, s, i, p]),
            "init_from_memory": (i, [p, p, size, i, p]), "verify_weights": (i, [p]), "run": (i, [p, p, p]),
            "free": (None, [p]), "strerror": (s, [i]), "error_detail": (s, [p]), "command_queue": (p, [p]),
            "arena_sub_buffers": (i, [p])}
    for name, (res, args) in sigs.items():
      try:
        fn = self._fn(name)
      except AttributeError:
        raise ArtifactError(f"{self.library_path}: the library has no function {self.symbol}_{name}") from None
      fn.restype, fn.argtypes = res, args

  def _describe(self, status: int, ctx) -> str:
    detail = self._fn("error_detail")(ctx).decode(errors="replace")
    return f"{self.strerror(status)}{f' ({detail})' if detail else ''} (status {status})"

  # ---- running ----
  def _call(self, in_ptrs, out_ptrs) -> None:
    status = self._fn("run")(self._ctx, in_ptrs, out_ptrs)
    if status != 0: raise ArtifactError(f"{self.folder}: run failed: {self._describe(status, self._ctx)}")

  @property
  def sub_buffers(self) -> bool:
    """Whether the context placed the intermediates as sub-buffers of one arena buffer."""
    if self._ctx is None: raise ArtifactError(f"{self.folder}: the artifact is closed")
    return bool(self._fn("arena_sub_buffers")(self._ctx))

  def __enter__(self) -> OpenCLArtifact: return self
