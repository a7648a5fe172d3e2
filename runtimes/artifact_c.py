"""Running a `c` artifact folder from Python: `CArtifact` reads its manifest.json, builds the folder's own model.c
(plus weights.S when the weights are embedded, and the bundle's optional thread pool tgc_threads.c) into a shared
library with the system C compiler (cached on disk by the sha256 of the sources, flags and compiler; by default -O3
and the flags of the CPU level the kernels were generated for), and calls the bundle's public C API through ctypes:
init (from the weights file, or the embedded copy), verify_weights, run, free; `threads` > 1 runs the kernels on
the bundle's pool (`set_parallel`), `profile` builds with -DTG_PROFILE and reads the per-launch times. Validation and
benchmarks use this, so they exercise exactly the code a user links.

Errors about the artifact or the caller's data raise `ArtifactError` (a ValueError) with one line naming the
culprit (file, input, status)."""
from __future__ import annotations
import ctypes
import hashlib
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
from tgc.ir.config import config

from tgc.runtimes.dims import is_dynamic
from tgc.runtimes.artifact import Artifact, ArtifactError, ArtifactFolder, held_entries
from tgc.runtimes.base import ToolchainMissing, cache_root

DEFAULT_CFLAGS = ("-O3",)
ARENA_ALIGN = 64
_compiler_ids: dict[str, str] = {}


def _compiler_id(compiler: str) -> str:
  if compiler not in _compiler_ids:
    try:
      out = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as error:
      raise ToolchainMissing(f"C compiler {compiler!r} is not usable ({error}); install gcc or set CC") from None
    _compiler_ids[compiler] = out.strip()
  return _compiler_ids[compiler]


class CArtifact(Artifact):
  """A loaded `c` artifact. `weights_path` overrides the folder's weights file (embedded bundles otherwise use
  the copy linked into the library). One instance owns one model context; `close` releases it."""
  TARGET = "c"
  KIND = "a C artifact"
  CACHE = "artifact_c"          # the folder under tgc's cache root for built libraries
  LIBS: tuple[str, ...] = ("-lm",)

  def __init__(self, folder: str | ArtifactFolder, weights_path: str | None = None, *,
               compiler: str | None = None, cflags: tuple[str, ...] | None = None, cache_dir: str | None = None,
               threads: int = 1, profile: bool = False):
    if threads < 1: raise ArtifactError(f"threads must be at least 1, not {threads}")
    self.threads, self.profiling, self._pool = threads, profile, None
    self._load_library(folder, compiler, cflags, DEFAULT_CFLAGS, cache_dir)
    ctx = self._new_context()
    arena_bytes = int(self._fn("arena_bytes")())
    raw = np.zeros(arena_bytes + ARENA_ALIGN, dtype=np.uint8)
    start = -raw.ctypes.data % ARENA_ALIGN
    self._arena = raw[start:start + arena_bytes]
    arena_ptr = ctypes.c_void_p(self._arena.ctypes.data if arena_bytes else None)
    if weights_path is None and self.embedded:
      source = f"{self.folder}/weights.S (embedded)"
      status = self._fn("init_embedded")(ctx, arena_ptr)
    else:
      source = self._weights_path(weights_path)
      status = self._fn("init")(ctx, os.fsencode(source), arena_ptr)
    if status == 0: status = self._fn("verify_weights")(ctx)
    if status != 0:
      self._fn("free")(ctx)
      raise ArtifactError(f"{source}: {self.strerror(status)} (status {status})")
    self._ctx = ctx
    if threads > 1:
      self._pool = self._lib.tgc_pool_create(threads)
      if not self._pool: raise ArtifactError(f"{self.folder}: cannot start {threads} threads")
      self._fn("set_parallel")(ctx, ctypes.cast(self._lib.tgc_pool_parallel_for, ctypes.c_void_p), self._pool)

  # ---- loading ----
  def _load_library(self, folder: str | ArtifactFolder, compiler: str | None, cflags: tuple[str, ...] | None,
                    default_cflags: tuple[str, ...], cache_dir: str | None) -> None:
    """Read the manifest, build (or find in the cache) the folder's library and bind its API."""
    self._ctx = None
    self._open(folder)
    self.compiler = compiler or config.cc
    cpu = tuple(self.manifest["target_info"].get("cpu", {}).get("cflags", ()))
    self.cflags = tuple(cflags) if cflags is not None else default_cflags + cpu
    self.cache_dir = cache_dir or os.path.join(cache_root(), self.CACHE)
    self.symbol: str = self.manifest["target_info"]["api_prefix"]
    self.embedded = bool(self.manifest["weights"].get("embedded"))
    self.library_path = self._build()
    self._lib = ctypes.CDLL(self.library_path)
    self._bind()

  def _new_context(self):
    """Zeroed storage for the API's context struct (its size from `<prefix>_ctx_size`), 8-byte aligned."""
    return (ctypes.c_uint64 * ((self._fn("ctx_size")() + 7) // 8))()

  def _weights_path(self, weights_path: str | None) -> str:
    return os.path.abspath(weights_path or os.path.join(self.folder, self.manifest["weights"]["file"]))

  def _sources(self) -> dict[str, bytes]:
    """The C sources, checked against the manifest's sha256."""
    return {name: self._checked(name) for name in ["model.c", "model.h"] + (["weights.S"] if self.embedded else []) +
            (["tgc_threads.c", "tgc_threads.h"] if "tgc_threads.c" in self.manifest["files"] else [])}

  def _compiled(self) -> list[str]:
    """The sources given to the compiler, and the flags only this runner adds."""
    return [n for n in ("model.c", "weights.S", "tgc_threads.c") if n in self._sources()]

  def _extra_flags(self) -> tuple[str, ...]:
    return (("-pthread",) if "tgc_threads.c" in self.manifest["files"] else ()) + \
      (("-DTG_PROFILE",) if getattr(self, "profiling", False) else ())

  def _build(self) -> str:
    """The shared library of this folder's sources; built once per content (embedded weights: identified by the
    manifest's sha256, so a cached library needs no weights file)."""
    files = self._sources()
    flags = ("-std=c99", *self.cflags, *self._extra_flags(), "-shared", "-fPIC")
    material = hashlib.sha256()
    for part in [self.compiler, _compiler_id(self.compiler), " ".join(flags), " ".join(self.LIBS)]:
      material.update(part.encode() + b"\0")
    for name in sorted(files): material.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    if self.embedded: material.update(b"weights\0" + self.manifest["weights"]["sha256"].encode())
    path = os.path.join(self.cache_dir, f"{material.hexdigest()}.so")
    if os.path.exists(path): return path
    if self.embedded: self._checked(self.manifest["weights"]["file"])   # the library is built from it
    os.makedirs(self.cache_dir, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=self.cache_dir, prefix=".artifact.", suffix=".so.tmp")
    os.close(fd)
    try:
      sources = self._compiled()
      command = [self.compiler, *flags, *sources, "-o", tmp, *self.LIBS]
      start = time.perf_counter()
      result = subprocess.run(command, cwd=self.folder, capture_output=True, text=True)
      if config.debug >= 1: print(f"tgc: {self.folder}: cc {time.perf_counter() - start:.2f} s", file=sys.stderr)
      if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        first = next((line for line in detail if "error" in line), detail[0] if detail else "").strip()
        self._check_toolchain(first)
        raise ArtifactError(f"{self.folder}/model.c: does not compile with {self.compiler} "
                            f"({first or f'exit status {result.returncode}'})")
      os.replace(tmp, path)
    finally:
      if os.path.exists(tmp): os.unlink(tmp)
    return path

  def _check_toolchain(self, first_error: str) -> None:
    """Raise RuntimeUnavailable when a failed build is the machine's fault (a missing header or library)."""

  def _fn(self, name: str):
    return getattr(self._lib, f"{self.symbol}_{name}")

  def _bind_pool(self) -> None:
    self._lib.tgc_pool_create.restype, self._lib.tgc_pool_create.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    self._lib.tgc_pool_destroy.restype, self._lib.tgc_pool_destroy.argtypes = None, [ctypes.c_void_p]

  def _signatures(self) -> dict[str, tuple]:
    """The API functions to bind: name -> (restype, argtypes)."""
    p, size, i = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
    sigs = {"ctx_size": (size, []), "arena_bytes": (size, []), "init": (i, [p, ctypes.c_char_p, p]),
            "verify_weights": (i, [p]), "run": (i, [p, p, p]), "free": (None, [p]), "strerror": (ctypes.c_char_p, [i]),
            "set_dims": (i, [p, p])}
    if self.embedded: sigs["init_embedded"] = (i, [p, p])
    sigs.update(self._state_signatures())
    if "tgc_threads.c" in self.manifest["files"]:
      sigs.update({"set_parallel": (None, [p, p, p]), "profile": (size, [p, p, size]), "profile_reset": (None, [p])})
    return sigs

  def _state_signatures(self) -> dict[str, tuple]:
    """The state API to bind (none without states): the lengths, and how state i's entries are reached."""
    if not self.manifest.get("states"): return {}
    p, size = ctypes.c_void_p, ctypes.c_size_t
    return {"state_length": (ctypes.c_int32, [p, size]), "set_state_length": (ctypes.c_int, [p, ctypes.c_int32]),
            **self._state_access()}

  def _state_access(self) -> dict[str, tuple]:
    """How state i's entries are reached: `state_data`, a pointer to its buffer in the arena."""
    return {"state_data": (ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t])}

  def _bind(self) -> None:
    for name, (res, args) in self._signatures().items():
      try:
        fn = self._fn(name)
      except AttributeError:
        raise ArtifactError(f"{self.library_path}: the library has no function {self.symbol}_{name}") from None
      fn.restype, fn.argtypes = res, args
    if "tgc_threads.c" in self.manifest["files"]: self._bind_pool()

  def strerror(self, status: int) -> str: return self._fn("strerror")(status).decode()

  def _describe(self, status: int) -> str: return f"{self.strerror(status)} (status {status})"

  # ---- running ----
  @property
  def ready(self) -> bool: return getattr(self, "_ctx", None) is not None

  def _prepare(self, inputs: dict[str, np.ndarray]):
    ins = super()._prepare(inputs)
    if not hasattr(self, "_run_fn"):     # what every run needs, made once (small models run in microseconds)
      self._run_fn = self._fn("run")
      self._out_specs = [(tuple(t["shape"]), np.dtype(t["dtype"])) for t in self.outputs]
      self._in_ptrs = (ctypes.c_void_p * max(len(ins), 1))()
      self._out_ptrs = (ctypes.c_void_p * len(self._out_specs))()
    out_specs = self._out_specs if not is_dynamic(self.manifest) else self._sized(inputs)
    outs = [np.empty(shape, dtype) for shape, dtype in out_specs]
    for i, a in enumerate(ins): self._in_ptrs[i] = a.__array_interface__["data"][0]
    for i, a in enumerate(outs): self._out_ptrs[i] = a.__array_interface__["data"][0]
    return ins, outs, self._in_ptrs, self._out_ptrs

  def _sized(self, inputs: dict) -> list[tuple]:
    """The sizes known at run time that the inputs' shapes give, set on the context (set_dims); the outputs' shapes
    and dtypes for them."""
    dims = self.input_dims(inputs)
    status = self._fn("set_dims")(self._ctx, (ctypes.c_int32 * len(dims))(*dims.values()))
    if status != 0: raise ArtifactError(f"{self.folder}: set_dims failed: {self._describe(status)}")
    return [(tuple(t["shape"]), d) for t, (_, d) in zip(self.specs_at(dims)[1], self._out_specs)]

  # ---- states ----
  def held_sizes(self) -> dict[str, int]:
    """Each state length now, by the name of the size it is: asked of the library once per size (every run asks)."""
    first = {}
    for i, st in enumerate(self.manifest.get("states", ())): first.setdefault(st["length"], i)
    return {name: int(self._fn("state_length")(self._ctx, i)) for name, i in first.items()}

  def reset_state(self, length: int = 0) -> None:
    """Set every state's length (0: start a new sequence; shorter forgets entries, longer takes what the buffer
    holds)."""
    status = self._fn("set_state_length")(self._ctx, length)
    if status != 0: raise ArtifactError(f"{self.folder}: set_state_length({length}): {self._describe(status)}")

  def state(self, i: int) -> np.ndarray:
    """A copy of the entries state i holds now (its length along its growing dim)."""
    st = self.manifest["states"][i]
    ptr = self._fn("state_data")(self._ctx, i)
    full = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_uint8)), (st["nbytes"],))
    whole = full.view(np.dtype(st["dtype"])).reshape(st["shape"])
    return held_entries(st, whole, self.held_sizes()[st["length"]])

  def _execute(self, prepared) -> dict[str, np.ndarray]:
    _, outs, in_ptrs, out_ptrs = prepared
    status = self._run_fn(self._ctx, in_ptrs, out_ptrs)
    if status != 0: raise ArtifactError(f"{self.folder}: run failed: {self._describe(status)}")
    return {t["name"]: a for t, a in zip(self.outputs, outs)}

  def profile(self) -> list[float]:
    """Seconds per kernel launch (manifest call order) summed over the runs since the last `profile_reset`; needs
    `profile=True` (the library built with -DTG_PROFILE)."""
    if not self.profiling: raise ArtifactError(f"{self.folder}: not built for profiling (profile=True)")
    n = len(self.manifest["calls"])
    out = (ctypes.c_double * max(n, 1))()
    self._fn("profile")(self._ctx, out, n)
    return list(out)[:n]

  def profile_reset(self) -> None:
    if self.profiling: self._fn("profile_reset")(self._ctx)

  def close(self) -> None:
    if self.ready:
      self._fn("free")(self._ctx)
      self._ctx = None
    if getattr(self, "_pool", None):
      self._lib.tgc_pool_destroy(self._pool)
      self._pool = None
