"""Renderers: one C-style base, each kernel language a small subclass."""
from codegen.render.cstyle import CStyleRenderer
from codegen.render.c import CRenderer
from codegen.render.opencl import OpenCLRenderer

RENDERERS = {"c": CRenderer, "opencl": OpenCLRenderer}


def get_renderer(target: str) -> CStyleRenderer:
  if target not in RENDERERS: raise ValueError(f"no renderer for target {target!r}; known: {', '.join(RENDERERS)}")
  return RENDERERS[target]()
