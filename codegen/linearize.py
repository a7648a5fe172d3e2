"""The linearizer: turns a kernel graph (after expansion) into a flat program in execution order.
Global and local ranges open first; each group of REDUCEs sharing ranges becomes accumulators (DEFINE_ACC),
a loop nest (RANGE ... ENDRANGE) with its body and ASSIGNs; values that do not depend on a loop are computed
before it (hoisted). The result is what renderers walk."""
from __future__ import annotations
from ir import Ops, UOp, dtypes

_IDENTITY = {Ops.ADD: 0, Ops.MUL: 1}


def reduce_identity(op: Ops, dtype):
  if op in _IDENTITY: return _IDENTITY[op]
  if dtype.is_float: return -float("inf")
  if dtype.is_bool: return False
  return 0 if dtype.is_unsigned else -(1 << (8 * dtype.itemsize - 1))


def linearize(sink: UOp) -> list[UOp]:
  nodes = sink.toposort()
  # the loop ranges each node depends on (a REDUCE closes its own ranges)
  deps: dict[UOp, frozenset] = {}
  for n in nodes:
    if n.op is Ops.RANGE and n.arg[1] not in ("global", "local"): deps[n] = frozenset([n])
    elif n.op is Ops.REDUCE: deps[n] = deps[n.src[0]] - frozenset(n.src[1:])
    else: deps[n] = frozenset().union(*(deps[s] for s in n.src)) if n.src else frozenset()
  outer_ranges = sorted((n for n in nodes if n.op is Ops.RANGE and n.arg[1] in ("global", "local")),
                        key=lambda r: (r.arg[1] != "global", r.arg[0]))
  groups: dict[tuple, list[UOp]] = {}
  for n in nodes:
    if n.op is Ops.REDUCE: groups.setdefault(tuple(n.src[1:]), []).append(n)
  out: list[UOp] = list(outer_ranges)
  emitted: set[UOp] = set(outer_ranges)
  accs: dict[UOp, UOp] = {}

  def emit_group(rs: tuple):
    reds = groups[rs]
    for red in reds:
      acc = UOp(Ops.DEFINE_ACC, red.dtype, (UOp.const(red.dtype, reduce_identity(red.arg, red.dtype)),),
                len(accs))
      accs[red] = acc
      out.append(acc)
    body_nodes = [n for n in nodes if deps[n] and deps[n] <= frozenset(rs) and n.op is not Ops.RANGE]
    # values the body needs that do not depend on the loop are hoisted before it
    for n in nodes:
      if n in emitted or deps[n] or n.op in (Ops.REDUCE, Ops.SINK, Ops.STORE): continue
      if any(n in b.src for b in body_nodes): emit(n)
    for r in rs:
      out.append(r); emitted.add(r)
    for n in body_nodes: emit(n)
    for red in reds: out.append(UOp(Ops.ASSIGN, red.dtype, (accs[red], red.src[0]), red))
    for r in reversed(rs): out.append(UOp(Ops.ENDRANGE, dtypes.bool, (r,)))
    for red in reds: emitted.add(red)

  def emit(n: UOp):
    if n in emitted: return
    for s in n.src:
      if s not in emitted and not (n.op is Ops.REDUCE): emit(s)
    if n.op is Ops.REDUCE:
      emit_group(tuple(n.src[1:]))
      return
    if n.op is Ops.SINK: return
    emitted.add(n)
    out.append(n)

  for n in nodes:
    if not deps[n]: emit(n)
  return out
