"""Renderers: one C-style base, each kernel language a small subclass. A renderer is made for a `Target`."""
from tgc.codegen.render.cstyle import CStyleRenderer, KernelParam
from tgc.codegen.render.c import CRenderer
from tgc.codegen.render.opencl import OpenCLRenderer
from tgc.codegen.render.cuda import CUDARenderer
from tgc.codegen.render.metal import MetalRenderer
from tgc.codegen.render.wgsl import WGSLRenderer
from tgc.codegen.target import as_target

RENDERERS = {"c": CRenderer, "opencl": OpenCLRenderer, "cuda": CUDARenderer, "metal": MetalRenderer,
             "webgpu": WGSLRenderer}


def get_renderer(target) -> CStyleRenderer:
  """The renderer for a Target, a language name (its device's target) or a renderer instance (used as given)."""
  if isinstance(target, CStyleRenderer): return target
  t = as_target(target)
  return RENDERERS[t.name](t)

__all__ = ["CStyleRenderer", "KernelParam", "CRenderer", "OpenCLRenderer", "CUDARenderer", "MetalRenderer",
           "WGSLRenderer", "RENDERERS", "get_renderer"]
