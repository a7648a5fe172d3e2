"""pytest set-up for the ONNX tests: the `slow` marker (the large real-architecture models) and its default
exclusion. Tests marked slow are skipped unless pytest runs with `--runslow` or selects them with a `-m` expression
that names `slow` (`-m slow`, `-m "slow or not slow"`).

`--runslow` is registered here, so pytest knows it when this folder is on the command line
(`pytest --runslow tests/onnx`); from the repository root (`pytest`, `pytest tests`) this conftest is loaded after
the command line is parsed: use `-m "slow or not slow"` there."""
from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
  parser.addoption("--runslow", action="store_true", default=False,
                   help="also run tests marked slow (the large ONNX light models: minutes each on 2 cores)")


def pytest_configure(config: pytest.Config) -> None:
  config.addinivalue_line("markers", "slow: a long test (minutes); skipped unless --runslow or -m selects it")


def _run_slow(config: pytest.Config) -> bool:
  try: wanted = bool(config.getoption("--runslow"))
  except ValueError: wanted = False          # the option was not registered in time (see the module docstring)
  return wanted or "slow" in (config.getoption("markexpr", default="") or "")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
  if _run_slow(config): return
  skip = pytest.mark.skip(reason="slow: run with --runslow (or -m slow)")
  for item in items:
    if "slow" in item.keywords: item.add_marker(skip)
