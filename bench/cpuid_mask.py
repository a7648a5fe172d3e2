"""Benchmarks as on an AVX2 machine: `masked_process()` re-runs the calling script with bench/cpuid_mask.c preloaded,
so that every CPUID in it reports x86-64-v3 (no AVX-512, no VNNI, no AMX). onnxruntime, numpy and OpenBLAS then pick
the kernels an AVX2 machine would run, which is the fair peer of an artifact compiled with `--cpu x86-64-v3` on a
machine with more. The artifacts are unaffected (their kernels are built for the level they were compiled for).
Linux on x86-64 with CPUID faulting (most Intel CPUs since Ivy Bridge, AMD since Zen 3, and KVM guests of them)."""
from __future__ import annotations
import ctypes
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "cpuid_mask.c")
LEVEL = "x86-64-v3"


def _library(cache: str) -> str:
  """The shim, built with tgc's C compiler (`config.cc`) into `cache` when its source is newer."""
  from tgc.ir.config import config
  lib = os.path.join(cache, "cpuid_mask.so")
  if not os.path.exists(lib) or os.path.getmtime(lib) < os.path.getmtime(SOURCE):
    os.makedirs(cache, exist_ok=True)
    subprocess.run([config.cc, "-O2", "-shared", "-fPIC", SOURCE, "-o", lib], check=True)
  return lib


def masked_process(cache: str) -> None:
  """Re-run this script with the CPUID mask preloaded (returns only inside the re-run, after checking the mask
  took); SystemExit with a one-line reason where it cannot."""
  masked = getattr(ctypes.CDLL(None), "cpuid_masked", None)      # the shim's, once it is preloaded
  if masked is not None:
    if not masked():
      raise SystemExit("--mask-cpuid: CPUID faulting is not available here (arch_prctl ARCH_SET_CPUID failed)")
    return
  if sys.platform != "linux" or os.uname().machine != "x86_64":
    raise SystemExit("--mask-cpuid needs Linux on x86-64")
  env = dict(os.environ, LD_PRELOAD=" ".join(filter(None, [_library(cache), os.environ.get("LD_PRELOAD")])),
             TGC_CPUID_MASK_PID=str(os.getpid()))    # the re-run keeps this process's id; what it starts is not masked
  sys.stdout.flush()
  sys.stderr.flush()
  os.execve(sys.executable, [sys.executable] + sys.argv, env)


def level_seen() -> str:
  """What this process's CPUID says, in numpy's words: the AVX-512 and VNNI features it reports."""
  try: from numpy._core._multiarray_umath import __cpu_features__ as features
  except ImportError: from numpy.core._multiarray_umath import __cpu_features__ as features
  wide = sorted(k for k, v in features.items() if v and ("AVX512" in k or "VNNI" in k))
  return "with " + " ".join(wide) if wide else "no AVX-512 or VNNI"
