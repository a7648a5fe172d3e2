"""Tensor compositions behind the ONNX neural-network operators: padding rules, N-d pooling (with argmax
indices), selection by data-dependent indices, per-axis interpolation tables for Resize, top-k, cumulative sums,
einsum and a discrete Fourier transform (transposed convolution is `functional.conv_transpose_cropped`).

Everything that touches tensor data is a lazy Tensor op. The only numpy here builds compile-time tables that
depend on shapes and attributes alone (Resize's interpolation weights), which become constant tensors."""
from __future__ import annotations
import math
from typing import Sequence
import numpy as np
from tgc.ir import dtypes, promote
from tgc.ir.sint import is_static, lowest as lowest_size
from tgc.frontend.tensor import Tensor
from tgc.codegen.knobs import RESIZE_TAP_RATIO
from tgc.frontend import functional
from tgc.frontend.shapes import lowest, prod
from tgc.frontend.onnx.compose import arange, move_axis


# ---------------------------------------------------------------- padding rules
def resolve_pads(auto_pad: str, pads, in_shape: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                 dilations: Sequence[int]) -> list[tuple[int, int]]:
  """ONNX conv/pool padding as (before, after) per spatial axis. SAME_* pads so that out = ceil(in / stride);
  SAME_UPPER puts the odd extra pad at the end, SAME_LOWER at the beginning."""
  n = len(in_shape)
  if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
    out = []
    for i, k, s, d in zip(in_shape, kernel, strides, dilations):
      if not is_static(i) and s != 1:
        raise ValueError(f"auto_pad {auto_pad} with stride {s} over a size known only at run time is not supported")
      total = (k - 1) * d if not is_static(i) else max(0, (-(-i // s) - 1) * s + (k - 1) * d + 1 - i)
      small, big = total // 2, total - total // 2
      out.append((small, big) if auto_pad == "SAME_UPPER" else (big, small))
    return out
  if auto_pad == "VALID" or not pads: return [(0, 0)] * n
  pads = [int(p) for p in pads]
  return [(pads[a], pads[a + n]) for a in range(n)]


# ---------------------------------------------------------------- pooling
def pool_geometry(in_shape, kernel, strides, dilations, pads, ceil_mode: bool):
  """Output sizes of an ONNX pool and the pads to apply, with the ceil_mode overhang added at the end of each
  axis (the last window must start inside the input or the leading pad, as the reference)."""
  outs, full = [], []
  for i, k, s, d, (b, e) in zip(in_shape, kernel, strides, dilations, pads):
    span = (k - 1) * d + 1
    if not is_static(i):      # a size known only at run time: the last window never reaches past the pads
      if ceil_mode: raise ValueError("ceil_mode over a size known only at run time is not supported")
      if lowest_size(i) + b + e < span: raise ValueError(f"pool window {tuple(kernel)} does not fit the smallest input")
      outs.append((i + b + e - span) // s + 1)
      full.append((b, e))
      continue
    if ceil_mode:
      o = -(-(i + b + e - span) // s) + 1
      if (o - 1) * s >= i + b: o -= 1
    else: o = (i + b + e - span) // s + 1
    if o < 1: raise ValueError(f"pool window {tuple(kernel)} (dilations {tuple(dilations)}) does not fit the "
                               f"padded input {tuple(in_shape)} with pads {pads}")
    outs.append(o)
    full.append((b, max(e, (o - 1) * s + span - i - b)))
  return outs, full


def windows(x: Tensor, kernel, strides, dilations, pads, value=0.0) -> Tensor:
  """Sliding windows over the trailing len(kernel) axes: (..., *in) -> (..., *out, *kernel). `pads` are
  (before, after) per spatial axis, filled with `value`; negative entries crop."""
  lead = ((0, 0),) * (x.ndim - len(kernel))
  xp = x.pad(lead + tuple(pads), value=value) if any(b or e for b, e in pads) else x
  return functional._pool(xp, tuple(kernel), tuple(strides), tuple(dilations))


def _reduce_kernel_axes(nd: int) -> tuple[int, ...]: return tuple(range(-nd, 0))


def max_pool(x: Tensor, kernel, strides, dilations, pads, ceil_mode=False) -> Tensor:
  nd = len(kernel)
  outs, full = pool_geometry(x.shape[-nd:], kernel, strides, dilations, pads, ceil_mode)
  return windows(x, kernel, strides, dilations, full, lowest(x.dtype)).max(_reduce_kernel_axes(nd))


def _valid_counts(in_shape, kernel, strides, dilations, pads, full, count_include_pad: bool, device: str) -> Tensor:
  """How many elements each window averages over: the input elements only, or the input plus the explicit pads
  (never the ceil_mode overhang)."""
  if count_include_pad:
    ones = Tensor.ones(*[i + b + e for i, (b, e) in zip(in_shape, pads)], device=device)
    counted = ones.pad(tuple((0, fe - e) for (_, e), (_, fe) in zip(pads, full)))
  else: counted = Tensor.ones(*in_shape, device=device).pad(tuple(full))
  windowed = functional._pool(counted, tuple(kernel), tuple(strides), tuple(dilations))
  return windowed.sum(_reduce_kernel_axes(len(kernel)))


def avg_pool(x: Tensor, kernel, strides, dilations, pads, ceil_mode=False, count_include_pad=False) -> Tensor:
  nd = len(kernel)
  in_shape = x.shape[-nd:]
  outs, full = pool_geometry(in_shape, kernel, strides, dilations, pads, ceil_mode)
  xf = x._float()
  sums = windows(xf, kernel, strides, dilations, full).sum(_reduce_kernel_axes(nd))
  no_overhang = all(fe == e for (_, e), (_, fe) in zip(pads, full))
  if (count_include_pad or all(b == 0 and e == 0 for b, e in full)) and no_overhang:
    out = sums * (1.0 / prod(kernel))
  else: out = sums / _valid_counts(in_shape, kernel, strides, dilations, pads, full, count_include_pad, x.device)
  return out.cast(x.dtype)


def lp_pool(x: Tensor, kernel, strides, dilations, pads, p: float, ceil_mode=False) -> Tensor:
  """(sum over the window of |x|^p) ^ (1/p), padding counting as zeros (what the ONNX node tests expect)."""
  nd = len(kernel)
  outs, full = pool_geometry(x.shape[-nd:], kernel, strides, dilations, pads, ceil_mode)
  xf = x._float().abs()
  powered = xf * xf if p == 2 else xf.pow(float(p))
  sums = windows(powered, kernel, strides, dilations, full).sum(_reduce_kernel_axes(nd))
  out = sums.sqrt() if p == 2 else sums.pow(1.0 / p)
  return out.cast(x.dtype)


def max_pool_with_indices(x: Tensor, kernel, strides, dilations, pads, ceil_mode=False, storage_order=0):
  """Max pooling plus, per output, the flat index (over N, C and the spatial axes) of the first maximum in the
  window (row-major spatial order; storage_order=1 numbers the spatial axes column-major)."""
  nd = len(kernel)
  n, c = x.shape[0], x.shape[1]
  in_shape = x.shape[2:]
  outs, full = pool_geometry(in_shape, kernel, strides, dilations, pads, ceil_mode)
  k = prod(kernel)
  vals = windows(x, kernel, strides, dilations, full, lowest(x.dtype)).reshape(n, c, *outs, k)
  spatial = prod(in_shape)
  flat = arange(spatial, x.device)
  if storage_order: flat = flat.reshape(tuple(reversed(in_shape))).permute(tuple(reversed(range(nd))))
  else: flat = flat.reshape(tuple(in_shape))
  flat_windows = windows(flat, kernel, strides, dilations, full, -1).reshape(*outs, k)
  best = vals.argmax(-1, keepdim=True)                               # (n, c, *outs, 1)
  pick = best == arange(k, x.device)
  index = pick.where(flat_windows, 0).sum(-1, dtype=dtypes.int32).cast(dtypes.int64)
  base = arange(n * c, x.device, dtypes.int64).reshape((n, c) + (1,) * nd) * spatial
  return vals.max(-1), index + base


# ---------------------------------------------------------------- selection by index
def one_hot(index: Tensor, n: int) -> Tensor:
  """index (...) -> bool (..., n): True where the last axis position equals the index (no hit when out of range)."""
  if index.dtype.itemsize > 4 or index.dtype.is_unsigned: index = index.cast(dtypes.int32)
  return index.unsqueeze(-1) == arange(n, index.device)


def masked_select_sum(mask: Tensor, x: Tensor, axis: int) -> Tensor:
  """sum over `axis` of where(mask, x, 0): an exact pick when the mask has at most one hit along the axis."""
  if x.dtype.is_bool: return masked_select_sum(mask, x.cast(dtypes.uint8), axis).cast(dtypes.bool)
  picked = mask.where(x, 0)
  if picked.shape[axis] == 1: return picked.squeeze(axis)     # nothing to add (and no reduce of a size-1 axis)
  return picked.sum(axis, dtype=x.dtype)


def gather_last(x: Tensor, index: Tensor) -> Tensor:
  """x (..., n), index (..., m) broadcastable in the leading axes -> (..., m): x[..., index]."""
  n = x.shape[-1]
  return masked_select_sum(one_hot(index, n), x.unsqueeze(-2), -1)


# ---------------------------------------------------------------- per-axis tables (Resize)
def apply_axis_table(x: Tensor, axis: int, table: np.ndarray, extra: np.ndarray | None = None,
                     extra_value: float = 0.0) -> Tensor:
  """out[..., o, ...] = sum_i table[o, i] * x[..., i, ...] along `axis` (float math; a 0/1 table with one hit per
  row is an exact selection), plus `extra_value` where the bool row mask `extra` is set."""
  out_n, in_n = table.shape
  selection = bool(np.all((table == 0) | (table == 1)) and np.all(table.sum(1) <= 1))
  xt = move_axis(x, axis, -1)
  if selection and out_n % in_n == 0 and in_n > 0:
    r = out_n // in_n
    repeat = np.zeros_like(table)
    repeat[np.arange(out_n), np.arange(out_n) // r] = 1
    if np.array_equal(repeat, table):      # nearest upsampling by an integer factor: repeat each element
      y = xt.unsqueeze(-1).expand(xt.shape + (r,)).reshape(xt.shape[:-1] + (out_n,))
      return move_axis(apply_extra(y, extra, extra_value), -1, axis)
  if selection:
    mask = Tensor(table.astype(bool), device=x.device)
    y = masked_select_sum(mask, xt.unsqueeze(-2), -1)
  else:
    w = Tensor(table.astype(np.float32), device=x.device)
    y = (xt._float().unsqueeze(-2) * w).sum(-1)
    if y.dtype != x.dtype: y = y.cast(x.dtype) if x.dtype.is_float else _saturating_round(y, x.dtype)
  return move_axis(apply_extra(y, extra, extra_value), -1, axis)


def apply_extra(y: Tensor, extra, value: float) -> Tensor:
  if extra is None or not extra.any(): return y
  return Tensor(extra, device=y.device).where(Tensor.full((), value, y.dtype, y.device), y)


def _saturating_round(y: Tensor, dt) -> Tensor:
  if dt.is_bool: return y.ne(0)
  info = np.iinfo(dt.numpy)
  return y.round().clip(float(info.min), float(info.max)).cast(dt)


def resize_taps(in_n: int, out_n: int, scale: float, mode: str, coord_mode: str, nearest_mode: str,
                cubic_a: float, exclude_outside: bool, antialias: bool, roi=None):
  """Resize along one axis as taps: for each output position the (unclamped) input indices and weights
  (out_n, taps), and the rows that are extrapolated (tf_crop_and_resize; None if none). Follows onnx.reference's
  Resize coordinate by coordinate, in float64; reading index i means reading index clip(i, 0, in_n - 1)."""
  out_w = scale * in_n
  y = np.arange(out_n, dtype=np.float64)
  extrap = None
  if coord_mode == "align_corners":
    x = np.zeros(out_n) if out_w == 1 else y * (in_n - 1) / (out_w - 1)
  elif coord_mode == "asymmetric": x = y / scale
  elif coord_mode == "tf_crop_and_resize":
    lo, hi = float(roi[0]), float(roi[1])
    x = np.full(out_n, (hi - lo) * (in_n - 1) / 2) if out_w == 1 else y * (hi - lo) * (in_n - 1) / (out_w - 1)
    x = x + lo * (in_n - 1)
    extrap = (x < 0) | (x > in_n - 1)
  elif coord_mode == "pytorch_half_pixel": x = np.full(out_n, -0.5) if out_w == 1 else (y + 0.5) / scale - 0.5
  elif coord_mode == "half_pixel": x = (y + 0.5) / scale - 0.5
  elif coord_mode == "half_pixel_symmetric":
    offset = in_n / 2 * (1 - out_n / out_w)
    x = offset + (y + 0.5) / scale - 0.5
  else: raise ValueError(f"unknown coordinate_transformation_mode {coord_mode!r}")
  xi = np.floor(x).astype(np.int64)
  ratios = np.where(x == xi, 1.0, x - xi)
  coeffs = np.stack([_resize_coeffs(float(r), scale, mode, nearest_mode, cubic_a, antialias) for r in ratios]) \
    if out_n else np.zeros((0, 2))
  taps = coeffs.shape[1]
  pad = int(np.ceil(taps / 2))
  xp = x + pad
  pp = np.floor(xp).astype(np.int64)
  frac = xp - pp
  if taps % 2 == 0: start = pp + np.where(frac == 0, -(taps // 2), -(taps // 2) + 1)
  else: start = pp + np.where(frac <= 0.5, -((taps - 1) // 2), -((taps - 1) // 2) + 1)
  idx = start[:, None] + np.arange(taps)[None, :] - pad
  if exclude_outside:
    coeffs = np.where((idx < 0) | (idx >= in_n), 0.0, coeffs)
    total = coeffs.sum(-1, keepdims=True)
    coeffs = coeffs / np.where(total == 0, 1.0, total)
  if extrap is not None and not extrap.any(): extrap = None
  return idx, coeffs, extrap


def resize_axis(x: Tensor, axis: int, idx: np.ndarray, coeffs: np.ndarray, extrap, extrap_value: float) -> Tensor:
  """Apply resize taps along `axis`. Taps that repeat with a period (integer and simple rational scales: output
  position P*q + r reads input Q*q + base[r]) become shifted, strided views of the edge-padded input, O(taps)
  work per output; float taps without a period (align_corners: 20 -> 80 positions) that are few beside the input's
  length become indexed reads of it; anything else multiplies by the dense (out, in) weight table."""
  in_n, out_n = x.shape[axis], idx.shape[0]
  if extrap is None:
    y = _resize_periodic(move_axis(x, axis, -1), idx, coeffs)
    if y is None and x.dtype.is_float and idx.shape[1] * RESIZE_TAP_RATIO < in_n:
      y = _resize_gathered(move_axis(x, axis, -1), idx, coeffs)
    if y is not None: return move_axis(y, -1, axis)
  table = np.zeros((out_n, in_n), dtype=np.float64)
  rows = np.repeat(np.arange(out_n), idx.shape[1])
  np.add.at(table, (rows, np.clip(idx, 0, in_n - 1).reshape(-1)), coeffs.reshape(-1))
  if extrap is not None: table[extrap] = 0.0
  return apply_axis_table(x, axis, table, extrap, extrap_value)


def _resize_gathered(xt: Tensor, idx: np.ndarray, coeffs: np.ndarray) -> Tensor | None:
  """(..., in_n) -> (..., out_n) of a float tensor: each output the sum of its taps, each tap an indexed read of the
  input (clamped to the edge) times its weight; taps whose weights are all zero are left out (None: all are)."""
  in_n, xf = xt.shape[-1], xt._float()
  y = None
  for t in range(idx.shape[1]):
    if not coeffs[:, t].any(): continue
    index = Tensor(np.clip(idx[:, t], 0, in_n - 1).astype(np.int32), device=xt.device)
    term = gather_last(xf, index) * Tensor(coeffs[:, t].astype(np.float32), device=xt.device)
    y = term if y is None else y + term
  return None if y is None else y.cast(xt.dtype)


def _resize_periodic(xt: Tensor, idx: np.ndarray, coeffs: np.ndarray):
  in_n, (out_n, taps) = xt.shape[-1], idx.shape
  g = math.gcd(in_n, out_n)
  period, step = out_n // g, in_n // g
  if period > 8 or out_n == 0: return None
  q = np.arange(out_n) // period
  base = idx - (q * step)[:, None]
  if not (np.array_equal(base, np.tile(base[:period], (g, 1))) and
          np.allclose(coeffs, np.tile(coeffs[:period], (g, 1)), rtol=0, atol=1e-12)): return None
  lo, hi = int(base.min()), int(base.max())
  left, right = max(0, -lo), max(0, step * (g - 1) + hi - (in_n - 1))
  lead = ((0, 0),) * (xt.ndim - 1)
  xp = xt.pad(lead + ((left, right),), mode="edge") if left or right else xt
  exact = not xt.dtype.is_float
  pieces = []
  for r in range(period):
    acc = None
    for t in range(taps):
      w = float(coeffs[r, t])
      if w == 0.0: continue
      start = int(base[r, t]) + left
      view = xp[(Ellipsis, slice(start, start + step * (g - 1) + 1, step))]
      if w != 1.0:
        if exact: return None
        view = view * w
      acc = view if acc is None else acc + view
    if acc is None: return None
    pieces.append(acc)
  if all(p.uop is pieces[0].uop for p in pieces):    # every phase reads one view (nearest, integer scale): repeat it
    y = pieces[0].unsqueeze(-1).expand(pieces[0].shape + (period,))
  else: y = Tensor.stack(pieces, -1)                                         # (..., g, period)
  return y.reshape(xt.shape[:-1] + (out_n,)).cast(xt.dtype)


def _resize_coeffs(ratio: float, scale: float, mode: str, nearest_mode: str, a: float, antialias: bool):
  if mode == "nearest":
    if float(ratio).is_integer(): return np.array([0.0, 1.0])
    rule = {"round_prefer_floor": [ratio <= 0.5, ratio > 0.5], "round_prefer_ceil": [ratio < 0.5, ratio >= 0.5],
            "floor": [1, 0], "ceil": [0, 1]}
    if nearest_mode not in rule: raise ValueError(f"unknown nearest_mode {nearest_mode!r}")
    return np.array(rule[nearest_mode], dtype=np.float64)
  if mode == "linear":
    if not antialias: return np.array([1 - ratio, ratio])
    s = min(scale, 1.0)
    start = int(np.floor(-1 / s) + 1)
    args = (np.arange(start, start + 2 - 2 * start) - ratio) * s
    c = np.clip(1 - np.abs(args), 0, 1)
    return c / c.sum()
  if mode == "cubic":
    if not antialias:
      return np.array([((a * (ratio + 1) - 5 * a) * (ratio + 1) + 8 * a) * (ratio + 1) - 4 * a,
                       ((a + 2) * ratio - (a + 3)) * ratio * ratio + 1,
                       ((a + 2) * (1 - ratio) - (a + 3)) * (1 - ratio) * (1 - ratio) + 1,
                       ((a * (2 - ratio) - 5 * a) * (2 - ratio) + 8 * a) * (2 - ratio) - 4 * a])
    s = min(scale, 1.0)
    i_start = int(np.floor(-2 / s) + 1)
    args = np.abs(np.array([s * (i - ratio) for i in range(i_start, 2 - i_start)]))
    c = np.where(args <= 1, (a + 2) * args ** 3 - (a + 3) * args ** 2 + 1,
                 np.where(args < 2, a * args ** 3 - 5 * a * args ** 2 + 8 * a * args - 4 * a, 0.0))
    return c / c.sum()
  raise ValueError(f"unknown mode {mode!r}")


# ---------------------------------------------------------------- top-k, cumulative sum
def topk(x: Tensor, k: int, axis: int, largest: bool = True) -> tuple[Tensor, Tensor]:
  """The k largest (smallest) elements along `axis`, sorted, ties in index order, with their int64 indices.
  Each element's rank is the count of elements that come before it; output slot r picks the rank-r element."""
  xt = move_axis(x, axis, -1)
  n = xt.shape[-1]
  xi, xj = xt.unsqueeze(-1), xt.unsqueeze(-2)                       # (..., n, 1) and (..., 1, n)
  ar = arange(n, x.device)
  earlier = ar.reshape(1, n) < ar.reshape(n, 1)                      # [i, j]: j < i
  beats = (xj > xi) if largest else (xj < xi)
  rank = beats.logical_or((xj == xi).logical_and(earlier)).sum(-1, dtype=dtypes.int32)   # (..., n)
  pick = rank.unsqueeze(-2) == arange(k, x.device).reshape(k, 1)      # (..., k, n)
  values = masked_select_sum(pick, xj, -1)
  indices = pick.where(ar.cast(dtypes.int64), 0).sum(-1, dtype=dtypes.int64)
  return move_axis(values, -1, axis), move_axis(indices, -1, axis)


def _scan_mask(n: int, device: str, exclusive: bool, reverse: bool) -> Tensor:
  """(n, n) bool: row i selects the elements that output i of a running sum or product takes in."""
  ar = arange(n, device)
  i, j = ar.reshape(n, 1), ar.reshape(1, n)
  if reverse: return (j > i) if exclusive else (j >= i)
  return (j < i) if exclusive else (j <= i)


def cumsum(x: Tensor, axis: int, exclusive: bool = False, reverse: bool = False) -> Tensor:
  xt = move_axis(x, axis, -1)
  mask = _scan_mask(xt.shape[-1], x.device, exclusive, reverse)
  acc = x.dtype if not x.dtype.is_bool else dtypes.int32
  out = mask.where(xt.unsqueeze(-2).cast(acc), 0).sum(-1, dtype=acc)
  return move_axis(out, -1, axis)


def cumprod(x: Tensor, axis: int, exclusive: bool = False, reverse: bool = False) -> Tensor:
  xt = move_axis(x, axis, -1)
  mask = _scan_mask(xt.shape[-1], x.device, exclusive, reverse)
  return move_axis(mask.where(xt.unsqueeze(-2), 1).prod(-1).cast(x.dtype), -1, axis)


# ---------------------------------------------------------------- einsum
def _diagonal(x: Tensor, a: int, b: int) -> Tensor:
  """The diagonal of axes a < b (equal sizes), kept at position a; axis b is removed."""
  n = x.shape[a]
  order = [i for i in range(x.ndim) if i not in (a, b)] + [a, b]
  xt = x.permute(order)
  lead = xt.shape[:-2]
  flat = xt.reshape(lead + (n * n,)).pad(((0, 0),) * len(lead) + ((0, n),))
  diag = flat.reshape(lead + (n, n + 1)).shrink(tuple([None] * len(lead) + [None, (0, 1)])).reshape(lead + (n,))
  return move_axis(diag, -1, a)


def einsum(equation: str, operands: list[Tensor]) -> Tensor:
  """numpy.einsum semantics: explicit or implicit output, ellipsis broadcasting, repeated labels (diagonals)."""
  eq = equation.replace(" ", "")
  lhs, rhs = eq.split("->") if "->" in eq else (eq, None)
  terms = lhs.split(",")
  if len(terms) != len(operands): raise ValueError(f"einsum {equation!r}: {len(terms)} terms, {len(operands)} inputs")
  ell = max((t.ndim - len(term.replace("...", "")) for term, t in zip(terms, operands) if "..." in term), default=0)
  ell_labels = [f"...{i}" for i in range(ell)]

  def labels_of(term: str, ndim: int) -> list[str]:
    if "..." not in term: return list(term)
    before, after = term.split("...")
    count = ndim - len(before) - len(after)
    return list(before) + ell_labels[ell - count:] + list(after)

  parsed = [labels_of(term, t.ndim) for term, t in zip(terms, operands)]
  for labels, t in zip(parsed, operands):
    if len(labels) != t.ndim: raise ValueError(f"einsum {equation!r}: operand of shape {t.shape} does not fit")
  if rhs is None:
    counts: dict[str, int] = {}
    for labels in parsed:
      for lb in labels: counts[lb] = counts.get(lb, 0) + 1
    out_labels = [lb for lb in ell_labels if lb in counts] + sorted(lb for lb, c in counts.items()
                                                                   if c == 1 and not lb.startswith("..."))
  else: out_labels = labels_of(rhs, len(rhs.replace("...", "")) + ell)
  # take diagonals so that every operand has distinct labels
  tensors = []
  for labels, t in zip(parsed, operands):
    labels = list(labels)
    while len(set(labels)) != len(labels):
      lb = next(lb for lb in labels if labels.count(lb) > 1)
      a = labels.index(lb)
      b = labels.index(lb, a + 1)
      t = _diagonal(t, a, b)
      labels.pop(b)
    tensors.append((labels, t))
  all_labels = list(out_labels) + [lb for labels, _ in tensors for lb in labels if lb not in out_labels]
  all_labels = list(dict.fromkeys(all_labels))
  sizes: dict[str, int] = {}
  for labels, t in tensors:
    for lb, s in zip(labels, t.shape):
      if s != 1: sizes[lb] = s
  dt = operands[0].dtype
  for t in operands[1:]: dt = promote(dt, t.dtype)
  out_dt, dt = dt, dt.compute                 # storage-only types (bfloat16, ...) multiply-add in float32
  acc = None
  for labels, t in tensors:
    order = [labels.index(lb) for lb in all_labels if lb in labels]
    t = t.cast(dt).permute(order) if order else t.cast(dt)
    present = [lb for lb in all_labels if lb in labels]
    shape = tuple(t.shape[present.index(lb)] if lb in present else 1 for lb in all_labels)
    t = t.reshape(shape)
    acc = t if acc is None else acc * t
  full = tuple(sizes.get(lb, 1) for lb in all_labels)
  acc = acc.expand(full) if acc.shape != full else acc
  reduce_axes = tuple(range(len(out_labels), len(all_labels)))
  if reduce_axes: acc = acc.sum(reduce_axes, dtype=dt)
  return acc.cast(out_dt)


# ---------------------------------------------------------------- discrete Fourier transform
def dft_last(re: Tensor, im: Tensor | None, length: int, inverse: bool, onesided: bool) -> tuple[Tensor, Tensor]:
  """DFT along the last axis of a complex signal given as real and imaginary parts (im None: real signal),
  zero-padded or cut to `length`. Forward: X_k = sum_n x_n e^(-2 pi i k n / L) (onesided keeps k <= L/2);
  inverse: (1/L) sum_k X_k e^(+2 pi i k n / L)."""
  def fit(t: Tensor, n: int) -> Tensor:
    m = t.shape[-1]
    if m == n: return t
    if m > n: return t.shrink(tuple([None] * (t.ndim - 1) + [(0, n)]))
    return t.pad(((0, 0),) * (t.ndim - 1) + ((0, n - m),))
  re = fit(re, length)
  im = fit(im, length) if im is not None else None
  n_out = length // 2 + 1 if onesided and not inverse else length
  cos, sin = (Tensor(t, device=re.device) for t in twiddles(n_out, length))
  sign = 1.0 if inverse else -1.0
  rx = re._float().unsqueeze(-2)
  out_re = (rx * cos).sum(-1)
  out_im = (rx * (sign * sin)).sum(-1)
  if im is not None:
    ix = im._float().unsqueeze(-2)
    out_re = out_re - (ix * (sign * sin)).sum(-1)
    out_im = out_im + (ix * cos).sum(-1)
  if inverse: out_re, out_im = out_re * (1.0 / length), out_im * (1.0 / length)
  return out_re, out_im


def twiddles(n_out: int, length: int) -> tuple[np.ndarray, np.ndarray]:
  """cos and sin of 2 pi k n / L for k < n_out, n < L as float32 tables (a compile-time constant of the shapes);
  computed in float64 from k*n mod L so that the exact zeros and ones of the unit circle stay exact."""
  m = (np.arange(n_out)[:, None] * np.arange(length)[None, :]) % length
  angle = 2 * np.pi * m / length
  cos, sin = np.cos(angle), np.sin(angle)
  cos[np.abs(cos) < 1e-12] = 0.0
  sin[np.abs(sin) < 1e-12] = 0.0
  return cos.astype(np.float32), sin.astype(np.float32)


def hermitian_extend(re: Tensor, im: Tensor, length: int) -> tuple[Tensor, Tensor]:
  """A one-sided spectrum (last axis, length//2 + 1 bins after padding or cutting) extended to all `length`
  bins with X[L-k] = conj(X[k])."""
  half = length // 2 + 1
  def fit(t: Tensor) -> Tensor:
    m = t.shape[-1]
    if m >= half: return t.shrink(tuple([None] * (t.ndim - 1) + [(0, half)]))
    return t.pad(((0, 0),) * (t.ndim - 1) + ((0, half - m),))
  re, im = fit(re), fit(im)
  tail = length - half
  if tail <= 0: return re, im
  lead = [None] * (re.ndim - 1)
  mirror_re = re.shrink(tuple(lead + [(1, 1 + tail)])).flip(-1)
  mirror_im = im.shrink(tuple(lead + [(1, 1 + tail)])).flip(-1)
  return functional.cat([re, mirror_re], -1), functional.cat([im, -mirror_im], -1)
