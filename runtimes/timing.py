"""A kernel timer for BEAM search: compiles a KernelProgram on a runtime and times it on scratch buffers."""
from __future__ import annotations
from typing import Callable
import numpy as np
from tgc.codegen.lower import KernelProgram
from tgc.runtimes.base import Runtime


def kernel_timer(rt: Runtime, buffer_nbytes: list[int], runs: int = 3) -> Callable[[KernelProgram], float]:
  """Times programs over scratch buffers of the given sizes (filled with small random bytes)."""
  rng = np.random.default_rng(0)
  bufs = []
  for n in buffer_nbytes:
    b = rt.alloc(max(n, 1))
    if n: rt.copyin(b, (rng.integers(0, 64, n, dtype=np.uint8)))
    bufs.append(b)

  def timer(prg: KernelProgram) -> float:
    fn = rt.load(prg)
    fn(*bufs, global_size=prg.global_size, local_size=prg.local_size, wait=True)
    return min(fn(*bufs, global_size=prg.global_size, local_size=prg.local_size, wait=True) for _ in range(runs))
  return timer
