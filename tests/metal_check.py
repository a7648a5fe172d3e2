"""Checking Metal kernels on Linux, where Apple's compiler does not exist: clang++ with the `metal_stdlib` shim in
tests/metal_shim checks syntax, types and address spaces (`syntax_errors`), and the same shim compiled for the host
runs a kernel on the CPU (`run_on_cpu`): threadgroups one after another, `threadgroup` storage static, and, when
the kernel has barriers, one thread per work-item with a std::barrier per threadgroup. Real validation needs macOS.
"""
from __future__ import annotations
import ctypes
import hashlib
import math
import os
import re
import shutil
import subprocess
import tempfile

import numpy as np

SHIM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "metal_shim")
# the check command (TOOLCHAINS.md) plus: float math silently promoted to double is an error (Metal has no double)
SYNTAX_FLAGS = ("--target=arm64-apple-macos13", "-std=c++17", "-fsyntax-only", "-nostdinc++", "-Wno-unknown-attributes",
                "-Werror=double-promotion")
RUN_FLAGS = ("-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-DTG_METAL_RUN", "-Wno-unknown-attributes",
             "-ffp-contract=off")

DRIVER = r"""
#undef thread
static std::barrier<>* tg_barrier = nullptr;
void metal::threadgroup_barrier(metal::mem_flags) { if (tg_barrier) tg_barrier->arrive_and_wait(); }
struct tg_ptr {
  void* p;
  template <typename T> operator T*() const { return static_cast<T*>(p); }
};
extern "C" void tg_run(void** bufs, const unsigned* groups, const unsigned* ls, int threaded) {
  const unsigned n = ls[0] * ls[1] * ls[2];
  for (unsigned gz = 0; gz < groups[2]; gz++)
  for (unsigned gy = 0; gy < groups[1]; gy++)
  for (unsigned gx = 0; gx < groups[0]; gx++) {
    uint3 gid = {gx, gy, gz};
    auto item = [&](unsigned t) {
      uint3 lid = {t % ls[0], t / ls[0] % ls[1], t / (ls[0] * ls[1])};
      KERNEL_NAME(ARGS gid, lid);
    };
    if (!threaded || n == 1) { for (unsigned t = 0; t < n; t++) item(t); continue; }
    std::barrier<> bar(n);
    tg_barrier = &bar;
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < n; t++) threads.emplace_back(item, t);
    for (auto& th : threads) th.join();
    tg_barrier = nullptr;
  }
}
"""


def clang() -> str | None:
  """The clang++ on PATH (apt-get install clang), or None."""
  return shutil.which("clang++")


_cpu_compiler: list[str | None] = []


def cpu_compiler() -> str | None:
  """A clang++ that has _Float16 on this host (the shim's `half`; x86-64 needs clang 15 or newer), or None. On
  Debian 12 `clang` is 14, but clang-15 comes with pocl-opencl-icd (PoCL compiles kernels with it)."""
  if not _cpu_compiler:
    names = ["clang++"] + [f"clang++-{v}" for v in range(25, 14, -1)]
    found = None
    for cxx in filter(None, map(shutil.which, names)):
      proc = subprocess.run([cxx, "-x", "c++", "-fsyntax-only", "-"], input="_Float16 h(_Float16 x) { return x; }",
                            capture_output=True, text=True, timeout=60)
      if proc.returncode == 0:
        found = cxx
        break
    _cpu_compiler.append(found)
  return _cpu_compiler[0]


def syntax_errors(src: str) -> str:
  """Compiler diagnostics for Metal source `src` checked against the shim; "" when it is clean."""
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "kernel.metal")
    with open(path, "w") as f: f.write(src)
    proc = subprocess.run([clang() or "clang++", *SYNTAX_FLAGS, f"-I{SHIM_DIR}", "-x", "c++", path],
                          capture_output=True, text=True, timeout=120)
  return "" if proc.returncode == 0 else (proc.stderr.strip() or f"clang++ exited with {proc.returncode}")


def _build_dir() -> str:
  path = os.path.join(os.environ.get("TGC_CACHE_DIR") or tempfile.gettempdir(), "metal-cpu")
  os.makedirs(path, exist_ok=True)
  return path


_libraries: dict[str, ctypes.CDLL] = {}


def build_for_cpu(src: str, name: str, nbufs: int) -> ctypes.CDLL:
  """A shared library with `tg_run(bufs, groups, local, threaded)` running kernel `name` of Metal source `src`."""
  args = "".join(f"tg_ptr{{bufs[{i}]}}, " for i in range(nbufs))
  unit = "\n".join(["#include <barrier>", "#include <thread>", "#include <vector>", src,
                    DRIVER.replace("KERNEL_NAME", name).replace("ARGS ", args)])
  return _cpu_library(unit, name, ["tg_run"], timeout=300)


def _cpu_library(unit: str, what: str, runners: list[str], timeout: int) -> ctypes.CDLL:
  """The shared library of the C++ translation unit `unit` (shim included), built once per content into the build
  folder and loaded once per process; each of `runners` gets the `tg_run` signature."""
  key = hashlib.sha256(unit.encode()).hexdigest()[:24]
  if key not in _libraries:
    out = os.path.join(_build_dir(), f"{key}.so")
    if not os.path.exists(out):
      fd, tmp_src = tempfile.mkstemp(suffix=".metal", dir=_build_dir())
      with os.fdopen(fd, "w") as f: f.write(unit)
      tmp_out = tmp_src + ".so"
      cmd = [cpu_compiler() or "clang++", *RUN_FLAGS, f"-I{SHIM_DIR}", "-x", "c++", tmp_src, "-o", tmp_out]
      proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
      os.unlink(tmp_src)
      if proc.returncode != 0: raise RuntimeError(f"building {what} for the CPU failed:\n{proc.stderr}")
      os.replace(tmp_out, out)
    lib = ctypes.CDLL(out)
    uints = ctypes.POINTER(ctypes.c_uint)
    for runner in runners:
      fn = getattr(lib, runner)
      fn.argtypes = [ctypes.POINTER(ctypes.c_void_p), uints, uints, ctypes.c_int]
      fn.restype = None
    _libraries[key] = lib
  return _libraries[key]


def run_on_cpu(src: str, name: str, bufs: list[np.ndarray], global_size, local_size) -> None:
  """Run kernel `name` over the launch (total threads `global_size`, threadgroup `local_size`) on numpy buffers,
  in place. Kernels with barriers run one OS thread per work-item."""
  lib = build_for_cpu(src, name, len(bufs))
  groups = [g // l for g, l in zip(global_size, local_size)]
  assert all(g * l == t for g, l, t in zip(groups, local_size, global_size)), (global_size, local_size)
  assert math.prod(local_size) <= 1024, local_size
  for b in bufs: assert b.flags.c_contiguous and b.flags.writeable
  pointers = (ctypes.c_void_p * max(len(bufs), 1))(*[b.ctypes.data for b in bufs])
  lib.tg_run(pointers, (ctypes.c_uint * 3)(*groups), (ctypes.c_uint * 3)(*local_size),
             int("threadgroup_barrier" in src))


# ---- the Objective-C host loader of a Metal artifact (model.m) ----

# ARC on (an unknown selector is an error), the shim's Foundation/ and Metal/ headers, every warning an error (a
# message the receiver's type does not declare, an argument of the wrong type); host target, so that the C
# library headers are the system's
OBJC_FLAGS = ("-fsyntax-only", "-x", "objective-c", "-fobjc-arc", "-fobjc-runtime=macosx-13.0", "-Wall", "-Wextra",
              "-Werror")


def objc_clang() -> str | None:
  """The clang on PATH (apt-get install clang), or None."""
  return shutil.which("clang")


def objc_errors(path: str) -> str:
  """Compiler diagnostics for the Objective-C file `path` (its own folder on the include path) checked against the
  shim's Foundation and Metal headers; "" when it is clean."""
  folder = os.path.dirname(os.path.abspath(path))
  proc = subprocess.run([objc_clang() or "clang", *OBJC_FLAGS, f"-I{SHIM_DIR}", f"-I{folder}", path],
                        capture_output=True, text=True, timeout=120)
  return "" if proc.returncode == 0 else (proc.stderr.strip() or f"clang exited with {proc.returncode}")


def build_model_for_cpu(source: str, kernels: dict[str, int]) -> ctypes.CDLL:
  """One shared library for every kernel of a whole model.metal (`kernels`: name -> buffer parameters), with
  `tg_run_<name>(bufs, groups, local, threaded)` per kernel: the DRIVER of `build_for_cpu`, its runner once per
  kernel, so that a model costs one compiler run."""
  common, runner = DRIVER.split('extern "C"', 1)
  runners = []
  for name, nbufs in kernels.items():
    args = "".join(f"tg_ptr{{bufs[{i}]}}, " for i in range(nbufs))
    runners.append(('extern "C"' + runner).replace("tg_run(", f"tg_run_{name}(").replace("KERNEL_NAME", name)
                   .replace("ARGS ", args))
  unit = "\n".join(["#include <barrier>", "#include <thread>", "#include <vector>", source, common, *runners])
  return _cpu_library(unit, "the model", [f"tg_run_{name}" for name in kernels], timeout=600)


class CPUBackend:
  """The backend interface of runtimes.artifact_metal.MetalArtifact on the CPU: buffers are numpy byte arrays and
  the whole model.metal is built once through the shim (`build_model_for_cpu`); each launch gets its buffers in
  binding-index order (the kernels' parameters are data0, data1, ... bound at [[buffer(i)]]), each at its byte
  offset, and runs one threadgroup after another (one thread per work-item when the kernel has barriers)."""
  device_name = "CPU (metal_stdlib shim)"
  max_group_threads = 1024

  def __init__(self):
    self.lib: ctypes.CDLL | None = None
    self.barriers: dict[str, bool] = {}
    self.launched: list[str] = []

  def compile(self, source: str, kernels: list[str]) -> None:
    starts = [m.start() for m in re.finditer(r"^kernel void ", source, re.M)]
    functions = {re.match(r"kernel void (\w+)\(", source[a:]).group(1): source[a:b]
                 for a, b in zip(starts, starts[1:] + [len(source)])}
    missing = sorted(set(kernels) - set(functions))
    assert not missing, f"model.metal lacks kernels {missing}"
    nbufs = {name: len(re.findall(r"\[\[buffer\(\d+\)\]\]", f.split("{", 1)[0])) for name, f in functions.items()}
    self.barriers = {name: "threadgroup_barrier" in f for name, f in functions.items()}
    self.lib = build_model_for_cpu(source, nbufs)

  def max_threads(self, kernel: str) -> int: return self.max_group_threads

  def alloc(self, nbytes: int, data: bytes | None = None) -> np.ndarray:
    buf = np.zeros(max(nbytes, 1), np.uint8)
    if data is not None: buf[:len(data)] = np.frombuffer(data, np.uint8)
    return buf

  def write(self, buf: np.ndarray, data: bytes) -> None: buf[:len(data)] = np.frombuffer(data, np.uint8)

  def read(self, buf: np.ndarray, nbytes: int) -> np.ndarray: return buf[:nbytes].copy()

  def run(self, launches) -> None:
    assert self.lib is not None, "compile first"
    for kernel, binds, groups, threads in launches:
      arrays = [buf[offset:] for _, buf, offset in sorted(binds, key=lambda b: b[0])]
      assert math.prod(threads) <= self.max_group_threads, threads
      pointers = (ctypes.c_void_p * max(len(arrays), 1))(*[a.ctypes.data for a in arrays])
      getattr(self.lib, f"tg_run_{kernel}")(pointers, (ctypes.c_uint * 3)(*groups), (ctypes.c_uint * 3)(*threads),
                                            int(self.barriers[kernel]))
      self.launched.append(kernel)
