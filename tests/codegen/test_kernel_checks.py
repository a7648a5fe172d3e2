"""scripts/kernel_checks.py on a small stratified sample of the ONNX node cases: the machinery that compiles every
kernel for CUDA (NVRTC, sm_80 and sm_90) and Metal (clang++ with the metal_stdlib shim) and runs the Metal kernels
on the CPU against the cases' expected outputs works, and it reports failures (a broken kernel is caught and named,
a refused case is counted apart). The full run over every case and light model is the script's job."""
from __future__ import annotations
import dataclasses
import os
import sys
import warnings

import numpy as np
import pytest

import metal_check
from cpu_kernels import skip_without_cpu_compiler
from tgc.runtimes import cuda as cuda_rt

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import kernel_checks  # noqa: E402

needs_tools = pytest.mark.skipif(cuda_rt.nvrtc is None or metal_check.clang() is None,
                                 reason="needs NVRTC (pip install cuda-python nvidia-cuda-nvrtc nvidia-cuda-runtime) "
                                 "and clang++ (apt-get install clang)")
SAMPLE_SIZE = 20


@pytest.fixture(scope="module")
def sample():
  """About SAMPLE_SIZE cases spread over the operators (every k-th operator's first case), plus test_abs (one
float32 kernel) and a float64 case."""
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    cases = kernel_checks.conformance.cases()
  first = kernel_checks.conformance.stratified_sample(cases, per_op=1)
  names = set(first[::max(1, len(first) // SAMPLE_SIZE)][:SAMPLE_SIZE]) | {"test_abs", "test_cast_FLOAT_to_DOUBLE"}
  return [c for c in cases if c.name in names]


@pytest.fixture(scope="module")
def results(sample):
  skip_without_cpu_compiler()
  kernel_checks._worker_init()
  with np.errstate(all="ignore"):
    return [kernel_checks.check_case(c, ("metal",)) for c in sample]


@needs_tools
def test_sample_compiles_and_runs(results, sample):
  summary = kernel_checks.summarize(results)
  assert summary["models"]["node"]["total"] == len(sample) >= SAMPLE_SIZE
  for check, c in summary["checks"].items():
    assert c["kernels"] > SAMPLE_SIZE // 2, (check, c)
    assert c["passed"] == c["kernels"], c["failures"]
  runs = summary["cpu_runs"]["metal"]
  assert runs["pass"] >= SAMPLE_SIZE // 2 and runs["fail"] == 0, runs["problems"]
  doc = kernel_checks.report(summary, 1.0, 1, kernel_checks.versions(), True, len(sample))
  assert "| nvrtc_sm_90 | cuda |" in doc and "| metal_shim | metal |" in doc


@needs_tools
def test_float64_is_counted_as_not_lowered_for_metal(results):
  (r,) = [r for r in results if r["name"] == "test_cast_FLOAT_to_DOUBLE"]
  assert r["targets"]["metal"]["build_error"].startswith("metal: float64 is not supported")
  assert not r["targets"]["cuda"]["build_error"] and r["targets"]["cuda"]["kernels"]
  summary = kernel_checks.summarize([r])
  assert summary["targets"]["metal"]["build_errors"] and summary["checks"]["metal_shim"]["kernels"] == 0


def _compiled(case, target: str):
  by_name, needed, want = kernel_checks.case_arrays(case)
  loaded, capture = kernel_checks.capture_model(case.model, {n: a.shape for n, a in by_name.items()
                                                             if n not in needed}, {n: by_name[n] for n in needed})
  feeds = {n: a for n, a in by_name.items() if n not in needed}
  return kernel_checks.compile_for("model", target, loaded, capture), capture, feeds, want


def _edited(prg, old: str, new: str, name: str | None = None):
  """The program with one edit made to its source (and function), optionally renamed."""
  src, function = prg.src.replace(old, new, 1), prg.function.replace(old, new, 1)
  if name: src, function = src.replace(prg.name, name), function.replace(prg.name, name)
  return dataclasses.replace(prg, name=name or prg.name, src=src, function=function)


@needs_tools
@pytest.mark.parametrize("target,check,old,new", [
  ("cuda", "nvrtc_sm_80", "data0[", "undefined_thing["), ("cuda", "nvrtc_sm_90", "data0[", "undefined_thing["),
  ("metal", "metal_shim", "data0[", "undefined_thing["),
  ("metal", "metal_shim", "device float* data0", "device double* data0")])
def test_a_broken_kernel_is_caught_and_named(sample, target, check, old, new):
  """In a unit with a good kernel, the broken one fails with its first error line and the good one passes."""
  cm, *_ = _compiled(next(c for c in sample if c.name == "test_abs"), target)
  prg = next(iter(cm.kernels.values()))
  assert old in prg.src
  out = kernel_checks.check_kernels([_edited(prg, old, new), _edited(prg, "", "", "other_k")], check, "probe")
  assert out["other_k"] == "" and "error" in out[prg.name], out


@needs_tools
def test_cpu_run_catches_a_wrong_kernel(sample):
  """The CPU run compares with the expected outputs: the same kernel changed to add 1 to its output fails."""
  from conformance import compare_outputs
  cm, capture, feeds, want = _compiled(next(c for c in sample if c.name == "test_abs"), "metal")
  assert compare_outputs(kernel_checks.run_compiled_on_cpu(cm, capture, feeds, "metal"), want)[0] == "pass"
  name, prg = next(iter(cm.kernels.items()))
  cm.kernels[name] = dataclasses.replace(prg, src=prg.src.rstrip()[:-1] + "  data0[0] = data0[0] + 1.0f;\n}\n")
  assert compare_outputs(kernel_checks.run_compiled_on_cpu(cm, capture, feeds, "metal"), want)[0] == "fail"
