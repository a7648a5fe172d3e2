"""Workgroup-memory tiles (GPUs): what a work-group reads from global memory in one step of its reduction loop is
loaded once, cooperatively, into workgroup memory (`var<workgroup>`, `__local`, `__shared__`, `threadgroup`), and
every work-item reads its operands from there.

Only reductions that are unrolled (an UNROLL of at least TILE_MIN_UNROLL copies: a step's two barriers and its fill
are paid for by that many multiply-adds per work-item) are staged. A load in such a reduction body is staged when its
index moves with the innermost reduction loop (it changes every step) and it does not depend on some LOCAL axis:
the work-items along that axis would each read the same element from global memory (matmul's rows shared by the
work-items of one column, a convolution's input pixels by those computing other output channels). Its tile holds
one element per value of the work-group axes, upcast and unroll copies and vector lanes the index depends on
(`TILE_KINDS`), laid out with the index's smallest stride innermost, so that consecutive work-items fill
consecutive addresses (coalesced; weights are stored in that order by codegen/relayout.py). Tiles are chosen by
reuse until the target's workgroup memory is spent.

Each step of the innermost reduction loop (with no loop left, the reduction unrolled whole: once, before it) then
runs: a barrier (everyone is done with the last step's tiles), the
fill (element e of a tile by work-item e mod work-group size, straight-line copies until the tile is full; the
load's own validity gate gives padding zeros; contiguous 16-byte aligned tiles are filled with vector loads), a
barrier, the computation reading the tiles. Both barriers sit in
the loop body in uniform control flow; the fill's tail is a gated store, never a gated barrier. The order is data:
each fill store names the first barrier (its last source), the second barrier's sources are the fill stores, and
every read of a tile names the second barrier (`LOAD(tile, index, barrier)`), so the linearizer places them in that
order inside the loop."""
from __future__ import annotations
import math
from tgc.ir import Ops, UOp, AxisType, dtypes, substitute
from tgc.ir.symbolic import simplify, split_terms
from tgc.codegen.knobs import GPU_LANES, TILE_MIN_REUSE, TILE_MIN_UNROLL
from tgc.codegen.target import Target
from tgc.codegen.render import get_renderer

INDEX = dtypes.index
TILE_KINDS = (AxisType.LOCAL, AxisType.UPCAST, AxisType.UNROLL, AxisType.VECTOR)
UNIFORM_KINDS = (AxisType.GLOBAL, AxisType.REDUCE)     # the same for every work-item of a work-group in one step


def _ranges(u: UOp) -> set[UOp]: return {n for n in u.toposort() if n.op is Ops.RANGE}


def _stride(idx: UOp, r: UOp) -> float:
  """|step| of idx per step of r when idx is affine in r, else infinity (placed outside)."""
  terms, _ = split_terms(idx)
  if r in terms and not any(t is not r and r in t.toposort() for t in terms): return abs(terms[r])
  return math.inf


def thread_id(locals_: list[UOp]) -> UOp:
  """The flat work-item index of the work-group: launch dimension 0 fastest (the LOCAL of the last global axis)."""
  tid, mult = UOp.const(INDEX, 0), 1
  for r in sorted(locals_, key=lambda r: -(r.arg.parent if r.arg.parent is not None else r.arg.id)):
    tid, mult = tid + r * mult, mult * r.src[0].arg
  return tid


def stage(ast: UOp, target: Target) -> UOp:
  """`ast` (opts applied, weights relaid, before expansion) with its worth-staging loads read from workgroup
  memory tiles filled once per step of the innermost reduction loop."""
  if not target.has_workgroups or not target.workgroup_tiles or target.shared_bytes <= 0: return ast
  rs = sorted(_ranges(ast), key=lambda r: r.arg.id)
  locals_ = [r for r in rs if r.arg.kind is AxisType.LOCAL]
  if not locals_ or any(r.arg.kind is AxisType.GROUP for r in rs): return ast
  reds = [n for n in ast.toposort() if n.op is Ops.REDUCE]
  if not reds or len({red.src[1:] for red in reds}) != 1: return ast
  loops = [r for r in reds[0].src[1:] if r.arg.kind is AxisType.REDUCE]
  unrolled = math.prod(r.src[0].arg for r in reds[0].src[1:] if r.arg.kind is AxisType.UNROLL)
  if unrolled < TILE_MIN_UNROLL: return ast
  # the loop whose steps refill the tiles (none: a reduction unrolled whole is filled once, before it)
  inner = max(loops, key=lambda r: r.arg.id) if loops else None
  wg = math.prod(r.src[0].arg for r in locals_)
  picked, budget = [], target.shared_bytes
  for reuse, ld, tile in sorted(_candidates(reds, locals_, inner), key=lambda c: (-c[0], c[1].key)):
    nbytes = math.prod(r.src[0].arg for r in tile) * ld.dtype.itemsize
    if nbytes <= budget: picked.append((ld, tile)); budget -= nbytes
  if not picked: return ast
  first = UOp(Ops.BARRIER, dtypes.bool, (inner,) if inner is not None else (), ("stage", 0))
  tid, fills, tiles = thread_id(locals_), [], []
  for n, (ld, tile) in enumerate(picked):
    order = sorted(tile, key=lambda r: (-_stride(ld.src[1], r), r.arg.id))     # smallest stride innermost
    sizes = [r.src[0].arg for r in order]
    buf = UOp(Ops.DEFINE_LOCAL, ld.dtype, (), (f"tile{n}", math.prod(sizes)))
    fills += _fill(ld, buf, order, sizes, tid, wg, first, target)
    pos, mult = UOp.const(INDEX, 0), 1
    for r, size in zip(reversed(order), reversed(sizes)): pos, mult = pos + r * mult, mult * size
    tiles.append((ld, buf, simplify(pos)))
  second = UOp(Ops.BARRIER, dtypes.bool, tuple(fills), ("stage", 1))
  return substitute(ast, {ld: UOp(Ops.LOAD, ld.dtype, (buf, pos, second)) for ld, buf, pos in tiles})


def _candidates(reds: list[UOp], locals_: list[UOp], inner: UOp | None) -> list[tuple[int, UOp, list[UOp]]]:
  """(reuse, load, tile ranges) of every load worth staging: a global 32-bit scalar load in a reduction body that
  moves with the innermost loop (with no loop: with the unrolled copies), depends only on uniform and tile axes,
  and is read alike by `reuse` >= TILE_MIN_REUSE work-items (the product of the LOCAL axes it does not depend on)."""
  out, seen = [], set()
  for red in reds:
    for ld in red.src[0].toposort():
      if ld.op is not Ops.LOAD or ld in seen or ld.src[0].op is not Ops.DEFINE_GLOBAL: continue
      seen.add(ld)
      if ld.dtype.count != 1 or ld.dtype.itemsize != 4 or ld.dtype.storage_only: continue
      deps = set().union(*(_ranges(s) for s in ld.src[1:]))
      moves = inner in deps if inner is not None else any(r.arg.kind is AxisType.UNROLL for r in deps)
      if not moves or any(r.arg.kind not in UNIFORM_KINDS + TILE_KINDS for r in deps): continue
      reuse = math.prod(r.src[0].arg for r in locals_ if r not in deps)
      tile = sorted((r for r in deps if r.arg.kind in TILE_KINDS), key=lambda r: r.arg.id)
      if reuse >= TILE_MIN_REUSE and tile: out.append((reuse, ld, tile))  # (no tile axis: one value, nothing to stage)
  return out


def _fill(ld: UOp, buf: UOp, order: list[UOp], sizes: list[int], tid: UOp, wg: int, after: UOp,
          target: Target) -> list[UOp]:
  """The stores filling `buf` with the values `ld` takes over its tile ranges: element e (row-major over `order`)
  by work-item e mod wg, ceil(size / wg) copies, the last gated where the tile ends. When the load's index steps
  through memory as the tile does (strides equal to the tile's row-major multipliers, as for weights stored in read
  order), element e is read at the index of the tile's first element plus e. When the tile's innermost axis is
  contiguous in memory, a multiple of 4 long and its first element provably 16-byte aligned (and no gate tells its
  elements apart), each work-item fills 4 consecutive elements with one vector load per copy."""
  size = math.prod(sizes)
  mults = [math.prod(sizes[i + 1:]) for i in range(len(sizes))]
  idx, gates = ld.src[1], ld.src[2:]
  terms = split_terms(idx)[0]
  linear = all(terms.get(r) == m and _stride(idx, r) == m for r, m in zip(order, mults))
  base = simplify(substitute(idx, {r: UOp.const(INDEX, 0) for r in order})) if linear else None

  def at(e: UOp) -> tuple[UOp, tuple[UOp, ...]]:
    """The index and gates of tile element e."""
    coords = {r: (e // m) % n if m > 1 else e % n for r, n, m in zip(order, sizes, mults)}
    gated = tuple(simplify(substitute(g, coords)) for g in gates)
    return (simplify(base + e) if linear else simplify(substitute(idx, coords))), gated

  inner = order[-1]
  if sizes[-1] % GPU_LANES == 0 and terms.get(inner) == 1 and _stride(idx, inner) == 1 and \
      not any(inner in _ranges(g) for g in gates):
    renderer = get_renderer(target)
    copies = [(tid + j * wg) * GPU_LANES for j in range(-(-size // (GPU_LANES * wg)))]
    places = [at(e) for e in copies]
    if all(renderer.vector_access(ld.src[0], index) for index, _ in places):
      return _vector_fill(ld, buf, copies, places, size, after, renderer)
  stores = []
  for j in range(-(-size // wg)):
    e = tid + j * wg
    index, gated = at(e)
    stores.append(_tile_store(buf, e, ld.replace(src=(ld.src[0], index) + _inside(gated, e, size)), e.lt(size),
                              after))
  return stores


def _vector_fill(ld: UOp, buf: UOp, copies: list[UOp], places: list[tuple], size: int, after: UOp,
                 renderer) -> list[UOp]:
  """The fill in 4-element vectors (one vector load each; a vector store where the language stores vectors into
  workgroup memory, else its 4 lanes)."""
  stores = []
  for e, (index, gated) in zip(copies, places):
    value = UOp(Ops.LOAD, ld.dtype.vec(GPU_LANES), (ld.src[0], index) + _inside(gated, e, size))
    if renderer.vector_access(buf, e): stores.append(_tile_store(buf, e, value, e.lt(size), after))
    else: stores += [_tile_store(buf, e + i, UOp(Ops.GEP, ld.dtype, (value,), i), e.lt(size), after)
                     for i in range(GPU_LANES)]
  return stores


def _inside(gates: tuple[UOp, ...], e: UOp, size: int) -> tuple[UOp, ...]:
  """The gates of the load filling tile element `e`, joined with `e < size` unless it always holds: a copy past the
  tile's end (a tile smaller than a multiple of the work-group) reads nothing, not past its buffer."""
  inside = simplify(e.lt(size))
  if inside.op is Ops.CONST and inside.arg: return gates
  return (gates[0].logical_and(inside),) + gates[1:] if gates else (inside,)


def _tile_store(buf: UOp, e: UOp, value: UOp, inside: UOp, after: UOp) -> UOp:
  """STORE(tile, e, value[, e inside the tile], barrier): ordered after the barrier."""
  gate = simplify(inside)
  tail = () if gate.op is Ops.CONST and gate.arg else (gate,)
  return UOp(Ops.STORE, dtypes.bool, (buf, simplify(e), value) + tail + (after,))
