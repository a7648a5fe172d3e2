"""bench/cpuid_mask.py: a process re-run with the shim preloaded sees x86-64-v3's CPUID (AVX2 and FMA on, the
AVX-512 family and VNNI off, in numpy's own detection), and its faults that are not CPUID still crash it; the
programs it starts are not masked (gcc, whose own SIGSEGV handler took the faults, compiles)."""
from __future__ import annotations
import os
import platform
import shutil
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench")
pytestmark = pytest.mark.skipif(sys.platform != "linux" or platform.machine() != "x86_64",
                                reason="the CPUID mask needs Linux on x86-64")

SCRIPT = """
import sys
sys.path.insert(0, {bench!r})
import cpuid_mask
cpuid_mask.masked_process({cache!r})
"""
PROBE = """from numpy._core._multiarray_umath import __cpu_features__ as f
print(f["AVX2"], f["FMA3"], any(v for k, v in f.items() if "AVX512" in k or "VNNI" in k))
"""


def run_masked(tmp_path, tail: str) -> subprocess.CompletedProcess:
  """A script that re-runs itself under the mask, then runs `tail`; skipped where CPUID cannot be made to fault."""
  script = tmp_path / "probe.py"
  script.write_text(SCRIPT.format(bench=BENCH, cache=str(tmp_path / "cache")) + tail)
  run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
  if "CPUID faulting is not available" in run.stderr: pytest.skip("this kernel or CPU cannot make CPUID fault")
  return run


def test_masked_process_reports_x86_64_v3(tmp_path):
  run = run_masked(tmp_path, PROBE)
  assert run.returncode == 0, run.stderr
  assert run.stdout.split() == ["True", "True", "False"]


def test_other_faults_still_crash(tmp_path):
  """A segmentation fault that is no CPUID goes to the handler installed before (here the default: the process dies
  of SIGSEGV), not into a loop."""
  run = run_masked(tmp_path, "import ctypes\nctypes.string_at(8)\n")
  assert run.returncode == -11, (run.returncode, run.stderr)


def test_programs_it_starts_are_not_masked(tmp_path):
  """A Python the masked process starts reports the machine's own CPUID (here: numpy's detection of it, whatever it
  is), and gcc compiles a file under it (cc1 installs its own SIGSEGV handler: masked, it died of the first CPUID)."""
  child = f"import subprocess, sys\nprint(subprocess.run([sys.executable, '-c', {PROBE!r}], capture_output=True, " \
          "text=True).stdout.strip())\n"
  here = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True).stdout.strip()
  run = run_masked(tmp_path, child)
  assert run.returncode == 0, run.stderr
  assert run.stdout.strip() == here
  if shutil.which("gcc") is None: pytest.skip("gcc is not installed")
  (tmp_path / "x.c").write_text("int f(int x) { return x * 3; }\n")
  cc = f"import subprocess\nsubprocess.run(['gcc', '-O2', '-march=native', '-c', {str(tmp_path / 'x.c')!r}, " \
       f"'-o', {str(tmp_path / 'x.o')!r}], check=True)\n"
  run = run_masked(tmp_path, cc)
  assert run.returncode == 0, run.stderr
