"""Hand-coded opt choices (the default when BEAM is off), made by asking the target.

CPUs get micro-kernels. The VECTOR axis is the output axis whose loads and store are cheapest as SIMD vectors:
contiguous or broadcast for every big load (weights count as contiguous: they are stored in the order the kernel
reads them) and for the store; failing that, a contiguous reduce axis (row reductions). Kernels with a reduction are
register-blocked: output axes along which a reduction load does not move are upcast (matmul's rows, a convolution's
output pixels; the vector axis itself for a second or third vector), filling about the target's vector registers
with accumulators. The loop over the reduce axis that every gate (padding) ignores goes innermost, so the gates
are computed once per tap; the output loop that indexes the weights goes outermost, so a panel of weights stays in
cache while the rest of the output streams past it.

GPU targets get work-group shapes for any extent, register blocks and work-group reductions: see
codegen/gpu_heuristics.py."""
from __future__ import annotations
import math
from tgc.ir import Ops, UOp, AxisType
from tgc.ir.symbolic import split_terms
from tgc.codegen.opts import Kernel, Opt, OptError
from tgc.codegen.target import Target

G, R = (AxisType.GLOBAL,), (AxisType.REDUCE,)
GR = (AxisType.GLOBAL, AxisType.REDUCE)
MAX_GATHER_SHARE = 0.2     # a VECTOR axis along which more of the memory accesses are lane by lane is not worth it


def _loads(k: Kernel) -> list[UOp]: return [n for n in k.ast.toposort() if n.op is Ops.LOAD]


def _depends(u: UOp, r: UOp) -> bool: return any(n is r for n in u.toposort())


def stride(idx: UOp, r: UOp) -> int | None:
  """The step of `idx` for one step of `r`: 0 when idx does not depend on r, None when not affine in r."""
  if not _depends(idx, r): return 0
  terms, _ = split_terms(idx)
  if r not in terms or any(t is not r and _depends(t, r) for t in terms): return None
  return terms[r]


def _try(k: Kernel, opt: Opt) -> Kernel:
  try: return k.apply(opt)
  except OptError: return k


def _in_reduce(k: Kernel) -> set[UOp]:
  """The loads a reduction body reads (executed once per reduce iteration)."""
  out: set[UOp] = set()
  for red in (n for n in k.ast.toposort() if n.op is Ops.REDUCE):
    out |= {n for n in red.src[0].toposort() if n.op is Ops.LOAD}
  return out


def hand_coded_opts(k: Kernel, target: Target, constant: frozenset = frozenset(), vector: bool = True) -> list[Opt]:
  """Opts for kernel `k` on `target` (after the opts `k` has already). `constant`: argument positions of buffers
  that are weights this kernel alone reads (their layout is chosen by lowering, so any access to them can be made
  contiguous). `vector=False` (CPUs): keep the kernel's VECTOR choice, choose the rest."""
  if target.has_workgroups: return _gpu_opts(k, target, constant)
  return _cpu_opts(k, target, constant, vector)


# ---------------------------------------------------------------- CPUs
def _vectorizable(k: Kernel) -> bool:
  """SIMD lanes are 32-bit values: every buffer and computed value of the kernel (comparisons are masks of them)."""
  return all(n.dtype.itemsize == 4 or (n.dtype.is_bool and n.op not in (Ops.LOAD, Ops.DEFINE_GLOBAL))
             for n in k.ast.toposort() if n.op not in (Ops.SINK, Ops.STORE))


def _gather_share(k: Kernel, r: UOp, constant: frozenset) -> float:
  """The share of the kernel's memory accesses that would move one lane at a time when vectorizing along `r`
  (gathers, scatters, gated lanes), reduction loads weighted by their loop."""
  hot = _in_reduce(k)
  loop = math.prod(Kernel.size(x) for x in k.axes(R)) or 1
  bad = total = 0
  for n in k.ast.toposort():
    if n.op not in (Ops.LOAD, Ops.STORE): continue
    buf, idx, gates = n.src[0], n.src[1], n.src[3:] if n.op is Ops.STORE else n.src[2:]
    weight = loop if n in hot else 1
    total += weight
    if any(_depends(g, r) for g in gates): bad += weight
    elif not (n.op is Ops.LOAD and buf.arg[0] in constant) and stride(idx, r) not in (0, 1): bad += weight
  return bad / max(total, 1)


def _pick_vector(k: Kernel, target: Target, constant: frozenset) -> Opt | None:
  if not _vectorizable(k): return None
  lanes = target.vector_lanes(4)
  best, best_key = None, None
  glob = k.axes(G)
  for kind, axes in (("global", glob), ("reduce", k.axes(R))):
    for i, r in enumerate(axes):
      n, w = Kernel.size(r), lanes
      while w >= 4 and n % w: w //= 2
      if w < 4: continue
      opt = Opt("VECTOR", (i if kind == "global" else len(glob) + i), w)
      split = k.apply(opt)     # judged after the split: a load of a w-wide panel is contiguous in its lanes only
      share = _gather_share(split, next(x for x in split.ranges() if x.arg.kind is AxisType.VECTOR), constant)
      # mostly vector loads and stores; a reduce axis is a second choice (a horizontal sum per output); then the most
      # lanes that move as vectors
      key = (share > MAX_GATHER_SHARE, kind == "reduce", -w * (1 - share), -i)
      if best_key is None or key < best_key: best, best_key = opt, key
  if best is None or best_key[0]: return None
  return best


def _reuse_axes(k: Kernel) -> list[tuple[int, UOp]]:
  """Output axes some reduction load does not move along (a loaded value is shared by the copies of an upcast)."""
  hot = [n for n in _in_reduce(k)]
  return [(i, r) for i, r in enumerate(k.axes(G)) if any(not _depends(ld.src[1], r) for ld in hot)]


def _block_cost(hot: list[UOp], block: dict[UOp, int], loop: int, cache: int, vector: UOp | None) -> float | None:
  """Loads per accumulation of a register block (axis -> copies): each reduction load is loaded once per distinct
  copy of its index. None when a load would read more than 8 rows a power-of-two stride apart (the rows share one
  set of the L1 cache), or when what one block reads over its reduction loop (`loop` iterations) does not fit in
  `cache` bytes (it is read again for the next block)."""
  loads = 0
  footprint = 0
  for ld in hot:
    copies = 1
    for r, n in block.items():
      if not _depends(ld.src[1], r): continue
      copies *= n
      s = stride(ld.src[1], r)
      if n > 8 and s is not None and (s * ld.dtype.itemsize) % 1024 == 0 and s: return None
    loads += copies
    lanes = Kernel.size(vector) if vector is not None and _depends(ld.src[1], vector) else 1
    footprint += copies * loop * ld.dtype.itemsize * lanes
  if footprint > cache: return None
  return loads / math.prod(block.values())


def reuse_block_options(k: Kernel, target: Target, limit: int = 12) -> list[list[Opt]]:
  """Register blocks of kernel `k` (its VECTOR split applied) by loads per accumulation, best first: UPCASTs of up
  to two output axes that reduction loads are shared along (`_reuse_axes`), with at most about the target's vector
  registers of accumulators, reading per block what fits in L2. Each is a list of opts to apply in order (the later
  axis first, so the earlier one's number is unchanged when it is applied)."""
  vector = any(r.arg.kind is AxisType.VECTOR for r in k.ranges())
  budget = max(4, target.registers - 6) if vector else 12
  hot = sorted(_in_reduce(k), key=lambda n: n.key)
  loop = math.prod(Kernel.size(r) for r in k.axes(R))
  vec = next((r for r in k.ranges() if r.arg.kind is AxisType.VECTOR), None)
  cache = target.cpu.l2_bytes if target.cpu is not None else 1 << 20
  cands = [(i, r) for i, r in _reuse_axes(k) if Kernel.size(r) > 1][:4]
  scored: dict[tuple, tuple] = {}
  for a in range(len(cands)):
    for b in range(a, len(cands)):
      (ia, ra), (ib, rb) = cands[a], cands[b]
      for na in _divisors_upto(Kernel.size(ra), budget):
        for nb in (_divisors_upto(Kernel.size(rb), budget // na) if b != a else [1]):
          block = {ra: na, rb: nb} if b != a else {ra: na}
          cost = _block_cost(hot, block, loop, cache, vec)
          if cost is None or math.prod(block.values()) < 2: continue
          opts = tuple(Opt("UPCAST", i, n) for i, n in sorted(((ia, na), (ib, nb)) if b != a else ((ia, na),),
                                                              reverse=True) if n > 1)
          scored.setdefault(opts, (cost, -math.prod(block.values()), a, b))
  return [list(o) for o in sorted(scored, key=scored.__getitem__)[:limit]]


def _register_block(k: Kernel, target: Target) -> Kernel:
  """The best register block of `reuse_block_options` applied."""
  options = reuse_block_options(k, target, limit=1)
  return k.apply_all(options[0]) if options else k


def _divisors_upto(n: int, limit: int) -> list[int]:
  return [d for d in range(1, min(n, limit, 32) + 1) if n % d == 0]


def _order_loops(k: Kernel, constant: frozenset) -> Kernel:
  """Reduce loops: the one no gate depends on innermost. Output loops: the one indexing the weights outermost."""
  red = k.axes(R)
  gates = [g for n in k.ast.toposort() if n.op is Ops.LOAD for g in n.src[2:]]
  free = [i for i, r in enumerate(red) if not any(_depends(g, r) for g in gates)]
  if len(red) > 1 and free and free[-1] != len(red) - 1:
    glob = len(k.axes(G))
    k = _try(k, Opt("SWAP", glob + free[-1], glob + len(red) - 1))
  weights = [n for n in _loads(k) if n.src[0].arg[0] in constant]
  glob = k.axes(G)
  if len(glob) > 1 and weights:
    users = [i for i, r in enumerate(glob) if any(_depends(w.src[1], r) for w in weights)]
    if users and users[0] != 0 and not any(_depends(w.src[1], glob[0]) for w in weights):
      k = _try(k, Opt("SWAP", 0, users[0]))
  return k


def _cpu_opts(k: Kernel, target: Target, constant: frozenset, vector: bool) -> list[Opt]:
  has_reduce = any(n.op is Ops.REDUCE for n in k.ast.toposort())
  vec = _pick_vector(k, target, constant) if vector else None
  if vec is not None: k = _try(k, vec)
  if has_reduce:
    k = _register_block(k, target)
    k = _order_loops(k, constant)
  return k.opts


# ---------------------------------------------------------------- GPUs
def _gpu_opts(k: Kernel, target: Target, constant: frozenset = frozenset()) -> list[Opt]:
  """Work-group shapes, vectors, register blocks and work-group reductions for GPU targets
  (codegen/gpu_heuristics.py)."""
  from tgc.codegen.gpu_heuristics import gpu_opts    # it builds on the helpers above
  return gpu_opts(k, target, constant)
