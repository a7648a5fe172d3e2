"""Renderers: one C-style base, each kernel language a small subclass."""
from codegen.render.cstyle import CStyleRenderer
from codegen.render.c import CRenderer
from codegen.render.opencl import OpenCLRenderer
from codegen.render.cuda import CUDARenderer
from codegen.render.metal import MetalRenderer

RENDERERS = {"c": CRenderer, "opencl": OpenCLRenderer, "cuda": CUDARenderer, "metal": MetalRenderer}


def get_renderer(target: str) -> CStyleRenderer:
  if target not in RENDERERS: raise ValueError(f"no renderer for target {target!r}; known: {', '.join(RENDERERS)}")
  return RENDERERS[target]()
