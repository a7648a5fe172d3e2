"""The measured roofline: a vector FMA peak and a copy bandwidth that are plausible, and the fraction
of the roofline a kernel reaches, bound by whichever of its arithmetic and its traffic takes longer."""
import pytest
from tgc.runtimes import roofline
from tgc.runtimes.base import RuntimeUnavailable
from tgc.runtimes.roofline import Roofline


def test_fraction_is_bound_by_arithmetic_or_traffic():
  r = Roofline(gflops=100.0, gbytes=10.0)
  assert r.fraction(1e9, 0, 0.01) == pytest.approx(1.0)          # 1 GFLOP at 100 GFLOP/s takes 10 ms
  assert r.fraction(1e9, 0, 0.1) == pytest.approx(0.1)
  assert r.fraction(0, 1e9, 0.2) == pytest.approx(0.5)           # 1 GB at 10 GB/s takes 100 ms
  assert r.fraction(1e9, 1e9, 0.1) == pytest.approx(1.0)         # the traffic bound is the larger one
  assert r.fraction(1e9, 0, 0.0) == 0.0


def test_measured_rates_are_plausible():
  """One core: at least a scalar FMA's worth per nanosecond, far from a GPU's; a copy between 0.1 and 1000 GB/s."""
  try: peak = roofline.peak_gflops(32)
  except RuntimeUnavailable as error: pytest.skip(f"no C compiler: {error}")
  assert 1.0 < peak < 5_000
  assert 0.1 < roofline.copy_gbytes(8 << 20) < 1_000


def test_the_peak_is_measured_with_the_kernels_flags(monkeypatch):
  """A C artifact's roofline is measured with its CPU level's compiler flags (x86-64-v4: -mprefer-vector-width=512,
  without which clang splits 64-byte vectors in two and a core with two 512-bit FMA ports reports half its peak),
  and the flags are part of what a built program is cached by."""
  from tgc.aot.bench import machine_roofline
  from tgc.codegen.target import CPU_LEVELS
  from tgc.runtimes.c import CRuntime
  seen = []
  monkeypatch.setattr(roofline, "measure", lambda vector_bytes, flags=(): seen.append((vector_bytes, flags)))
  machine_roofline({"target_info": {"cpu": CPU_LEVELS["x86-64-v4"].describe()}})
  assert seen == [(64, ("-march=x86-64-v4", "-mprefer-vector-width=512"))]
  try: runtime = CRuntime()
  except RuntimeUnavailable as error: pytest.skip(f"no C compiler: {error}")
  source = roofline._peak_source(64)
  assert runtime.cache_key(source, ("-mprefer-vector-width=512",)) != runtime.cache_key(source)
