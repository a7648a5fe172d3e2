"""Fixtures of the frontend tests: `device` runs a test on each device the frontend realizes on."""
import pytest

DEVICES = ["numpy", "c", "opencl"]


@pytest.fixture(params=DEVICES)
def device(request) -> str:
  """A device name; compiled devices skip, naming the missing piece, when their runtime cannot run here."""
  name = request.param
  if name != "numpy":
    from tgc.runtimes import RuntimeUnavailable, get_runtime
    try: get_runtime(name)
    except RuntimeUnavailable as error:
      hint = " (OpenCL needs pyopencl and a platform: install pocl-opencl-icd)" if name == "opencl" else ""
      pytest.skip(f"{error}{hint}")
  return name
