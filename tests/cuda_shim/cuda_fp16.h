// Stand-in for cuda_fp16.h when CUDA kernels are run on the CPU (tests/cuda_cpu.py): everything the kernels use
// is declared by tg_cuda_cpu.h, which the build force-includes.
#pragma once
