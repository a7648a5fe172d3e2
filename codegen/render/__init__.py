"""Renderers: one C-style base, each kernel language a small subclass."""
from tgc.codegen.render.cstyle import CStyleRenderer
from tgc.codegen.render.c import CRenderer
from tgc.codegen.render.opencl import OpenCLRenderer
from tgc.codegen.render.cuda import CUDARenderer
from tgc.codegen.render.metal import MetalRenderer
from tgc.codegen.render.wgsl import WGSLRenderer

RENDERERS = {"c": CRenderer, "opencl": OpenCLRenderer, "cuda": CUDARenderer, "metal": MetalRenderer,
             "webgpu": WGSLRenderer}


def get_renderer(target) -> CStyleRenderer:
  """A fresh renderer for the target name; a renderer instance (a target with options, e.g.
  `WGSLRenderer(narrow_int64=True)`) is used as given."""
  if isinstance(target, CStyleRenderer): return target
  if target not in RENDERERS: raise ValueError(f"no renderer for target {target!r}; known: {', '.join(RENDERERS)}")
  return RENDERERS[target]()
