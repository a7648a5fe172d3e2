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
