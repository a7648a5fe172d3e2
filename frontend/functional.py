"""Tensor compositions that need more than a line or two: non-constant padding modes, indexing, cat/stack/split,
convolution (any number of spatial dims), transposed convolution, pooling and gather.

Everything here is built from the lazy Tensor's primitives (elementwise, reduce, reshape/permute/expand/pad/
shrink/flip, cast), so the scheduler fuses each composition into as few kernels as it can; nothing runs here.
Sliding windows (`_pool`) use only movement ops (tinygrad's repeat/reshape/shrink trick), so a convolution is
one multiply-sum reduce kernel with no im2col buffer.

The functions take Tensors and build new ones with the class of their arguments (`type(x)`), so this module does
not import `frontend.tensor`: the Tensor imports it for its composed methods (`t[idx]`, `t.conv2d(...)`, ...)."""
from __future__ import annotations
from typing import Sequence
from tgc.ir import dtypes, promote
from tgc.frontend.shapes import broadcast_shape, ceildiv, lowest
from tgc.ir.sint import highest, is_static, lowest as lowest_size


def _tuple(value, n: int, name: str) -> tuple[int, ...]:
  """An int broadcast to `n` ints, or a sequence of exactly `n` ints."""
  if isinstance(value, int): return (value,) * n
  value = tuple(int(v) for v in value)
  if len(value) != n: raise ValueError(f"{name}: expected an int or {n} values, got {value}")
  return value


def _dim(dim: int, ndim: int, op: str) -> int:
  if not -ndim <= dim < ndim: raise ValueError(f"{op}: dim {dim} out of range for {ndim} dims")
  return dim % ndim


# ---------------------------------------------------------------- padding modes
_PAD_MODES = ("reflect", "symmetric", "edge", "replicate", "wrap", "circular")


def pad_mode(t, pads: Sequence[tuple[int, int]], mode: str):
  """Pad with a non-constant `mode`: "reflect" (mirror without the edge, as numpy/torch), "symmetric" (mirror
  with the edge), "edge"/"replicate" (repeat the edge), "wrap"/"circular" (periodic). `pads` holds one
  (before, after) pair per axis; negative amounts crop first."""
  if mode not in _PAD_MODES: raise ValueError(f"pad: unknown mode {mode!r}; known: constant, {', '.join(_PAD_MODES)}")
  if any(b < 0 or a < 0 for b, a in pads):
    t = t.shrink(tuple((max(0, -b), s - max(0, -a)) for (b, a), s in zip(pads, t.shape)))
    pads = tuple((max(0, b), max(0, a)) for b, a in pads)
  for axis, (before, after) in enumerate(pads):
    if before == 0 and after == 0: continue
    t = _pad_axis(t, axis, before, after, mode)
  return t


def _slice_axis(t, axis: int, begin: int, end: int):
  return t.shrink(tuple((begin, end) if i == axis else None for i in range(t.ndim)))


def _pad_axis(t, axis: int, before: int, after: int, mode: str):
  n = t.shape[axis]
  if n == 0: raise ValueError(f"pad: mode {mode!r} cannot pad axis {axis} of size 0 in {t.shape}")
  if mode in ("wrap", "circular"):
    # tile the axis enough times, then cut the window [-before, n + after) of the periodic extension
    reps_before, reps_after = ceildiv(before, n), ceildiv(after, n)
    tiled = t.repeat(tuple(1 + reps_before + reps_after if i == axis else 1 for i in range(t.ndim)))
    start = reps_before * n - before
    return _slice_axis(tiled, axis, start, start + before + n + after)
  pieces = []
  if mode in ("edge", "replicate"):
    edge_shape = lambda k: tuple(k if i == axis else s for i, s in enumerate(t.shape))  # noqa: E731
    left = _slice_axis(t, axis, 0, 1).expand(edge_shape(before))
    right = _slice_axis(t, axis, n - 1, n).expand(edge_shape(after))
  else:
    skip = 1 if mode == "reflect" else 0
    if before > n - skip or after > n - skip:
      raise ValueError(f"pad: mode {mode!r} needs pads ({before}, {after}) <= {n - skip} on axis {axis} of {t.shape}")
    left = _slice_axis(t, axis, skip, skip + before).flip(axis)
    right = _slice_axis(t, axis, n - skip - after, n - skip).flip(axis)
  if before: pieces.append(left)
  pieces.append(t)
  if after: pieces.append(right)
  return cat(pieces, axis)


# ---------------------------------------------------------------- indexing
def _strided(t, axis: int, step: int):
  """Every `step`-th element of `axis` starting at 0 (step >= 1): pad to a multiple, split, keep index 0."""
  if step == 1: return t
  n = t.shape[axis]
  count = ceildiv(n, step)
  x = t.pad(tuple((0, count * step - n) if i == axis else (0, 0) for i in range(t.ndim)))
  x = x.reshape(t.shape[:axis] + (count, step) + t.shape[axis + 1:])
  x = x.shrink(tuple((0, 1) if i == axis + 1 else None for i in range(x.ndim)))
  return x.reshape(t.shape[:axis] + (count,) + t.shape[axis + 1:])


def _slice(t, axis: int, sl: slice):
  if sl.start is None and sl.stop is None and sl.step in (None, 1): return t
  n = t.shape[axis]
  start, stop, step = sl.indices(n)
  count = len(range(start, stop, step))
  if count == 0: return _slice_axis(t, axis, 0, 0)
  last = start + (count - 1) * step
  if step > 0: return _strided(_slice_axis(t, axis, start, last + 1), axis, step)
  return _strided(_slice_axis(t, axis, last, start + 1).flip(axis), axis, -step)


def _normalize_index(idx, t) -> tuple:
  """The index as a tuple: lists become integer Tensors on `t`'s device, other integer-like values ints."""
  if not isinstance(idx, tuple): idx = (idx,)
  Tensor = type(t)
  out = []
  for i in idx:
    if isinstance(i, list): i = Tensor(i, device=t.device, dtype=dtypes.int32)
    if hasattr(i, "__index__") and not isinstance(i, (Tensor, bool)) and not isinstance(i, slice): i = int(i)
    out.append(i)
  return tuple(out)


def getitem(t, idx):
  """numpy-style indexing: ints (negative too), slices with any step (clamped like numpy), None, Ellipsis and
  integer Tensors (advanced indexing, broadcast together; the result dims go where numpy puts them).
  Integer Tensor indices are selected with an `arange == index` mask and a sum; negative ones count from
  the end; out-of-range ones give 0 (a lazy graph cannot raise on data)."""
  Tensor = type(t)
  idx = _normalize_index(idx, t)
  for i in idx:
    if isinstance(i, Tensor) and (i.dtype.is_bool or i.dtype.is_float):
      raise TypeError(f"getitem: index tensors must be integer, got {i.dtype.name} (boolean masks have a "
                      f"data-dependent shape and are not supported)")
    if isinstance(i, Tensor) and i.device != t.device:
      raise ValueError(f"getitem: index tensor on {i.device} but the tensor is on {t.device}")
    if not isinstance(i, (int, slice, Tensor)) and i is not None and i is not Ellipsis:
      raise TypeError(f"getitem: unsupported index {i!r} of type {type(i).__name__}")
  if sum(i is Ellipsis for i in idx) > 1: raise IndexError("getitem: an index can only have a single ellipsis")
  consumed = sum(1 for i in idx if i is not None and i is not Ellipsis)
  if consumed > t.ndim: raise IndexError(f"getitem: too many indices for tensor of shape {t.shape}: {len(idx)}")
  if Ellipsis in [i for i in idx if not isinstance(i, Tensor)]:
    pos = next(k for k, i in enumerate(idx) if i is Ellipsis)
    idx = idx[:pos] + (slice(None),) * (t.ndim - consumed) + idx[pos + 1:]
  else: idx = idx + (slice(None),) * (t.ndim - consumed)

  # basic indexing; tensor indices keep their axis for now and are remembered by output axis
  x, axis = t, 0
  out_shape: list[int] = []
  tensor_axes: list[tuple[int, Tensor]] = []
  advanced_positions: list[int] = []   # positions in `idx` of ints and tensors (numpy's adjacency rule)
  for k, i in enumerate(idx):
    if i is None:
      out_shape.append(1)
      continue
    n = x.shape[axis]
    if isinstance(i, int):
      if not -n <= i < n: raise IndexError(f"getitem: index {i} is out of bounds for axis {axis} with size {n}")
      x = _slice_axis(x, axis, i % n, i % n + 1)
      advanced_positions.append(k)
    elif isinstance(i, slice):
      x = _slice(x, axis, i)
      out_shape.append(x.shape[axis])
    else:
      tensor_axes.append((len(out_shape), i))
      out_shape.append(n)
      advanced_positions.append(k)
    axis += 1
  x = x.reshape(tuple(out_shape))
  if not tensor_axes: return x
  return _advanced_index(x, tensor_axes, advanced_positions)


def _advanced_index(x, tensor_axes, advanced_positions):
  bshape: tuple[int, ...] = ()
  for _, i in tensor_axes: bshape = broadcast_shape(bshape, i.shape, "getitem")
  axes = [a for a, _ in tensor_axes]
  rest = [a for a in range(x.ndim) if a not in axes]
  # x: (1.. for bshape, indexed dims, rest); mask: (bshape, indexed dims, 1.. for rest)
  xp = x.permute(axes + rest)
  xp = xp.reshape((1,) * len(bshape) + xp.shape)
  mask = None
  for j, (a, i) in enumerate(tensor_axes):
    n = x.shape[a]
    i = i.cast(dtypes.int32) if i.dtype.itemsize > 4 or i.dtype.is_unsigned else i
    i = (i < 0).where(i + n, i)._broadcast_to(bshape)
    ar_shape = (1,) * len(bshape) + tuple(n if jj == j else 1 for jj in range(len(axes))) + (1,) * len(rest)
    ar = _arange(x, n).reshape(ar_shape)
    m = i.reshape(bshape + (1,) * (len(axes) + len(rest))) == ar
    mask = m if mask is None else mask.logical_and(m)
  out = _masked_sum(xp, mask, tuple(range(len(bshape), len(bshape) + len(axes))))
  # numpy: adjacent advanced indices put the broadcast dims in place of the first one, else in front
  adjacent = advanced_positions == list(range(advanced_positions[0], advanced_positions[-1] + 1))
  first = min(axes)
  if adjacent and first > 0:
    nb = len(bshape)
    order = list(range(nb, nb + first)) + list(range(nb)) + list(range(nb + first, out.ndim))
    out = out.permute(order)
  return out


def _arange(like, n: int):
  """0..n-1 as int32 on the device of the Tensor `like`."""
  return type(like).arange(n, device=like.device)


def _masked_sum(x, mask, axes):
  """sum(where(mask, x, 0)) over `axes`: an exact selection when the mask has one hit per output."""
  if x.dtype.is_bool: return _masked_sum(x.cast(dtypes.uint8), mask, axes).cast(dtypes.bool)
  return mask.where(x, 0).sum(axes, dtype=x.dtype)


# ---------------------------------------------------------------- cat / stack / split
def cat(tensors, dim: int = 0):
  """Concatenate along `dim` (dtypes promoted). Each piece is padded to the full size and selected with a
  position mask, so the result is exact for every dtype (no arithmetic on the values)."""
  tensors = list(tensors)
  if not tensors: raise ValueError("cat: expected a non-empty list of tensors")
  first = tensors[0]
  if first.ndim == 0: raise ValueError("cat: zero-dimensional tensors cannot be concatenated (use stack)")
  dim = _dim(dim, first.ndim, "cat")
  for t in tensors[1:]:
    if t.ndim != first.ndim or any(a != b for k, (a, b) in enumerate(zip(t.shape, first.shape)) if k != dim):
      raise ValueError(f"cat: shapes {first.shape} and {t.shape} do not match outside dim {dim}")
    if t.device != first.device: raise ValueError(f"cat: tensors on different devices {first.device} and {t.device}")
  dt = first.dtype
  for t in tensors[1:]: dt = promote(dt, t.dtype)
  tensors = [t.cast(dt) for t in tensors]
  total = sum(t.shape[dim] for t in tensors)
  nonempty = [t for t in tensors if highest(t.shape[dim])]     # a size known at run time may be 0, never less
  if len(nonempty) <= 1:
    if nonempty: return nonempty[0]
    return tensors[0]
  out, offset = None, 0
  for t in tensors:
    size = t.shape[dim]
    if not highest(size): continue
    pads = tuple((offset, total - offset - size) if k == dim else (0, 0) for k in range(t.ndim))
    padded = t.pad(pads)
    if out is None: out = padded
    else:
      inside = t.ones_like(dtypes.bool).pad(pads)
      out = inside.where(padded, out)
    offset += size
  return out


def stack(tensors, dim: int = 0):
  """Stack along a new axis `dim`; all shapes must be equal."""
  tensors = list(tensors)
  if not tensors: raise ValueError("stack: expected a non-empty list of tensors")
  for t in tensors[1:]:
    if t.shape != tensors[0].shape:
      raise ValueError(f"stack: shapes {tensors[0].shape} and {t.shape} must be equal")
  dim = _dim(dim, tensors[0].ndim + 1, "stack")
  return cat([t.unsqueeze(dim) for t in tensors], dim)


def split(t, sizes, dim: int = 0) -> list:
  """Split along `dim` into chunks of `sizes` (an int: equal chunks, the last one may be smaller; a list: the
  exact sizes, which must add up to the axis size)."""
  if t.ndim == 0: raise ValueError("split: cannot split a zero-dimensional tensor")
  dim = _dim(dim, t.ndim, "split")
  n = t.shape[dim]
  if isinstance(sizes, int):
    if sizes <= 0: raise ValueError(f"split: size must be positive, got {sizes}")
    sizes = [min(sizes, n - b) for b in range(0, n, sizes)] or [0]
  sizes = [int(s) for s in sizes]
  if sum(sizes) != n or any(s < 0 for s in sizes):
    raise ValueError(f"split: sizes {sizes} do not add up to {n} (dim {dim} of {t.shape})")
  out, offset = [], 0
  for s in sizes:
    out.append(_slice_axis(t, dim, offset, offset + s))
    offset += s
  return out


# ---------------------------------------------------------------- sliding windows
def _pool(x, kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...]):
  """Sliding windows over the last len(kernel) axes with movement ops only: (..., *in) -> (..., *out, *kernel),
  out = floor((in - dilation*(k-1) - 1) / stride) + 1 (the input is already padded)."""
  nk = len(kernel)
  lead, ins = x.shape[:-nk], x.shape[-nk:]
  outs = tuple((i - d * (k - 1) - 1) // s + 1 for i, k, s, d in zip(ins, kernel, stride, dilation))
  nl = len(lead)
  if not is_static(ins):
    # a size known at run time: padded up to its largest value, windows as over fixed sizes (affine indexes,
    # the period of the repeat fixed), the outputs past the size cut off
    full = tuple(highest(i) for i in ins)
    x = x.pad(tuple([(0, 0)] * nl + [(0, f - i) for f, i in zip(full, ins)]))
    windows = _pool(x, kernel, stride, dilation)
    return windows.shrink(tuple([None] * nl + [(0, o) for o in outs] + [None] * nk))
  if any(k > s for k, s in zip(kernel, stride)) or any(d != 1 for d in dilation):
    # repeat each axis k times with period i*f+d: row j, column m reads x[(j*d + m) mod i] (no wrap is reached)
    fs = [1 + int(o * s > i - d * (k - 1)) for o, s, i, d, k in zip(outs, stride, ins, dilation, kernel)]
    periods = [i * f + d for i, f, d in zip(ins, fs, dilation)]
    x = x.repeat((1,) * nl + tuple(ceildiv(k * p, i) for k, p, i in zip(kernel, periods, ins)))
    x = x.shrink(tuple([None] * nl + [(0, k * p) for k, p in zip(kernel, periods)]))
    x = x.reshape(lead + tuple(v for k, p in zip(kernel, periods) for v in (k, p)))
    # stride: keep columns 0, s, 2s, ... of the first o*s
    x = x.shrink(tuple([None] * nl + [r for k, o, s in zip(kernel, outs, stride) for r in ((0, k), (0, o * s))]))
    x = x.reshape(lead + tuple(v for k, o, s in zip(kernel, outs, stride) for v in (k, o, s)))
    x = x.shrink(tuple([None] * nl + [r for k, o in zip(kernel, outs) for r in ((0, k), (0, o), (0, 1))]))
    x = x.reshape(lead + tuple(v for k, o in zip(kernel, outs) for v in (k, o)))
    return x.permute(tuple(range(nl)) + tuple(nl + 2 * a + 1 for a in range(nk)) + tuple(nl + 2 * a for a in range(nk)))
  # kernel <= stride and no dilation: windows do not overlap, a pad/reshape/shrink suffices
  x = x.pad(tuple([(0, 0)] * nl + [(0, max(0, o * s - i)) for i, o, s in zip(ins, outs, stride)]))
  x = x.shrink(tuple([None] * nl + [(0, o * s) for o, s in zip(outs, stride)]))
  x = x.reshape(lead + tuple(v for o, s in zip(outs, stride) for v in (o, s)))
  x = x.shrink(tuple([None] * nl + [r for o, k in zip(outs, kernel) for r in ((0, o), (0, k))]))
  return x.permute(tuple(range(nl)) + tuple(nl + 2 * a for a in range(nk)) + tuple(nl + 2 * a + 1 for a in range(nk)))


def conv_pads(padding, kernel: tuple[int, ...], dilation: tuple[int, ...], stride: tuple[int, ...],
              op: str) -> list[tuple[int, int]]:
  """Per spatial axis (before, after): an int, one int per axis, one (before, after) pair per axis, a flat
  2*n tuple in axis order ((top, bottom, left, right) for 2-D), or "valid"/"same" (stride 1 only for "same";
  the odd extra pad goes after, as torch)."""
  n = len(kernel)
  if isinstance(padding, str):
    if padding == "valid": return [(0, 0)] * n
    if padding != "same": raise ValueError(f"{op}: padding must be an int, a tuple, 'valid' or 'same', got {padding!r}")
    if any(s != 1 for s in stride): raise ValueError(f"{op}: padding='same' needs stride 1, got stride {stride}")
    totals = [d * (k - 1) for k, d in zip(kernel, dilation)]
    return [(t // 2, t - t // 2) for t in totals]
  if isinstance(padding, int): return [(padding, padding)] * n
  padding = tuple(padding)
  if len(padding) == n and all(isinstance(p, (tuple, list)) for p in padding):
    return [(int(b), int(a)) for b, a in padding]
  if len(padding) == n: return [(int(p), int(p)) for p in padding]
  if len(padding) == 2 * n: return [(int(padding[2 * a]), int(padding[2 * a + 1])) for a in range(n)]
  raise ValueError(f"{op}: padding {padding} does not fit {n} spatial dims")


# ---------------------------------------------------------------- convolution
def conv(x, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1, pad_value: float = 0.0):
  """Convolution (cross-correlation, as torch) over N spatial dims, N = weight.ndim - 2: x (batch, cin, *in),
  weight (cout, cin/groups, *kernel) -> (batch, cout, *out), out = floor((in + pads - dilation*(k-1) - 1)
  / stride) + 1; the padding reads `pad_value`."""
  if not isinstance(weight, type(x)): weight = type(x)(weight, x.device)
  nd = weight.ndim - 2
  if nd < 1 or x.ndim != nd + 2:
    raise ValueError(f"conv: input {x.shape} and weight {weight.shape} need ranks N+2 (N >= 1 spatial dims)")
  bs, cin = x.shape[:2]
  cout, cin_g = weight.shape[:2]
  kernel = weight.shape[2:]
  if groups < 1 or cin != cin_g * groups or cout % groups:
    raise ValueError(f"conv: input {x.shape} and weight {weight.shape} do not match with groups={groups} "
                     f"(need input channels == weight.shape[1] * groups and output channels divisible by groups)")
  stride, dilation = _tuple(stride, nd, "conv stride"), _tuple(dilation, nd, "conv dilation")
  if any(s < 1 for s in stride) or any(d < 1 for d in dilation):
    raise ValueError(f"conv: stride {stride} and dilation {dilation} must be positive")
  pads = conv_pads(padding, kernel, dilation, stride, "conv")
  padded = tuple(i + b + a for i, (b, a) in zip(x.shape[2:], pads))
  if any(lowest_size(p) < d * (k - 1) + 1 for p, k, d in zip(padded, kernel, dilation)):
    raise ValueError(f"conv: input {x.shape} (padded spatial size {padded}) is smaller than the dilated kernel of "
                     f"weight {weight.shape} (dilation {dilation})")
  if bias is not None and tuple(bias.shape) != (cout,):
    raise ValueError(f"conv: bias {tuple(bias.shape)} does not match {cout} output channels")
  dt = promote(x.dtype, weight.dtype)
  xp = x.cast(dt).pad(((0, 0), (0, 0)) + tuple(pads), value=pad_value)
  win = _pool(xp, kernel, stride, dilation)                      # (bs, cin, *out, *kernel)
  outs = win.shape[2:2 + nd]
  rcout = cout // groups
  win = win.reshape((bs, groups, cin_g, 1) + outs + kernel).expand((bs, groups, cin_g, rcout) + outs + kernel)
  # -> (bs, groups, rcout, *out, cin_g, *kernel)
  win = win.permute((0, 1, 3) + tuple(4 + a for a in range(nd)) + (2,) + tuple(4 + nd + a for a in range(nd)))
  w = weight.cast(dt).reshape((1, groups, rcout) + (1,) * nd + (cin_g,) + kernel)
  out = (win * w).sum(tuple(range(3 + nd, 4 + 2 * nd)), dtype=dt).reshape((bs, cout) + outs)
  return out if bias is None else out + bias.cast(dt).reshape((1, cout) + (1,) * nd)


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
  """torch.nn.functional.conv2d semantics (NCHW input, OIHW weight); also accepts 1-D and 3-D weights."""
  return conv(x, weight, bias, stride, padding, dilation, groups)


def conv_transpose(x, weight, bias=None, stride=1, padding=0, output_padding=0, dilation=1, groups: int = 1):
  """Transposed convolution over N spatial dims, as torch: x (batch, cin, *in), weight (cin, cout/groups,
  *kernel) -> (batch, cout, *out), out = (in-1)*stride - 2*padding + dilation*(k-1) + output_padding + 1."""
  if not isinstance(weight, type(x)): weight = type(x)(weight, x.device)
  nd = weight.ndim - 2
  if nd < 1 or x.ndim != nd + 2:
    raise ValueError(f"conv_transpose: input {x.shape} and weight {weight.shape} need ranks N+2")
  cin = weight.shape[0]
  if groups < 1 or x.shape[1] != cin or cin % groups:
    raise ValueError(f"conv_transpose: input {x.shape} and weight {weight.shape} do not match with "
                     f"groups={groups} (need input channels == weight.shape[0], divisible by groups)")
  stride, dilation = _tuple(stride, nd, "conv_transpose stride"), _tuple(dilation, nd, "conv_transpose dilation")
  padding = _tuple(padding, nd, "conv_transpose padding")
  output_padding = _tuple(output_padding, nd, "conv_transpose output_padding")
  if any(op >= max(s, d) for op, s, d in zip(output_padding, stride, dilation)):
    raise ValueError(f"conv_transpose: output_padding {output_padding} must be smaller than stride {stride} or "
                     f"dilation {dilation}")
  crops = [(p, p - op) for p, op in zip(padding, output_padding)]
  return conv_transpose_cropped(x, weight, bias, stride, crops, dilation, groups)


def conv_transpose_cropped(x, weight, bias, stride: Sequence[int], crops: Sequence[tuple[int, int]],
                           dilation: Sequence[int], groups: int):
  """Transposed convolution with the output cropped by (before, after) per spatial axis, a negative `after`
  extending it at the end (ONNX ConvTranspose's pads, output_padding and output_shape come to this):
  out = stride*(in-1) + (k-1)*dilation + 1 - before - after. A strided one without dilation goes by output phase
  (`_conv_transpose_phases`); otherwise it inserts stride-1 zeros between input elements, flips the kernel, swaps
  in/out channels per group and runs a plain convolution."""
  nd = weight.ndim - 2
  if any(s > 1 for s in stride) and all(d == 1 for d in dilation):
    return _conv_transpose_phases(x, weight, bias, stride, crops, groups)
  cin, cout_g = weight.shape[:2]
  kernel = weight.shape[2:]
  # weight (groups*cin_g, cout_g, *k) -> (groups*cout_g, cin_g, *k), spatially flipped
  cin_g = cin // groups
  w = weight.reshape((groups, cin_g, cout_g) + kernel).transpose(1, 2)
  w = w.flip(tuple(range(3, 3 + nd))).reshape((groups * cout_g, cin_g) + kernel)
  if any(s > 1 for s in stride):
    # (.., i) -> (.., i, 1) -> pad to (.., i, s) -> (.., i*s) -> keep the first (i-1)*s + 1
    ins = x.shape[2:]
    x = x.reshape(x.shape[:2] + tuple(v for i in ins for v in (i, 1)))
    x = x.pad(((0, 0), (0, 0)) + tuple(p for s in stride for p in ((0, 0), (0, s - 1))))
    x = x.reshape(x.shape[:2] + tuple(i * s for i, s in zip(ins, stride)))
    x = x.shrink((None, None) + tuple((0, (i - 1) * s + 1) for i, s in zip(ins, stride)))
  pads = [((k - 1) * d - b, (k - 1) * d - e) for k, d, (b, e) in zip(kernel, dilation, crops)]
  return conv(x, w, bias, 1, pads, tuple(dilation), groups)


def _conv_transpose_phases(x, weight, bias, stride: Sequence[int], crops: Sequence[tuple[int, int]], groups: int):
  """A strided transposed convolution as a stride-1 one with one set of output channels per output phase, realized,
  then moved back into space (depth to space): output s*j + r sums kernel taps r, r+s, r+2s, .. over inputs j,
  j-1, .., so no product with a zero inserted between inputs is computed (stride**N fewer than in the zero-stuffed
  convolution; a 2x2 stride-2 upsampling becomes a 1x1 convolution)."""
  nd = weight.ndim - 2
  cin, cout_g = weight.shape[:2]
  kernel = weight.shape[2:]
  taps = [ceildiv(k, s) for k, s in zip(kernel, stride)]
  w = weight.pad(((0, 0), (0, 0)) + tuple((0, t * s - k) for k, s, t in zip(kernel, stride, taps)))
  # (cin, cout_g, t0, s0, t1, s1, ..) -> (cin, s0, s1, .., cout_g, t0, t1, ..) -> (cin, phases * cout_g, *taps):
  # a phase's channels in a row, so that moving them back into space reads them contiguous when stored channels last
  w = w.reshape((cin, cout_g) + tuple(v for t, s in zip(taps, stride) for v in (t, s)))
  w = w.permute((0,) + tuple(3 + 2 * a for a in range(nd)) + (1,) + tuple(2 + 2 * a for a in range(nd)))
  phases = 1
  for s in stride: phases *= s
  w = w.reshape((cin, phases * cout_g) + tuple(taps))
  # realized before moving into space: a kernel that reads its weights through the output's phase (`col % 2`) gets
  # no weights laid out for it (a copy per output column) and gathers them (PP-OCR's detector head: 9 -> 13 ms)
  y = conv_transpose_cropped(x, w, None, (1,) * nd, [(0, 0)] * nd, (1,) * nd, groups).contiguous()
  # (bs, groups * phases * cout_g, *js) -> (bs, groups, s0, s1, .., cout_g, j0, j1, ..)
  # -> (bs, groups, cout_g, j0, s0, j1, s1, ..) -> (bs, cout, j0 * s0, j1 * s1, ..)
  js = y.shape[2:]
  cout = groups * cout_g
  y = y.reshape((y.shape[0], groups) + tuple(stride) + (cout_g,) + js)
  y = y.permute((0, 1, 2 + nd) + tuple(v for a in range(nd) for v in (3 + nd + a, 2 + a)))
  y = y.reshape((y.shape[0], cout) + tuple(j * s for j, s in zip(js, stride)))
  # y covers s*(i+t-1) positions, the full output s*(i-1)+k of them (the rest is zero): crop, or extend with zeros
  ends = [j * s + min(0, k - e - s * t) for j, s, k, (_, e), t in zip(js, stride, kernel, crops, taps)]
  y = y.shrink((None, None) + tuple((max(b, 0), end) for (b, _), end in zip(crops, ends)))
  extra = [(max(-b, 0), max(0, k - e - s * t)) for s, k, (b, e), t in zip(stride, kernel, crops, taps)]
  if any(p != (0, 0) for p in extra): y = y.pad(((0, 0), (0, 0)) + tuple(extra))
  return y if bias is None else y + bias.cast(y.dtype).reshape((1, cout) + (1,) * nd)


def conv_transpose2d(x, weight, bias=None, stride=1, padding=0, output_padding=0, dilation=1, groups: int = 1):
  """torch.nn.functional.conv_transpose2d semantics (weight (cin, cout/groups, kh, kw)); 1-D and 3-D too."""
  return conv_transpose(x, weight, bias, stride, padding, output_padding, dilation, groups)


# ---------------------------------------------------------------- pooling
def _pool_setup(x, kernel_size, stride, padding, dilation, ceil_mode: bool, op: str):
  """Common argument handling for 2-D pooling: kernel, stride, dilation, (before, after) pads per axis that
  include the extra ceil_mode padding, and the symmetric user padding."""
  if x.ndim < 2: raise ValueError(f"{op}: input {x.shape} needs at least 2 dims")
  kernel = _tuple(kernel_size, 2, f"{op} kernel_size")
  stride = kernel if stride is None or stride == () else _tuple(stride, 2, f"{op} stride")
  dilation = _tuple(dilation, 2, f"{op} dilation")
  padding = _tuple(padding, 2, f"{op} padding")
  if any(k < 1 for k in kernel) or any(s < 1 for s in stride) or any(d < 1 for d in dilation):
    raise ValueError(f"{op}: kernel {kernel}, stride {stride} and dilation {dilation} must be positive")
  if any(2 * p > k for p, k in zip(padding, kernel)):
    raise ValueError(f"{op}: padding {padding} must be at most half of kernel {kernel}")
  pads = []
  for i, k, s, d, p in zip(x.shape[-2:], kernel, stride, dilation, padding):
    span = d * (k - 1) + 1
    if lowest_size(i) + 2 * p < span:
      raise ValueError(f"{op}: input {x.shape} (padded by {padding}) is smaller than the window {kernel} "
                       f"with dilation {dilation}")
    if not is_static(i):
      # a size known at run time: padded by p at both ends; the windows' count follows (what _pool computes)
      if ceil_mode: raise ValueError(f"{op}: ceil_mode over a size known only at run time is not supported")
      pads.append((p, p))
      continue
    if ceil_mode:
      o = ceildiv(i + 2 * p - span, s) + 1
      if (o - 1) * s >= i + p: o -= 1     # torch: the last window must start inside the input or left padding
    else: o = (i + 2 * p - span) // s + 1
    pads.append((p, (o - 1) * s + span - i - p))
  return kernel, stride, dilation, pads, padding


def max_pool2d(x, kernel_size=2, stride=None, padding=0, dilation=1, ceil_mode: bool = False):
  """torch.nn.functional.max_pool2d over the last two axes (padding counts as -inf)."""
  kernel, stride, dilation, pads, _ = _pool_setup(x, kernel_size, stride, padding, dilation, ceil_mode, "max_pool2d")
  xp = x.pad(((0, 0),) * (x.ndim - 2) + tuple(pads), value=lowest(x.dtype))
  return _pool(xp, kernel, stride, dilation).max((-2, -1))


def avg_pool2d(x, kernel_size=2, stride=None, padding=0, ceil_mode: bool = False, count_include_pad: bool = True):
  """torch.nn.functional.avg_pool2d over the last two axes. The divisor counts the user padding when
  count_include_pad, never the extra ceil_mode padding, as torch."""
  kernel, stride, dilation, pads, padding = _pool_setup(x, kernel_size, stride, padding, 1, ceil_mode, "avg_pool2d")
  xf = x._float()
  lead = ((0, 0),) * (x.ndim - 2)
  sums = _pool(xf.pad(lead + tuple(pads)), kernel, stride, dilation).sum((-2, -1))
  extra = [a - p for (_, a), p in zip(pads, padding)]
  if count_include_pad and all(e <= 0 for e in extra): return sums * (1.0 / (kernel[0] * kernel[1]))
  Tensor = type(x)
  if count_include_pad:
    # the counted region is the input plus the user padding; the ceil_mode overhang counts nothing
    ones = Tensor.ones(*(s + 2 * p for s, p in zip(x.shape[-2:], padding)), device=x.device)
    counted = ones.pad(tuple((0, e) for e in extra))
  else: counted = Tensor.ones(*x.shape[-2:], device=x.device).pad(tuple(pads))
  counts = _pool(counted, kernel, stride, dilation).sum((-2, -1))
  return sums / counts


# ---------------------------------------------------------------- gather
def gather(x, dim: int, index):
  """torch.gather: out[i][j][k] = x[i][index[i][j][k]][k] for dim=1 (index has x's rank; its sizes may be
  smaller than x's outside `dim`). Selected with an `arange == index` mask summed over `dim`; negative indices
  count from the end."""
  if not isinstance(index, type(x)): index = type(x)(index, x.device, dtypes.int32)
  if index.dtype.is_float or index.dtype.is_bool:
    raise TypeError(f"gather: index must be integer, got {index.dtype.name}")
  out_shape = index.shape
  if x.ndim == 0 and index.ndim == 0: x, index = x.reshape(1), index.reshape(1)
  dim = _dim(dim, x.ndim, "gather")
  if index.ndim != x.ndim or any(i > s for k, (i, s) in enumerate(zip(index.shape, x.shape)) if k != dim):
    raise ValueError(f"gather: index shape {index.shape} does not fit input shape {x.shape} on dim {dim}")
  n = x.shape[dim]
  xs = x.shrink(tuple(None if k == dim else (0, i) for k, i in enumerate(index.shape)))
  # xs: (.., n at dim, ..) -> (.., 1 at dim, .., n)
  xs = xs.unsqueeze(-1).transpose(-1, dim)
  index = index.cast(dtypes.int32) if index.dtype.itemsize > 4 or index.dtype.is_unsigned else index
  index = (index < 0).where(index + n, index)
  mask = index.unsqueeze(-1) == _arange(x, n).reshape((1,) * index.ndim + (n,))
  return _masked_sum(xs, mask, (-1,)).reshape(out_shape)
