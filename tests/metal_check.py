"""Checking Metal kernels on Linux, where Apple's compiler does not exist: clang++ with the `metal_stdlib` shim in
tests/metal_shim checks syntax, types and address spaces (`syntax_errors`), and the same shim compiled for the host
runs a kernel on the CPU (`run_on_cpu`): threadgroups one after another, `threadgroup` storage static, and, when
the kernel has barriers, one thread per work-item with a std::barrier per threadgroup. Real validation needs macOS.
"""
from __future__ import annotations
import ctypes
import os
import re
import shutil
import subprocess
import tempfile

import numpy as np

from cpu_kernels import MAX_GROUP_THREADS, CPUShim, launch

SHIM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "metal_shim")
# clang++ checks a kernel's syntax and types against the metal_stdlib shim (no Apple toolchain needed); float math
# silently promoted to double is an error (Metal has no double)
SYNTAX_FLAGS = ("--target=arm64-apple-macos13", "-std=c++17", "-fsyntax-only", "-nostdinc++", "-Wno-unknown-attributes",
                "-Werror=double-promotion")
RUN_FLAGS = ("-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-DTG_METAL_RUN", "-Wno-unknown-attributes",
             "-ffp-contract=off", f"-I{SHIM_DIR}")

DRIVER = r"""
#include <metal_stdlib>
#undef thread
void metal::threadgroup_barrier(metal::mem_flags) { if (tg_barrier) tg_barrier->arrive_and_wait(); }
extern "C" void tg_run(void** bufs, const unsigned* groups, const unsigned* ls, int threaded) {
  tg_launch(groups, ls, threaded, [&](unsigned gx, unsigned gy, unsigned gz, unsigned t) {
    uint3 gid = {gx, gy, gz};
    uint3 lid = {t % ls[0], t / ls[0] % ls[1], t / (ls[0] * ls[1])};
    KERNEL_NAME(ARGS gid, lid);
  });
}
"""


def clang() -> str | None:
  """The clang++ on PATH (apt-get install clang), or None."""
  return shutil.which("clang++")


def syntax_errors(src: str) -> str:
  """Compiler diagnostics for Metal source `src` checked against the shim; "" when it is clean."""
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "kernel.metal")
    with open(path, "w") as f: f.write(src)
    proc = subprocess.run([clang() or "clang++", *SYNTAX_FLAGS, f"-I{SHIM_DIR}", "-x", "c++", path],
                          capture_output=True, text=True, timeout=120)
  return "" if proc.returncode == 0 else (proc.stderr.strip() or f"clang++ exited with {proc.returncode}")


SHIM = CPUShim("metal-cpu", RUN_FLAGS, DRIVER, lambda n: "".join(f"tg_ptr{{bufs[{i}]}}, " for i in range(n)),
               "threadgroup_barrier")


def run_on_cpu(src: str, name: str, bufs: list[np.ndarray], global_size, local_size) -> None:
  """Run kernel `name` over the launch (total threads `global_size`, threadgroup `local_size`) on numpy buffers,
  in place. Kernels with barriers run one OS thread per work-item."""
  SHIM.run(src, name, bufs, global_size, local_size)


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
  `tg_run_<name>(bufs, groups, local, threaded)` per kernel, so that a model costs one compiler run."""
  return SHIM.library(source, kernels)


class CPUBackend:
  """The backend interface of runtimes.artifact_metal.MetalArtifact on the CPU: buffers are numpy byte arrays and
  the whole model.metal is built once through the shim (`build_model_for_cpu`); each launch gets its buffers in
  binding-index order (the kernels' parameters are data0, data1, ... bound at [[buffer(i)]]), each at its byte
  offset, and runs one threadgroup after another (one thread per work-item when the kernel has barriers)."""
  device_name = "CPU (metal_stdlib shim)"
  max_group_threads = MAX_GROUP_THREADS

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
      launch(self.lib, kernel, arrays, groups, threads, self.barriers[kernel])
      self.launched.append(kernel)
