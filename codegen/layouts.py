"""Storage orders of intermediates, chosen once their kernels are built. A kernel reaches an element of an open value
(an intermediate whose order is not chosen yet) through an OPEN_INDEX: its index in row-major order, then its index
along each dim, both simplified with the kernel. `choose_layouts` judges the row-major indices (image-like values
that convolutions and window ops read are stored channels-last, a reduction's operand read across the output's
contiguous axis is stored transposed) and `lay_out` replaces each OPEN_INDEX by the index in the chosen order, a rule
table run with the symbolic rules: each kernel is built once, and no choice waits for a kernel built again."""
from __future__ import annotations
from tgc.ir import Ops, UOp, AxisType, UPat, PatternMatcher, dtypes, graph_rewrite
from tgc.ir.symbolic import split_terms, symbolic
from tgc.ir.sint import sint, highest, is_static, quotient, simplified, prod as sym_prod
from tgc.codegen.knobs import GROUP_LANES, PADDED_VECTORS, TRANSPOSE_MULTIPLE

INDEX = dtypes.index


def strides(shape) -> list[sint]:
  """Row-major strides of `shape` (0 for dims of size 1)."""
  st, acc = [], 1
  for s in reversed(shape):
    st.append(acc if s != 1 else 0)
    acc = sym_prod((acc, s))
  return st[::-1]


def flat_index(idx, shape) -> UOp:
  """Where element `idx` of a row-major array of `shape` sits."""
  out = UOp.const(INDEX, 0)
  for x, st in zip(idx, strides(shape)):
    if isinstance(st, UOp) or st: out = out + x * st
  return out


def open_values(values: list[UOp], roots: set[UOp]) -> set[UOp]:
  """The realized values whose order is chosen once their kernels are built: the intermediates (outputs keep their
  order) that `choose_layouts` may store otherwise, image-like values of a type the scheduler may lay out and floats
  with two or more dims of a size other than 1."""
  return {n for n in values if n not in roots and _layout_free(n.dtype) and
          (_image_dims(n.shape) is not None or (n.dtype.is_float and sum(s != 1 for s in n.shape) >= 2))}


def open_index(idx: tuple[UOp, ...], shape) -> UOp:
  """The OPEN_INDEX of element `idx` of an open value of `shape`: its row-major index, then its index along each dim
  (0 along dims of size 1, which no order steps along)."""
  dims = tuple(UOp.const(INDEX, 0) if s == 1 else x for x, s in zip(idx, shape))
  return UOp(Ops.OPEN_INDEX, INDEX, (flat_index(idx, shape),) + dims)


def row_major(index: UOp) -> UOp:
  """The row-major index of an access: an OPEN_INDEX's first source, any other index as it is."""
  return index.src[0] if index.op is Ops.OPEN_INDEX else index


def choose_layouts(items: list, values: dict[UOp, UOp]) -> dict[UOp, tuple[int, ...]]:
  """Per buffer of an open value (`values`: buffer -> lazy node) stored in another order than row-major, the order
  of its dims, judged from the kernels `items` (ScheduleItems) as they read and write them row-major."""
  picked = channels_last(items, values)
  _follow_outputs(items, values, picked)
  images = set(picked)      # stored channels last as images (a transposed operand may have the same order)
  picked.update({n: perm for n, perm in transposed_operands(items, values).items() if n not in picked})
  _convolution_outputs(items, values, picked, images)
  return {b: picked[n] for b, n in values.items() if n in picked}


def _ordered(ctx: dict[int, tuple], x: UOp, buf: UOp, index: UOp) -> UOp:
  shape, order = ctx[buf.arg[0]]
  if order is None: flat = index.src[0]
  else: flat = flat_index(tuple(index.src[1 + d] for d in order), tuple(shape[d] for d in order))
  return x.replace(src=(buf, flat) + x.src[2:])


laid_out = PatternMatcher([
  # LOAD/STORE(buf, OPEN_INDEX(row-major, per dim)) -> the index in the order chosen for buf (row-major: the first)
  (UPat((Ops.LOAD, Ops.STORE), name="x", src=(UPat(Ops.DEFINE_GLOBAL, name="buf"), UPat(Ops.OPEN_INDEX, name="index")),
        allow_any_len=True), _ordered),
], name="layouts") + symbolic


def lay_out(ast: UOp, bufs: tuple[UOp, ...], orders: dict[UOp, tuple[int, ...]]) -> UOp:
  """`ast` binding `bufs` with each OPEN_INDEX replaced by the index in the order `orders` gives its buffer (absent:
  row-major), simplified."""
  ctx = {i: (b.arg[1], orders.get(b)) for i, b in enumerate(bufs)}
  return graph_rewrite(ast, laid_out, ctx)


def _open_loads(ast: UOp) -> list[UOp]:
  return [u for u in ast.toposort() if u.op is Ops.LOAD and u.src[1].op is Ops.OPEN_INDEX]


def channels_last(items: list, values: dict[UOp, UOp]) -> dict[UOp, tuple[int, ...]]:
  """Intermediates shaped like (N, C, H, W) (dims of size 1 aside: a convolution's reduce keeps its reduced dims)
  that a convolution reads (a reduction over C) or a window op reads (an output channel indexing C, a window sliding
  over H or W: depthwise convolutions, pooling) are stored channels last, (N, H, W, C): those kernels then vectorize
  along contiguous channels. Not those a grouped convolution reads over groups of channels that are no multiple of
  GROUP_LANES (`_odd_groups`): stored as they are, whatever else reads them."""
  reads = []
  for it in items:
    for ld in _open_loads(it.ast):
      n = values[it.bufs[ld.src[0].arg[0]]]
      dims = _image_dims(n.shape)
      if dims is not None and not _batched_product(it.ast, ld, n.shape):
        reads.append((n, _image_access(row_major(ld.src[1]), n.shape, dims)))
  kept = {n for n, access in reads if access == "odd groups"}
  return {n: _channels_last_order(n) for n, access in reads if access == "channels" and n not in kept}


def _batched_product(ast: UOp, ld: UOp, shape: tuple) -> bool:
  """Whether `ld` reads a 4-D image-like value (N, C, H, W) in a kernel whose other loads change with the output
  axis that indexes N: a batch of matrix products, each with operands of its own (Winograd's products), not a
  convolution (whose weights are the same for every image of a batch)."""
  big = [i for i, s in enumerate(shape) if highest(s) > 1]
  if len(big) != 4: return False
  st = strides(shape)
  terms, _ = split_terms(row_major(ld.src[1]))
  batch = [t for t, k in terms.items() if t.op is Ops.RANGE and t.arg.kind is AxisType.GLOBAL and
           _dim_of_step(k, st) == big[0]]
  others = [u for u in ast.toposort() if u.op is Ops.LOAD and u is not ld]
  return any(any(n is r for n in u.src[1].toposort()) for u in others for r in batch)


def _follow_outputs(items: list, values: dict[UOp, UOp], picked: dict[UOp, tuple[int, ...]]) -> None:
  """Image-like open values that a kernel without reductions reads across the axis it stores contiguously (a
  convolution's output squared and stored channels last for an LRN's window sums over channels) are stored channels
  last when that makes the read contiguous along that axis too: the kernel is then a map, not a transposition, and
  the convolution writes its output channels last. Repeated back along chains of such kernels."""
  changed = True
  while changed:
    changed = False
    for it in items:
      if len(it.ast.src) != 1 or it.ast.src[0].op is not Ops.STORE or \
          any(u.op is Ops.REDUCE for u in it.ast.toposort()): continue
      store = it.ast.src[0]
      idx = _final_index(store.src[1], values.get(it.bufs[store.src[0].arg[0]]), picked)
      inner = [t for t, k in split_terms(idx)[0].items() if k == 1 and t.op is Ops.RANGE]
      if len(inner) != 1: continue
      for ld in _open_loads(it.ast):
        n = values[it.bufs[ld.src[0].arg[0]]]
        order = _channels_last_order(n)
        if n in picked or order is None or split_terms(row_major(ld.src[1]))[0].get(inner[0]) == 1: continue
        if split_terms(_final_index(ld.src[1], n, {n: order}))[0].get(inner[0]) == 1:
          picked[n] = order
          changed = True


def _convolution_outputs(items: list, values: dict[UOp, UOp], picked: dict[UOp, tuple[int, ...]],
                         images: set[UOp]) -> None:
  """Image-like open values that no rule above orders, written by a convolution over a channels-last input, are
  stored channels last too: such a convolution vectorizes its output channels (its weights' contiguous axis), and
  row-major each of its vectors was 16 stores a channel plane apart (UNet's 2x2 stride-2 transposed convolutions,
  64 planes of 128x128 read by a concat: 12% of the roofline). Their readers (a concat, a resize, a depth to space)
  are maps, which read either order. A convolution here reduces a channels-last image (`images`: stored so as an
  image, not as attention's K stored transposed, whose order can look the same) against weights (a buffer that is
  no intermediate): attention's scores, two intermediates multiplied, are no image (MobileViT's, stored heads
  innermost, made its softmax scalar)."""
  def convolves(it, ld: UOp) -> bool:        # a load of a channels-last image, reduced over its channels
    m = values[it.bufs[ld.src[0].arg[0]]]
    return m in images and \
      _image_access(row_major(ld.src[1]), m.shape, _image_dims(m.shape)) == "channels"
  for it in items:
    if len(it.ast.src) != 1 or it.ast.src[0].op is not Ops.STORE: continue
    n = values.get(it.bufs[it.ast.src[0].src[0].arg[0]])
    if n is None or n in picked or (order := _channels_last_order(n)) is None: continue
    reduced = {u for red in it.ast.toposort() if red.op is Ops.REDUCE for u in red.src[0].toposort()}
    loads = [u for u in reduced if u.op is Ops.LOAD and u.src[0].op is Ops.DEFINE_GLOBAL]
    if any(convolves(it, ld) for ld in loads if ld.src[1].op is Ops.OPEN_INDEX) and \
       any(ld.src[1].op is not Ops.OPEN_INDEX for ld in loads):
      picked[n] = order


def _final_index(index: UOp, n: UOp | None, picked: dict[UOp, tuple[int, ...]]) -> UOp:
  """The flat index of an access in the order `picked` gives value `n` (row-major when it has none)."""
  if index.op is not Ops.OPEN_INDEX: return index
  if n not in picked: return index.src[0]
  order = picked[n]
  return graph_rewrite(flat_index(tuple(index.src[1 + d] for d in order), tuple(n.shape[d] for d in order)), symbolic)


def _channels_last_order(n: UOp) -> tuple[int, ...] | None:
  """The order of dims of image-like value `n` stored channels last: (N, H, W, C); None when not image-like."""
  dims = _image_dims(n.shape)
  if dims is None: return None
  c, w = dims[0], dims[2]
  return tuple(d for d in range(len(n.shape)) if d != c and d <= w) + (c,) + \
    tuple(d for d in range(len(n.shape)) if d > w)


def _layout_free(dtype) -> bool:
  """Values whose layout the scheduler may choose: floats and integers computed in their own type."""
  return (dtype.is_float or dtype.is_int) and not dtype.storage_only


def transposed_operands(items: list, values: dict[UOp, UOp]) -> dict[UOp, tuple[int, ...]]:
  """Intermediates that a reduction reads along its reduced dim (stride 1) and across the output's contiguous axis
  (a large stride), beside an operand that does not move along that axis: attention's K in Q·Kᵀ, read as K[j, d]
  with d reduced and j the scores' contiguous axis. Stored with that axis innermost ((d, j)), the kernel vectorizes
  along j with contiguous loads of K and one broadcast Q value, as a matmul with weights does, instead of summing
  vectors along d horizontally for every output. Only where j is a whole number of the widest vectors (16 floats)
  or long enough to be padded to one (PADDED_VECTORS of them: Whisper's 750 keys, the last vector's loads masked):
  a short padded axis would be vectorized otherwise, and read the transposed operand lane by lane."""
  picked: dict[UOp, tuple[int, ...]] = {}
  for it in items:
    if len(it.ast.src) != 1 or it.ast.src[0].op is not Ops.STORE: continue
    terms, _ = split_terms(row_major(it.ast.src[0].src[1]))
    out = [t for t, k in terms.items() if k == 1 and t.op is Ops.RANGE and t.arg.kind is AxisType.GLOBAL]
    if len(out) != 1: continue
    g = out[0]     # a length known only at run time ends in a masked vector, a long one in a padded vector
    length = g.src[0].arg if g.src[0].op is Ops.CONST else None
    if length is not None and length % TRANSPOSE_MULTIPLE and length < PADDED_VECTORS * TRANSPOSE_MULTIPLE: continue
    for red in (u for u in it.ast.toposort() if u.op is Ops.REDUCE):
      loads = [u for u in red.src[0].toposort() if u.op is Ops.LOAD and u.src[0].op is Ops.DEFINE_GLOBAL]
      moving = [ld for ld in loads if g in row_major(ld.src[1]).toposort()]
      if len(moving) != 1 or len(loads) < 2 or moving[0].src[1].op is not Ops.OPEN_INDEX: continue
      ld = moving[0]
      n = values[it.bufs[ld.src[0].arg[0]]]
      if n in picked or not n.dtype.is_float: continue
      dim = _transposed_dim(row_major(ld.src[1]), n.shape, g, red.src[1:])
      if dim is not None: picked[n] = tuple(d for d in range(len(n.shape)) if d != dim) + (dim,)
  return picked


def _transposed_dim(idx: UOp, shape: tuple[int, ...], g: UOp, reduced: tuple[UOp, ...]) -> int | None:
  """The dim of `shape` that range `g` indexes, when `idx` steps by 1 along a reduced range and by a whole row (or
  more) along `g`; None otherwise."""
  terms, _ = split_terms(idx)
  if not any(terms.get(r) == 1 for r in reduced) or any(g in t.toposort() for t in terms if t is not g): return None
  k = terms.get(g)
  st = strides(shape)
  last = max((d for d, s in enumerate(shape) if highest(s) > 1), default=None)
  if k is None or last is None or k < highest(shape[last]): return None
  dim = min((d for d, s in enumerate(st) if is_static(s) and s and s <= k), default=None)
  return dim if dim is not None and dim != last and k == st[dim] else None


def _image_dims(shape: tuple[int, ...]) -> tuple[int, int, int] | None:
  """The (channel, height, width) dims of an image-like shape: three or four dims bigger than 1 ((C, H, W) or
  (N, C, H, W)); None for anything else."""
  big = [i for i, s in enumerate(shape) if highest(s) > 1]
  if len(big) == 3: return (big[0], big[1], big[2])
  if len(big) == 4: return (big[1], big[2], big[3])
  return None


def _dim_of_step(k: sint, st: list[sint]) -> int | None:
  """The dim a flat-index step of `k` moves along: the largest stride <= k, when it divides k (over sizes known
  only at run time: the largest stride that divides k as a product of sizes)."""
  if is_static([k, *st]):
    if k <= 0: return None
    d = min((d for d, s in enumerate(st) if s and s <= k), default=None)
    return None if d is None or k % st[d] else d
  for d, s in enumerate(st):
    q = quotient(k, s)
    if q is not None and is_static(q) and q > 0: return d
  return None


def _image_access(idx: UOp, shape: tuple[int, ...], image: tuple[int, int, int]) -> str | None:
  """How a load of an image-like buffer at `idx` reads it (the terms of the flat index sorted into dims by their
  strides): "channels" when it reduces over its channels, or indexes them by an output axis while a window slides
  over its height or width; "odd groups" for a grouped convolution's read over groups that are no multiple of
  GROUP_LANES channels (`_odd_groups`); else None."""
  st = strides(shape)
  terms, _ = split_terms(idx)
  dims: dict[int, list[tuple[UOp, sint, bool]]] = {}
  for t, k in terms.items():
    if t.op is Ops.MUL and t.src[0].op is Ops.RANGE and not any(u.op is Ops.RANGE for u in t.src[1].toposort()):
      t, k = t.src[0], simplified(t.src[1] * k)     # a step that is a size known only at run time
    # the group an output channel is in (oc // 34), counted as that output axis for `_odd_groups` only
    group = t.op is Ops.IDIV and t.src[0].op is Ops.RANGE and t.src[0].arg.kind is AxisType.GLOBAL
    if t.op is not Ops.RANGE and not group: continue
    d = _dim_of_step(k, st)
    if d is not None: dims.setdefault(d, []).append((t.src[0] if group else t, k, group))
  channel = {r.arg.kind for r, _, group in dims.get(image[0], []) if not group}
  # a window: a spatial dim indexed by an output position plus a reduced tap (oh*stride + kh)
  window = any({r.arg.kind for r, _, group in dims.get(d, []) if not group} >= {AxisType.GLOBAL, AxisType.REDUCE}
               for d in image[1:])
  if AxisType.REDUCE in channel: return "odd groups" if _odd_groups(dims[image[0]], st[image[0]]) else "channels"
  return "channels" if AxisType.GLOBAL in channel and window else None


def _odd_groups(terms: list[tuple[UOp, sint, bool]], step: sint) -> bool:
  """Whether a read reducing over channels (`terms`: its ranges along the channel dim with their steps, `step`: the
  channel's) picks its channels' group by an output axis (a grouped convolution: `group*34 + ic`, or `oc // 34 * 34
  + ic`) in groups of channels that are no multiple of GROUP_LANES. Stored channels last, such a convolution could
  vectorize neither its output channels (a vector's lanes would read two groups) nor its pixels (a channel's pixels
  a row apart); stored as it is, its pixels are contiguous vectors. ShuffleNet's 1x1 convolutions over groups of 34
  channels ran at 6% of the roofline channels last."""
  for r, k, _ in terms:
    if r.arg.kind is not AxisType.GLOBAL or not is_static([k, step]) or not step: continue
    # a step of one channel is the output channel itself (an LRN's window over channels), not a group
    if k % step == 0 and k // step > 1 and (k // step) % GROUP_LANES: return True
  return False
