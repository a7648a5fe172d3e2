"""The linearizer: turns a kernel graph (after expansion) into a flat program in execution order.
Global and local ranges open first; each group of REDUCEs sharing ranges becomes accumulators (DEFINE_ACC),
a loop nest (RANGE ... ENDRANGE) with its body and ASSIGNs; values that do not depend on a loop are computed
before it (hoisted). The result is what renderers walk."""
from __future__ import annotations
from tgc.ir import Ops, UOp, dtypes

_IDENTITY = {Ops.ADD: 0, Ops.MUL: 1}


def reduce_identity(op: Ops, dtype):
  if op in _IDENTITY: return _IDENTITY[op]
  if dtype.is_float: return -float("inf")
  if dtype.is_bool: return False
  return 0 if dtype.is_unsigned else -(1 << (8 * dtype.itemsize - 1))


def linearize(sink: UOp, grid_kinds: tuple[str, ...] = ("global", "local")) -> list[UOp]:
  """`grid_kinds`: range kinds that are work-item indices rather than loops. When "group" is among them, a
  REDUCE over a group range finishes with a work-group reduction through local memory."""
  nodes = sink.toposort()
  # the loop ranges each node depends on (a REDUCE closes its own ranges)
  deps: dict[UOp, frozenset] = {}
  for n in nodes:
    if n.op is Ops.RANGE and n.arg[1] not in grid_kinds: deps[n] = frozenset([n])
    elif n.op is Ops.REDUCE: deps[n] = deps[n.src[0]] - frozenset(n.src[1:])
    else: deps[n] = frozenset().union(*(deps[s] for s in n.src)) if n.src else frozenset()
  outer_ranges = sorted((n for n in nodes if n.op is Ops.RANGE and n.arg[1] in grid_kinds),
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
    loops = tuple(r for r in rs if r.arg[1] not in grid_kinds)
    shared = [r for r in rs if r.arg[1] in grid_kinds]
    body_nodes = [n for n in nodes if deps[n] and deps[n] <= frozenset(rs) and n.op is not Ops.RANGE]
    # values the body needs that do not depend on the loop are hoisted before it
    for n in nodes:
      if n in emitted or deps[n] or n.op in (Ops.REDUCE, Ops.SINK, Ops.STORE): continue
      if any(n in b.src for b in body_nodes): emit(n)
    for r in loops:
      out.append(r); emitted.add(r)
    for n in body_nodes: emit(n)
    for red in reds: out.append(UOp(Ops.ASSIGN, red.dtype, (accs[red], red.src[0]), red))
    for r in reversed(loops): out.append(UOp(Ops.ENDRANGE, dtypes.bool, (r,)))
    if shared: out.extend(_workgroup_reduce(reds, accs, shared, len(accs)))
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


def _workgroup_reduce(reds: list[UOp], accs: dict, shared: list[UOp], n_acc: int) -> list[UOp]:
  """Each work-item's partial result goes to local memory; after a barrier every work-item combines them
  (uniform control flow, as browsers require); the stores are gated to the first work-item by `lower`.
  The local buffer is indexed by the group axis alone, so no other axis may be split into the work-group."""
  if len(shared) != 1: raise ValueError("a reduction split across work-items supports one GROUP axis")
  g = shared[0]
  size = g.src[0].arg
  out: list[UOp] = []
  temps = []
  for i, red in enumerate(reds):
    tmp = UOp(Ops.DEFINE_LOCAL, red.dtype, (), (f"temp{n_acc + i}", size))
    temps.append(tmp)
    out += [tmp, UOp(Ops.STORE, dtypes.bool, (tmp, g, accs[red]))]
  out.append(UOp(Ops.BARRIER, dtypes.bool, ()))
  for i, (red, tmp) in enumerate(zip(reds, temps)):
    acc = UOp(Ops.DEFINE_ACC, red.dtype, (UOp.const(red.dtype, reduce_identity(red.arg, red.dtype)),), n_acc + i)
    r = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, size),), (10_000 + n_acc + i, "reduce"))
    ld = UOp(Ops.LOAD, red.dtype, (tmp, r))
    out += [acc, r, ld, UOp(Ops.ASSIGN, red.dtype, (acc, ld), red), UOp(Ops.ENDRANGE, dtypes.bool, (r,))]
  return out
