"""Typed I/O of the C artifact: model.h's `<name>_inputs` / `<name>_outputs` structs and per-tensor macros, with
fields named after the model's inputs and outputs even when those names collide once sanitized, differ only in case,
are C or C++ keywords or macros of the C library; a C program calls `<name>_run_io` through the fields (so a wrong
name fails to compile, a wrong order gives wrong numbers) and matches the numpy interpreter on random inputs; the
header also compiles as C++; the `void **` API gives the same values."""
from __future__ import annotations
import os
from pathlib import Path

import numpy as np
import pytest

from artifact_cases import C_WARNINGS, ModelCase, compare, emit_folder, manifest_of, require_tool, run
from tgc.frontend import Tensor

INPUTS = ["x", "X", "class", "errno", "a b", "a-b"]
OUTPUTS = ["in", "out", "linux"]
# what each name becomes as a field: X and x differ only in case; class is a keyword; errno and linux are macros of
# the C library and gcc; "a b" and "a-b" sanitize to the same symbol; "in" is a keyword of other targets
FIELDS_IN = ["x", "X_2", "in_class", "t_errno", "a_b", "a_b_2"]
FIELDS_OUT = ["ou_in", "out", "t_linux"]


def build_named(device: str):
  w = Tensor(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3), device=device)

  def forward(x, big_x, klass, err, ab1, ab2):
    first = x * 2.0 + big_x * w
    second = klass * 3 - (klass > 0).where(klass, -klass)
    third = (ab1 * ab2 - ab2).sum().reshape(1) * err + x.sum()
    return first, second, third
  return forward


def named_case() -> ModelCase:
  rng = np.random.default_rng(11)
  values = [rng.standard_normal((2, 3), np.float32), rng.standard_normal((2, 3), np.float32),
            rng.integers(-50, 50, (4,)).astype(np.int32), rng.standard_normal((4,), np.float32),
            rng.standard_normal((5,), np.float32), rng.standard_normal((5,), np.float32)]
  return ModelCase("named io", build_named, dict(zip(INPUTS, values)), output_names=OUTPUTS)


def c_array(name: str, a: np.ndarray) -> str:
  ctype = {"float32": "float", "int32": "int32_t"}[a.dtype.name]
  items = ", ".join(repr(float(v)) + "f" if a.dtype.kind == "f" else str(int(v)) for v in a.ravel())
  return f"static {ctype} {name}[{a.size}] = {{{items}}};\n"


PROGRAM = r"""
#include <errno.h>
#include <stdio.h>
#include <stdint.h>
#include "model.h"
%(arrays)s
static float out0[NAMED_IO_OUT_OU_IN_ELEMS];
static int32_t out1[NAMED_IO_OUT_OUT_ELEMS];
static float out2[NAMED_IO_OUT_T_LINUX_ELEMS];

static int save(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (f == NULL || fwrite(data, 1, n, f) != n) return 1;
  return fclose(f) != 0;
}

int main(void) {
  static named_io_ctx ctx;
  named_io_inputs in;
  named_io_outputs out;
  const size_t shape[] = NAMED_IO_IN_X_2_SHAPE;
  int s;
  if (NAMED_IO_IN_IN_CLASS_INDEX != 2 || NAMED_IO_OUT_T_LINUX_INDEX != 2 || shape[1] != 3 ||
      NAMED_IO_IN_A_B_2_BYTES != 20 || NAMED_IO_IN_X_NDIM != 2 || NAMED_IO_OUT_T_LINUX_DIM0 != 4) return 3;
  in.x = a0; in.X_2 = a1; in.in_class = a2; in.t_errno = a3; in.a_b = a4; in.a_b_2 = a5;
  out.ou_in = out0; out.out = out1; out.t_linux = out2;
  if ((s = named_io_init(&ctx, "weights.safetensors", NULL)) != NAMED_IO_OK) return 10 + s;
  if ((s = named_io_run_io(&ctx, &in, &out)) != NAMED_IO_OK) return 20 + s;
  if (named_io_run_io(&ctx, NULL, &out) != NAMED_IO_ERR_NULL) return 4;
  in.t_errno = NULL;
  if (named_io_run_io(&ctx, &in, &out) != NAMED_IO_ERR_NULL) return 5;
  named_io_free(&ctx);
  return save("out0.bin", out0, sizeof(out0)) | save("out1.bin", out1, sizeof(out1)) |
         save("out2.bin", out2, sizeof(out2));
}
"""


@pytest.fixture(scope="module")
def named(tmp_path_factory):
  case = named_case()
  return case, emit_folder(tmp_path_factory.mktemp("named"), case), case.reference()


def test_fields_and_macros_are_named_after_the_model(named):
  _, folder, _ = named
  header = Path(folder, "model.h").read_text()
  for field in FIELDS_IN: assert f" *{field};" in header, field
  for field in FIELDS_OUT: assert f" *{field};" in header, field
  assert "const float *X_2;" in header and "const int32_t *in_class;" in header and "int32_t *out;" in header
  assert "#define NAMED_IO_IN_X_2_SHAPE {2, 3}" in header and "#define NAMED_IO_OUT_T_LINUX_ELEMS 4" in header
  manifest = manifest_of(folder)
  assert [t["name"] for t in manifest["inputs"]] == INPUTS and [t["name"] for t in manifest["outputs"]] == OUTPUTS


@pytest.mark.parametrize("compiler", ["gcc", "clang"])
def test_run_io_matches_the_reference(named, tmp_path, compiler):
  require_tool(compiler, compiler)
  case, folder, reference = named
  arrays = "".join(c_array(f"a{i}", v) for i, v in enumerate(case.inputs.values()))
  Path(tmp_path, "prog.c").write_text(PROGRAM % {"arrays": arrays})
  os.symlink(os.path.join(folder, "weights.safetensors"), tmp_path / "weights.safetensors")
  run([compiler, *C_WARNINGS, "-O2", "-I", folder, "prog.c", os.path.join(folder, "model.c"), "-o", "prog", "-lm"],
      cwd=tmp_path)
  run(["./prog"], cwd=tmp_path)
  got = {name: np.fromfile(tmp_path / f"out{i}.bin", reference[name].dtype).reshape(reference[name].shape)
         for i, name in enumerate(OUTPUTS)}
  compare(got, reference, 1e-5, 1e-5)
  from tgc.runtimes.artifact_c import CArtifact
  with CArtifact(folder, cache_dir=str(tmp_path / "libs")) as art:
    generic = art.run(case.inputs)
  compare(generic, got, 1e-6, 1e-6)


def test_header_compiles_as_cxx(named, tmp_path):
  require_tool("clang++", "clang")
  _, folder, _ = named
  Path(tmp_path, "use.cc").write_text('#include <cerrno>\n#include "model.h"\n'
                                      "int main() { named_io_inputs in = {}; return in.in_class != nullptr; }\n")
  run(["clang++", "-std=c++11", "-Wall", "-Wextra", "-pedantic", "-Werror", "-I", folder, "-fsyntax-only", "use.cc"],
      cwd=tmp_path)
