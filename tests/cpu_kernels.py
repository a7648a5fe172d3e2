"""Running GPU-language kernels on the CPU, for the tests and scripts/kernel_checks.py: the kernel source (CUDA or
Metal) is compiled as host C++ against its language's shim, with a runner `tg_run_<kernel>(bufs, groups, local,
threaded)` per kernel that runs the launch's groups one after another. A kernel with barriers runs one OS thread per
work-item, the threads of a group meeting at a std::barrier. A library is built once per content into a cache folder
and loaded once per process. tests/cuda_cpu.py and tests/metal_check.py hold what differs per language.
"""
from __future__ import annotations
import ctypes
import hashlib
import math
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Callable

import numpy as np

# before the kernel source (the Metal shim defines `thread`, an address space, as a macro, which <thread> must not
# see): the barrier of the running group and the buffer pointer that converts to any kernel parameter type
PRELUDE = r"""
#include <barrier>
#include <thread>
#include <vector>
static std::barrier<>* tg_barrier = nullptr;
struct tg_ptr {
  void* p;
  template <typename T> operator T*() const { return static_cast<T*>(p); }
};
"""
# after the language's driver declarations: the groups one after another, each work-item `item(gx, gy, gz, t)` in
# turn, or (threaded) one OS thread per work-item meeting at tg_barrier
LAUNCH = r"""
template <typename F> static void tg_launch(const unsigned* groups, const unsigned* local, int threaded, F item) {
  const unsigned n = local[0] * local[1] * local[2];
  for (unsigned gz = 0; gz < groups[2]; gz++)
  for (unsigned gy = 0; gy < groups[1]; gy++)
  for (unsigned gx = 0; gx < groups[0]; gx++) {
    if (!threaded || n == 1) { for (unsigned t = 0; t < n; t++) item(gx, gy, gz, t); continue; }
    std::barrier<> bar(n);
    tg_barrier = &bar;
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < n; t++) threads.emplace_back([&, t] { item(gx, gy, gz, t); });
    for (auto& th : threads) th.join();
    tg_barrier = nullptr;
  }
}
"""
# the runner template of a driver starts here; KERNEL_NAME and ARGS are filled in per kernel
RUNNER_START = 'extern "C" void tg_run('
MAX_GROUP_THREADS = 1024

_cpu_compiler: list[str | None] = []
_libraries: dict[str, ctypes.CDLL] = {}


def cpu_compiler() -> str | None:
  """A clang++ that has _Float16 on this host (the shims' `half`; x86-64 needs clang 15 or newer), or None. On
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


def skip_without_cpu_compiler() -> None:
  """pytest.skip naming the missing piece when no host clang++ can build the shims."""
  if cpu_compiler() is None:
    import pytest
    pytest.skip("no host clang++ with _Float16 for CPU runs through the shims (clang 15 or newer: "
                "apt-get install clang-15)")


@dataclass(frozen=True)
class CPUShim:
  """One language's way onto the CPU: `flags` for the host compiler (the shim's include path and headers),
  `driver` (C++ declarations, then a runner template starting with RUNNER_START that calls tg_launch), `args(n)`
  the kernel's first arguments for n buffers, `barrier` the token that marks a kernel needing one thread per
  work-item."""
  cache: str
  flags: tuple[str, ...]
  driver: str
  args: Callable[[int], str]
  barrier: str

  def library(self, source: str, kernels: dict[str, int], timeout: int = 600) -> ctypes.CDLL:
    """The shared library of `source` with a runner per kernel (`kernels`: name -> buffer parameters): one
    compiler run for a whole model."""
    common, runner = self.driver.split(RUNNER_START, 1)
    runners = [(f'extern "C" void tg_run_{name}(' + runner).replace("KERNEL_NAME", name).replace("ARGS", self.args(n))
               for name, n in kernels.items()]
    unit = "\n".join([PRELUDE, source, common, LAUNCH, *runners])
    key = hashlib.sha256("\n".join([*self.flags, unit]).encode()).hexdigest()[:24]
    if key not in _libraries:
      _libraries[key] = self._load(self._build(unit, key, timeout), list(kernels))
    return _libraries[key]

  def _build(self, unit: str, key: str, timeout: int) -> str:
    folder = os.path.join(os.environ.get("TGC_CACHE_DIR") or tempfile.gettempdir(), self.cache)
    os.makedirs(folder, exist_ok=True)
    out = os.path.join(folder, f"{key}.so")
    if os.path.exists(out): return out
    fd, tmp_src = tempfile.mkstemp(suffix=".cc", dir=folder)
    with os.fdopen(fd, "w") as f: f.write(unit)
    tmp_out = tmp_src + ".so"
    cmd = [cpu_compiler() or "clang++", *self.flags, "-x", "c++", tmp_src, "-o", tmp_out]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    os.unlink(tmp_src)
    if proc.returncode != 0: raise RuntimeError(f"building kernels for the CPU ({self.cache}) failed:\n{proc.stderr}")
    os.replace(tmp_out, out)   # atomic: a concurrent worker never loads half a library
    return out

  @staticmethod
  def _load(path: str, kernels: list[str]) -> ctypes.CDLL:
    lib = ctypes.CDLL(path)
    uints = ctypes.POINTER(ctypes.c_uint)
    for name in kernels:
      fn = getattr(lib, f"tg_run_{name}")
      fn.argtypes = [ctypes.POINTER(ctypes.c_void_p), uints, uints, ctypes.c_int]
      fn.restype = None
    return lib

  def run(self, src: str, name: str, bufs: list[np.ndarray], global_size, local_size) -> None:
    """Run kernel `name` of `src` in place on numpy buffers (total threads `global_size`, group `local_size`)."""
    launch(self.library(src, {name: len(bufs)}), name, bufs, groups(global_size, local_size), local_size,
           self.barrier in src)


def groups(global_size, local_size) -> list[int]:
  """Groups per dimension of a launch given as total threads and group size (which must divide it)."""
  out = [g // l for g, l in zip(global_size, local_size)]
  assert all(n * l == g for n, l, g in zip(out, local_size, global_size)), (global_size, local_size)
  return out


def launch(lib: ctypes.CDLL, kernel: str, bufs: list[np.ndarray], group_counts, local_size, threaded: bool) -> None:
  """One launch of `kernel` through its runner in `lib`, the buffers passed in kernel parameter order."""
  assert math.prod(local_size) <= MAX_GROUP_THREADS, local_size
  for b in bufs: assert b.flags.c_contiguous and b.flags.writeable
  pointers = (ctypes.c_void_p * max(len(bufs), 1))(*[b.ctypes.data for b in bufs])
  getattr(lib, f"tg_run_{kernel}")(pointers, (ctypes.c_uint * 3)(*group_counts), (ctypes.c_uint * 3)(*local_size),
                                   int(threaded))
