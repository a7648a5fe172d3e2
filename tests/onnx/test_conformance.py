"""The official ONNX node conformance cases through the importer on device "numpy" (no kernel compilation): every
case passes except the known failures in expected_failures.py, which must really fail (xfail strict).
scripts/conformance.py runs the same cases on compiled devices and writes docs/conformance.md."""
from __future__ import annotations
import os
import sys
import warnings

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conformance  # noqa: E402
from expected_failures import EXPECTED_FAILURES  # noqa: E402

CASES = {c.name: c for c in conformance.cases()}


def _params():
  out = []
  for name in sorted(CASES):
    if name in EXPECTED_FAILURES:
      category, reason = EXPECTED_FAILURES[name]
      out.append(pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=f"{category}: {reason}")))
    else: out.append(name)
  return out


def test_expected_failures_are_cases():
  unknown = sorted(set(EXPECTED_FAILURES) - set(CASES))
  assert not unknown, f"expected_failures.py lists cases that do not exist: {unknown}"


@pytest.mark.parametrize("name", _params())
def test_node_case(name):
  with warnings.catch_warnings(), np.errstate(all="ignore"):
    warnings.simplefilter("ignore")
    status, detail = conformance.run_case(CASES[name], "numpy")
  assert status == "pass", f"{status}: {detail}"
