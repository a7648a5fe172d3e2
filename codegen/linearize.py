"""The linearizer: turns a kernel graph (after expansion and vectorization) into a flat program in execution order.

Grid ranges (work-item indices on GPUs) come first. Every other range is a loop: the output loops (C's global ranges)
open in range order around the stores, and each group of REDUCEs sharing their loops becomes accumulators
(DEFINE_ACC), a loop nest (RANGE ... ENDRANGE) with its body and ASSIGNs (a DOT body adds into its accumulator: the
ASSIGN stores DOT(a, b, acc) as it is). Values are placed in the outermost loop
that contains everything they depend on: address arithmetic and whatever a reduction body needs are hoisted out
of the loops they do not depend on; the rest is computed where it is first used. The result is what renderers
walk."""
from __future__ import annotations
from typing import Callable
from tgc.ir import Ops, UOp, AxisType, dtypes
from tgc.codegen.expand import COMBINE

_IDENTITY = {Ops.ADD: 0, Ops.MUL: 1}
INDEX = dtypes.index


def reduce_identity(op: Ops, dtype):
  if op in _IDENTITY: return _IDENTITY[op]
  if dtype.is_float: return -float("inf")
  if dtype.is_bool: return False
  return 0 if dtype.is_unsigned else -(1 << (8 * dtype.itemsize - 1))


def loop_dependencies(nodes: list[UOp], is_loop: Callable[[UOp], bool]) -> dict[UOp, frozenset]:
  """The loops each of `nodes` (a toposort) depends on: the RANGEs `is_loop` accepts that it reads (a REDUCE closes
  its own ranges)."""
  deps: dict[UOp, frozenset] = {}
  for n in nodes:
    if n.op is Ops.RANGE and is_loop(n): deps[n] = frozenset([n])
    elif n.op is Ops.REDUCE: deps[n] = deps[n.src[0]] - frozenset(n.src[1:])
    else: deps[n] = frozenset().union(*(deps[s] for s in n.src)) if n.src else frozenset()
  return deps


class _Linearizer:
  def __init__(self, sink: UOp, grid_kinds: tuple[AxisType, ...]):
    self.nodes = sink.toposort()
    self.position = {n: i for i, n in enumerate(self.nodes)}
    self.grid_kinds = grid_kinds
    self.deps = loop_dependencies(self.nodes, lambda r: r.arg.kind not in grid_kinds)
    self.groups: dict[tuple, list[UOp]] = {}
    for n in self.nodes:
      if n.op is Ops.REDUCE: self.groups.setdefault(tuple(n.src[1:]), []).append(n)
    # reduction bodies that add into their accumulator themselves: emitted only as part of their ASSIGN
    self.fused = {n.src[0] for n in self.nodes if n.op is Ops.REDUCE and _accumulating(n.src[0])}
    self.out: list[UOp] = []
    self.emitted: set[UOp] = set()
    self.open: set[UOp] = set()
    self.accs: dict[UOp, UOp] = {}

  def run(self, sink: UOp) -> list[UOp]:
    grid = sorted((n for n in self.nodes if n.op is Ops.RANGE and n.arg.kind in self.grid_kinds),
                  key=lambda r: (r.arg.kind is not AxisType.GLOBAL, r.arg.id))
    for g in grid: self.emit(g.src[0])
    self.out += grid
    self.emitted |= set(grid)
    owned = {r for rs in self.groups for r in rs}
    outer = sorted({n for n in self.nodes if n.op is Ops.RANGE and n.arg.kind not in self.grid_kinds} - owned,
                   key=lambda r: r.arg.id)
    stores = [s for s in sink.src]
    self._nest(outer, stores, hoist_all=False)
    for s in stores: self.emit(s)
    return self.out

  def _within(self, stores: list[UOp]) -> list[UOp]:
    """Every node the roots need, in graph order (reduce bodies included)."""
    seen, stack = set(), list(stores)
    while stack:
      n = stack.pop()
      if n in seen or n in self.emitted: continue
      seen.add(n)
      stack.extend(n.src)
    return sorted(seen, key=self.position.__getitem__)

  def _nest(self, loops: list[UOp], roots: list[UOp], hoist_all: bool) -> None:
    """Open `loops` one by one; after each, emit what `roots` need that depends on nothing deeper: everything for a
    reduction body (`hoist_all`), address arithmetic otherwise (values are computed where they are used)."""
    body = self._within(roots)
    for r in loops:
      self.emit(r.src[0])        # a loop over a size known only at run time: its length first
      self.out.append(r)
      self.emitted.add(r)
      self.open.add(r)
      for n in body:
        if n in self.emitted or n in self.fused or n.op in (Ops.REDUCE, Ops.STORE, Ops.SINK, Ops.RANGE): continue
        if not self.deps[n] <= self.open: continue
        if hoist_all or n.dtype == INDEX: self.emit(n)

  def emit(self, n: UOp) -> None:
    if n in self.emitted or n.op is Ops.CONST: return
    if n.op is Ops.REDUCE:
      self._group(tuple(n.src[1:]))
      return
    for s in n.src: self.emit(s)
    if n.op is Ops.SINK: return
    self.emitted.add(n)
    self.out.append(n)

  def _group(self, rs: tuple) -> None:
    reds = self.groups[rs]
    for red in reds:
      acc = UOp(Ops.DEFINE_ACC, red.dtype, (UOp.const(red.dtype.scalar, reduce_identity(red.arg, red.dtype.scalar)),),
                len(self.accs))
      self.accs[red] = acc
      self.out.append(acc)
    loops = [r for r in rs if r.arg.kind not in self.grid_kinds]
    shared = [r for r in rs if r.arg.kind in self.grid_kinds]
    bodies = [red.src[0] for red in reds]
    # what the body needs from outside the loops is computed before them
    for n in self._within(bodies):
      if n.op not in (Ops.REDUCE, Ops.RANGE) and n not in self.fused and self.deps[n] <= self.open: self.emit(n)
    self._nest(loops, bodies, hoist_all=True)
    for b in bodies:
      for n in (b.src if b in self.fused else (b,)): self.emit(n)
    for red in reds: self.out.append(UOp(Ops.ASSIGN, red.dtype, (self.accs[red], self._accumulated(red)), red))
    for r in reversed(loops):
      self.out.append(UOp(Ops.ENDRANGE, dtypes.bool, (r,)))
      self.open.discard(r)
    if shared: self.out.extend(_workgroup_reduce(reds, self.accs, shared, len(self.accs)))
    self.emitted |= set(reds)

  def _accumulated(self, red: UOp) -> UOp:
    """What the ASSIGN of `red` stores: its body, combined with the accumulator by the renderer; or a DOT that adds
    into the accumulator itself (emitted here: acc = DOT(a, b, acc))."""
    body = red.src[0]
    if body not in self.fused: return body
    fused = body.replace(src=body.src + (self.accs[red],))
    self.out.append(fused)
    return fused


def _accumulating(body: UOp) -> bool:
  """A reduction body the dot-product instruction sums into the accumulator itself (the renderer stores it as is)."""
  return body.op is Ops.DOT and len(body.src) % 2 == 0


def _computed(u: UOp, done: set[UOp]) -> list[UOp]:
  """`u` after those of its sources not computed yet (ranges, constants, buffers and barriers are not computed)."""
  out = []
  for n in u.toposort():
    if n in done or n.op in (Ops.CONST, Ops.RANGE, Ops.DEFINE_LOCAL, Ops.DEFINE_GLOBAL, Ops.BARRIER): continue
    done.add(n)
    out.append(n)
  return out


def linearize(sink: UOp, grid_kinds: tuple[AxisType, ...] = (AxisType.GLOBAL, AxisType.LOCAL)) -> list[UOp]:
  """`grid_kinds`: range kinds that are work-item indices rather than loops (none on CPUs). When GROUP is among
  them, a REDUCE over a group range finishes with a work-group reduction through local memory. Output loops that
  stay open around the stores are closed at the end of the program."""
  return _Linearizer(sink, grid_kinds).run(sink)


def _workgroup_reduce(reds: list[UOp], accs: dict, shared: list[UOp], n_acc: int) -> list[UOp]:
  """Each work-item's partial result goes to local memory and the partials are combined as a tree: at each step
  the first half of the work-items adds (multiplies, maxes) the second half's partials into theirs, with a barrier
  between steps (every work-item reaches every barrier: uniform control flow, as browsers require), then every
  work-item reads the total; the stores are gated to the first work-item by `lower`. A group size that is not a
  power of two first folds the part above the largest power of two below it. The local buffer is indexed by the
  group axis alone, so no other axis may be split into the work-group. Each barrier is its own node (`arg`: its
  step), and the loads after it name it, so every read is ordered after the writes it needs."""
  if len(shared) != 1: raise ValueError("a reduction split across work-items supports one GROUP axis")
  g = shared[0]
  size = g.src[0].arg
  out: list[UOp] = []
  temps = []
  for i, red in enumerate(reds):
    tmp = UOp(Ops.DEFINE_LOCAL, red.dtype, (), (f"temp{n_acc + i}", size))
    temps.append(tmp)
    out += [tmp, UOp(Ops.STORE, dtypes.bool, (tmp, g, accs[red]))]
  barrier = UOp(Ops.BARRIER, dtypes.bool, (), (n_acc, 0))
  out.append(barrier)
  done: set[UOp] = set()
  live, step = size, 1
  while live > 1:
    half = 1 << ((live - 1).bit_length() - 1)          # the largest power of two below `live`
    gate = g.lt(live - half)                           # partials [half, live) fold into [0, live - half)
    partner = gate.where(g + half, g)                  # in bounds for every work-item; used only where gated
    for red, tmp in zip(reds, temps):
      mine, theirs = UOp(Ops.LOAD, red.dtype, (tmp, g, barrier)), UOp(Ops.LOAD, red.dtype, (tmp, partner, barrier))
      out += _computed(UOp(Ops.STORE, dtypes.bool, (tmp, g, COMBINE[red.arg](mine, theirs), gate)), done)
    barrier = UOp(Ops.BARRIER, dtypes.bool, (), (n_acc, step))
    out.append(barrier)
    live, step = half, step + 1
  for i, (red, tmp) in enumerate(zip(reds, temps)):
    acc = UOp(Ops.DEFINE_ACC, red.dtype, (UOp.const(red.dtype, reduce_identity(red.arg, red.dtype)),), n_acc + i)
    out += [acc, ld := UOp(Ops.LOAD, red.dtype, (tmp, UOp.const(INDEX, 0), barrier)),
            UOp(Ops.ASSIGN, red.dtype, (acc, ld), red)]
  return out
