"""Loop axes of a kernel: the kind of each RANGE (`AxisType`) and the typed RANGE argument (`RangeArg`).

A kernel AST loops over RANGE nodes. Their kind says how the loop is realized: GLOBAL and LOCAL are work-item indices
on GPUs and plain loops on CPUs; REDUCE is a reduction loop; UPCAST and UNROLL are expanded into straight-line copies;
VECTOR is one SIMD vector of lanes; GROUP is a reduction split across a work-group."""
from __future__ import annotations
from dataclasses import dataclass
from enum import Enum


class AxisType(Enum):
  GLOBAL = "global"      # an output axis: work-groups on GPUs, a loop on CPUs
  LOCAL = "local"        # an output axis split into the work-group (GPUs)
  GROUP = "group"        # a reduce axis split across the work-group, combined through workgroup memory (GPUs)
  REDUCE = "reduce"      # a reduction loop
  UPCAST = "upcast"      # an output axis expanded into registers (straight-line copies)
  UNROLL = "unroll"      # a reduce axis expanded into straight-line copies
  VECTOR = "vector"      # an output or reduce axis held in the lanes of one SIMD vector

  def __repr__(self): return f"AxisType.{self.name}"

  @property
  def is_reduce(self) -> bool: return self in (AxisType.REDUCE, AxisType.UNROLL, AxisType.GROUP)


# axis kinds that are work-item indices on GPUs (never loops there)
GRID_AXES = (AxisType.GLOBAL, AxisType.LOCAL, AxisType.GROUP)


@dataclass(frozen=True, order=True)
class RangeArg:
  """The argument of a RANGE: its number in the kernel (loops are ordered by it), its kind, the number of the range it
  was split from (inner parts of an opt), and the launch dimension a grid range was given by lowering (GPUs)."""
  id: int
  kind: AxisType
  parent: int | None = None
  dim: int | None = None

  def __repr__(self):
    extra = (f", parent={self.parent}" if self.parent is not None else "") + \
            (f", dim={self.dim}" if self.dim is not None else "")
    return f"RangeArg({self.id}, {self.kind!r}{extra})"

  def replace(self, **kw) -> RangeArg:
    return RangeArg(kw.get("id", self.id), kw.get("kind", self.kind), kw.get("parent", self.parent),
                    kw.get("dim", self.dim))
