"""Timing kernels for BEAM search and reports: `batch_measure` builds the candidate programs of one kernel in a few
translation units (one compiler call each, `jobs` of them at once) and times each on scratch buffers of its own
argument sizes, one buffer per argument (as in the model: an output never shares memory with an input; floats filled
with normal values: random bits would make denormals and NaNs, which time differently; integers zero, so that
indices read from a buffer stay in range). Every candidate runs once untimed (first touches, instruction caches),
then at least MIN_RUNS times: its time is the median, what a run of the model sees, not the luckiest run. A
candidate slower than the caller's `stop_after` in its warm-up run is not timed further. `kernel_timer` times one
program."""
from __future__ import annotations
import math
from concurrent.futures import ThreadPoolExecutor
from typing import Callable
import numpy as np
from tgc.codegen.lower import KernelProgram
from tgc.runtimes.base import Runtime

BATCH = 24            # candidate kernels per translation unit
TIME_BUDGET = 0.02    # seconds of repeated runs per candidate (at least MIN_RUNS, at most MAX_RUNS runs)
MIN_RUNS, MAX_RUNS = 3, 15


def arg_bytes(prg: KernelProgram, item_bytes: list[int]) -> list[int]:
  """The byte size of each argument of `prg`, a lowering of a kernel whose buffers have `item_bytes`: relaid weights
  hold what their relayout computes."""
  out = []
  for i, pos in enumerate(prg.args or range(len(item_bytes))):
    how = prg.relayouts.get(pos)
    size = item_bytes[pos] if how is None else \
      math.prod(r.src[0].arg for r in how.ranges) * how.expr.dtype.itemsize
    out.append(size)
  return out


class Scratch:
  """Scratch buffers on a runtime, one per (argument position, size, kind), made once and reused by every
  candidate."""

  def __init__(self, rt: Runtime):
    self.rt, self.bufs, self.rng = rt, {}, np.random.default_rng(0)

  def get(self, nbytes: int, is_float: bool, position: int = 0):
    key = (position, nbytes, is_float)
    if key not in self.bufs:
      b = self.rt.alloc(max(nbytes, 1))
      if nbytes:
        data = self.rng.standard_normal((nbytes + 3) // 4).astype(np.float32).view(np.uint8)[:nbytes] if is_float \
          else np.zeros(nbytes, np.uint8)
        self.rt.copyin(b, data)
      self.bufs[key] = b
    return self.bufs[key]

  def for_program(self, prg: KernelProgram, item_bytes: list[int]) -> list:
    kinds = {p.index: p.dtype.is_float for p in prg.params}
    return [self.get(n, kinds.get(i, False), i) for i, n in enumerate(arg_bytes(prg, item_bytes))]


def _time_one(fn, bufs, prg: KernelProgram, stop_after: float) -> float:
  """The median of at least MIN_RUNS timed runs after one untimed run (the untimed one alone when it is slower
  than `stop_after`)."""
  launch = dict(global_size=prg.global_size, local_size=prg.local_size, wait=True)
  first = fn(*bufs, **launch)
  if first is None: return math.inf
  if first > stop_after: return first
  times: list[float] = []
  while len(times) < MIN_RUNS or (sum(times) < TIME_BUDGET and len(times) < MAX_RUNS):
    times.append(fn(*bufs, **launch))
  return float(np.median(times))


def batch_measure(rt: Runtime, item_bytes: list[int], jobs: int = 1) -> Callable[[list[KernelProgram], float],
                                                                                   list[float]]:
  """measure(programs, stop_after) -> seconds per program (math.inf for one that does not build or run)."""
  scratch = Scratch(rt)
  build_many = getattr(rt, "compile_many", None)

  def build(group: list[KernelProgram]) -> list:
    if build_many is not None:
      try: return build_many(group)
      except Exception: pass           # one bad candidate: build the batch's programs one by one
    out = []
    for prg in group:
      try: out.append(rt.load(prg))
      except Exception: out.append(None)
    return out

  def measure(programs: list[KernelProgram], stop_after: float = math.inf) -> list[float]:
    groups = [programs[i:i + BATCH] for i in range(0, len(programs), BATCH)]
    with ThreadPoolExecutor(max(1, jobs)) as pool: built = [f for g in pool.map(build, groups) for f in g]
    times = []
    best = stop_after
    for prg, fn in zip(programs, built):
      if fn is None: times.append(math.inf); continue
      try: t = _time_one(fn, scratch.for_program(prg, item_bytes), prg, best)
      except Exception: t = math.inf
      times.append(t)
      best = min(best, t * 2.0) if math.isfinite(t) else best
    return times
  return measure


def kernel_timer(rt: Runtime, buffer_nbytes: list[int], runs: int = 3) -> Callable[[KernelProgram], float]:
  """Times one program over scratch buffers of the given sizes (the best of `runs` runs after a warm-up)."""
  scratch = Scratch(rt)

  def timer(prg: KernelProgram) -> float:
    fn = rt.load(prg)
    bufs = scratch.for_program(prg, buffer_nbytes)
    launch = dict(global_size=prg.global_size, local_size=prg.local_size, wait=True)
    fn(*bufs, **launch)
    return float(np.median([fn(*bufs, **launch) for _ in range(runs)]))
  return timer

