"""Shared test set-up: every test process (each pytest-xdist worker too) gets private temporary folders for the
PoCL kernel cache, tgc's disk caches ($TGC_CACHE_DIR: the C runtime's shared objects, ...) and a mode-700
XDG_RUNTIME_DIR for Vulkan, set before any test module is imported and removed at the end of the run; plus runtime
fixtures (and `tint`, Dawn's WGSL validator) that skip, naming the missing piece, when a runtime cannot run here."""
from __future__ import annotations
import os
import shutil
import tempfile

import pytest

# The temporary tree is created by the main pytest process and inherited by pytest-xdist workers, which make
# their own folders inside it; only its creator removes it, after the workers have exited.
TEMP_ROOT_ENV = "TGC_TEST_TEMP_ROOT"
_owned_roots: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
  parent = os.environ.get(TEMP_ROOT_ENV)
  if parent and os.path.isdir(parent):
    root = tempfile.mkdtemp(prefix="worker-", dir=parent)
  else:
    root = tempfile.mkdtemp(prefix="tgc-tests-")
    _owned_roots.append(root)
    os.environ[TEMP_ROOT_ENV] = root
  config.addinivalue_line("markers", "webgpu: uses the WebGPU runtime (run apart from OpenCL: see below)")
  folders = {"POCL_CACHE_DIR": "pocl", "XDG_RUNTIME_DIR": "xdg-runtime", "TGC_CACHE_DIR": "tgc-cache"}
  for variable, folder in folders.items():
    path = os.path.join(root, folder)
    os.makedirs(path, mode=0o700)
    os.chmod(path, 0o700)
    os.environ[variable] = path


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
  """Tests that touch WebGPU get the `webgpu` marker: Mesa's software Vulkan (lavapipe) and PoCL each load their
  own LLVM, and both in one process abort ("Option ... registered more than once"), so scripts/test.sh runs the
  webgpu tests in a pytest run of their own."""
  for item in items:
    if "webgpu" in item.nodeid.lower() or "wgsl" in item.nodeid.lower(): item.add_marker(pytest.mark.webgpu)


def pytest_unconfigure(config: pytest.Config) -> None:
  while _owned_roots:
    shutil.rmtree(_owned_roots.pop(), ignore_errors=True)
    os.environ.pop(TEMP_ROOT_ENV, None)


@pytest.fixture(scope="session")
def tgc_cache_dir() -> str:
  """The temporary root of tgc's disk caches for this test process (also in $TGC_CACHE_DIR)."""
  return os.environ["TGC_CACHE_DIR"]


def shared_runtime(name: str):
  """The shared runtime `name` (`runtimes.get_runtime`); the test is skipped, naming the missing piece (a compiler,
  package, platform or device), when it cannot run here."""
  from tgc.runtimes import RuntimeUnavailable, get_runtime
  try:
    return get_runtime(name)
  except RuntimeUnavailable as error:
    pytest.skip(str(error))


@pytest.fixture(scope="session")
def c_runtime():
  """The shared C runtime; skipped when no C compiler is usable."""
  return shared_runtime("c")


@pytest.fixture(scope="session")
def opencl_runtime():
  """The shared OpenCL runtime; skipped only when pyopencl or an OpenCL platform/device is missing."""
  return shared_runtime("opencl")


@pytest.fixture(scope="session")
def webgpu_runtime():
  """The shared WebGPU runtime; skipped when wgpu or an adapter is missing."""
  return shared_runtime("webgpu")


@pytest.fixture(scope="session")
def tint():
  """A Dawn device on the Null backend: create_shader_module runs Tint, pipeline creation checks the limits."""
  try:
    import wgpudawn
  except ImportError:
    pytest.skip("wgpudawn is not installed (pip install wgpudawn): Tint checks need it")
  old = os.environ.get("WGPU_BACKEND_TYPE")
  os.environ["WGPU_BACKEND_TYPE"] = "Null"       # read by wgpudawn (and wgpu): set only around this request
  try:
    adapter = wgpudawn.gpu.request_adapter_sync()
    return adapter.request_device_sync(required_features=[f for f in ("shader-f16",) if f in adapter.features])
  finally:
    if old is None: del os.environ["WGPU_BACKEND_TYPE"]
    else: os.environ["WGPU_BACKEND_TYPE"] = old
