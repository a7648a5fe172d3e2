"""The C artifact's CMakeLists.txt: a small application links `tgc::<name>` through add_subdirectory, and through
find_package of the artifact installed into a prefix; the C artifact cross-builds for aarch64 with a toolchain file
and runs under qemu. Every program runs the model through the typed I/O on random inputs and matches the numpy
interpreter."""
from __future__ import annotations
import os
import struct
from pathlib import Path

import numpy as np
import pytest

from artifact_cases import cnn_case, compare, emit_folder, manifest_of, require_aarch64, require_tool, run
from tgc.codegen.target import Target
from tgc.emit import write_artifact

APP = r"""
#include <stdio.h>
#include "model.h"

static float image[CNN_IN_IMAGE_ELEMS], logits[CNN_OUT_LOGITS_ELEMS], features[CNN_OUT_FEATURES_ELEMS];

int main(int argc, char **argv) {
  static cnn_ctx ctx;
  cnn_inputs in;
  cnn_outputs out;
  FILE *f = fopen("image.bin", "rb");
  int s;
  if (argc != 2 || f == NULL || fread(image, sizeof(image), 1, f) != 1) return 2;
  fclose(f);
  in.image = image;
  out.logits = logits;
  out.features = features;
  if ((s = cnn_init(&ctx, argv[1], NULL)) != CNN_OK) return 10 + s;
  if ((s = cnn_run_io(&ctx, &in, &out)) != CNN_OK) return 20 + s;
  cnn_free(&ctx);
  f = fopen("logits.bin", "wb");
  if (f == NULL || fwrite(logits, sizeof(logits), 1, f) != 1 || fclose(f) != 0) return 3;
  f = fopen("features.bin", "wb");
  if (f == NULL || fwrite(features, sizeof(features), 1, f) != 1 || fclose(f) != 0) return 3;
  return 0;
}
"""
APP_CMAKE = """cmake_minimum_required(VERSION 3.13)
project(app C)
{use}
add_executable(app app.c)
target_link_libraries(app PRIVATE tgc::cnn)
"""
TOOLCHAIN = """set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_ASM_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
"""


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
  require_tool("cmake", "cmake")
  case = cnn_case()
  return case, emit_folder(tmp_path_factory.mktemp("cmake"), case), case.reference()


def cmake_build(source: str, build: str, *options: str) -> None:
  run(["cmake", "-S", source, "-B", build, "-DCMAKE_BUILD_TYPE=Release", *options])
  run(["cmake", "--build", build, "-j", "2"])


def run_app(build: Path, case, weights: str, runner: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
  case.inputs["image"].tofile(build / "image.bin")
  run([*runner, "./app", weights], cwd=build)
  return {"logits": np.fromfile(build / "logits.bin", np.float32).reshape(1, 5),
          "features": np.fromfile(build / "features.bin", np.float32).reshape(1, 6, 2, 2)}


def test_add_subdirectory(cnn, tmp_path):
  case, folder, reference = cnn
  (tmp_path / "app").mkdir()
  (tmp_path / "app" / "app.c").write_text(APP)
  (tmp_path / "app" / "CMakeLists.txt").write_text(APP_CMAKE.format(use=f'add_subdirectory("{folder}" cnn)'))
  cmake_build(str(tmp_path / "app"), str(tmp_path / "build"))
  assert not (tmp_path / "build" / "cnn" / "main").exists(), "the example is built only for the top-level project"
  got = run_app(tmp_path / "build", case, os.path.join(folder, "weights.safetensors"))
  compare(got, reference, case.rtol, case.atol)


def test_install_and_find_package(cnn, tmp_path):
  case, folder, reference = cnn
  prefix = tmp_path / "prefix"
  cmake_build(folder, str(tmp_path / "model_build"))
  assert (tmp_path / "model_build" / "main").is_file(), "the example is built for the top-level project"
  run(["cmake", "--install", str(tmp_path / "model_build"), "--prefix", str(prefix)])
  headers = {p.name for p in prefix.glob("include/cnn/*")}
  assert headers == {"model.h", "tgc_threads.h"} and list(prefix.glob("lib*/libtgc_cnn.a"))
  assert list(prefix.glob("lib*/cmake/cnn/cnnConfig.cmake"))
  (tmp_path / "app").mkdir()
  (tmp_path / "app" / "app.c").write_text(APP)
  use = 'find_package(cnn REQUIRED)\nadd_compile_definitions(WEIGHTS="${cnn_WEIGHTS_FILE}")\n' \
        'file(WRITE "${CMAKE_BINARY_DIR}/weights_path.txt" "${cnn_WEIGHTS_FILE}")'
  (tmp_path / "app" / "CMakeLists.txt").write_text(APP_CMAKE.format(use=use))
  cmake_build(str(tmp_path / "app"), str(tmp_path / "build"), f"-DCMAKE_PREFIX_PATH={prefix}")
  weights = (tmp_path / "build" / "weights_path.txt").read_text()
  assert Path(weights).is_file() and Path(weights).is_relative_to(prefix.resolve()), weights
  compare(run_app(tmp_path / "build", case, weights), reference, case.rtol, case.atol)


def test_cross_build_for_aarch64_runs_under_qemu(cnn, tmp_path):
  require_aarch64(tmp_path)
  case, x86, reference = cnn
  (tmp_path / "aarch64.cmake").write_text(TOOLCHAIN)
  arm = str(tmp_path / "arm")
  os.makedirs(arm)
  write_artifact(case.compile(Target.make("c", cpu="armv8-a")), arm, embed_weights=True)
  toolchain = f"-DCMAKE_TOOLCHAIN_FILE={tmp_path / 'aarch64.cmake'}"
  for name, folder in (("arm", arm), ("x86", x86)):
    build = tmp_path / f"build_{name}"
    cmake_build(folder, str(build), toolchain)
    cache = (build / "CMakeCache.txt").read_text()
    flags = "-march=armv8-a" if name == "arm" else ""     # an x86 level's flags are left out for another processor
    assert f"TGC_CNN_CPU_FLAGS:STRING={flags}\n" in cache
    with open(build / "main", "rb") as f: elf = f.read(20)
    assert elf[:4] == b"\x7fELF" and struct.unpack("<H", elf[18:20])[0] == 183    # EM_AARCH64
    spec = manifest_of(folder)["inputs"][0]
    np.save(build / f"{spec['symbol']}.npy", case.inputs["image"])
    weights = [] if name == "arm" else ["--weights", os.path.join(folder, "weights.safetensors")]
    run(["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu", "./main", *weights], cwd=build)
    got = {s["name"]: np.load(build / f"{s['symbol']}.npy") for s in manifest_of(folder)["outputs"]}
    compare(got, reference, case.rtol, case.atol)
