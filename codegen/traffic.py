"""Global-memory traffic of one work-group of a GPU kernel (what `tgc inspect` reports): how many elements its loads
read from global memory per output element it stores (`loads_per_output`), and how many times each distinct
element the work-group reads is loaded (`reads_per_element`: 1 when every element a work-group needs comes from
global memory once, as with workgroup-memory tiles; about the work-group's extent along an axis a load does not
depend on when every work-item loads the element itself). `vector_loads`: how many of the global loads are 4-lane
vector loads (one 16-byte access each).

Counted on the linearized program (codegen/lower.py `linearized`) of the work-group in the middle of the grid: every
work-item, every lane, the loop iterations each load executes in (the loops open where the linearizer placed it),
where its validity gate holds; loops longer than SAMPLE iterations are sampled (their first SAMPLE: the same
elements are read again, shifted, at every step), so that the counts stay cheap to enumerate."""
from __future__ import annotations
import math
from dataclasses import dataclass
import numpy as np
from tgc.ir import Ops, UOp, AxisType
from tgc.codegen.lower import linearized
from tgc.codegen.relayout import evaluate
from tgc.codegen.render.cstyle import load_gate, store_gate

SAMPLE = 8
_GRID = (AxisType.GLOBAL, AxisType.LOCAL, AxisType.GROUP)


@dataclass(frozen=True)
class Traffic:
  loads_per_output: float       # global elements loaded per output element stored
  reads_per_element: float      # global element loads per distinct element, in one work-group
  vector_loads: int             # 4-lane global load instructions of the kernel
  scalar_loads: int             # one-lane global load instructions of the kernel


def kernel_traffic(ast: UOp, target, opts=None, weights: dict[int, int] | None = None) -> Traffic:
  """The traffic of `ast` lowered for `target` with `opts` (None: the heuristics')."""
  program, _, _ = linearized(ast, target, opts, weights)
  return program_traffic(program)


def program_traffic(program: list[UOp]) -> Traffic:
  grid = [u for u in program if u.op is Ops.RANGE and u.arg.kind in _GRID]
  workers = [r for r in grid if r.arg.kind is not AxisType.GLOBAL]
  fixed = {r: np.asarray(_extent(r) // 2, np.int64) for r in grid if r.arg.kind is AxisType.GLOBAL}
  loops: list[UOp] = []
  loaded, executed, stored, addresses = 0, 0.0, 0, {}
  vector = scalar = 0
  for u in program:
    if u.op is Ops.RANGE and u.arg.kind not in _GRID: loops.append(u); continue
    if u.op is Ops.ENDRANGE: loops.remove(u.src[0]); continue
    if u.op not in (Ops.LOAD, Ops.STORE) or u.src[0].op is not Ops.DEFINE_GLOBAL: continue
    lanes = u.dtype.count if u.op is Ops.LOAD else u.src[2].dtype.count
    if u.op is Ops.LOAD: vector, scalar = vector + (lanes > 1), scalar + (lanes == 1)
    axes = workers + loops
    env = dict(fixed)
    for i, r in enumerate(axes):
      n = _extent(r) if r in workers else min(_extent(r), SAMPLE)
      env[r] = np.arange(n, dtype=np.int64).reshape([-1 if j == i else 1 for j in range(len(axes))])
    shape = [(_extent(r) if r in workers else min(_extent(r), SAMPLE)) for r in axes]
    gate = load_gate(u) if u.op is Ops.LOAD else store_gate(u)
    valid = np.broadcast_to(evaluate(gate, env), shape).reshape(-1) if gate is not None else \
      np.ones(math.prod(shape), bool)
    count = int(valid.sum()) * lanes
    if u.op is Ops.STORE: stored += count; continue
    sampled = math.prod(_extent(r) / min(_extent(r), SAMPLE) for r in loops)    # every iteration, not the sample
    loaded += count
    executed += count * sampled
    base = np.broadcast_to(evaluate(u.src[1], env), shape).reshape(-1)[valid]
    where = (base[:, None] + np.arange(lanes)).reshape(-1)
    addresses.setdefault(u.src[0].arg[0], []).append(where)
  distinct = sum(np.unique(np.concatenate(a)).size for a in addresses.values())
  return Traffic(executed / max(stored, 1), loaded / max(distinct, 1), vector, scalar)


def _extent(r: UOp) -> int:
  """A loop's length (over a size known only at run time: its largest)."""
  return int(r.src[0].vmax)
