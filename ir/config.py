"""The one configuration object. Environment variables are read here, once, and nowhere else.

  DEBUG=1..4   1: kernel count and time per realize, 2: the schedule, 3: each kernel's IR, 4: generated source
  DEVICE       default Tensor device ("numpy", "c", "opencl", ...); default "c"
  TGC_CACHE_DIR  directory for the compiled-kernel and tuning caches; default ~/.cache/tgc
  CC           the C compiler kernels and artifacts are built with (default clang when installed, else cc)
  BEAM         beam width for kernel search (0: hand-coded heuristics)
  NOOPT        1: no opt actions at all (plain loops), for debugging
  VIZ          1: every tgc command that compiles a model or reads an artifact also writes the `tgc viz` page
               (OUT.viz.html beside the artifact folder OUT, else viz.html in the current folder)
"""
from __future__ import annotations
import os
import shutil
from dataclasses import dataclass, field


@dataclass
class Config:
  debug: int = 0
  device: str = "c"
  cache_dir: str = field(default_factory=lambda: os.path.join(os.path.expanduser("~"), ".cache", "tgc"))
  beam: int = 0
  noopt: bool = False
  viz: bool = False
  # clang's SLP vectorizer turns the upcast straight-line code into vector ops; gcc 12 leaves it scalar (~4x slower)
  cc: str = field(default_factory=lambda: "clang" if shutil.which("clang") else "cc")

  @staticmethod
  def from_env(env=os.environ) -> Config:
    c = Config()
    c.debug = int(env.get("DEBUG", "0") or 0)
    c.device = env.get("DEVICE", c.device).lower()
    c.cache_dir = os.path.expanduser(env.get("TGC_CACHE_DIR") or c.cache_dir)
    c.cc = env.get("CC") or c.cc
    c.beam = int(env.get("BEAM", "0") or 0)
    c.noopt = env.get("NOOPT", "0") not in ("", "0")
    c.viz = env.get("VIZ", "0") not in ("", "0")
    return c


config = Config.from_env()
