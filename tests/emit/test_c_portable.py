"""C artifacts are portable by default: `tgc compile` without `--cpu` generates kernels for the baseline level of the
machine's architecture (x86-64-v3, armv8-a), so the example built with its own Makefile runs on older CPUs than the
compiling one (qemu-x86_64 as a Haswell, AVX2 without AVX-512; `--cpu x86-64-v2` as a Nehalem, SSE4.2) with the same
bytes as here,
while a `--cpu native` build on an AVX-512 machine stops there with an illegal instruction; the floating-point options
the kernels need are popped before the functions a caller sees."""
from __future__ import annotations
import os
import platform
import re
import subprocess

import numpy as np
import pytest

from artifact_cases import ROOT, make, manifest_of, require_tool, run, tgc
from tgc.codegen import target as target_module
from tgc.codegen.target import CPU_LEVELS, cpu_level, host_cpu

EXAMPLE = str(ROOT / "examples" / "mnist_cnn.py") + ":build"


def x86_only():
  if platform.machine().lower() not in ("x86_64", "amd64"): pytest.skip("needs an x86-64 machine (qemu-x86_64 runs)")


@pytest.fixture(scope="module")
def portable(tmp_path_factory):
  out = tmp_path_factory.mktemp("portable") / "cnn"
  result = tgc("compile", EXAMPLE, "-o", out)
  assert result.exit_code == 0, result.output
  return str(out)


def test_portable_is_the_architecture_baseline(monkeypatch):
  for machine, level in (("x86_64", "x86-64-v3"), ("aarch64", "armv8-a"), ("arm64", "armv8-a")):
    monkeypatch.setattr(target_module.platform, "machine", lambda m=machine: m)
    cpu = cpu_level("portable")
    assert cpu.level == level and cpu.requested == "portable" and cpu.cc_flags == (f"-march={level}",)
  assert cpu_level("generic").cc_flags == () and CPU_LEVELS["generic"].vector_bytes == 4


def test_default_compile_records_and_builds_for_the_baseline(portable):
  info = manifest_of(portable)["target_info"]["cpu"]
  base = {"x86_64": "x86-64-v3", "amd64": "x86-64-v3"}.get(platform.machine().lower(), "armv8-a")
  assert info["requested"] == "portable" and info["level"] == base and info["cflags"] == [f"-march={base}"]
  makefile = open(os.path.join(portable, "Makefile")).read()
  assert set(re.findall(r"-march=[\w.+-]+", makefile)) == {f"-march={base}"}
  assert f"-march={base}" in open(os.path.join(portable, "model.h")).read()


def _runs_as(folder: str, work: str, cpus: tuple[str, ...]) -> None:
  """The artifact in `folder` built with its Makefile gives the same bytes here and under qemu as each of `cpus`."""
  subprocess.run(["cp", "-r", folder, work], check=True)
  make(work)
  x = np.random.default_rng(7).standard_normal((1, 1, 28, 28)).astype(np.float32)
  np.save(os.path.join(work, "input_0.npy"), x)
  run(["./main"], cwd=work)
  here = np.load(os.path.join(work, "output_0.npy"))
  assert np.isfinite(here).all() and np.abs(here).max() > 0
  for cpu in cpus:
    os.remove(os.path.join(work, "output_0.npy"))
    run(["qemu-x86_64", "-cpu", cpu, "./main"], cwd=work)
    assert np.load(os.path.join(work, "output_0.npy")).tobytes() == here.tobytes(), cpu


def test_default_build_runs_on_older_cpus(portable, tmp_path):
  x86_only()
  require_tool("qemu-x86_64", "qemu-user")
  _runs_as(portable, str(tmp_path / "cnn"), ("Haswell",))
  result = tgc("validate", portable, "--seed", "2")
  assert result.exit_code == 0 and "OK" in result.stdout, result.output


def test_x86_64_v2_build_runs_on_a_nehalem(tmp_path):
  x86_only()
  require_tool("qemu-x86_64", "qemu-user")
  out = str(tmp_path / "v2")
  assert tgc("compile", EXAMPLE, "--cpu", "x86-64-v2", "-o", out).exit_code == 0
  _runs_as(out, str(tmp_path / "v2_build"), ("Nehalem",))


def test_native_build_of_an_avx512_machine_does_not(tmp_path):
  """The check above can fail: what the old default (native) gives on an AVX-512 machine stops on a Haswell."""
  x86_only()
  require_tool("qemu-x86_64", "qemu-user")
  if not host_cpu().level.startswith("x86-64-v4"):
    pytest.skip("this machine has no AVX-512: native is no level above Haswell")
  out = str(tmp_path / "native")
  assert tgc("compile", EXAMPLE, "--cpu", "native", "-o", out).exit_code == 0
  make(out)
  np.save(os.path.join(out, "input_0.npy"), np.ones((1, 1, 28, 28), np.float32))
  r = run(["qemu-x86_64", "-cpu", "Haswell", "./main"], cwd=out, check=False)
  assert r.returncode != 0 and not os.path.exists(os.path.join(out, "output_0.npy"))


def test_fast_contraction_is_scoped_to_the_kernels(portable):
  source = open(os.path.join(portable, "model.c")).read()
  sym = manifest_of(portable)["target_info"]["api_prefix"]
  push, pop = source.index("#pragma GCC push_options"), source.index("#pragma GCC pop_options")
  assert source.count("#pragma GCC optimize") == 1 and source.count("#pragma GCC pop_options") == 1
  assert source.index("#pragma float_control(push)") < source.index("#pragma float_control(pop)")
  kernels = [k["name"] for k in manifest_of(portable)["kernels"]]
  assert all(push < source.index(f" void {k}(") < pop for k in kernels)
  assert pop < source.index("static void tg_launch(") and pop < source.index(f"{sym}_status {sym}_init_from_memory(")
  assert pop > source.rindex("static void tg_task_")
