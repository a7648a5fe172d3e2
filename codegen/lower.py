"""Lowering one kernel AST for a target: choose opts (heuristics or given), apply them, store weights in read order,
stage shared loads in workgroup memory (GPUs), compute float32 in float16 (`--precision f16`), expand upcasts and
unrolls, vectorize the VECTOR axis, map grid
ranges to launch dimensions, linearize, render. The result carries
everything a runtime or an artifact needs to launch it, as data (`KernelProgram`)."""
from __future__ import annotations
import itertools
import math
from dataclasses import dataclass, field
from tgc.ir import Ops, GroupOp, UOp, AxisType, RangeArg, dtypes, substitute
from tgc.ir.config import config
from tgc.ir.symbolic import simplify
from tgc.ir.sint import sint, highest, highest_prod, prod, simplified
from tgc.codegen.opts import Kernel, Opt, divisors
from tgc.codegen.expand import expand
from tgc.codegen.vectorize import vectorize
from tgc.codegen.dot import dot_prepare, dot_rewrite
from tgc.codegen.relayout import GPU_ORDER, Relayout, relayout
from tgc.codegen.linearize import linearize
from tgc.codegen.unswitch import unswitch_gated_loops
from tgc.codegen.heuristics import hand_coded_opts
from tgc.codegen.knobs import MIN_TASKS, TRANSCENDENTAL_OPS
from tgc.codegen.gpu_tiles import stage
from tgc.codegen.precision import half_precision
from tgc.codegen.render import get_renderer, KernelParam
from tgc.codegen.target import Precision, Target, as_target

INDEX = dtypes.index
G = AxisType.GLOBAL
_LOCALS = (AxisType.LOCAL, AxisType.GROUP)


@dataclass(frozen=True)
class KernelProgram:
  name: str
  src: str                              # a complete translation unit: prefix + function
  function: str                         # the kernel function alone
  prefix: tuple[str, ...]               # includes and helpers the function needs
  global_size: tuple[sint, sint, sint]  # total work-items per dimension (C: the task loop's iterations)
  local_size: tuple[int, int, int]
  nbufs: int
  opts: tuple[Opt, ...]
  ops: int                              # arithmetic ops per launch (estimate, for reports)
  params: tuple[KernelParam, ...] = ()  # the buffer parameters in signature order
  bytes: int = 0                        # bytes loaded and stored per launch (estimate, for reports)
  shared_bytes: int = 0                 # workgroup memory per work-group
  features: tuple[str, ...] = ()        # device features the kernel needs (e.g. "shader-f16", "cl_khr_fp64")
  # weight arguments stored in the order this kernel reads them: position -> how to build the new contents
  relayouts: dict[int, Relayout] = field(default_factory=dict, compare=False, hash=False, repr=False)
  # the AST's argument positions the kernel's arguments 0, 1, ... stand for (a weight folded into another is dropped)
  args: tuple[int, ...] = ()
  variables: tuple[str, ...] = ()       # the sizes known only at run time it takes after its buffers, by name
  work: int = 0                         # ops per launch, an exp2, log2 or sin as TRANSCENDENTAL_OPS (thread pool)


def _grid(k_ast: UOp, max_dims: int, max_per_dim: int | tuple[int, ...] | None = None) -> tuple[UOp, tuple, tuple]:
  """Give grid ranges their launch dimension (last global range -> dim 0) and fold extra dims into the first.
  With `max_per_dim` (work-groups per dimension: one limit, or one per dimension x, y, z), a global range wider
  than its dimension allows is split over free launch dimensions; where none is free and dimension 0 allows more
  than the others (CUDA), all global ranges are folded into dimension 0 and split from there."""
  rs = sorted({n for n in k_ast.toposort() if n.op is Ops.RANGE}, key=lambda r: r.arg.id)
  locs = {r.arg.id: r for r in rs if r.arg.kind in _LOCALS}
  # an axis that went into the work-group whole (its LOCAL or GROUP split left no global range) keeps a launch
  # dimension in its place: a global range of one work-group that appears nowhere in the kernel
  present = {r.arg.id for r in rs if r.arg.kind is G}
  whole = {p for p in _local_parents(k_ast).values() if p not in present}
  globs = sorted([r for r in rs if r.arg.kind is G] +
                 [UOp(Ops.RANGE, INDEX, (UOp.const(INDEX, 1),), RangeArg(p, G)) for p in whole], key=lambda r: r.arg.id)
  limits = _dim_limits(max_per_dim, max_dims) if max_per_dim else None
  if len(globs) > max_dims:
    groups = _fold_groups(globs, max_dims, limits, set(_local_parents(k_ast).values()))
    if groups is None: raise ValueError("cannot fold a launch dimension that has a local split")
    globs = []
    for group in groups:
      if len(group) > 1: k_ast, merged = _fold(k_ast, group, group[0].arg.id)
      globs.append(merged if len(group) > 1 else group[0])
  if limits:
    k_ast, globs = _split_wide(k_ast, globs, locs, max_dims, limits)
    if len(limits) > 1 and limits[0] > max(limits[1:]) and _over_limit(globs, limits):
      k_ast, globs = _split_wide(*_fold_into_x(k_ast, globs), locs, max_dims, limits)
  parents = _local_parents(k_ast)
  gsize, lsize, sub = [1, 1, 1], [1, 1, 1], {}
  dim_of = {}
  for dim, g in enumerate(reversed(globs)):
    sub[g] = g.replace(arg=RangeArg(g.arg.id, G, dim=dim))
    gsize[dim] = extent(g)
    dim_of[g.arg.id] = dim
  for lid in sorted(locs):
    dim = dim_of[parents[lid]]
    sub[locs[lid]] = locs[lid].replace(arg=locs[lid].arg.replace(dim=dim))
    lsize[dim] = locs[lid].src[0].arg
  k_ast = substitute(k_ast, sub)
  return k_ast, tuple(prod((g, l)) for g, l in zip(gsize, lsize)), tuple(lsize)


def extent(r: UOp) -> sint:
  """A range's number of iterations: an int, or an `ir.sint` expression for a loop over a size known only at run
  time (a GPU launch dimension of one is then computed when the kernel is launched)."""
  return r.src[0].arg if r.src[0].op is Ops.CONST else simplified(r.src[0])


def _fold_groups(globs: list[UOp], slots: int, limits: tuple[int, ...] | None,
                 split_ids: set) -> list[list[UOp]] | None:
  """How to fold the global ranges (outermost first) into `slots` launch dimensions: consecutive ranges form one
  group each. Without limits the outermost ranges are folded into the first group. With `limits` (work-groups per
  dimension), the grouping with the fewest groups over their dimension's limit, then the smallest largest group.
  A range with a LOCAL split cannot share a group. None when no grouping is possible."""
  n = len(globs)
  options = [(0,) + cuts + (n,) for cuts in itertools.combinations(range(1, n), slots - 1)]
  if limits is None: options = [(0, n - slots + 1) + tuple(range(n - slots + 2, n + 1))]
  best, best_key = None, None
  for bounds in options:
    groups = [globs[a:b] for a, b in zip(bounds, bounds[1:])]
    if any(len(g) > 1 and any(r.arg.id in split_ids for r in g) for g in groups): continue
    sizes = [highest_prod(extent(r) for r in g) for g in groups]
    over = sum(size > limits[slots - 1 - i] for i, size in enumerate(sizes)) if limits else 0
    key = (over, max(sizes))
    if best_key is None or key < best_key: best, best_key = groups, key
  return best


def _fold(k_ast: UOp, fold: list[UOp], keep_id: int) -> tuple[UOp, UOp]:
  """Replace the global ranges `fold` (outermost first) by one range over their product, with range id `keep_id`
  (a LOCAL split of that range stays attached to the merged one)."""
  sizes = [extent(r) for r in fold]
  total = prod(sizes)
  merged = UOp(Ops.RANGE, INDEX, (total if isinstance(total, UOp) else UOp.const(INDEX, total),), RangeArg(keep_id, G))
  sub = {}
  for i, r in enumerate(fold):
    stride = prod(sizes[i + 1:])       # a size known only at run time divides an index like any other
    sub[r] = (merged // stride) % sizes[i] if not isinstance(stride, int) or stride > 1 else merged % sizes[i]
  return simplify(substitute(k_ast, sub)), merged


def _dim_limits(max_per_dim: int | tuple[int, ...], max_dims: int) -> tuple[int, ...]:
  """Work-groups allowed per launch dimension (x, y, z): one number for all, or one each (CUDA: 2^31-1, 65535,
  65535)."""
  return tuple(max_per_dim) if isinstance(max_per_dim, tuple) else (max_per_dim,) * max_dims


def _over_limit(globs: list[UOp], limits: tuple[int, ...]) -> list[UOp]:
  """The global ranges with more work-groups than their launch dimension allows (the last range is dimension 0)."""
  return [g for i, g in enumerate(globs) if highest(extent(g)) > limits[len(globs) - 1 - i]]


def _fold_into_x(k_ast: UOp, globs: list[UOp]) -> tuple[UOp, list[UOp]]:
  """Every global range in launch dimension 0, for targets whose dimension 0 holds far more work-groups than the
  others (CUDA): used when a range is too wide for its dimension and no dimension is free to split it. The merged
  range keeps the id of the one range with a LOCAL split, so that split stays on dimension 0."""
  split = set(_local_parents(k_ast).values())
  carriers = [g for g in globs if g.arg.id in split]
  if len(carriers) > 1: return k_ast, globs     # two LOCAL splits cannot share a dimension: left to the renderer
  k_ast, merged = _fold(k_ast, globs, (carriers or globs)[0].arg.id)
  return k_ast, [merged]


def _split_wide(k_ast: UOp, globs: list[UOp], locs: dict, max_dims: int,
                limits: tuple[int, ...]) -> tuple[UOp, list[UOp]]:
  """Split each global range of more work-groups than its launch dimension allows (`limits` per dimension) as
  hi*n + lo over a free launch dimension: lo keeps the range's dimension and id, so a LOCAL split of it stays on
  lo's dimension, and hi takes the next one. n is the largest divisor that makes both parts fit; when none does,
  the parts are rounded up and every store is gated by the original range. Ranges that still do not fit (no free
  dimension) are left for the renderer to report."""
  parents = _local_parents(k_ast)
  free = max_dims - len(globs) - sum(1 for lid in locs if parents.get(lid) not in {g.arg.id for g in globs})
  while free > 0 and (over := _over_limit(globs, limits)):
    g = max(over, key=lambda r: highest(extent(r)))
    total, dim = extent(g), len(globs) - 1 - globs.index(g)
    if not isinstance(total, int): break        # a size known at run time: the renderer reports its largest value
    lo_limit, hi_limit = limits[dim], limits[dim + 1]
    lo_n = max((d for d in divisors(total) if d <= lo_limit and total // d <= hi_limit), default=None)
    if lo_n is None: lo_n = -(-total // -(-total // lo_limit))
    hi_n = -(-total // lo_n)
    new_id = 1 + max(n.arg.id for n in k_ast.toposort() if n.op is Ops.RANGE)
    lo = UOp(Ops.RANGE, INDEX, (UOp.const(INDEX, lo_n),), g.arg)
    hi = UOp(Ops.RANGE, INDEX, (UOp.const(INDEX, hi_n),), RangeArg(new_id, G))
    flat = hi * lo_n + lo
    k_ast = substitute(k_ast, {g: flat})
    if hi_n * lo_n != total:
      inside = flat.lt(total)
      k_ast = k_ast.replace(src=tuple(st.replace(src=st.src[:3] + ((st.src[3].logical_and(inside),) if len(st.src) > 3
                                                                   else (inside,))) for st in k_ast.src))
    k_ast = simplify(k_ast)
    i = globs.index(g)
    globs = globs[:i] + [hi, lo] + globs[i + 1:]
    free -= 1
  return k_ast, globs


def _gate_group_stores(ast: UOp) -> UOp:
  """With a reduction split across a work-group, only the first work-item of the group stores the result."""
  groups = sorted({n for n in ast.toposort() if n.op is Ops.RANGE and n.arg.kind is AxisType.GROUP},
                  key=lambda r: r.arg.id)
  if not groups: return ast
  gate = groups[0].eq(0)
  for g in groups[1:]: gate = gate.logical_and(g.eq(0))
  return ast.replace(src=tuple(st.replace(src=st.src[:3] + (gate,)) for st in ast.src))


def _local_parents(ast: UOp) -> dict[int, int]:
  """local/group range id -> id of the range it was split from (recorded by the LOCAL and GROUP opts)."""
  return {n.arg.id: n.arg.parent for n in ast.toposort() if n.op is Ops.RANGE and n.arg.kind in _LOCALS}


def count_ops(program: list[UOp], grid_loops: bool) -> tuple[int, int, int]:
  """Arithmetic ops, bytes loaded/stored and work (the ops, each exp2, log2 or sin counted as TRANSCENDENTAL_OPS:
  what a C kernel's launch costs, which decides whether the thread pool takes it) by one work-item (C: the whole
  kernel, its output loops included), counting each vector lane. Of an IF ... ELSE ... ENDIF only the first branch
  counts (the two do the same work); IFs nest."""
  loops, n, nbytes, extra, mult = [], 0, 0, 0, 1
  skipping = 0      # while an ELSE branch is skipped: 1 + the IFs open inside it (its ENDIF ends the skip)
  for u in program:
    if skipping:
      skipping += {Ops.IF: 1, Ops.ENDIF: -1}.get(u.op, 0)
      continue
    if u.op is Ops.ELSE: skipping = 1
    elif u.op is Ops.RANGE and (grid_loops or u.arg.kind not in (G, AxisType.LOCAL)):
      loops.append(int(u.src[0].vmax)); mult *= loops[-1]     # a size known at run time: at its largest
    elif u.op is Ops.ENDRANGE: mult //= loops.pop()
    elif u.op is Ops.DOT: n += mult * u.src[0].dtype.count * 2 * (len(u.src) // 2)
    elif u.op in (Ops.ADD, Ops.MUL, Ops.MAX, Ops.FDIV, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.ASSIGN, Ops.MULACC) \
        and u.dtype.scalar != INDEX and not (u.op is Ops.ASSIGN and u.src[1].op is Ops.DOT):
      n += mult * u.dtype.count * (2 if u.op is Ops.MULACC else 1)
      if u.op in GroupOp.Transcendental: extra += mult * u.dtype.count * (TRANSCENDENTAL_OPS - 1)
    elif u.op is Ops.LOAD and u.src[0].op is Ops.DEFINE_GLOBAL: nbytes += mult * u.dtype.count * u.dtype.itemsize
    elif u.op is Ops.STORE and u.src[0].op is Ops.DEFINE_GLOBAL:
      nbytes += mult * u.src[2].dtype.count * u.src[2].dtype.itemsize
  return n, nbytes, n + extra


def _as_loop(ast: UOp, expand_lanes: bool) -> UOp:
  """The VECTOR range of `ast` for a language without vectors: its lanes become straight-line copies (UPCAST or
  UNROLL: GPU languages), or a loop (C's plain fallback: small and quick to build; the lanes loop sits inside the
  other output loops, or is one more reduce loop)."""
  def kind(r: UOp) -> AxisType:
    if expand_lanes: return AxisType.UNROLL if _reduced(ast, r) else AxisType.UPCAST
    return AxisType.REDUCE if _reduced(ast, r) else AxisType.GLOBAL
  sub = {n: n.replace(arg=n.arg.replace(kind=kind(n))) for n in ast.toposort()
         if n.op is Ops.RANGE and n.arg.kind is AxisType.VECTOR}
  return substitute(ast, sub) if sub else ast


def _reduced(ast: UOp, r: UOp) -> bool:
  return any(n.op is Ops.REDUCE and r in n.src[1:] for n in ast.toposort())


def _program(ast: UOp, target: Target, renderer, vectors: bool):
  """Expand, vectorize (or expand the VECTOR axis too), assign launch dimensions, linearize."""
  expanded = expand(ast if vectors else _as_loop(ast, target.has_workgroups))
  if vectors: expanded = vectorize(expanded, renderer.vector_ops, renderer.vector_access, renderer.vector_itemsizes,
                                   renderer.masked_vectors, renderer.lane_masks)
  if vectors and target.dot: expanded = dot_rewrite(expanded, target.dot, target.cpu.vector_bytes)
  if target.has_workgroups:
    grid_ast, gsz, lsz = _grid(_gate_group_stores(expanded), target.grid_dims,
                               target.max_groups_per_dim[:target.grid_dims] if target.max_groups_per_dim else None)
    grid_kinds = (G, AxisType.LOCAL, AxisType.GROUP)
  else: grid_ast, gsz, lsz, grid_kinds = expanded, _c_sizes(expanded), (1, 1, 1), ()
  grid_ast = renderer.prepare(grid_ast)
  program = linearize(grid_ast, grid_kinds)
  return (program if target.has_workgroups else unswitch_gated_loops(program)), gsz, lsz


@dataclass(frozen=True)
class Optimized:
  """A kernel AST made ready to linearize: `kernel` with its opts applied, constant work folded into its weights and
  weights relaid, its arguments compacted, shared loads staged."""
  kernel: Kernel
  opts: list[Opt]                     # the opts applied (the heuristics' when none were given)
  relayouts: dict[int, Relayout]      # how each relaid weight argument is stored
  args: tuple[int, ...]               # the AST positions of the kernel's arguments
  vectors: bool                       # its VECTOR axis becomes SIMD vectors


def _optimized(ast: UOp, target: Target, renderer, opts: list[Opt] | None, weights: dict[int, int]) -> Optimized:
  """The kernel of `ast` for `target` with `opts` (None: the heuristics'); `weights`: see `lower`."""
  k = Kernel(ast)
  if opts is None: opts = [] if config.noopt else hand_coded_opts(k, target, frozenset(weights))
  k = k.apply_all(opts)
  order = GPU_ORDER if target.has_workgroups else None
  prepared, inner = dot_prepare(k.ast, target.dot, frozenset(weights))
  relaid_ast, relayouts = relayout(prepared, weights, order, inner) if weights else (prepared, {})
  nargs = 1 + max(n.arg[0] for n in ast.toposort() if n.op is Ops.DEFINE_GLOBAL)
  relaid_ast, args = _compact_args(relaid_ast, nargs)
  if target.has_threads: relaid_ast = task_loop(relaid_ast)
  k = Kernel(stage(relaid_ast, target), k.opts)
  if target.has_workgroups and not target.workgroup_tiles:
    k = Kernel(rolled(k.ast, target.register_blocks, target.kept_block_axis), k.opts)
  if target.precision is Precision.F16: k = Kernel(half_precision(k.ast), k.opts)
  vectors = bool(renderer.vector_ops) and any(n.op is Ops.RANGE and n.arg.kind is AxisType.VECTOR
                                              for n in k.ast.toposort())
  return Optimized(k, opts, relayouts, args, vectors)


def rolled(ast: UOp, register_blocks: bool = True, kept_axis: int | None = None) -> UOp:
  """UNROLL ranges as reduction loops: GPU-language kernels without workgroup tiles run on a CPU (SwiftShader,
  lavapipe, PoCL), whose shader compiler (LLVM) spends far more on straight-line copies than the CPU gains from them
  (MobileNetV2's kernels: 2.3x the WGSL, 3x SwiftShader's compile time). The ranges and so the weights' layout stay
  those of the opts (a kernel variant binds the same relaid weights as the unrolled main kernel); only the copies go.
  Without `register_blocks`, UPCAST ranges too become loops, each around its copy of the reduction and store: one
  accumulator instead of a block of them, the same launch (the quick variants a page runs while the blocked ones
  compile: MobileNetV2 compiles 5x faster on SwiftShader and runs 2x slower). `kept_axis` (with several UPCAST
  ranges): the one of them that stays copies, by length, longest first (a smaller block, a loop around it)."""
  loops = {AxisType.UNROLL} if register_blocks else {AxisType.UNROLL, AxisType.UPCAST}
  ranges = [n for n in ast.toposort() if n.op is Ops.RANGE and n.arg.kind in loops]
  upcasts = sorted((n for n in ranges if n.arg.kind is AxisType.UPCAST), key=lambda n: (-n.src[0].vmax, n.arg.id))
  if kept_axis is not None and 1 < len(upcasts) and kept_axis < len(upcasts): ranges.remove(upcasts[kept_axis])
  sub = {n: n.replace(arg=n.arg.replace(kind=AxisType.REDUCE)) for n in ranges}
  return substitute(ast, sub) if sub else ast


def linearized(ast: UOp, target: Target | str, opts: list[Opt] | None = None,
               weights: dict[int, int] | None = None) -> tuple[list[UOp], tuple, tuple]:
  """The linearized program `lower` renders, with its global and local sizes (for analyses of a kernel)."""
  target = as_target(target)
  renderer = get_renderer(target)
  done = _optimized(ast, target, renderer, opts, weights or {})
  return _program(done.kernel.ast, target, renderer, done.vectors)


def lower(ast: UOp, target: Target, opts: list[Opt] | None = None,
          name: str | None = None, weights: dict[int, int] | None = None, note: str = "") -> KernelProgram:
  """`weights`: argument position -> element count of each weight buffer only this kernel reads; lowering may
  fold constant work into them and store them in the order the kernel reads them (`KernelProgram.relayouts` says
  how; a weight folded into another is no argument of the kernel any more: `KernelProgram.args`). `note`: text the
  renderer writes as the comment heading the function (the model nodes it computes)."""
  if not isinstance(target, Target): raise TypeError(f"lower: a Target is needed, not {type(target).__name__}")
  renderer = get_renderer(target)
  done = _optimized(ast, target, renderer, opts, weights or {})
  program, gsz, lsz = _program(done.kernel.ast, target, renderer, done.vectors)
  name = name or _default_name(ast, gsz)
  rendered = renderer.render_kernel(name, program, lsz, note)
  function, prefix = rendered.function, list(rendered.prefix)
  src = "\n".join(prefix + [function])
  ops, nbytes, work = count_ops(program, not target.has_workgroups)
  work_items = 1 if not target.has_workgroups else highest_prod(gsz)
  return KernelProgram(name, src, function, tuple(prefix), gsz, lsz, len(done.args), tuple(done.opts),
                       ops * work_items, rendered.params, nbytes * work_items, rendered.shared_bytes, rendered.features,
                       done.relayouts, done.args, rendered.variables, work * work_items)


def _compact_args(ast: UOp, nbufs: int) -> tuple[UOp, tuple[int, ...]]:
  """Arguments numbered 0, 1, ... over the positions the AST still uses, and those positions."""
  used = sorted({n.arg[0] for n in ast.toposort() if n.op is Ops.DEFINE_GLOBAL})
  if used == list(range(nbufs)): return ast, tuple(used)
  sub = {n: n.replace(arg=(used.index(n.arg[0]), n.arg[1])) for n in ast.toposort() if n.op is Ops.DEFINE_GLOBAL}
  return substitute(ast, sub), tuple(used)




def task_loop(ast: UOp) -> UOp:
  """A CPU kernel's outermost output loops folded into one (the task loop threads split) until it has MIN_TASKS
  iterations or no output loop is left."""
  globs = sorted({n for n in ast.toposort() if n.op is Ops.RANGE and n.arg.kind is G}, key=lambda r: r.arg.id)
  n = 1
  # loops over a size known only at run time are not folded (one of them is a task loop of its own)
  while n < len(globs) and all(g.src[0].op is Ops.CONST for g in globs[:n + 1]) and \
      math.prod(g.src[0].arg for g in globs[:n]) < MIN_TASKS: n += 1
  return ast if n < 2 else _fold(ast, globs[:n], globs[0].arg.id)[0]


def _c_sizes(ast: UOp):
  """C: the launch size is the task loop's iterations (1 without output loops; an `ir.sint` expression when the task
  loop runs over a size known only at run time)."""
  ranges = sorted({n for n in ast.toposort() if n.op is Ops.RANGE and n.arg.kind is G}, key=lambda r: r.arg.id)
  g = [r.src[0].arg if r.src[0].op is Ops.CONST else r.src[0] for r in ranges]
  return (g[0] if g else 1, 1, 1)


def _default_name(ast: UOp, gsz) -> str:
  red = any(n.op is Ops.REDUCE for n in ast.toposort())
  sizes = [str(s) if isinstance(s, int) else "n" for s in gsz if not isinstance(s, int) or s > 1]
  return f"{'r' if red else 'e'}_{'_'.join(sizes) or '1'}_{ast.key[:6]}"
