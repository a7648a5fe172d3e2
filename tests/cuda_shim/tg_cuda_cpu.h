// CUDA device built-ins for running tgc's CUDA kernels on the CPU (tests/cuda_cpu.py force-includes this header):
// blocks run one after another, each thread of a block is an OS thread when the kernel has __syncthreads()
// (a driver defines it with one std::barrier per block), __shared__ storage is static, __half is _Float16 and the
// conversion and bit-reinterpretation intrinsics round and copy bits as NVIDIA documents them.
// It checks what the kernels compute, not that NVRTC accepts them (the tests compile them with NVRTC for that).
#pragma once
#include <math.h>

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __restrict__ __restrict
#define __shared__ static

struct tg_dim3 { unsigned x, y, z; };
extern thread_local tg_dim3 blockIdx, threadIdx;
void __syncthreads();

// the 16-byte vector structs of vector_types.h and their make_ functions
#define TG_VECTOR4(T, name) \
  struct alignas(16) name { T x, y, z, w; }; \
  inline name make_##name(T x, T y, T z, T w) { return name{x, y, z, w}; }
TG_VECTOR4(float, float4)
TG_VECTOR4(int, int4)
TG_VECTOR4(unsigned int, uint4)
#undef TG_VECTOR4

typedef _Float16 __half;
inline float __half2float(__half h) { return (float)h; }
inline __half __float2half_rn(float f) { return (__half)f; }
inline __half __double2half(double d) { return (__half)d; }
inline __half __int2half_rn(int i) { return (__half)i; }
inline __half __uint2half_rn(unsigned int i) { return (__half)i; }
inline __half __ll2half_rn(long long i) { return (__half)i; }
inline __half __ull2half_rn(unsigned long long i) { return (__half)i; }

inline int __float_as_int(float x) { return __builtin_bit_cast(int, x); }
inline unsigned int __float_as_uint(float x) { return __builtin_bit_cast(unsigned int, x); }
inline float __int_as_float(int x) { return __builtin_bit_cast(float, x); }
inline float __uint_as_float(unsigned int x) { return __builtin_bit_cast(float, x); }
inline long long __double_as_longlong(double x) { return __builtin_bit_cast(long long, x); }
inline double __longlong_as_double(long long x) { return __builtin_bit_cast(double, x); }
inline short __half_as_short(__half x) { return __builtin_bit_cast(short, x); }
inline unsigned short __half_as_ushort(__half x) { return __builtin_bit_cast(unsigned short, x); }
inline __half __short_as_half(short x) { return __builtin_bit_cast(__half, x); }
// half-precision math of cuda_fp16.h (computed in float and rounded once)
inline __half hexp2(__half x) { return (__half)exp2f((float)x); }
inline __half hlog2(__half x) { return (__half)log2f((float)x); }
inline __half hsin(__half x) { return (__half)sinf((float)x); }
inline __half hsqrt(__half x) { return (__half)sqrtf((float)x); }
inline __half htrunc(__half x) { return (__half)truncf((float)x); }
inline __half hrint(__half x) { return (__half)rintf((float)x); }
inline __half __ushort_as_half(unsigned short x) { return __builtin_bit_cast(__half, x); }
