"""Shapes of lazy-graph nodes, derived from their op and args."""
from __future__ import annotations
from tgc.ir.ops import Ops, GroupOp


def shape_of(u) -> tuple[int, ...]:
  if u.op is Ops.BUFFER: return tuple(u.arg[1])
  if u.op is Ops.CONST: return ()
  if u.op is Ops.ARANGE: return (u.arg,)
  if u.op in (Ops.RESHAPE, Ops.EXPAND): return tuple(u.arg)
  if u.op is Ops.PERMUTE: return tuple(u.src[0].shape[i] for i in u.arg)
  if u.op is Ops.PAD: return tuple(s + b + a for s, (b, a) in zip(u.src[0].shape, u.arg))
  if u.op is Ops.SHRINK: return tuple(e - b for b, e in u.arg)
  if u.op in (Ops.FLIP, Ops.CONTIGUOUS): return u.src[0].shape
  if u.op is Ops.REDUCE_AXIS:
    return tuple(1 if i in u.arg[1] else s for i, s in enumerate(u.src[0].shape))
  if u.op in GroupOp.Elementwise:
    shapes = {s.shape for s in u.src}
    if len(shapes) != 1: raise ValueError(f"{u.op.name}: source shapes differ: {sorted(shapes)}")
    return shapes.pop()
  raise ValueError(f"{u.op.name} has no tensor shape")
