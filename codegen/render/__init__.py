"""Renderers: one C-style base, each kernel language a small subclass. A renderer is made for a `Target`; which
class renders a target is its registry entry's (codegen.registry)."""
from tgc.codegen.render.cstyle import CStyleRenderer, KernelParam
from tgc.codegen.render.c import CRenderer
from tgc.codegen.render.opencl import OpenCLRenderer
from tgc.codegen.render.cuda import CUDARenderer
from tgc.codegen.render.metal import MetalRenderer
from tgc.codegen.render.wgsl import WGSLRenderer
from tgc.codegen.registry import load, target_spec
from tgc.codegen.target import as_target


def get_renderer(target) -> CStyleRenderer:
  """The renderer for a Target, a language name (its device's target) or a renderer instance (used as given)."""
  if isinstance(target, CStyleRenderer): return target
  t = as_target(target)
  return load(target_spec(t.name).renderer)(t)

__all__ = ["CStyleRenderer", "KernelParam", "CRenderer", "OpenCLRenderer", "CUDARenderer", "MetalRenderer",
           "WGSLRenderer", "get_renderer"]
