"""A freestanding build of the C artifact: the example CNN compiled with embedded weights, its model.c built with
`-ffreestanding -DTG_NO_STDIO -DTG_NO_MALLOC -DTG_NO_SHA256` references nothing of the C library but memcpy, memset and
libm functions; linked with `-nostdlib` into a program with its own entry point, memcpy and memset (only libm beside)
it runs on a caller-owned context and arena through the typed I/O and matches the numpy interpreter; the functions
left out answer ERR_UNSUPPORTED, and without malloc a NULL arena is refused."""
from __future__ import annotations
import os
import platform
import re
import subprocess

import numpy as np
import pytest

from artifact_cases import C_WARNINGS, ROOT, manifest_of, require_tool, run, tgc
from tgc.aot import models
from tgc.aot.reference import reference_outputs

EXAMPLE = str(ROOT / "examples" / "mnist_cnn.py") + ":build"
FREESTANDING = ("-ffreestanding", "-DTG_NO_STDIO", "-DTG_NO_MALLOC", "-DTG_NO_SHA256")
LIBC_ALLOWED = {"memcpy", "memset"}
# libm's functions (float and double forms) a kernel may call
LIBM = re.compile(r"(exp2|log2|sin|cos|sqrt|trunc|pow|exp|log|tanh|floor|ceil|fabs|fmax|fmin|round|nearbyint|rint)f?")

PROGRAM = r"""
#include "model.h"

void *memcpy(void *d, const void *s, size_t n) {
  unsigned char *a = (unsigned char *)d;
  const unsigned char *b = (const unsigned char *)s;
  while (n--) *a++ = *b++;
  return d;
}
void *memset(void *d, int c, size_t n) {
  unsigned char *a = (unsigned char *)d;
  while (n--) *a++ = (unsigned char)c;
  return d;
}
static long tg_write(const void *p, long n) {
  long r;
  __asm__ volatile("syscall" : "=a"(r) : "a"(1L), "D"(1L), "S"(p), "d"(n) : "rcx", "r11", "memory");
  return r;
}

static const float input[MNIST_CNN_IN_INPUT_0_ELEMS] = {%(input)s};
static float output[MNIST_CNN_OUT_OUTPUT_0_ELEMS];
static mnist_cnn_ctx ctx;
static unsigned char arena[MNIST_CNN_ARENA_BYTES] __attribute__((aligned(64)));

int tg_main(void);
int tg_main(void) {
  mnist_cnn_inputs in;
  mnist_cnn_outputs out;
  int s;
  if (mnist_cnn_init(&ctx, "weights.safetensors", arena) != MNIST_CNN_ERR_UNSUPPORTED) return 2;
  if (mnist_cnn_init_embedded(&ctx, NULL) != MNIST_CNN_ERR_NULL) return 3;
  if ((s = mnist_cnn_init_embedded(&ctx, arena)) != MNIST_CNN_OK) return 10 + s;
  if (mnist_cnn_verify_weights(&ctx) != MNIST_CNN_ERR_UNSUPPORTED) return 4;
  in.input_0 = input;
  out.output_0 = output;
  if ((s = mnist_cnn_run_io(&ctx, &in, &out)) != MNIST_CNN_OK) return 20 + s;
  mnist_cnn_free(&ctx);
  return tg_write(output, (long)sizeof(output)) == (long)sizeof(output) ? 0 : 5;
}

__asm__(".globl _start\n_start:\n  xor %%ebp, %%ebp\n  and $-16, %%rsp\n  call tg_main\n  mov %%eax, %%edi\n"
        "  mov $60, %%eax\n  syscall\n  hlt\n");
"""


def undefined(path: str) -> set[str]:
  return {line.split()[-1].split("@")[0] for line in run(["nm", "-u", path]).stdout.splitlines() if line.strip()}


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
  out = tmp_path_factory.mktemp("freestanding") / "cnn"
  result = tgc("compile", EXAMPLE, "--embed-weights", "-o", out)
  assert result.exit_code == 0, result.output
  return str(out)


@pytest.mark.parametrize("compiler", ["gcc", "clang"])
def test_model_needs_only_memcpy_memset_and_libm(embedded, tmp_path, compiler):
  require_tool(compiler, compiler)
  flags = manifest_of(embedded)["target_info"]["cpu"]["cflags"]
  obj = str(tmp_path / "model.o")
  run([compiler, *C_WARNINGS, "-O2", *flags, *FREESTANDING, "-c", os.path.join(embedded, "model.c"), "-o", obj])
  needed = undefined(obj) - {"mnist_cnn_weights_data", "mnist_cnn_weights_size"}
  libc = {s for s in needed if not LIBM.fullmatch(s)}
  assert libc <= LIBC_ALLOWED, f"model.c needs more of the C library than memcpy/memset: {sorted(libc)}"
  hosted = str(tmp_path / "hosted.o")
  run([compiler, "-std=c99", "-O2", *flags, "-c", os.path.join(embedded, "model.c"), "-o", hosted])
  assert {"fopen", "malloc"} <= undefined(hosted), "the check above would not see the C library"


def test_nostdlib_program_runs_and_matches(embedded, tmp_path):
  if platform.machine().lower() not in ("x86_64", "amd64") or not os.path.isdir("/proc"):
    pytest.skip("the freestanding test program's entry point and write are x86-64 Linux system calls")
  require_tool("gcc", "gcc")
  x = np.random.default_rng(21).standard_normal((1, 1, 28, 28)).astype(np.float32)
  (tmp_path / "prog.c").write_text(PROGRAM % {"input": ", ".join(f"{v!r}f" for v in x.ravel().tolist())})
  flags = ["-O2", *manifest_of(embedded)["target_info"]["cpu"]["cflags"], *FREESTANDING, "-I", embedded]
  # -fno-tree-loop-distribute-patterns: gcc would otherwise make the program's own memcpy loop a call to memcpy
  run(["gcc", "-std=gnu99", *flags, "-fno-tree-loop-distribute-patterns", "-c", "prog.c", "-o", "prog.o"],
      cwd=tmp_path)
  run(["gcc", "-std=c99", *flags, "-c", os.path.join(embedded, "model.c"), "-o", "model.o"], cwd=tmp_path)
  run(["gcc", f"-Wa,-I{embedded}", "-c", os.path.join(embedded, "weights.S"), "-o", "weights.o"], cwd=tmp_path)
  run(["gcc", "-nostdlib", "-o", "prog", "prog.o", "model.o", "weights.o", "-lm"], cwd=tmp_path)
  needed = undefined(str(tmp_path / "prog"))
  assert needed and all(LIBM.fullmatch(s) for s in needed), f"beyond libm: {sorted(needed)}"
  r = subprocess.run(["./prog"], cwd=tmp_path, capture_output=True, timeout=60)
  assert r.returncode == 0, f"exit {r.returncode}"
  got = np.frombuffer(r.stdout, np.float32).reshape(1, 10)
  want, _ = reference_outputs(models.parse_model_spec(EXAMPLE), {"input_0": x})
  np.testing.assert_allclose(got, want["output_0"], rtol=1e-4, atol=1e-5)
