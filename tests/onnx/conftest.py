"""pytest set-up for the ONNX tests: the `slow` marker (the large real-architecture models) and its default
exclusion. Tests marked slow are skipped unless pytest runs with `--runslow`."""
from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
  parser.addoption("--runslow", action="store_true", default=False,
                   help="also run tests marked slow (the large ONNX light models: minutes each on 2 cores)")


def pytest_configure(config: pytest.Config) -> None:
  config.addinivalue_line("markers", "slow: a long test (minutes); skipped unless --runslow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
  if config.getoption("--runslow", default=False): return
  skip = pytest.mark.skip(reason="slow: run with --runslow")
  for item in items:
    if "slow" in item.keywords: item.add_marker(skip)
