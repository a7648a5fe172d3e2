"""Running CUDA kernels on the CPU, to check what they compute on machines without an NVIDIA GPU: the kernel source
is compiled as host C++ with tests/cuda_shim/tg_cuda_cpu.h force-included (CUDA built-ins and intrinsics), blocks
run one after another and, when a kernel has __syncthreads(), each thread of a block is an OS thread meeting at a
std::barrier (tests/cpu_kernels.py builds and launches). NVRTC (in the tests) checks that the same source compiles
for real GPUs.
"""
from __future__ import annotations
import ctypes
import os

import numpy as np

from cpu_kernels import CPUShim

SHIM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cuda_shim")
FLAGS = ("-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-ffp-contract=off", "-Wno-unknown-attributes",
         f"-I{SHIM_DIR}", "-include", os.path.join(SHIM_DIR, "tg_cuda_cpu.h"))

DRIVER = r"""
thread_local tg_dim3 blockIdx, threadIdx;
void __syncthreads() { if (tg_barrier) tg_barrier->arrive_and_wait(); }
extern "C" void tg_run(void** bufs, const unsigned* grid, const unsigned* block, int threaded) {
  tg_launch(grid, block, threaded, [&](unsigned bx, unsigned by, unsigned bz, unsigned t) {
    blockIdx = {bx, by, bz};
    threadIdx = {t % block[0], t / block[0] % block[1], t / (block[0] * block[1])};
    KERNEL_NAME(ARGS);
  });
}
"""

SHIM = CPUShim("cuda-cpu", FLAGS, DRIVER, lambda n: ", ".join(f"tg_ptr{{bufs[{i}]}}" for i in range(n)),
               "__syncthreads")


def build_model_for_cpu(source: str, kernels: dict[str, int]) -> ctypes.CDLL:
  """One library for every kernel of `source` (`kernels`: name -> buffer parameters), `tg_run_<name>` each."""
  return SHIM.library(source, kernels)


def run_on_cpu(src: str, name: str, bufs: list[np.ndarray], global_size, local_size) -> None:
  """Run CUDA kernel `name` in place on numpy buffers with the runtime's launch convention (total threads
  `global_size`, block `local_size`, grid their quotient)."""
  SHIM.run(src, name, bufs, global_size, local_size)
