"""Hand-coded opts for GPU targets (work-groups): what `heuristics.hand_coded_opts` gives a target with work-groups.

1. Coalescing: the output axis the kernel's store is contiguous along becomes the last global axis (SWAP), which
   lowering maps to launch dimension 0: neighbouring work-items of a work-group then store (and mostly load)
   neighbouring elements.
2. Long reductions of few outputs, or long reductions that read each loaded element for one output only and along
   the contiguous axis of what they read (softmax, LayerNorm, row sums): the innermost reduce axis is split across a
   work-group (GROUP) and the partial results are combined in workgroup memory.
3. Vectors: when every value is 32-bit, the stores step one element along the last global axis and most loads
   are contiguous (weights count: they are stored in the order the kernel reads them) or broadcast along it, that
   axis is a VECTOR of 4 lanes (float4 / vec4 loads and stores where aligned, codegen/vectorize.py).
4. Other reductions (matmul, convolution) are register-blocked: up to two output axes along which a reduction load
   does not move are upcast (each loaded value is used by every copy), at most 64 accumulators (vector lanes
   included) per work-item, and the reduce axis the loads step along contiguously is unrolled by 8 or 4, which
   lets lowering stage the loads the work-items of a work-group share in workgroup memory (gpu_tiles.py).
5. Every kernel gets a work-group of 64 to 256 work-items (fewer when that would leave fewer than about 32
   work-groups, or the kernel has fewer work-items): LOCAL splits of the last global axes, from the contiguous one.
   A LOCAL amount need not divide its axis: the axis is padded and the tail guarded (opts.py); amounts are chosen
   to waste few padded work-items."""
from __future__ import annotations
import math
from tgc.ir import Ops, UOp, AxisType
from tgc.codegen.opts import Kernel, Opt, OptOps, divisors
from tgc.codegen.target import Target
from tgc.codegen.knobs import (BLOCK_SLACK, GPU_LANES, GPU_UNROLL, GROUP_FEW_OUTPUTS, GROUP_MIN_LOOP, MAX_ACCUMULATORS,
                               MAX_GATHER_SHARE, MAX_WASTE, MIN_GROUPS, MIN_ITEMS, WORKGROUP)
from tgc.codegen.kernel_access import (block_cost, depends, lanes_are_32bit, reduce_body_loads,
                                       stride, try_opt)

G, R = (AxisType.GLOBAL,), (AxisType.REDUCE,)


def _stores(k: Kernel) -> list[UOp]: return [n for n in k.ast.src if n.op is Ops.STORE]


def _contiguous_axis(k: Kernel) -> int | None:
  """The global axis every store of the kernel steps through memory by one element along."""
  glob = k.axes(G)
  for i, r in enumerate(glob):
    if all(stride(st.src[1], r) == 1 for st in _stores(k)): return i
  return None


def coalesce(k: Kernel) -> Kernel:
  """SWAP the store's contiguous axis to the last place among the global axes (launch dimension 0)."""
  glob, c = k.axes(G), _contiguous_axis(k)
  if c is None or c == len(glob) - 1: return k
  return try_opt(k, Opt(OptOps.SWAP, c, len(glob) - 1))


def group_reduce(k: Kernel, target: Target) -> Kernel | None:
  """GROUP the innermost reduce axis when the reduction is long and has few outputs or reads along its own
  contiguous axis; None when the kernel is not such a reduction."""
  red = k.axes(R)
  if not red: return None
  loop, outputs, last = math.prod(Kernel.size(r) for r in red), math.prod(Kernel.size(r) for r in k.axes(G)), red[-1]
  loads = reduce_body_loads(k)
  along = any(stride(ld.src[1], last) == 1 for ld in loads)
  reuse = any(Kernel.size(r) > 1 and not depends(ld.src[1], r) for ld in loads for r in k.axes(G))
  if loop < GROUP_MIN_LOOP or Kernel.size(last) < 32: return None
  if outputs > GROUP_FEW_OUTPUTS and (reuse or not along): return None
  n, limit = Kernel.size(last), min(target.max_local_items, target.max_local_size[0], WORKGROUP)
  # the largest work-group that still leaves each work-item a few elements to combine, a power of two if it can
  for want in (limit, limit // 2, limit // 4):
    if want >= 32 and n % want == 0 and n // want >= 2: return try_opt(k, Opt(OptOps.GROUP, len(red) - 1, want))
  amounts = [d for d in range(min(limit, n // 2), 31, -1) if n % d == 0]
  return try_opt(k, Opt(OptOps.GROUP, len(red) - 1, amounts[0])) if amounts else None


def pick_vector(k: Kernel, constant: frozenset) -> Kernel:
  """VECTOR 4 along the last global axis when the kernel's values are all 32-bit, its stores are contiguous along
  it and, split so, few of its memory accesses would be lane by lane (an access contiguous in each group of 4, as
  in a layout of 16-element panels, is a vector)."""
  glob = k.axes(G)
  if not glob or Kernel.size(glob[-1]) % GPU_LANES or not lanes_are_32bit(k): return k
  if not all(stride(st.src[1], glob[-1]) == 1 for st in _stores(k)): return k
  trial = try_opt(k, Opt(OptOps.VECTOR, len(glob) - 1, GPU_LANES))
  if trial is k or _lane_share(trial, constant) > MAX_GATHER_SHARE: return k
  return trial


def _lane_share(k: Kernel, constant: frozenset) -> float:
  """The share of the memory accesses of `k` (reduction loads weighted by their loop) that its VECTOR axis makes
  lane by lane: gated per lane, or not contiguous in the lanes (weights this kernel alone reads count as
  contiguous: they are stored in its read order)."""
  from tgc.codegen.vectorize import contiguous_base
  v = next(r for r in k.ranges() if r.arg.kind is AxisType.VECTOR)
  hot = set(reduce_body_loads(k))
  loop = math.prod(Kernel.size(r) for r in k.axes(R)) or 1
  bad = total = 0
  for n in k.ast.toposort():
    if n.op not in (Ops.LOAD, Ops.STORE): continue
    weight = loop if n in hot else 1
    total += weight
    idx, gates = n.src[1], n.src[3:] if n.op is Ops.STORE else n.src[2:]
    if any(depends(g, v) for g in gates): bad += weight
    elif n.op is Ops.LOAD and n.src[0].arg[0] in constant: continue
    elif depends(idx, v) and contiguous_base(idx, v) is None: bad += weight
  return bad / max(total, 1)


def register_block(k: Kernel) -> Kernel:
  """Upcast up to two output axes that reduction loads are shared along, by the amounts (2..8, dividing the axis)
  that need the fewest loads per accumulation, with at most MAX_ACCUMULATORS accumulators and enough work-items
  left for a few work-groups. Of the blocks within BLOCK_SLACK of the fewest loads, the one with the fewest
  accumulators is taken: every copy is shader code a browser compiles as the page loads (SwiftShader: about 12 ms
  per KB) and registers a GPU holds, so a copy that saves few loads is not worth it (a matmul keeps its 4x4 block; a
  3x3 convolution, whose copies share only the weight's load, gets a smaller one)."""
  hot = reduce_body_loads(k)
  glob = k.axes(G)
  items = math.prod(Kernel.size(r) for r in glob)
  lanes = math.prod(Kernel.size(r) for r in k.ranges() if r.arg.kind is AxisType.VECTOR)
  cands = [(i, r) for i, r in enumerate(glob) if Kernel.size(r) > 1 and any(not depends(ld.src[1], r) for ld in hot)]
  loop = math.prod(Kernel.size(r) for r in k.axes(R))
  blocks = []      # (loads per accumulation, accumulators, first axis, second axis, [(axis, amount)])
  for a in range(len(cands)):
    for b in range(a, len(cands)):
      (ia, ra), (ib, rb) = cands[a], cands[b]
      for na in divisors(Kernel.size(ra), 8):
        for nb in (divisors(Kernel.size(rb), 8) if b != a else [1]):
          n = na * nb
          if n < 2 or n * lanes > MAX_ACCUMULATORS or items // n < MIN_ITEMS * 4: continue
          cost = block_cost(hot, {ra: na, rb: nb} if b != a else {ra: na}, loop, 1 << 62, None)
          if cost is not None: blocks.append((cost, n, a, b, [(ia, na), (ib, nb)] if b != a else [(ia, na)]))
  if not blocks: return k
  fewest = min(cost for cost, *_ in blocks)
  near = [blk for blk in blocks if blk[0] <= fewest * BLOCK_SLACK]
  best = min(near, key=lambda blk: (blk[1], blk[0], blk[2], blk[3]))[4]
  for i, n in sorted(best, reverse=True):    # the later axis first: the earlier one's number stays valid
    if n > 1: k = try_opt(k, Opt(OptOps.UPCAST, i, n))
  return k


def unroll_reduce(k: Kernel) -> Kernel:
  """UNROLL the reduce axis the reduction's loads step along contiguously (else the innermost) by 8 or 4 when the
  reduction is long: more multiply-adds per loop step, and per step of workgroup-memory tiles (gpu_tiles.py). When
  no reduce axis is a multiple of 4 (a 3x3 or 7x7 window over 1 or 3 channels), the short axes (up to 8) are
  unrolled whole, innermost first, until there are at least 4 copies."""
  red = k.axes(R)
  if not red or math.prod(Kernel.size(r) for r in red) < 4: return k
  loads = reduce_body_loads(k)
  order = sorted(range(len(red)), key=lambda i: (not any(stride(ld.src[1], red[i]) == 1 for ld in loads), -i))
  if math.prod(Kernel.size(r) for r in red) >= 4 * GPU_UNROLL[-1]:
    for i in order:
      for amt in GPU_UNROLL:
        if Kernel.size(red[i]) % amt == 0: return try_opt(k, Opt(OptOps.UNROLL, i, amt))
  copies = 1
  for i in sorted(range(len(red)), reverse=True):      # the later axis first: the earlier ones keep their numbers
    if copies >= GPU_UNROLL[-1]: break
    if 1 < Kernel.size(red[i]) <= GPU_UNROLL[0]:
      k, copies = try_opt(k, Opt(OptOps.UNROLL, i, Kernel.size(red[i]))), copies * Kernel.size(red[i])
  return k




def _local_amount(n: int, budget: int, cap: int) -> int:
  """Work-items of a LOCAL split of an axis of n (about `budget`, at most `cap`): the whole axis if it fits in
  twice the budget, else the largest amount up to the budget whose padding wastes at most MAX_WASTE (multiples of
  32 preferred, then any)."""
  if n <= min(2 * budget, cap): return n
  for step in (32, 16, 8, 1):
    for amt in range(budget - budget % step, step - 1 if step > 1 else 1, -step):
      if amt > 1 and -(-n // amt) * amt <= MAX_WASTE * n: return amt
  return budget


def local_split(k: Kernel, target: Target, square: bool = False) -> Kernel:
  """LOCAL splits of the global axes, last first, up to a work-group of `WORKGROUP` work-items (fewer when the
  kernel would have fewer than MIN_GROUPS work-groups). `square` (register-blocked reductions): the last axis gets
  about the square root of the work-group, the next the rest, so that what one work-group reads of each operand
  (a tile, gpu_tiles.py) is shared by many of its work-items."""
  glob = k.axes(G)
  items = math.prod(Kernel.size(r) for r in glob)
  if items < 2: return k
  size = min(WORKGROUP, target.max_local_items)
  while size > MIN_ITEMS and items / size < MIN_GROUPS: size //= 2
  # a LOCAL on the i-th last axis gets that axis's launch dimension (limits x, y, z); axes with a LOCAL split keep a
  # launch dimension each, and the others must still fold into one at least
  dims = list(target.max_local_size)[:target.grid_dims]
  most = len(dims) if len(glob) <= len(dims) else len(dims) - 1
  used = 1
  for pos, r in enumerate(reversed(glob)):
    if pos >= most or used >= MIN_ITEMS or size // used < 2: break
    cap = min(dims[pos], target.max_local_items // used, WORKGROUP // used)
    want = size // used if not (square and pos == 0) else 1 << (max(size, 1).bit_length() - 1) // 2
    amt = _local_amount(Kernel.size(r), min(want, cap), cap)
    if amt < 2: continue
    k = try_opt(k, Opt(OptOps.LOCAL, len(glob) - 1 - pos, amt))
    used *= amt
  return k


def gpu_opts(k: Kernel, target: Target, constant: frozenset = frozenset()) -> list[Opt]:
  """`constant`: argument positions of weights only this kernel reads (lowering stores them in its read order)."""
  k = coalesce(k)
  reduce = any(n.op is Ops.REDUCE for n in k.ast.toposort())
  if reduce:
    grouped = group_reduce(k, target)
    if grouped is not None and any(o.op is OptOps.GROUP for o in grouped.opts): return grouped.opts
  k = pick_vector(k, constant)
  blocked = False
  if reduce:
    blocked_k = register_block(k)
    blocked, k = blocked_k.opts != k.opts, unroll_reduce(blocked_k)
  return local_split(k, target, square=blocked and sum(Kernel.size(r) > 1 for r in k.axes(G)) >= 2).opts
