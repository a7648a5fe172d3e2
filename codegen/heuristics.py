"""Hand-coded opt choices (the default when BEAM is off), made by asking the target.

CPUs get micro-kernels. The VECTOR axis is the output axis whose loads and store are cheapest as SIMD vectors:
contiguous or broadcast for every big load (weights count as contiguous: they are stored in the order the kernel
reads them) and for the store; failing that, a contiguous reduce axis (row reductions). Kernels with a reduction are
register-blocked: output axes along which a reduction load does not move are upcast (matmul's rows, a convolution's
output pixels; the vector axis itself for a second or third vector), filling about the target's vector registers
with accumulators. The loop over the reduce axis that every gate (padding) ignores goes innermost, so the gates
are computed once per tap; the output loop that indexes the weights goes outermost, so a panel of weights stays in
cache while the rest of the output streams past it. Where the CPU has an integer dot-product instruction and the
reductions sum 8-bit products, a reduce axis is unrolled by the products one instruction sums (codegen/dot.py).
A reduction over a few taps only, every load moving with the vector lanes (a depthwise convolution, a pooling
window), is unrolled: the block's overlapping windows then share their input loads.

GPU targets get work-group shapes for any extent, register blocks and work-group reductions: see
codegen/gpu_heuristics.py."""
from __future__ import annotations
import math
from tgc.ir import Ops, GroupOp, UOp, AxisType, dtypes
from tgc.codegen.opts import Kernel, Opt, OptError, OptOps, divisors
from tgc.codegen.target import Target
from tgc.codegen.render import get_renderer
from tgc.codegen.vectorize import mask_gates, unclamped, unclamped_access
from tgc.codegen.linearize import loop_dependencies
from tgc.codegen.knobs import (BLOCK_MAX_PADDING, BLOCK_ODD_PADDING, GATHER_WORTH_OPS, MASKED_MIN_FILL,
                               MAX_GATHER_SHARE, PADDED_VECTORS, SHORT_TAPS, TRANSCENDENTAL_OPS, UNROLLED_TAPS)
from tgc.codegen.kernel_access import (block_copies, block_cost, block_moves, depends, lanes_are_32bit,
                                       reduce_body_loads, streamed_loads, stride, try_opt)
from tgc.codegen.gpu_heuristics import gpu_opts
from tgc.codegen.dot import dot_unroll, unpack_cost, unpacks

G, R = (AxisType.GLOBAL,), (AxisType.REDUCE,)
GR = (AxisType.GLOBAL, AxisType.REDUCE)


def _loads(k: Kernel) -> list[UOp]: return [n for n in k.ast.toposort() if n.op is Ops.LOAD]


def hand_coded_opts(k: Kernel, target: Target, constant: frozenset = frozenset(), vector: bool = True) -> list[Opt]:
  """Opts for kernel `k` on `target` (after the opts `k` has already). `constant`: argument positions of buffers
  that are weights this kernel alone reads (their layout is chosen by lowering, so any access to them can be made
  contiguous). `vector=False` (CPUs): keep the kernel's VECTOR choice, choose the rest."""
  if target.has_workgroups: return gpu_opts(k, target, constant)
  return _cpu_opts(k, target, constant, vector)


# ---------------------------------------------------------------- CPUs
def _gather_share(k: Kernel, r: UOp, constant: frozenset, masked: bool = False, lane_masks: bool = False) -> float:
  """The share of the kernel's memory accesses that would move one lane at a time when vectorizing along `r`
  (gathers, scatters, gated lanes: with `masked` vector accesses, a contiguous one gated per lane at the end of a
  padded loop moves as a vector; with `lane_masks` one gated by any lane comparisons too), reduction loads weighted
  by their loop."""
  hot = set(reduce_body_loads(k))
  loop = math.prod(Kernel.size(x) for x in k.axes(R)) or 1
  bad = total = 0
  for n in k.ast.toposort():
    if n.op not in (Ops.LOAD, Ops.STORE): continue
    buf, idx, gates = n.src[0], n.src[1], n.src[3:] if n.op is Ops.STORE else n.src[2:]
    weight = loop if n in hot else 1
    total += weight
    weights = n.op is Ops.LOAD and buf.arg[0] in constant     # laid out at compile time in the order read
    # a clamped access as one masked access (own weights in the reduction's body: their clamped copies are stored)
    if masked and not (weights and n in hot) and (found := unclamped_access(n, r, lane_masks)) is not None:
      idx, gates = found
    item = (n.dtype if n.op is Ops.LOAD else n.src[2].dtype).itemsize
    if any(depends(g, r) for g in gates) and \
        not (masked and stride(idx, r) == 1 and mask_gates(gates, r, lane_masks and item == 4)): bad += weight
    elif not weights and stride(idx, r) not in (0, 1): bad += weight
  return bad / max(total, 1)


def _float_ops_per_access(k: Kernel) -> float:
  """Float arithmetic of the kernel per load and store, each counted as often as it runs (a reduction's body once per
  step) and an exp2, log2 or sin as TRANSCENDENTAL_OPS: an elementwise erf reads one value and computes about 30, a
  softmax's sum of exponentials about 13 per value it reads."""
  nodes = k.ast.toposort()
  loops = loop_dependencies(nodes, lambda r: r.arg.kind is AxisType.REDUCE)
  ops = accesses = 0
  for n in nodes:
    runs = math.prod(Kernel.size(r) for r in loops[n])
    if n.op in _FLOAT_ARITHMETIC and n.dtype.is_float:
      ops += runs * (TRANSCENDENTAL_OPS if n.op in GroupOp.Transcendental else 1)
    elif n.op in (Ops.LOAD, Ops.STORE): accesses += runs
  return ops / max(accesses, 1)


_FLOAT_ARITHMETIC = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.NEG, Ops.MAX, Ops.MULACC, Ops.RECIP, Ops.EXP2,
                               Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.WHERE})


def _fill(n: int, w: int) -> float:
  """The share of the lanes of vectors of `w` lanes that an axis of `n` fills (the last vector padded)."""
  return n / (-(-n // w) * w)


def _pick_vector(k: Kernel, target: Target, constant: frozenset) -> tuple[Opt | None, tuple | None]:
  """The VECTOR opt for kernel `k` and its rank (lower is better: mostly vector accesses, an output axis, the most
  lanes that move as vectors), or (None, None)."""
  if not lanes_are_32bit(k, narrow=True): return None, None
  lanes = target.vector_lanes(4)
  renderer = get_renderer(target)
  masked, lane_masks = renderer.masked_vectors, renderer.lane_masks
  best, best_key = None, None
  glob = k.axes(G)
  for kind, axes in (("global", glob), ("reduce", k.axes(R))):
    for i, r in enumerate(axes):
      n, w = Kernel.size(r), lanes
      while w >= 4 and n % w: w //= 2
      widths = [w] if w >= 4 else []
      # an axis of many vectors but no multiple of them: padded, its last vector stores only what exists (an
      # output axis); a reduce axis no width of 4 or more divides reads only what exists (masked loads), the
      # reduction taking its identity past the end
      if w < lanes and n >= PADDED_VECTORS * lanes and (kind == "global" or masked and not widths):
        widths.append(lanes)
      # a short output axis where masked stores are single instructions: padded to the widest vector it fills
      # enough of (a 14-pixel row in 16 lanes, 7 in 8)
      elif kind == "global" and lane_masks and w < lanes:
        widths += [x for x in (lanes, lanes // 2, lanes // 4) if x > w and x >= 4 and n % x and
                   _fill(n, x) >= MASKED_MIN_FILL][:1]
      for w in widths:
        opt = Opt(OptOps.VECTOR, (i if kind == "global" else len(glob) + i), w)
        split = k.apply(opt)     # judged after the split: a load of a w-wide panel is contiguous in its lanes only
        share = _gather_share(split, next(x for x in split.ranges() if x.arg.kind is AxisType.VECTOR), constant,
                              masked, lane_masks)
        # mostly vector loads and stores; a reduce axis is a second choice (a horizontal sum per output); then the
        # most lanes that move as vectors
        key = (share > MAX_GATHER_SHARE, kind == "reduce", -w * (1 - share) * _fill(n, w), -i)
        if best_key is None or key < best_key: best, best_key = opt, key
  # lane-by-lane accesses cost less than computing every lane alone where the kernel is mostly arithmetic
  if best is None or best_key[0] and _float_ops_per_access(k) < GATHER_WORTH_OPS: return None, None
  return best, best_key


def _merged_vector(k: Kernel, target: Target, constant: frozenset) -> Kernel:
  """Kernel `k` with its VECTOR opt applied (`_pick_vector`), after a MERGE of two neighbouring output loops where
  that gives vectors of more lanes that move as vectors: a 1x1 convolution over an NCHW image of 14x14 pixels has no
  axis of 4 or more lanes (or a row of 14 in 16 padded lanes), its 196 pixels merged are 49 vectors of 4 (or 13 of
  16, the last padded). Where the loads would still be gathered, an output loop read through an interleave is
  split first (`_deinterleaved`)."""
  vec, key = _pick_vector(k, target, constant)
  lanes = target.vector_lanes(4)
  # fewer lanes, or lanes padded (a row of 14 in 16: the merged rows fill more of them) or gathered
  if vec is None or key[2] > -lanes:
    for i in range(len(k.axes(G)) - 1):
      try: merged = k.apply(Opt(OptOps.MERGE, i, i + 1))
      except OptError: continue
      mvec, mkey = _pick_vector(merged, target, constant)
      if mvec is not None and (key is None or mkey[:3] < key[:3]): return merged.apply(mvec)
  if vec is None or key[0]:
    split = _deinterleaved(k, target, constant, key)
    if split is not None: return split
  return k if vec is None else k.apply(vec)


def _deinterleaved(k: Kernel, target: Target, constant: frozenset, key: tuple | None) -> Kernel | None:
  """Kernel `k` with an output loop split by a small factor u into copies (UPCAST) and the rest vectorized, where
  that turns gathers into vector loads: a depthwise convolution after a channel shuffle reads channel c at
  (c % u) * n + c // u, so along c // u its loads step through memory one by one (its stores then go lane by lane,
  once per output against a load per tap). The smallest such factor; None when none does better than `key`."""
  for i, r in enumerate(k.axes(G)):
    for u in divisors(Kernel.size(r), target.vector_lanes(4))[1:]:
      split = try_opt(k, Opt(OptOps.UPCAST, i, u))
      if split is k: continue
      vec, skey = _pick_vector(split, target, constant)
      if vec is not None and not skey[0] and (key is None or skey[:3] < key[:3]): return split.apply(vec)
  return None


def _reuse_axes(k: Kernel) -> list[tuple[int, UOp]]:
  """Output axes some reduction load does not move along within a block of two (a loaded value is shared by the
  copies of an upcast; a grouped convolution's input along its output channels, the group one value per block)."""
  hot = reduce_body_loads(k)
  return [(i, r) for i, r in enumerate(k.axes(G)) if any(not block_moves(ld.src[1], r, 2) for ld in hot)]


def reuse_block_options(k: Kernel, target: Target, limit: int = 12,
                        constant: frozenset = frozenset()) -> list[list[Opt]]:
  """Register blocks of kernel `k` (its VECTOR split applied) by loads per accumulation (L2 lines included:
  `block_cost`), best first: UPCASTs of up to two output axes that reduction loads are shared along (`_reuse_axes`),
  that fit in the target's vector registers (`_fits_registers`), reading per block what fits in L2. Each is a list
  of opts to apply in order (the later axis first, so the earlier one's number is unchanged when it is applied).
  `constant`: as for `hand_coded_opts`."""
  vector = any(r.arg.kind is AxisType.VECTOR for r in k.ranges())
  # copies made already (a de-interleaved axis' UPCAST) hold accumulators too
  made = math.prod(Kernel.size(r) for r in k.ranges() if r.arg.kind is AxisType.UPCAST)
  # with 16 registers, a dot product that unpacks its operands at every use (`dot.unpacks`) spreads the unpacking
  # over as many accumulators as the registers hold but two, its cost the unpacking instructions per accumulation
  # (x86-64-v3's int8 3x3 convolutions in blocks of 7 pixels x 2 weight vectors, 14 accumulators: 10-15% faster per
  # kernel than 4 x 2 or 1 x 8, though they spill; 3 x 4 was between). With 32 (x86-64-v4) the blocks by loads are
  # as fast: 7 x 4 instead of 4 x 4 was 1.3% slower on resnet18_qdq_pt, 1.8% faster on mobilenet_v2_qdq_pc
  unpacking = vector and target.registers <= 16 and unpacks(k, target.dot, constant)
  weigh = (lambda ld: unpack_cost(ld, constant)) if unpacking else None
  budget = (target.registers - 2 if unpacking else max(4, target.registers - 6) if vector else 12) // made
  hot = reduce_body_loads(k)
  loop = math.prod(Kernel.size(r) for r in k.axes(R))
  vec = next((r for r in k.ranges() if r.arg.kind is AxisType.VECTOR), None)
  cache = target.cpu.l2_bytes if target.cpu is not None else 1 << 20
  # L2 lines are counted for 32-bit operands only: an 8-bit activation broadcast into a dot product costs several
  # instructions (its word packed or widened), which the loads per accumulation do not show, so the integer
  # kernels' blocks keep sharing each broadcast across weight vectors (x86-64-v3's int8 layer-4 convs took 7 pixels
  # x 1 weight vector with L2 lines counted: 2.9 -> 5.0 ms)
  l1 = target.cpu.l1d_bytes if target.cpu is not None and all(ld.dtype.itemsize == 4 for ld in hot) else None
  streamed = streamed_loads(k, hot, _loop_order(k, constant), l1) if l1 is not None else frozenset()
  cands = [(i, r) for i, r in _reuse_axes(k) if Kernel.size(r) > 1][:4]
  padded = {r: _vector_padded(r, vec, hot, constant) for _, r in cands}
  scored: dict[tuple, tuple] = {}
  for a in range(len(cands)):
    for b in range(a, len(cands)):
      (ia, ra), (ib, rb) = cands[a], cands[b]
      for na in _block_sizes(ra, budget, padded[ra]):
        for nb in (_block_sizes(rb, budget // na, padded[rb]) if b != a else [1]):
          block = {ra: na, rb: nb} if b != a else {ra: na}
          if vector and not unpacking and not _fits_registers(block, hot, target.registers, made): continue
          if unpacking and not _fits_paired(block, hot, target.registers, made, constant): continue
          cost = block_cost(hot, block, loop, cache, vec, l1, streamed, weigh)
          if cost is None or math.prod(block.values()) < 2: continue
          cost *= _padding_factor(block)
          opts = tuple(Opt(OptOps.UPCAST, i, n) for i, n in sorted(((ia, na), (ib, nb)) if b != a else ((ia, na),),
                                                              reverse=True) if n > 1)
          scored.setdefault(opts, (cost, -math.prod(block.values()), a, b))
  return [list(o) for o in sorted(scored, key=scored.__getitem__)[:limit]]


def _fits_registers(block: dict[UOp, int], hot: list[UOp], registers: int, made: int = 1) -> bool:
  """Whether a register block's accumulators, the copies of the reduction load held while the other copies stream
  past (a load some block axis does not move: the compiler keeps all its copies, the larger such set counted) and
  two streamed vectors fit in the vector registers. A matmul block of 3 weight vectors x 8 tokens (24 accumulators,
  the 8 broadcast tokens held across the weight vectors) spilled and shuffled registers at every step: 2x slower
  than 6 x 4. A convolution's block of 3 x 8 pixels holds its one weight vector. `made`: the copies of the upcasts
  applied before the block, each block copy holding that many accumulators and loads."""
  accumulators = math.prod(block.values())
  copies = [block_copies(ld, block) for ld in hot]
  held = max([c for c in copies if c < accumulators], default=1)
  return (accumulators + held) * made + 2 <= registers


def _fits_paired(block: dict[UOp, int], hot: list[UOp], registers: int, made: int, constant: frozenset) -> bool:
  """Whether a madd4 block fits its registers when it sums pairs of groups (`dot.shares_one_integer`: it copies no
  integer its weights multiply): its accumulators, the two groups' integers split in four, two weight vectors (the
  split's constants then spill a little: a recurrent matrix-vector product in blocks of 10 weight vectors ran as fast
  as in 6, in 13 it was 12% slower)."""
  shared = [ld for ld in hot if ld.src[0].arg[0] not in constant]
  return any(block_copies(ld, block) > 1 for ld in shared) or math.prod(block.values()) * made + 6 <= registers


def _register_block(k: Kernel, target: Target, constant: frozenset) -> Kernel:
  """The best register block of `reuse_block_options` applied."""
  options = reuse_block_options(k, target, limit=1, constant=constant)
  return k.apply_all(options[0]) if options else k


def _padding_factor(block: dict[UOp, int]) -> float:
  """How much more a register block (axis -> copies) computes than its axes hold: a padded block's last copies
  compute outputs that do not exist."""
  return math.prod(_padded_length(r, n) / Kernel.size(r) for r, n in block.items())


def _padded_length(r: UOp, n: int) -> float:
  """The length of loop `r` blocked by n: a multiple of n. Over a size known at run time in steps (`Kernel.multiple`
  > 1: the blocks that divide the step never pad), half a block's missing copies on average; over one without, as
  if it were the length planned for."""
  size, step = Kernel.size(r), _step(r)
  if step % n == 0: return size
  if step == size: return -(-size // n) * n      # a fixed length, or one planned for as if it were fixed
  return size + (n - math.gcd(n, step)) / 2


def _step(r: UOp) -> int:
  """What every length of loop `r` is a multiple of, for blocking: its length when fixed or when the run-time size
  comes in no steps (planned for as if fixed), else the step."""
  step = Kernel.multiple(r)
  return Kernel.size(r) if step == 1 else step


def _vector_padded(r: UOp, vec: UOp | None, hot: list[UOp], constant: frozenset) -> bool:
  """Whether output loop `r` holds the vectors of a padded VECTOR split (750 keys in 47 vectors of 16: the split
  clamps `r*16 + lane < 750`) that a reduction load other than own weights (`constant`: laid out with their padding
  at compile time) reads with each lane clamped (`unclamped`): the keys of a transposed K, read by masked vector
  loads."""
  if vec is None or vec.arg.parent != r.arg.id: return False
  return any(ld.src[0].arg[0] not in constant and unclamped(ld.src[1], vec) is not None for ld in hot)


def _block_sizes(r: UOp, limit: int, padded: bool = False) -> list[int]:
  """Register block sizes for output loop `r`: the divisors of its length up to `limit`, and sizes that pad it by at
  most BLOCK_MAX_PADDING (ViT's 197 tokens: blocks of 4, 6 or 8), or BLOCK_ODD_PADDING when no block of 2 to 8
  divides it (13 pixels in blocks of 7); the last block's extra copies store nothing, their cost counted by
  `_padding_factor`. A loop of `padded` vectors is not padded again: its last vector's lanes would be clamped twice
  and read one by one."""
  n, step = Kernel.size(r), _step(r)
  if padded: return [d for d in range(1, min(n, limit, 32) + 1) if step % d == 0]
  most = BLOCK_ODD_PADDING if not any(step % d == 0 for d in range(2, 9)) else BLOCK_MAX_PADDING
  return [d for d in range(1, min(n, limit, 32) + 1) if step % d == 0 or _padded_length(r, d) - n <= most * n]


def _weights_axis(k: Kernel, constant: frozenset) -> int:
  """The output loop `_order_loops` swaps with the outermost one: the first that indexes the weights (`constant`),
  else 0 (the outermost stays)."""
  weights = [n for n in _loads(k) if n.src[0].arg[0] in constant]
  return next((i for i, r in enumerate(k.axes(G)) if any(depends(w.src[1], r) for w in weights)), 0)


def _loop_order(k: Kernel, constant: frozenset) -> list[UOp]:
  """The output loops, outermost first, as `_order_loops` will order them."""
  glob, i = list(k.axes(G)), _weights_axis(k, constant)
  if i: glob[0], glob[i] = glob[i], glob[0]
  return glob


def _order_loops(k: Kernel, constant: frozenset) -> Kernel:
  """Reduce loops: the one no gate depends on innermost. Output loops: the one indexing the weights outermost."""
  red = k.axes(R)
  gates = [g for n in k.ast.toposort() if n.op is Ops.LOAD for g in n.src[2:]]
  free = [i for i, r in enumerate(red) if not any(depends(g, r) for g in gates)]
  if len(red) > 1 and free and free[-1] != len(red) - 1:
    glob = len(k.axes(G))
    k = try_opt(k, Opt(OptOps.SWAP, glob + free[-1], glob + len(red) - 1))
  i = _weights_axis(k, constant)
  return try_opt(k, Opt(OptOps.SWAP, 0, i)) if i else k


def _store_order(k: Kernel) -> Kernel:
  """A kernel without a reduction (a copy into another layout: NCHW into a padded channels-last image; an elementwise
  epilogue over a channels-last image, its channels in vectors) gets the output loop its stores step through
  contiguously innermost (a step of 1, or of the lanes for the loop whose copies the VECTOR lanes are): it writes
  whole cache lines one after another and reads from a few streams at once, instead of writing each line again once
  per pass of the outer loop. The other loops keep their order. Not where values that loop alone sets are computed
  (the channels' squeeze-and-excitation scales beside a vector epilogue): outermost, the compiler computes them once
  per pass instead of once per pixel."""
  glob = k.axes(G)
  vec = next((r for r in k.ranges() if r.arg.kind is AxisType.VECTOR), None)
  step = {r: Kernel.size(vec) if vec is not None and vec.arg.parent == r.arg.id else 1 for r in glob}
  stores = [n for n in k.ast.toposort() if n.op is Ops.STORE]
  inner = [i for i, r in enumerate(glob) if stores and all(stride(s.src[1], r) == step[r] for s in stores)]
  if len(glob) < 2 or not inner or inner[0] == len(glob) - 1: return k
  r = glob[inner[0]]
  if any(n.op in GroupOp.ALU and n.dtype.scalar not in (dtypes.index, dtypes.bool) and depends(n, r) and
         not any(depends(n, o) for o in glob if o is not r) for n in k.ast.toposort()):
    return k
  for i in range(inner[0], len(glob) - 1): k = try_opt(k, Opt(OptOps.SWAP, i, i + 1))
  return k


def _unroll_taps(k: Kernel) -> Kernel:
  """A reduction over a few taps only (a depthwise convolution's or a pooling window's: every reduce axis fixed and
  at most SHORT_TAPS long) unrolled from its innermost axis, up to UNROLLED_TAPS copies. The register block's
  neighbouring outputs read overlapping windows: unrolled, each input pixel is loaded (and converted) once for all
  the taps that read it instead of once per tap. Only where every load of the sum moves with the vector lanes (a
  channel each, as in a depthwise conv): a convolution over a few input channels (an RGB stem) shares broadcast
  pixels across its block already, and its unrolled weights would crowd out the accumulators."""
  red = k.axes(R)
  vec = next((r for r in k.ranges() if r.arg.kind is AxisType.VECTOR), None)
  if not red or vec is None or any(r.src[0].op is not Ops.CONST or r.src[0].arg > SHORT_TAPS for r in red) or \
     any(o.op is OptOps.UNROLL for o in k.opts) or not all(depends(ld.src[1], vec) for ld in reduce_body_loads(k)):
    return k
  copies = 1
  for i in reversed(range(len(red))):
    n = Kernel.size(red[i])
    if copies * n > UNROLLED_TAPS: break
    unrolled = try_opt(k, Opt(OptOps.UNROLL, i, n))
    if unrolled is k: break
    k, copies = unrolled, copies * n
  return k


def _cpu_opts(k: Kernel, target: Target, constant: frozenset, vector: bool) -> list[Opt]:
  has_reduce = any(n.op is Ops.REDUCE for n in k.ast.toposort())
  if vector: k = _merged_vector(k, target, constant)
  if not has_reduce: k = _store_order(k)
  if has_reduce: k = after_block(_register_block(k, target, constant), target, constant)
  return k.opts


def after_block(k: Kernel, target: Target, constant: frozenset, order: bool = True) -> Kernel:
  """What the heuristics decide after a reduction's register block (CPUs): the loop order (unless `order` is False:
  the caller chose it), the unrolling a dot-product instruction needs, the taps unrolled."""
  if order: k = _order_loops(k, constant)
  return _unroll_taps(dot_unroll(k, target.dot, constant))
