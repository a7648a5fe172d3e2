"""Running CUDA kernels on the CPU, to check what they compute on machines without an NVIDIA GPU: the kernel source
is compiled as host C++ with tests/cuda_shim/tg_cuda_cpu.h force-included (CUDA built-ins and intrinsics), blocks
run one after another and, when a kernel has __syncthreads(), each thread of a block is an OS thread meeting at a
std::barrier. NVRTC (in the tests) checks that the same source compiles for real GPUs.
"""
from __future__ import annotations
import ctypes
import hashlib
import math
import os
import subprocess
import tempfile

import numpy as np

from metal_check import cpu_compiler

SHIM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cuda_shim")
FLAGS = ("-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-ffp-contract=off", "-Wno-unknown-attributes",
         "-include", os.path.join(SHIM_DIR, "tg_cuda_cpu.h"))

DRIVER = r"""
#include <barrier>
#include <thread>
#include <vector>
thread_local tg_dim3 blockIdx, threadIdx;
static std::barrier<>* tg_barrier = nullptr;
void __syncthreads() { if (tg_barrier) tg_barrier->arrive_and_wait(); }
struct tg_ptr {
  void* p;
  template <typename T> operator T*() const { return static_cast<T*>(p); }
};
extern "C" void tg_run(void** bufs, const unsigned* grid, const unsigned* block, int threaded) {
  const unsigned n = block[0] * block[1] * block[2];
  for (unsigned bz = 0; bz < grid[2]; bz++)
  for (unsigned by = 0; by < grid[1]; by++)
  for (unsigned bx = 0; bx < grid[0]; bx++) {
    auto item = [&](unsigned t) {
      blockIdx = {bx, by, bz};
      threadIdx = {t % block[0], t / block[0] % block[1], t / (block[0] * block[1])};
      KERNEL_NAME(ARGS);
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

_libraries: dict[str, ctypes.CDLL] = {}


def _build_dir() -> str:
  path = os.path.join(os.environ.get("TGC_CACHE_DIR") or tempfile.gettempdir(), "cuda-cpu")
  os.makedirs(path, exist_ok=True)
  return path


def build(src: str, name: str, nbufs: int) -> ctypes.CDLL:
  """A shared library with `tg_run(bufs, grid, block, threaded)` running CUDA kernel `name` of `src` on the CPU."""
  unit = src + "\n" + DRIVER.replace("KERNEL_NAME", name).replace("ARGS", ", ".join(
    f"tg_ptr{{bufs[{i}]}}" for i in range(nbufs)))
  key = hashlib.sha256(unit.encode()).hexdigest()[:24]
  if key not in _libraries:
    out = os.path.join(_build_dir(), f"{key}.so")
    if not os.path.exists(out):
      fd, tmp_src = tempfile.mkstemp(suffix=".cu", dir=_build_dir())
      with os.fdopen(fd, "w") as f: f.write(unit)
      tmp_out = tmp_src + ".so"
      cmd = [cpu_compiler() or "clang++", *FLAGS, f"-I{SHIM_DIR}", "-x", "c++", tmp_src, "-o", tmp_out]
      proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
      os.unlink(tmp_src)
      if proc.returncode != 0: raise RuntimeError(f"building {name} for the CPU failed:\n{proc.stderr}")
      os.replace(tmp_out, out)
    lib = ctypes.CDLL(out)
    uints = ctypes.POINTER(ctypes.c_uint)
    lib.tg_run.argtypes = [ctypes.POINTER(ctypes.c_void_p), uints, uints, ctypes.c_int]
    lib.tg_run.restype = None
    _libraries[key] = lib
  return _libraries[key]


def run_on_cpu(src: str, name: str, bufs: list[np.ndarray], global_size, local_size) -> None:
  """Run CUDA kernel `name` in place on numpy buffers with the runtime's launch convention (total threads
  `global_size`, block `local_size`, grid their quotient)."""
  lib = build(src, name, len(bufs))
  grid = [g // l for g, l in zip(global_size, local_size)]
  assert all(g * l == t for g, l, t in zip(grid, local_size, global_size)), (global_size, local_size)
  assert math.prod(local_size) <= 1024, local_size
  for b in bufs: assert b.flags.c_contiguous and b.flags.writeable
  pointers = (ctypes.c_void_p * max(len(bufs), 1))(*[b.ctypes.data for b in bufs])
  lib.tg_run(pointers, (ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*local_size), int("__syncthreads" in src))
