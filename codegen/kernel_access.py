"""How a kernel's memory accesses move along its axes: the facts the CPU heuristics (heuristics.py) and the GPU
heuristics (gpu_heuristics.py) choose opts by, and applying an opt when it applies."""
from __future__ import annotations
import math
from typing import Callable
from tgc.ir import Ops, UOp, AxisType, RangeArg, dtypes, substitute
from tgc.ir.symbolic import simplify, split_terms
from tgc.codegen.opts import Kernel, Opt, OptError
from tgc.codegen.knobs import L2_LINE_COST

LINE_BYTES = 64     # a cache line (x86 and most Arm cores)
INDEX = dtypes.index


def depends(u: UOp, r: UOp) -> bool: return any(n is r for n in u.toposort())


def stride(idx: UOp, r: UOp) -> int | None:
  """The step of `idx` for one step of `r`: 0 when idx does not depend on r, None when not affine in r."""
  if not depends(idx, r): return 0
  terms, _ = split_terms(idx)
  if r not in terms or any(t is not r and depends(t, r) for t in terms): return None
  return terms[r]


def block_moves(idx: UOp, r: UOp, n: int) -> bool:
  """Whether index `idx` differs across the n copies of a register block of output loop `r` (r = outer*n + copy):
  it depends on r other than through a division the block does not cross (a grouped convolution's input channel
  group `oc // 68` is one value over 4 copies of oc, 4 dividing 68)."""
  if n == 1 or not depends(idx, r): return False
  if not any(u.op in (Ops.IDIV, Ops.MOD) and depends(u, r) for u in idx.toposort()): return True
  copy = UOp(Ops.RANGE, INDEX, (UOp.const(INDEX, n),), RangeArg(-1, AxisType.UPCAST, r.arg.id))
  outer = UOp(Ops.RANGE, INDEX, (UOp.const(INDEX, -(-Kernel.size(r) // n)),), RangeArg(-2, AxisType.GLOBAL))
  return depends(simplify(substitute(idx, {r: outer * n + copy})), copy)


def try_opt(k: Kernel, opt: Opt) -> Kernel:
  try: return k.apply(opt)
  except OptError: return k


def reduce_body_loads(k: Kernel) -> list[UOp]:
  """The loads a reduction body reads (executed once per reduce iteration), in a fixed order (by key)."""
  out: set[UOp] = set()
  for red in (n for n in k.ast.toposort() if n.op is Ops.REDUCE):
    out |= {n for n in red.src[0].toposort() if n.op is Ops.LOAD}
  return sorted(out, key=lambda n: n.key)


def streamed_loads(k: Kernel, hot: list[UOp], order: list[UOp], l1: int) -> frozenset:
  """The reduction loads read again at each step of an output loop they do not move along (an activation panel every
  output channel reads), whose values over one step of it (the loops inside it swept: `order` is the output loops,
  outermost first) take half of the L1 cache or more: each step reads them from L2 again (a grouped 1x1
  convolution's 54 KB input panel, re-read for each of its 68 output channels per group when its register block
  holds pixels only)."""
  def step_bytes(ld: UOp, outside: set) -> int:
    return ld.dtype.itemsize * math.prod(Kernel.size(r) for r in k.ranges() if r not in outside and
                                         depends(ld.src[1], r))
  return frozenset(ld for ld in hot for i, loop in enumerate(order)
                   if not block_moves(ld.src[1], loop, 2) and step_bytes(ld, set(order[:i + 1])) >= l1 // 2)


def lanes_are_32bit(k: Kernel, narrow: bool = False) -> bool:
  """SIMD lanes are 32-bit values: every buffer and computed value of the kernel (comparisons are masks of them),
  but for a narrower integer cast straight back to 32 bits (the saturated integer of a QuantizeLinear before its
  DequantizeLinear: a conversion per lane, no narrow arithmetic) and a narrow load only compared or converted (an
  attention mask of bytes: loaded lane by lane). With `narrow` (CPUs: the renderer loads and stores 8- and 16-bit
  vectors) narrow integer buffers may also be written, from a conversion of 32-bit lanes (an 8-bit activation), and
  a 64-bit integer load only compared or converted is loaded lane by lane too (an int64 attention mask, as torch
  exports it, compared with 0 in the scores' kernel)."""
  nodes = [n for n in k.ast.toposort() if n.op not in (Ops.SINK, Ops.STORE)]
  users: dict[UOp, list[UOp]] = {}
  for n in k.ast.toposort():
    for s in n.src: users.setdefault(s, []).append(n)

  def narrow_cast(n: UOp) -> bool:
    return n.op is Ops.CAST and n.dtype.is_int and n.dtype.itemsize < 4 and \
      all((u.op is Ops.CAST and u.dtype.itemsize == 4) or (narrow and u.op is Ops.STORE) for u in users.get(n, ()))

  def narrow_buffer(n: UOp) -> bool:
    return n.op is Ops.DEFINE_GLOBAL and (not n.arg[1] or narrow) and n.dtype.is_int

  def narrow_mask(n: UOp) -> bool:
    return n.op is Ops.LOAD and (n.dtype.itemsize < 4 or narrow) and not n.dtype.is_float and \
      all(u.op in (Ops.CAST, Ops.CMPNE, Ops.CMPEQ, Ops.CMPLT) for u in users.get(n, ()))
  # (a constant of another width is judged where it is used: a mask's comparison, or arithmetic that is not 32-bit)
  return all(n.dtype.itemsize == 4 or (n.dtype.is_bool and n.op not in (Ops.LOAD, Ops.DEFINE_GLOBAL)) or
             (narrow and n.op is Ops.CONST) or narrow_cast(n) or narrow_mask(n) or narrow_buffer(n)
             for n in nodes)


def block_copies(ld: UOp, block: dict[UOp, int]) -> int:
  """How many copies of load `ld` a register block (axis -> copies) makes: the product of the block's sizes along
  the axes its index moves along within the block (`block_moves`: a matmul's weight vector is copied along the
  weight axis, not along the tokens)."""
  return math.prod(n for r, n in block.items() if block_moves(ld.src[1], r, n))


def block_cost(hot: list[UOp], block: dict[UOp, int], loop: int, cache: int, vector: UOp | None,
               l1: int | None = None, streamed: frozenset = frozenset(),
               weigh: Callable[[UOp], float] | None = None) -> float | None:
  """Loads per accumulation of a register block (axis -> copies): each reduction load is loaded once per distinct
  copy of its index. None when a load would read more than 8 rows a power-of-two stride apart (the rows share one
  set of the L1 cache), or when what one block reads over its reduction loop (`loop` iterations) does not fit in
  `cache` bytes (it is read again for the next block). With `l1` (the L1 data cache's bytes), a load whose values
  over the loop take half of it or more also comes from L2 at each block: its cache lines per accumulation count
  L2_LINE_COST loads each (a 1x1 conv's weight panel of 8 vectors, read again for each pair of pixels, moves 3.5
  times the L2 bytes per multiply of a panel of 2 vectors read for 7 pixels); so do the `streamed` loads (what
  they read between two reuses does not stay in L1: `streamed_loads`). `weigh`: what one copy of a load costs, in
  loads (default 1)."""
  loads = lines = 0.0
  footprint = 0
  for ld in hot:
    for r, n in block.items():
      s = stride(ld.src[1], r) if n > 8 else None
      if s and (s * ld.dtype.itemsize) % 1024 == 0: return None
    copies = block_copies(ld, block)
    loads += copies * (weigh(ld) if weigh is not None else 1)
    lanes = Kernel.size(vector) if vector is not None and depends(ld.src[1], vector) else 1
    values = copies * loop * ld.dtype.itemsize * lanes
    footprint += values
    if l1 is not None and (values >= l1 // 2 or ld in streamed):
      lines += copies * ld.dtype.itemsize * lanes / LINE_BYTES
  if footprint > cache: return None
  return (loads + L2_LINE_COST * lines) / math.prod(block.values())
