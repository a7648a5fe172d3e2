"""The scheduler: splits a lazy graph into kernels. Elementwise chains fuse into their producer/consumer reduce;
movement ops become index arithmetic; a kernel break happens only where needed (a reduce that is broadcast,
shared, or nested in another reduce; a computed value a reduce would recompute for each use through an expand).
Each kernel is an AST: SINK(STORE(DEFINE_GLOBAL, index, value)), built once: the storage order of intermediates
is chosen afterwards from the kernels (codegen/layouts.py) and put in place by a rewrite."""
from __future__ import annotations
import math
from dataclasses import dataclass, field, replace
from tgc.ir import Ops, GroupOp, UOp, AxisType, RangeArg, dtypes, provenance, substitute, viz, graph_rewrite
from tgc.ir.symbolic import simplify
from tgc.ir.lowp import per_word
from tgc.ir.sint import sint, highest, highest_prod, is_static, same, simplified, prod as sym_prod
from tgc.codegen.storage import lower_storage_types, pack_store
from tgc.codegen.select_loads import select_loads
from tgc.codegen.batch_steps import batch_sliced_reductions
from tgc.codegen.pieces import split_pieces
from tgc.codegen.layouts import strides, flat_index, open_values, open_index, choose_layouts, lay_out
from tgc.codegen.knobs import RECOMPUTE_MAX_OPS

INDEX = dtypes.index


@dataclass(frozen=True)
class ScheduleItem:
  """One kernel: `ast` reads/writes DEFINE_GLOBAL(i) which binds to `bufs[i]` (outputs first). `meta["nodes"]`: the
  model nodes (provenance Origins) the kernel computes, sources first."""
  ast: UOp
  bufs: tuple[UOp, ...]          # BUFFER nodes of the lazy graph (outputs are new BUFFERs)
  outputs: int = 1
  meta: dict = field(default_factory=dict, compare=False, hash=False)


def _consumers(roots: list[UOp]) -> dict[UOp, set[UOp]]:
  users: dict[UOp, set[UOp]] = {}
  for r in roots:
    for n in r.toposort():
      for s in n.src: users.setdefault(s, set()).add(n)
  return users


def _expands(n: UOp) -> bool:
  return n.op is Ops.EXPAND and any(a != b for a, b in zip(n.src[0].shape, n.arg))


def _numel(n: UOp) -> int:
  """Elements of `n`'s value (at the largest sizes of dims known only at run time)."""
  return highest_prod(n.shape)


def _source_sizes(roots: list[UOp]) -> dict[UOp, int]:
  """Per node, the element count of the largest value it is computed from without broadcasting: buffers, reduces
  and requested copies count their own elements, constants one, any other node the largest of its sources. A node
  with more elements than that is a broadcast (an expand of something smaller)."""
  sizes: dict[UOp, int] = {}
  for r in roots:
    for n in r.toposort():
      if n in sizes: continue
      if n.op in (Ops.BUFFER, Ops.REDUCE_AXIS, Ops.CONTIGUOUS): sizes[n] = _numel(n)
      # zeros around a value that is not a broadcast are no broadcast either (the pieces of a concatenation)
      elif n.op is Ops.PAD and sizes[n.src[0]] >= _numel(n.src[0]): sizes[n] = _numel(n)
      else: sizes[n] = max((sizes[s] for s in n.src), default=1)
  return sizes


def _is_const(n: UOp) -> bool:
  while n.op in GroupOp.Movement: n = n.src[0]
  return n.op is Ops.CONST


def _cheap_to_recompute(n: UOp, realize: set[UOp]) -> bool:
  """Casts plus at most one arithmetic op with a constant operand, over loads (buffers, realized values, reduces
  that get realized anyway): recomputing that per use costs less than a kernel and a buffer."""
  arithmetic, stack, seen = 0, [n], set()
  while stack:
    m = stack.pop()
    if m in seen: continue
    seen.add(m)
    if m is not n and (m in realize or m.op in (Ops.BUFFER, Ops.CONST, Ops.REDUCE_AXIS, Ops.CONTIGUOUS)): continue
    if m.op in GroupOp.ALU:
      arithmetic += 1
      # a select between two computed values (the pieces of a concatenation) is no op with a constant operand
      operands = m.src[1:] if m.op is Ops.WHERE else m.src
      if arithmetic > 1 or not any(_is_const(s) for s in operands): return False
    stack.extend(m.src)
  return True


def _worth_realizing(n: UOp, loop_size: int, sizes: dict[UOp, int], realize: set[UOp]) -> bool:
  """Whether an elementwise value that a reduce reads through an expand (a broadcast operand, a window: each element
  feeds several iterations of the reduce) is computed once into a buffer of its own instead of per use."""
  # movement ops stay index math; buffers and constants are plain loads
  if n.op not in GroupOp.Elementwise: return False
  # the reduce visits fewer elements than n has (an expanded slice): recomputing is cheaper than all of n
  if _numel(n) >= loop_size: return False
  # n itself broadcasts smaller values: a buffer would be a copy bigger than its sources, realize those instead
  if _numel(n) > sizes[n]: return False
  # a cast or one op with a constant over a load: cheaper than a kernel and a buffer
  return not _cheap_to_recompute(n, realize)


def find_realize_points(roots: list[UOp]) -> set[UOp]:
  """Nodes that must be materialized in a buffer of their own: outputs, reduces that are broadcast (recomputing
  them per output element would repeat the reduction), used by several nodes or kernels, or nested inside another
  reduce, and computed elementwise values a reduce reads through an expand (see `_worth_realizing`)."""
  users = _consumers(roots)
  sizes = _source_sizes(roots)
  position = _positions(roots)
  realize: set[UOp] = {r for r in roots if r.op is not Ops.BUFFER}
  realize |= {n for n in position if n.op is Ops.CONTIGUOUS}
  realize |= {n for n in position if n.op is Ops.REDUCE_AXIS and _readers(n, users) > 1}
  realize |= _maxed_values(position, users)
  # walk down from each kernel root, users before their sources (a fixed order: the result depends on it, and
  # sets of nodes iterate in memory order); what a root would recompute per use is realized, and all but one of
  # the unrelated reductions of a kernel, until nothing changes
  changed = True
  while changed:
    changed = False
    for root in sorted(realize, key=position.__getitem__, reverse=True):
      for n in _recomputed(root, realize, sizes) + _extra_reductions(root, realize, position):
        if n not in realize: realize.add(n); changed = True
    if not changed:
      shared = (_shared_reductions(realize) | _shared_transcendentals(realize, users, sizes, position)) - realize
      realize |= shared
      changed = bool(shared)
  return realize


def _readers(n: UOp, users: dict[UOp, set[UOp]]) -> int:
  """How many nodes read the value of `n`, through views of it (movement ops) too: a convolution whose output is
  split in halves (Slice, Split: packed QKV, an STFT's real and imaginary parts) is read twice."""
  count, stack = 0, [n]
  while stack:
    for u in users.get(stack.pop(), ()):
      if u.op in GroupOp.Movement: stack.append(u)
      else: count += 1
  return count


def _maxed_values(position: dict[UOp, int], users: dict[UOp, set[UOp]]) -> set[UOp]:
  """Computed values whose maximum is taken and that are also used beside it (softmax: exp(x - max x)): stored
  once, so that every kernel reads the very values the maximum was taken of. Recomputed in each kernel, a multiply
  contracted into a multiply-add in one of them gives other roundings, and x - max x can then be below zero
  everywhere by more than exp can take (a sum of zeros, 0 / 0) for large x."""
  out = set()
  for n in position:
    if n.op is not Ops.REDUCE_AXIS or n.arg[0] is not Ops.MAX: continue
    x, shared = n.src[0], False
    while True:
      shared = shared or len(users.get(x, ())) > 1
      if x.op not in GroupOp.Movement: break
      x = x.src[0]
    if x.op in GroupOp.ALU and shared: out.add(x)
  return out


def _extra_reductions(root: UOp, realize: set[UOp], position: dict[UOp, int]) -> list[UOp]:
  """The reductions of `root`'s kernel to compute in kernels of their own: when a kernel would add up two unrelated
  reductions (a residual block's 3x3 and 1x1 convolutions over different inputs), all but the one doing the most
  work. A loop nest with one reduction is register-blocked along the axes its loads share; two reductions over
  different data share none (the real and imaginary halves of an STFT's convolution read other rows of its
  weights). Reductions that read the very same views (a mean and a mean of squares) stay together."""
  reduces = _kernel_reductions(root, realize)
  if len(reduces) < 2: return []
  views = {r: _views(r.src[0], realize) for r in reduces}
  if len({views[r] for r in reduces}) == 1: return []
  keep = max(reduces, key=lambda r: (_numel(r.src[0]), position[r]))
  return sorted((r for r in reduces if r is not keep), key=position.__getitem__)


def _kernel_reductions(root: UOp, realize: set[UOp]) -> list[UOp]:
  """The reductions `root`'s kernel computes (itself when it is one): reached from it without passing a realized
  value; what a reduction reduces is its own business."""
  reduces, seen, stack = [], set(), [root]
  while stack:
    n = stack.pop()
    if n in seen: continue
    seen.add(n)
    if n is not root and n in realize: continue
    if n.op is Ops.REDUCE_AXIS: reduces.append(n); continue
    stack.extend(n.src)
  return reduces


def _shared_reductions(realize: set[UOp]) -> set[UOp]:
  """Reductions that two kernels would each compute: a convolution whose activation is both squared into a
  realized window sum and divided by that sum (LRN) would run twice. Realized, it runs once. (Called when nothing
  else is left to realize: a reduction inside another one is realized already.)"""
  kernels: dict[UOp, int] = {}
  for root in realize:
    for n in _kernel_reductions(root, realize):
      if n is not root: kernels[n] = kernels.get(n, 0) + 1
  return {n for n, count in kernels.items() if count > 1}


def _kernel_nodes(root: UOp, realize: set[UOp]) -> set[UOp]:
  """The nodes `root`'s kernel computes: reached from it without passing a realized value or a reduction's input."""
  out, stack = set(), [root]
  while stack:
    n = stack.pop()
    if n in out: continue
    out.add(n)
    if n is not root and (n in realize or n.op is Ops.REDUCE_AXIS): continue
    stack.extend(n.src)
  return out


def _shared_transcendentals(realize: set[UOp], users: dict[UOp, set[UOp]], sizes: dict[UOp, int],
                            position: dict[UOp, int]) -> set[UOp]:
  """Elementwise values with an exponential, logarithm or sine in them that two or more kernels would each compute:
  Whisper's GELU of its second convolution, transposed and added to the positions, is the residual stream that a
  dozen kernels read (layer norms, residual adds), each computing an erf per element, five of them scalar (15% of
  the run). The values computed by exactly the same kernels, up from the transcendental op through elementwise ops
  and views, that take RECOMPUTE_MAX_OPS operations or more per element: the last of them is realized once (not a
  broadcast: a copy bigger than its sources)."""
  kernels: dict[UOp, frozenset[UOp]] = {}
  for root in realize:
    for n in _kernel_nodes(root, realize):
      if n is not root: kernels[n] = kernels.get(n, frozenset()) | {root}
  out = set()
  for t, roots in kernels.items():
    if t.op not in GroupOp.Transcendental or len(roots) < 2: continue
    shared, stack = {t}, [t]
    while stack:
      for u in users.get(stack.pop(), ()):
        if u not in shared and u not in realize and kernels.get(u) == roots and \
           (u.op in GroupOp.Elementwise or u.op in GroupOp.Movement and not _expands(u)):
          shared.add(u); stack.append(u)
    n = max(shared, key=position.__getitem__)
    while n.op in GroupOp.Movement: n = n.src[0]      # a view of the value is index math of its readers
    # a softmax's exp (a few operations) stays recomputed
    if n.op in GroupOp.Elementwise and _numel(n) <= sizes[n] and _operations(n, realize) >= RECOMPUTE_MAX_OPS:
      out.add(n)
  return out


def _operations(n: UOp, realize: set[UOp]) -> int:
  """The arithmetic operations per element that computing `n` from buffers and realized values takes."""
  seen, stack = set(), [n]
  while stack:
    m = stack.pop()
    if m in seen or (m is not n and (m in realize or m.op in (Ops.BUFFER, Ops.REDUCE_AXIS))): continue
    seen.add(m)
    stack.extend(m.src)
  return sum(m.op in GroupOp.ALU for m in seen)


def _views(n: UOp, realize: set[UOp]) -> frozenset[UOp]:
  """What the arithmetic of `n` reads within one kernel: the buffers, realized values and views of them (movement
  ops) its elementwise ops take as operands."""
  out, seen, stack = set(), set(), [n]
  while stack:
    m = stack.pop()
    if m in seen: continue
    seen.add(m)
    if m.op in GroupOp.Elementwise and not (m is not n and m in realize): stack.extend(m.src)
    elif m.op is not Ops.CONST: out.add(m)
  return frozenset(out)


def _positions(roots: list[UOp]) -> dict[UOp, int]:
  """Each node of the graph of `roots` -> its place in one topological order (sources first): the order in which
  passes that add realize points visit nodes, so that a compile does not depend on where nodes sit in memory."""
  position: dict[UOp, int] = {}
  for r in roots:
    for n in r.toposort(): position.setdefault(n, len(position))
  return position


def _recomputed(root: UOp, realize: set[UOp], sizes: dict[UOp, int]) -> list[UOp]:
  """Nodes that, fused into `root`'s kernel, would be computed many times per element (reduces behind an expand or
  inside another reduce, and elementwise values a reduce reads through an expand) or only in part of it (a reduce
  behind a pad: a convolution that is one piece of a concatenation gets a kernel it can block, not a gated one)."""
  out, seen = [], set()
  stack: list[tuple[UOp, bool, int]] = [(root, False, 0)]     # node, behind an expand or pad, enclosing loop size
  while stack:
    n, expanded, loop = stack.pop()
    if (n, expanded, loop) in seen: continue
    seen.add((n, expanded, loop))
    if n is not root and n in realize: continue
    if n.op is Ops.REDUCE_AXIS:
      if n is not root and (expanded or loop): out.append(n); continue
      stack.append((n.src[0], False, max(1, _numel(n.src[0])))); continue
    if n is not root and expanded and loop and _worth_realizing(n, loop, sizes, realize): out.append(n); continue
    for s in n.src: stack.append((s, expanded or _expands(n) or n.op is Ops.PAD, loop))
  return out


class _KernelBuilder:
  """Builds one kernel's value graph: walks the lazy graph from the root with an index per dimension."""

  def __init__(self, realized: dict[UOp, UOp], opened: set[UOp]):
    self.realized = realized        # lazy node -> BUFFER holding its value
    self.opened = opened            # realized nodes whose layout is chosen after the kernels are built
    self.bufs: list[UOp] = []
    self.memo: dict = {}
    self.n_ranges = 0
    self.origins: dict[provenance.Origin, None] = {}    # the model nodes this kernel computes, sources first
    self.const_memo: dict[UOp, bool] = {}

  def constant(self, n: UOp) -> bool:
    """Whether `n` is computed from constants alone (no buffer, no realized value)."""
    if n not in self.const_memo:
      self.const_memo[n] = n.op is Ops.CONST or (n.op is not Ops.BUFFER and n not in self.realized and bool(n.src)
                                                 and all(self.constant(s) for s in n.src))
    return self.const_memo[n]

  def buffer_arg(self, buf: UOp, mutable: bool = False) -> UOp:
    if buf not in self.bufs: self.bufs.append(buf)
    return UOp(Ops.DEFINE_GLOBAL, buf.dtype, (), (self.bufs.index(buf), mutable))

  def element_index(self, n: UOp, idx: tuple[UOp, ...]) -> UOp:
    """Where element `idx` of realized node `n` sits in its buffer (a bigger one for a value placed into a state:
    the same coordinates); an OPEN_INDEX for a value whose layout is not chosen yet."""
    buf = self.realized[n]
    if tuple(buf.arg[1]) != tuple(n.shape): return flat_index(idx, buf.arg[1])
    return open_index(idx, n.shape) if n in self.opened else flat_index(idx, n.shape)

  def new_range(self, size: sint, kind: AxisType) -> UOp:
    end = size if isinstance(size, UOp) else UOp.const(INDEX, size)
    r = UOp(Ops.RANGE, INDEX, (end,), RangeArg(self.n_ranges, kind))
    self.n_ranges += 1
    return r

  def value(self, n: UOp, idx: tuple[UOp, ...], valid: UOp | None, top: bool = False) -> UOp:
    key = (n, idx, valid)
    if key not in self.memo:
      self.memo[key] = self._value(n, idx, valid, top)
      # values computed from constants alone are shared by every node that builds the same one: they name no node
      if n.op is not Ops.BUFFER and (top or n not in self.realized) and not self.constant(n):
        if (o := provenance.origin_of(n)) is not None: self.origins.setdefault(o)
    return self.memo[key]

  def _value(self, n: UOp, idx: tuple, valid: UOp | None, top: bool) -> UOp:
    if n.op is Ops.BUFFER or (not top and n in self.realized):
      buf = n if n.op is Ops.BUFFER else self.realized[n]
      flat = flat_index(idx, buf.arg[1]) if n.op is Ops.BUFFER else self.element_index(n, idx)
      src = (self.buffer_arg(buf), flat) + ((valid,) if valid is not None else ())
      return UOp(Ops.LOAD, buf.dtype, src)
    if n.op in (Ops.CONST, Ops.DEFINE_VAR): return n
    if n.op is Ops.ARANGE: return idx[0].cast(n.dtype)
    if n.op is Ops.CONTIGUOUS: return self.value(n.src[0], idx, valid)
    if n.op in GroupOp.Elementwise:
      return n.replace(src=tuple(self.value(s, idx, valid) for s in n.src))
    if n.op is Ops.REDUCE_AXIS:
      op, axes = n.arg
      in_shape = n.src[0].shape
      ranges = {a: self.new_range(in_shape[a], AxisType.REDUCE) if in_shape[a] != 1 else UOp.const(INDEX, 0)
                for a in axes}
      inner = tuple(ranges[i] if i in ranges else x for i, x in enumerate(idx))
      body = self.value(n.src[0], inner, valid)
      loops = tuple(ranges[a] for a in sorted(ranges) if ranges[a].op is Ops.RANGE)
      return UOp(Ops.REDUCE, n.dtype, (body,) + loops, op) if loops else body   # reducing one element is the element
    src = n.src[0]
    if n.op is Ops.RESHAPE: return self.value(src, _reshaped_index(idx, n.shape, src.shape), valid)
    if n.op is Ops.PERMUTE:
      inner = [None] * len(idx)
      for i, o in enumerate(n.arg): inner[o] = idx[i]
      return self.value(src, tuple(inner), valid)
    if n.op is Ops.EXPAND:
      inner = tuple(UOp.const(INDEX, 0) if s == 1 and t != 1 else x for x, s, t in zip(idx, src.shape, n.arg))
      return self.value(src, inner, valid)
    if n.op is Ops.SHRINK: return self.value(src, tuple(x + b for x, (b, _) in zip(idx, n.arg)), valid)
    if n.op is Ops.FLIP:
      return self.value(src, tuple((s - 1) - x if i in n.arg else x for i, (x, s) in enumerate(zip(idx, src.shape))),
                        valid)
    if n.op is Ops.PAD:
      cond = None
      inner = []
      for x, (b, a), s in zip(idx, n.arg, src.shape):
        if not (is_static((b, a)) and b == 0 and a == 0):
          c = simplify(x.lt(b).ne(True).logical_and(x.lt(b + s)))
          if not (c.op is Ops.CONST and c.arg): cond = c if cond is None else cond.logical_and(c)
        inner.append(x - b if isinstance(b, UOp) or b else x)
      if cond is None: return self.value(src, tuple(inner), valid)
      v = cond if valid is None else valid.logical_and(cond)
      sub = self.value(src, tuple(inner), v)
      return cond.where(sub, UOp.const(n.dtype, 0))
    raise NotImplementedError(f"scheduler: cannot index through {n.op}")


def _unflatten(flat: UOp, shape) -> tuple[UOp, ...]:
  out = []
  for s, st in zip(shape, strides(shape)):
    out.append(UOp.const(INDEX, 0) if s == 1 else (flat // st) % s)
  return tuple(out)


def _reshaped_index(idx: tuple[UOp, ...], shape: tuple[int, ...], src_shape: tuple[int, ...]) -> tuple[UOp, ...]:
  """The index into `src_shape` of element `idx` of its reshape to `shape`. Dims are matched in runs of equal
  product (size-1 dims aside): a dim kept as it is keeps its index, and only dims really merged or split become
  division and remainder (so a reshape that adds or drops dims of size 1 costs no index arithmetic)."""
  out = [UOp.const(INDEX, 0)] * len(src_shape)
  dst = [i for i, s in enumerate(shape) if s != 1]
  srcd = [i for i, s in enumerate(src_shape) if s != 1]
  a = b = 0
  while a < len(dst) or b < len(srcd):
    ga, gb = [dst[a]] if a < len(dst) else [], [srcd[b]] if b < len(srcd) else []
    pa, pb = (shape[ga[0]] if ga else 1), (src_shape[gb[0]] if gb else 1)
    while not same(pa, pb):     # sizes known at run time compare at their largest values
      if highest(pa) < highest(pb): a += 1; ga.append(dst[a]); pa = sym_prod((pa, shape[dst[a]]))
      else: b += 1; gb.append(srcd[b]); pb = sym_prod((pb, src_shape[srcd[b]]))
    a, b = a + 1, b + 1
    if len(ga) == 1 and len(gb) == 1: out[gb[0]] = idx[ga[0]]; continue
    flat = flat_index(tuple(idx[i] for i in ga), tuple(shape[i] for i in ga))
    for i, v in zip(gb, _unflatten(flat, tuple(src_shape[i] for i in gb))): out[i] = v
  return tuple(out)


def _drop_unused_buffers(ast: UOp, bufs: list[UOp]) -> tuple[UOp, tuple[UOp, ...]]:
  """Simplification can remove every load of a buffer (where(False, x, y) -> y): renumber the arguments so
  the kernel binds only the buffers it uses."""
  used = sorted({n.arg[0] for n in ast.toposort() if n.op is Ops.DEFINE_GLOBAL})
  if len(used) == len(bufs): return ast, tuple(bufs)
  mapping = {n: n.replace(arg=(used.index(n.arg[0]), n.arg[1])) for n in ast.toposort() if n.op is Ops.DEFINE_GLOBAL}
  return substitute(ast, mapping), tuple(bufs[i] for i in used)


def _packed_store(kb: _KernelBuilder, n: UOp, out_arg: UOp) -> UOp:
  """A sub-byte output is written a whole byte per work-item: each byte gathers its elements."""
  if not is_static(n.shape): raise NotImplementedError("sub-byte tensors with sizes known only at run time")
  k, numel = per_word(n.dtype), math.prod(n.shape)
  nbytes = -(-numel // k)
  byte = kb.new_range(nbytes, AxisType.GLOBAL) if nbytes > 1 else UOp.const(INDEX, 0)
  vals = []
  for i in range(k):
    e = byte * k + i
    valid = e.lt(numel) if numel % k else None
    v = kb.value(n, _unflatten(e, n.shape), valid, top=True)
    vals.append(valid.where(v, UOp.const(n.dtype, 0)) if valid is not None else v)
  return pack_store(out_arg, byte, vals)


class ScheduleError(ValueError):
  """The graph cannot be split to fit a target limit."""


def _limit_buffers(roots: list[UOp], realize: set[UOp], max_buffers: int) -> None:
  """Add realize points until no kernel binds more than `max_buffers` buffers (its inputs and its output): the
  fused node reading the most inputs that still fits in a kernel of its own is split off first, preferring nodes
  that are computed (not movement) and no bigger than their sources (never a broadcast copy: an expand stays index
  math of the kernel that reads it)."""
  sizes = _source_sizes(roots)
  position = _positions(roots)
  while True:
    leaves: dict[UOp, frozenset] = {}
    for r in roots:
      for n in r.toposort():
        if n in leaves: continue
        if n.op is Ops.BUFFER: leaves[n] = frozenset([n])
        else: leaves[n] = frozenset().union(*(frozenset([s]) if s in realize else leaves[s] for s in n.src)) \
          if n.src else frozenset()
    over = sorted((n for n in realize if len(leaves.get(n, ())) + 1 > max_buffers), key=position.__getitem__)
    if not over: return
    root = over[0]
    region, stack = [], [root]
    while stack:
      n = stack.pop()
      for src in n.src:
        if src not in realize and src.op not in (Ops.BUFFER, Ops.CONST) and src not in region:
          region.append(src); stack.append(src)
    fits = [m for m in region if 2 <= len(leaves[m]) <= max_buffers - 1]
    if not fits:
      raise ScheduleError(f"a kernel computing a tensor of shape {root.shape} reads {len(leaves[root])} buffers; "
                          f"the target allows {max_buffers} storage buffers per kernel")
    # ties go to the node latest in graph order (never to content hashes: those name buffers by their ids)
    realize.add(max(fits, key=lambda m: (_numel(m) <= sizes[m], m.op not in GroupOp.Movement, len(leaves[m]),
                                         position[m])))


def schedule(roots: list[UOp], new_buffer, max_buffers: int | None = None,
             placed: dict[UOp, tuple[UOp, tuple]] | None = None) -> tuple[list[ScheduleItem], list[UOp]]:
  """Split the graph of `roots` into kernels. `new_buffer(shape, dtype)` makes the BUFFER a kernel writes;
  `max_buffers` bounds the buffers one kernel may bind (WebGPU: 8 storage buffers by default); `placed` maps a
  root to the existing BUFFER holding its value (at the same coordinates: a state's buffer, as big as its capacity)
  and, per dim, the first index its kernel computes (the entries before it are in the buffer already: a call
  appends to a state in place, and what reads the root reads that buffer). Returns the kernels in execution order
  and, per root, the BUFFER holding its value."""
  placed = placed or {}
  viz.snapshot("graph to schedule", *roots)
  roots = batch_sliced_reductions(roots)
  realize = find_realize_points(roots)
  if max_buffers is not None: _limit_buffers(roots, realize, max_buffers)
  realized: dict[UOp, UOp] = {}
  order: list[UOp] = []
  for n in (n for r in roots for n in r.toposort()):
    if n in realize and n not in realized:
      realized[n] = placed[n][0] if n in placed else new_buffer(n.shape, n.dtype)
      order.append(n)
  firsts = {n: first for n, (_, first) in placed.items()}
  # intermediates' layouts are chosen from the kernels built with them open, then put in place by a rewrite
  opened = open_values(order, set(roots))
  values = {realized[n]: n for n in order if n in opened}
  built = [it for it in (_build(n, realized, opened, firsts.get(n)) for n in order) if it is not None]
  orders = choose_layouts(built, values)
  items = [replace(it, ast=lay_out(it.ast, it.bufs, orders)) if any(b in values for b in it.bufs) else it
           for it in built]
  return _pieces_apart(items), [r if r.op is Ops.BUFFER else realized[r] for r in roots]


def _pieces_apart(items: list[ScheduleItem]) -> list[ScheduleItem]:
  """Each kernel storing a concatenation as one kernel per piece (codegen/pieces.py), binding what it reads."""
  out = []
  for it in items:
    parts = split_pieces(it)
    if len(parts) == 1: out.append(it); continue
    for part in parts:
      ast, bufs = _drop_unused_buffers(part.ast, list(part.bufs))
      out.append(replace(part, ast=ast, bufs=bufs))
  return out


def _build(n: UOp, realized: dict[UOp, UOp], opened: set[UOp], first: tuple | None = None) -> ScheduleItem | None:
  """The kernel computing realized node `n` into its buffer (None for an empty tensor: nothing to compute); with
  `first`, only the entries from that index on along each dim. Values in `opened` are reached through OPEN_INDEX
  nodes (their layout is chosen later)."""
  kb = _KernelBuilder(realized, opened)
  out_arg = kb.buffer_arg(realized[n], mutable=True)
  shape = n.shape
  if any(s == 0 for s in shape): return None
  if n.dtype.storage_only and per_word(n.dtype) > 1: store = _packed_store(kb, n, out_arg)
  else:
    first = first or (0,) * len(shape)
    idx = tuple(_from(kb, simplified(s - f), f) for s, f in zip(shape, first))
    store = UOp(Ops.STORE, dtypes.bool, (out_arg, kb.element_index(n, idx), kb.value(n, idx, None, top=True)))
  ast = simplify(lower_storage_types(UOp(Ops.SINK, dtypes.bool, (store,))))
  ast = simplify(graph_rewrite(ast, select_loads))
  ast, bufs = _drop_unused_buffers(ast, kb.bufs)
  return ScheduleItem(ast, bufs, meta={"nodes": tuple(kb.origins)})


def _from(kb: _KernelBuilder, size: sint, first: sint) -> UOp:
  """The index of a kernel's output dim running over `size` entries from `first`."""
  if not is_static(size) or size != 1: loop = kb.new_range(size, AxisType.GLOBAL)
  else: loop = UOp.const(INDEX, 0)
  return loop + first if isinstance(first, UOp) or first else loop


def placed_kernel(root: UOp, buf: UOp, new_buffer) -> ScheduleItem | None:
  """The one kernel writing `root` into `buf` (at the same coordinates), reading every reduction it is computed
  from as a buffer of its own (made by `new_buffer`, computed by no kernel): enough to tell what the write does
  (`rewrites_itself`) without scheduling the graph above it."""
  realized = {n: new_buffer(n.shape, n.dtype) for n in root.toposort() if n.op is Ops.REDUCE_AXIS and n is not root}
  realized[root] = buf
  return _build(root, realized, set())


def rewrites_itself(item: ScheduleItem) -> bool:
  """Whether a kernel stores into each element the value it loads from that very element (a state's old part
  written back where it is: nothing to do)."""
  store = item.ast.src[0] if len(item.ast.src) == 1 else None
  if store is None or store.op is not Ops.STORE or len(store.src) != 3: return False
  value = store.src[2]
  return value.op is Ops.LOAD and len(value.src) == 2 and item.bufs[value.src[0].arg[0]] is item.bufs[0] and \
    value.src[1] is store.src[1]
