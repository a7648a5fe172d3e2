"""Shapes of lazy-graph nodes, derived from their op and args. A dim is an int or, known only at run time, an
`ir.sint` expression."""
from __future__ import annotations
from tgc.ir.ops import Ops, GroupOp
from tgc.ir.sint import simplified
from tgc.ir.uop import set_shape_rule


def shape_of(u) -> tuple:
  if u.op is Ops.BUFFER: return tuple(u.arg[1])
  if u.op in (Ops.CONST, Ops.DEFINE_VAR): return ()
  if u.op is Ops.ARANGE: return (u.arg,)
  if u.op in (Ops.RESHAPE, Ops.EXPAND): return tuple(u.arg)
  if u.op is Ops.PERMUTE: return tuple(u.src[0].shape[i] for i in u.arg)
  if u.op is Ops.PAD: return tuple(simplified(s + b + a) for s, (b, a) in zip(u.src[0].shape, u.arg))
  if u.op is Ops.SHRINK: return tuple(simplified(e - b) for b, e in u.arg)
  if u.op in (Ops.FLIP, Ops.CONTIGUOUS): return u.src[0].shape
  if u.op is Ops.REDUCE_AXIS:
    return tuple(1 if i in u.arg[1] else s for i, s in enumerate(u.src[0].shape))
  if u.op in GroupOp.Elementwise:
    shapes = {tuple(s.shape) for s in u.src}
    if len(shapes) != 1: raise ValueError(f"{u.op.name}: source shapes differ: {sorted(shapes)}")
    return shapes.pop()
  raise ValueError(f"{u.op.name} has no tensor shape")


set_shape_rule(shape_of)
