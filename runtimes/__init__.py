"""Python runtimes that execute rendered kernels for eager realize, BEAM timing, `validate` and `bench`.

`get_runtime("c")` / `get_runtime("opencl")` give cached Runtime instances; concrete runtime modules are imported
only when first asked for, so a missing optional dependency affects only its own runtime.
"""
from tgc.runtimes.base import (Buffer, CompileError, LaunchError, Program, Runtime, RuntimeUnavailable, cache_root,
                               get_runtime)

__all__ = ["Buffer", "CompileError", "LaunchError", "Program", "Runtime", "RuntimeUnavailable", "cache_root",
           "get_runtime"]
