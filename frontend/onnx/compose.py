"""Tensor compositions behind the basic ONNX operators that the Tensor API does not have: inverse trigonometric
and hyperbolic functions, padding with a tensor value, gather/scatter by data-dependent indices (selection with
one-hot masks: `arange == index`, summed or reduced over the index axis), one-hot, triangular masks and the
determinant of small matrices.

Everything is built from lazy Tensor ops; nothing here computes on tensor data."""
from __future__ import annotations
import math
from typing import Sequence
import numpy as np
from tgc.ir import DType, dtypes
from tgc.frontend import functional
from tgc.frontend.shapes import highest, lowest, prod
from tgc.frontend.tensor import Tensor


def scalar(value, dtype: DType, device: str) -> Tensor:
  """A 0-d constant."""
  return Tensor.full((), value, dtype, device)


def move_axis(x: Tensor, src: int, dst: int) -> Tensor:
  order = list(range(x.ndim))
  order.insert(dst % x.ndim, order.pop(src % x.ndim))
  return x.permute(order)


def index_int(idx: Tensor) -> Tensor:
  """Indices as int32 (what the one-hot compares use)."""
  return idx if idx.dtype == dtypes.int32 else idx.cast(dtypes.int32)


def normalize_index(idx: Tensor, n: int) -> Tensor:
  """Negative indices count from the end."""
  idx = index_int(idx)
  return (idx < 0).where(idx + n, idx)


def arange(n: int, device: str, dtype: DType = dtypes.int32) -> Tensor:
  """0..n-1 (int32 unless `dtype` says otherwise) on `device`."""
  return Tensor.arange(n, dtype=dtype, device=device)


# ---------------------------------------------------------------- comparisons
def less_equal(a: Tensor, b) -> Tensor:
  """a <= b that is False for NaN (Tensor's <= is `not >`)."""
  if a.dtype.is_float or (isinstance(b, Tensor) and b.dtype.is_float) or isinstance(b, float):
    return (a < b).logical_or(a == b)
  return a <= b


def greater_equal(a: Tensor, b) -> Tensor:
  if a.dtype.is_float or (isinstance(b, Tensor) and b.dtype.is_float) or isinstance(b, float):
    return (a > b).logical_or(a == b)
  return a >= b


# ---------------------------------------------------------------- math
def atan(x: Tensor) -> Tensor:
  """Arc tangent: |x| > 1 uses pi/2 - atan(1/|x|), then x > tan(pi/8) uses pi/4 + atan((x-1)/(x+1)), and a
  polynomial (Cephes atanf) on [-tan(pi/8), tan(pi/8)]; relative error about 1e-7."""
  x = x._float()
  ax = x.abs()
  big = ax > 1
  z = big.where(ax.reciprocal(), ax)
  mid = z > 0.41421356237309503
  w = mid.where((z - 1) / (z + 1), z)
  s = w * w
  p = (((0.0805374449538 * s - 0.138776856032) * s + 0.199777106478) * s - 0.333329491539) * s * w + w
  r = mid.where(p + math.pi / 4, p)
  r = big.where(math.pi / 2 - r, r)
  return (x < 0).where(-r, r)


def asin(x: Tensor) -> Tensor:
  x = x._float()
  return atan(x / ((1 - x) * (1 + x)).sqrt())


def acos(x: Tensor) -> Tensor:
  x = x._float()
  return 2 * atan(((1 - x) / (1 + x)).sqrt())


def sinh(x: Tensor) -> Tensor:
  x = x._float()
  return (x.exp() - (-x).exp()) * 0.5


def cosh(x: Tensor) -> Tensor:
  x = x._float()
  return (x.exp() + (-x).exp()) * 0.5


def asinh(x: Tensor) -> Tensor:
  x = x._float()
  ax = x.abs()
  r = (ax + (ax * ax + 1).sqrt()).log()
  return (x < 0).where(-r, r)


def acosh(x: Tensor) -> Tensor:
  x = x._float()
  return (x + (x * x - 1).sqrt()).log()


def atanh(x: Tensor) -> Tensor:
  x = x._float()
  return ((1 + x) / (1 - x)).log() * 0.5


def fmod_float(x: Tensor, y: Tensor) -> Tensor:
  """C fmod (the sign of the dividend); x % +-inf is x for finite x."""
  r = x - (x / y).trunc() * y
  return y.isinf().logical_and(x.isinf().logical_not()).where(x, r)


def mod_float(x: Tensor, y: Tensor) -> Tensor:
  """numpy's mod for floats (the sign of the divisor): fmod, then add y when the signs differ."""
  r = fmod_float(x, y)
  fix = r.ne(0).logical_and((r < 0).ne(y < 0))
  return fix.where(r + y, r)


def softplus(x: Tensor) -> Tensor:
  """log(1 + exp(x)) without overflow: max(x, 0) + log(1 + exp(-|x|))."""
  return x.maximum(0) + (1 + (-x.abs()).exp()).log()


# ---------------------------------------------------------------- padding
def pad(x: Tensor, pads: Sequence[tuple[int, int]], mode: str = "constant", value: Tensor | None = None) -> Tensor:
  """ONNX Pad: (before, after) per axis, negative amounts crop; constant padding with a 0-d (or 1-element)
  Tensor value of x's dtype."""
  pads = [(int(b), int(a)) for b, a in pads]
  if mode != "constant": return x.pad(pads, mode=mode)
  if any(b < 0 or a < 0 for b, a in pads):
    x = x.shrink(tuple((max(0, -b), s - max(0, -a)) for (b, a), s in zip(pads, x.shape)))
    pads = [(max(0, b), max(0, a)) for b, a in pads]
  if all(b == 0 and a == 0 for b, a in pads): return x
  padded = x.pad(pads)
  if value is None: return padded
  inside = x.ones_like(dtypes.bool).pad(pads)
  return inside.where(padded, value.reshape(()).cast(x.dtype))


# ---------------------------------------------------------------- selection
def masked_sum(mask: Tensor, x: Tensor, axes) -> Tensor:
  """sum over `axes` of where(mask, x, 0): an exact selection when the mask has at most one hit."""
  if x.dtype.is_bool: return masked_sum(mask, x.cast(dtypes.uint8), axes).cast(dtypes.bool)
  picked = mask.where(x, x.zeros_like())
  axes = tuple(a % picked.ndim for a in axes)
  if all(picked.shape[a] == 1 for a in axes):   # nothing to add up: drop the axes instead of reducing
    return picked.reshape(tuple(s for i, s in enumerate(picked.shape) if i not in axes))
  return picked.sum(axes, dtype=x.dtype)


def take(x: Tensor, axis: int, idx: Tensor) -> Tensor:
  """np.take(x, idx, axis) for an integer index tensor of any rank (negative indices count from the end;
  out-of-range ones select nothing, giving 0)."""
  axis %= x.ndim
  n = x.shape[axis]
  idx = normalize_index(idx, n)
  # x: (pre, n, post) -> (pre, 1.., n, post); mask: (1.., idx.shape, n, 1..)
  pre, post = x.shape[:axis], x.shape[axis + 1:]
  xs = x.reshape(pre + (1,) * idx.ndim + (n,) + post)
  mask = idx.reshape((1,) * len(pre) + idx.shape + (1,) + (1,) * len(post)) == \
    arange(n, x.device).reshape((1,) * (len(pre) + idx.ndim) + (n,) + (1,) * len(post))
  return masked_sum(mask, xs, (len(pre) + idx.ndim,)).reshape(pre + idx.shape + post)


def take_const(x: Tensor, axis: int, indices) -> Tensor:
  """np.take with indices known at compile time: slices and a concatenation, no masks."""
  axis %= x.ndim
  n = x.shape[axis]
  idx = np.asarray(indices).astype(np.int64)
  if ((idx < -n) | (idx >= n)).any(): raise ValueError(f"index {idx.min()}..{idx.max()} out of range for size {n}")
  idx = np.where(idx < 0, idx + n, idx)
  flat = idx.reshape(-1).tolist()
  pieces = []
  run_start, run_len = None, 0
  for v in flat + [None]:
    if run_start is not None and v == run_start + run_len:
      run_len += 1
      continue
    if run_start is not None:
      pieces.append(x.shrink(tuple((run_start, run_start + run_len) if i == axis else None for i in range(x.ndim))))
    run_start, run_len = v, 1
  if not pieces:
    return x.shrink(tuple((0, 0) if i == axis else None for i in range(x.ndim))).reshape(
      x.shape[:axis] + idx.shape + x.shape[axis + 1:])
  out = pieces[0] if len(pieces) == 1 else functional.cat(pieces, axis)
  return out.reshape(x.shape[:axis] + idx.shape + x.shape[axis + 1:])


def gather_nd(data: Tensor, indices: Tensor, batch_dims: int = 0) -> Tensor:
  """ONNX GatherND: indices (*batch, *q, k) select data[*batch, i0..ik-1, ...]."""
  b = batch_dims
  k = indices.shape[-1]
  bshape, qshape = data.shape[:b], indices.shape[b:-1]
  dk, rest = data.shape[b:b + k], data.shape[b + k:]
  nb, nq, n, nr = prod(bshape), prod(qshape), prod(dk), prod(rest)
  lin = None
  stride = 1
  idx = index_int(indices)
  for j in reversed(range(k)):
    col = idx.shrink(tuple((j, j + 1) if i == idx.ndim - 1 else None for i in range(idx.ndim))).reshape(idx.shape[:-1])
    col = (col < 0).where(col + dk[j], col)
    term = col * stride
    lin = term if lin is None else lin + term
    stride *= dk[j]
  if lin is None: lin = Tensor.zeros(*idx.shape[:-1], dtype=dtypes.int32, device=data.device)
  lin = lin.reshape(nb, nq, 1, 1)
  mask = lin == arange(n, data.device).reshape(1, 1, n, 1)
  x = data.reshape(nb, 1, n, nr)
  return masked_sum(mask, x, (2,)).reshape(bshape + qshape + rest)


def _combine(base: Tensor, hit: Tensor, sel_mask: Tensor, upd: Tensor, axis: int, reduction: str) -> Tensor:
  """Scatter core: base (..., n) indexed on the last axis; sel_mask (..., m, n) says update j writes position i;
  upd (..., m, 1). `axis` is the m axis of sel_mask."""
  dt = base.dtype
  if reduction == "none":
    # the last write wins (the reference's order): keep only the last j that hits each position
    m = sel_mask.shape[axis]
    jpos = arange(m, base.device).reshape((1,) * axis + (m,) + (1,) * (sel_mask.ndim - axis - 1))
    last = sel_mask.where(jpos, jpos.full_like(-1)).max(axis, keepdim=True)
    only = sel_mask.logical_and(jpos == last)
    return hit.where(masked_sum(only, upd, (axis,)), base)
  if reduction == "add":
    return base + masked_sum(sel_mask, upd, (axis,)).cast(dt)
  if reduction == "mul":
    factors = sel_mask.where(upd, upd.ones_like())
    return base * factors.prod(axis).cast(dt)
  if reduction in ("max", "min"):
    fill = lowest(dt) if reduction == "max" else highest(dt)
    cand = sel_mask.where(upd, upd.full_like(fill))
    red = cand.max(axis) if reduction == "max" else cand.min(axis)
    comb = base.maximum(red) if reduction == "max" else base.minimum(red)
    return hit.where(comb, base)
  raise ValueError(f"unknown reduction {reduction!r}")


def scatter_elements(data: Tensor, indices: Tensor, updates: Tensor, axis: int, reduction: str = "none") -> Tensor:
  """ONNX ScatterElements: out[.., indices[p], ..] (at `axis`) = updates[p] (or reduced into it)."""
  r = data.ndim
  axis %= r
  n = data.shape[axis]
  perm = [i for i in range(r) if i != axis] + [axis]
  inv = [perm.index(i) for i in range(r)]
  d, ix, u = data.permute(perm), normalize_index(indices, n).permute(perm), updates.permute(perm)
  # indices may be smaller than data outside `axis`: pad with an index that never matches
  pads = [(0, ds - s) for ds, s in zip(d.shape[:-1], ix.shape[:-1])] + [(0, 0)]
  if any(a for _, a in pads):
    ix = pad(ix, pads, value=scalar(n, ix.dtype, ix.device))
    u = u.pad(pads)
  sel = ix.reshape(ix.shape + (1,)) == arange(n, data.device).reshape((1,) * r + (n,))   # (..., m, n)
  hit = sel.cast(dtypes.int32).max(r - 1).cast(dtypes.bool)                              # (..., n)
  out = _combine(d, hit, sel, u.reshape(u.shape + (1,)), r - 1, reduction)
  return out.permute(inv)


def scatter_nd(data: Tensor, indices: Tensor, updates: Tensor, reduction: str = "none") -> Tensor:
  """ONNX ScatterND: indices (*q, k) address data[i0..ik-1, ...]; updates (*q, *data.shape[k:])."""
  k = indices.shape[-1]
  dk, rest = data.shape[:k], data.shape[k:]
  n, nr = prod(dk), prod(rest)
  qn = prod(indices.shape[:-1])
  idx = index_int(indices)
  lin, stride = None, 1
  for j in reversed(range(k)):
    col = idx.shrink(tuple((j, j + 1) if i == idx.ndim - 1 else None for i in range(idx.ndim))).reshape(idx.shape[:-1])
    col = (col < 0).where(col + dk[j], col)
    lin = col * stride if lin is None else lin + col * stride
    stride *= dk[j]
  if lin is None: lin = Tensor.zeros(*idx.shape[:-1], dtype=dtypes.int32, device=data.device)
  d = data.reshape(n, nr).permute(1, 0)          # (nr, n): positions on the last axis
  sel = lin.reshape(1, qn, 1) == arange(n, data.device).reshape(1, 1, n)      # (1, m, n)
  hit = sel.cast(dtypes.int32).max(1).cast(dtypes.bool)                        # (1, n)
  u = updates.reshape(qn, nr).permute(1, 0).reshape(nr, qn, 1)
  out = _combine(d, hit, sel, u, 1, reduction)   # (nr, n)
  return out.permute(1, 0).reshape(data.shape)


def one_hot(indices: Tensor, depth: int, axis: int, off: Tensor, on: Tensor) -> Tensor:
  idx = normalize_index(indices, depth)
  r = idx.ndim
  mask = idx.reshape(idx.shape + (1,)) == arange(depth, idx.device).reshape((1,) * r + (depth,))
  out = mask.where(on.reshape(()), off.reshape(()))
  return move_axis(out, r, axis % (r + 1))


def triangle_mask(rows: int, cols: int, k, upper: bool, device: str) -> Tensor:
  """(rows, cols) bool: j - i >= k (upper) or j - i <= k (lower); k an int or a 0-d int Tensor."""
  diff = arange(cols, device).reshape(1, cols) - arange(rows, device).reshape(rows, 1)
  if isinstance(k, Tensor): k = k.reshape(()).cast(dtypes.int32)
  return diff >= k if upper else diff <= k


def det(x: Tensor) -> Tensor:
  """Determinant over the last two (square) axes by Gaussian elimination with partial pivoting, unrolled
  (n steps of elementwise ops and max-reductions; fine for the small matrices this is meant for)."""
  n = x.shape[-1]
  if x.ndim < 2 or x.shape[-2] != n: raise ValueError(f"det: needs square matrices, got {x.shape}")
  a = x._float()
  batch = a.shape[:-2]
  if n == 0: return Tensor.ones(*batch, dtype=a.dtype, device=a.device)
  sign = Tensor.ones(*batch, dtype=a.dtype, device=a.device)
  result = sign
  rows = arange(n, a.device)
  for c in range(n):
    col = a.shrink(tuple([None] * len(batch) + [None, (c, c + 1)])).reshape(batch + (n,))
    cand = (rows >= c).where(col.abs(), col.abs().full_like(-1.0))
    best = cand.max(-1, keepdim=True)
    # the first row that reaches the maximum
    first = (cand == best).where(rows, rows.full_like(n)).min(-1, keepdim=True)
    piv = first.reshape(batch + (1,))
    is_piv = rows == piv                                           # (batch, n)
    is_c = rows.reshape((1,) * len(batch) + (n,)) == c                 # (1.., n)
    prow = masked_sum(is_piv.reshape(batch + (n, 1)), a, (-2,))    # (batch, n)
    crow = a.shrink(tuple([None] * len(batch) + [(c, c + 1), None])).reshape(batch + (n,))
    swapped = piv.reshape(batch) != c
    sign = swapped.where(-sign, sign)
    # swap rows c and piv
    a = is_c.reshape((1,) * len(batch) + (n, 1)).where(prow.reshape(batch + (1, n)),
                                           is_piv.reshape(batch + (n, 1)).where(crow.reshape(batch + (1, n)), a))
    p = prow.shrink(tuple([None] * len(batch) + [(c, c + 1)]))    # (batch, 1)
    result = result * p.reshape(batch)
    factor = a.shrink(tuple([None] * len(batch) + [None, (c, c + 1)])) / p.reshape(batch + (1, 1))
    below = (rows > c).reshape((1,) * len(batch) + (n, 1))
    a = below.where(a - factor * prow.reshape(batch + (1, n)), a)
  return result * sign
