"""clang's OpenCL C front end as a checker of OpenCL kernels no device here can build (half arithmetic: neither
PoCL nor Oclgrind has cl_khr_fp16): OpenCL C 1.2 on the SPIR target, the standard built-ins declared, every
warning an error."""
from __future__ import annotations
import shutil
import subprocess
import tempfile

FLAGS = ("-x", "cl", "-cl-std=CL1.2", "--target=spir64", "-Xclang", "-finclude-default-header", "-fsyntax-only",
         "-Werror")


def clang() -> str | None: return shutil.which("clang")


def opencl_c_errors(src: str) -> str:
  """The front end's errors for `src`, or "" when it accepts it."""
  with tempfile.NamedTemporaryFile("w", suffix=".cl") as f:
    f.write(src)
    f.flush()
    r = subprocess.run([clang() or "clang", *FLAGS, f.name], capture_output=True, text=True, timeout=120)
  return r.stderr if r.returncode else ""
