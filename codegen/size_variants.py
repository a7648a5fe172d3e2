"""Kernels for small values of a size known only at run time. The CPU heuristics size a register block of a loop
over such a size for the middle of its range (`Kernel.size`); when the size is much smaller in a run (a decoder's
one new token against a prompt of hundreds), the block's copies past the end compute nothing useful. A kernel with
such a block gets a variant without it, run when the size is at most half the block (`small_size_opts`); it reads
the same buffers in the same layout, so it shares the weights (checked by the caller)."""
from __future__ import annotations
from dataclasses import dataclass
from tgc.ir import Ops, UOp
from tgc.codegen.opts import OPT_KINDS, Kernel, Opt, OptError, OptOps


@dataclass(frozen=True)
class SmallSize:
  opts: list[Opt]       # the kernel's opts without the blocks over sizes known at run time
  extent: UOp           # the length of the first such blocked loop (a size expression)
  block: int            # its block: the variant runs when 2 * extent <= block


def small_size_opts(ast: UOp, opts: list[Opt]) -> SmallSize | None:
  """The opts of a kernel without its UPCASTs of loops over a size known at run time, or None when it has none.
  Dropping one leaves the other opts' axis numbers as they were (such a loop keeps its outer part)."""
  k, kept, first = Kernel(ast), [], None
  for o in opts:
    if o.op is OptOps.UPCAST:
      axes = k.axes(OPT_KINDS[o.op][0])
      end = axes[o.axis].src[0] if 0 <= o.axis < len(axes) else None
      if end is not None and end.op is not Ops.CONST:
        first = first or (end, o.amount)
        try: k = k.apply(o)
        except OptError: return None
        continue
    kept.append(o)
    try: k = k.apply(o)
    except OptError: return None
  return SmallSize(kept, *first) if first else None
