"""tgc: an ahead-of-time model compiler. Models come from the `Tensor` API or an ONNX file; `tgc compile` writes a
standalone artifact (C, CUDA, OpenCL, Metal or WGSL kernels, a host loader, weights and a manifest).

The layers are subpackages: `tgc.ir`, `tgc.codegen`, `tgc.runtimes`, `tgc.frontend`, `tgc.emit`, `tgc.aot` and the
host templates in `tgc.templates`. In the source repository the layer folders sit at the top level beside this
package; an installed tgc holds them inside it (pyproject.toml maps one onto the other), so that running from a
checkout and running an installed copy import the same names."""
import os as _os

_here = _os.path.dirname(_os.path.abspath(__file__))
if not _os.path.isdir(_os.path.join(_here, "ir")):      # a source checkout: the layers are the sibling folders
  __path__.append(_os.path.dirname(_here))  # noqa: F821 (a package's __path__)

__all__ = ["Tensor", "Variable", "dtypes", "nn", "jit", "trace"]


def __getattr__(name: str):
  """`from tgc import Tensor` and friends, imported on first use (so `import tgc.ir` stays light)."""
  if name == "Tensor":
    from tgc.frontend.tensor import Tensor
    return Tensor
  if name == "Variable":
    from tgc.ir.sint import Variable
    return Variable
  if name == "dtypes":
    from tgc.ir import dtypes
    return dtypes
  if name == "nn":
    from tgc.frontend import nn
    return nn
  if name in ("jit", "trace"):
    from tgc.frontend import jit as jit_module
    return getattr(jit_module, name)
  raise AttributeError(f"module 'tgc' has no attribute {name!r}")
