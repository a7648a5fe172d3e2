"""ONNX image resampling: Resize and Upsample (nearest, linear and cubic, every coordinate transformation mode,
antialiasing), AffineGrid, GridSample (nearest, linear, cubic; zeros, border and reflection padding) and RoiAlign
(average or max pooling of bilinear samples)."""
from __future__ import annotations
import math
import numpy as np
from tgc.ir.sint import is_static
from tgc.ir import dtypes
from tgc.frontend.tensor import Tensor
from tgc.frontend.onnx.registry import NodeContext, onnx_op
from tgc.frontend.onnx import compose_nn as nn
from tgc.frontend.shapes import prod
from tgc.frontend.onnx.node_helpers import attr_floats, attr_ints, attr_str, const_input, const_input_or_none


# ---------------------------------------------------------------- resize
def _resize(ctx: NodeContext, x: Tensor, scales, sizes, roi, mode: str, coord: str, nearest: str, axes=None):
  r = x.ndim
  axes = ctx.axes(axes, r) if axes else list(range(r))
  cubic_a = float(ctx.attr("cubic_coeff_a", -0.75))
  exclude = bool(ctx.attr("exclude_outside", 0))
  extrap_value = float(ctx.attr("extrapolation_value", 0.0))
  antialias = bool(ctx.attr("antialias", 0))
  policy = attr_str(ctx, "keep_aspect_ratio_policy", "stretch")
  if sizes is not None:
    sizes = [int(s) for s in sizes.reshape(-1)]
    if len(sizes) != len(axes): raise ctx.fail(f"sizes {sizes} do not match axes {axes}")
    factors = {a: s / x.shape[a] for a, s in zip(axes, sizes)}
    out = dict(zip(axes, sizes))
    if policy != "stretch":
      pick = min if policy == "not_larger" else max
      scale = pick(factors.values())
      factors = {a: scale for a in axes}
      out = {a: int(scale * x.shape[a] + 0.5) for a in axes}
  elif scales is not None:
    scales = np.asarray(scales).reshape(-1)
    if len(scales) != len(axes): raise ctx.fail(f"scales {scales.tolist()} do not match axes {axes}")
    factors = {a: float(s) for a, s in zip(axes, scales)}
    out = {a: int(np.float64(s) * x.shape[a]) for a, s in zip(axes, scales) if is_static(x.shape[a])}
  else: raise ctx.fail("one of scales or sizes is required")
  if roi is not None:
    roi = np.asarray(roi, dtype=np.float64).reshape(-1)
    roi = {a: (roi[i], roi[i + len(axes)]) for i, a in enumerate(axes)} if len(roi) == 2 * len(axes) else \
      {a: (roi[a], roi[a + r]) for a in axes}
  y = x
  for a in axes:
    if not is_static(x.shape[a]):
      y = _sized_nearest(ctx, y, a, factors[a], mode, coord, nearest, roi)
      continue
    scale, n_out = factors[a], out[a]
    lo_hi = roi.get(a) if roi is not None else None
    trivial_roi = lo_hi is None or (math.isclose(lo_hi[0], 0.0) and math.isclose(lo_hi[1], 1.0))
    if math.isclose(scale, 1.0) and n_out == x.shape[a] and (trivial_roi or coord != "tf_crop_and_resize"): continue
    if n_out == 0: raise ctx.fail(f"output size 0 on axis {a}")
    axis_nearest = nearest
    if nearest == "simple": axis_nearest = "ceil" if scale < 1 else "floor"
    idx, coeffs, extrap = nn.resize_taps(x.shape[a], n_out, scale, mode, coord, axis_nearest, cubic_a, exclude,
                                         antialias and scale < 1, lo_hi if lo_hi is not None else (0.0, 1.0))
    y = nn.resize_axis(y, a, idx, coeffs, extrap, extrap_value)
  return y


# nearest-neighbour coordinate modes in which output y of a whole factor s reads input y // s
_REPEATING = {("asymmetric", "floor"), ("half_pixel", "round_prefer_floor"), ("half_pixel", "round_prefer_ceil"),
              ("pytorch_half_pixel", "round_prefer_floor"), ("pytorch_half_pixel", "round_prefer_ceil")}


def _sized_nearest(ctx: NodeContext, x: Tensor, axis: int, scale: float, mode: str, coord: str, nearest: str, roi):
  """Resize of an axis whose size is known only at run time: nearest-neighbour upsampling by a whole factor, where
  output y reads input y // factor (each element repeated); anything else is refused naming the node."""
  factor = int(round(scale))
  if mode != "nearest" or factor < 1 or not math.isclose(scale, factor) or roi is not None or \
      (factor > 1 and (coord, nearest) not in _REPEATING):
    raise ctx.fail(f"over a size known only at run time only nearest upsampling by a whole factor is supported "
                   f"(mode {mode}, scale {scale:g}, {coord}, {nearest})")
  if factor == 1: return x
  shape = x.shape
  y = x.reshape(shape[:axis + 1] + (1,) + shape[axis + 1:])
  y = y.expand(shape[:axis + 1] + (factor,) + shape[axis + 1:])
  return y.reshape(shape[:axis] + (shape[axis] * factor,) + shape[axis + 1:])


@onnx_op("Resize")
def resize(ctx: NodeContext):
  x = ctx.input(0)
  mode = attr_str(ctx, "mode", "nearest")
  if ctx.opset < 11:
    scales = const_input(ctx, 1, "scales")
    return _resize(ctx, x, scales, None, None, mode, "asymmetric", "simple")
  roi = const_input_or_none(ctx, 1, "roi")
  scales = const_input_or_none(ctx, 2, "scales")
  sizes = const_input_or_none(ctx, 3, "sizes")
  coord = attr_str(ctx, "coordinate_transformation_mode", "half_pixel")
  nearest = attr_str(ctx, "nearest_mode", "round_prefer_floor")
  return _resize(ctx, x, None if sizes is not None else scales, sizes, roi, mode, coord, nearest,
                 attr_ints(ctx, "axes"))


@onnx_op("Upsample")
def upsample(ctx: NodeContext):
  x = ctx.input(0)
  scales = np.asarray(attr_floats(ctx, "scales")) if ctx.opset < 9 else const_input(ctx, 1, "scales")
  mode = attr_str(ctx, "mode", "nearest")
  if mode == "bilinear": mode = "linear"
  return _resize(ctx, x, scales, None, None, mode, "asymmetric", "floor")


# ---------------------------------------------------------------- grids and sampling
@onnx_op("AffineGrid")
def affine_grid(ctx: NodeContext):
  theta = ctx.input(0)
  size = [int(s) for s in const_input(ctx, 1, "size").reshape(-1)]
  align = bool(ctx.attr("align_corners", 0))
  spatial = size[2:]
  nd = len(spatial)
  dev = theta.device
  def coords(n: int) -> Tensor:
    i = Tensor.arange(n, dtype=dtypes.float32, device=dev)
    if align: return i * (2.0 / (n - 1)) - 1.0 if n > 1 else i * 0.0 - 1.0
    return (i * 2.0 + 1.0) / n - 1.0
  # homogeneous base grid (*spatial, nd + 1) with coordinates ordered x (last axis), y, (z), 1
  parts = []
  for k in range(nd):
    axis = nd - 1 - k                                                # x runs along the last spatial axis
    c = coords(spatial[axis]).reshape(tuple(spatial[axis] if a == axis else 1 for a in range(nd)))
    parts.append(c.expand(tuple(spatial)))
  parts.append(Tensor.ones(*spatial, device=dev))
  base = Tensor.stack(parts, -1).reshape(prod(spatial), nd + 1)
  grid = base.cast(theta.dtype).matmul(theta.transpose(1, 2))         # (N, points, nd)
  return grid.reshape(theta.shape[0], *spatial, nd)


def _reflect(x: Tensor, lo: float, hi: float) -> Tensor:
  rng = hi - lo
  def fold(dx: Tensor, near: float, far: float, sign: float) -> Tensor:
    n = (dx / rng).trunc()
    r = dx - n * rng
    even = (n - (n * 0.5).floor() * 2) == 0
    return even.where(near + sign * r, far - sign * r)
  below = fold(lo - x, lo, hi, 1.0)
  above = fold(x - hi, hi, lo, -1.0)
  return (x < lo).where(below, (x > hi).where(above, x))


def _cubic_weights(t: Tensor, a: float) -> list[Tensor]:
  """Keys' cubic convolution weights of the taps at -1, 0, 1, 2 for a fractional offset t in [0, 1)
  (constants folded in Python; only additions of them, so no `x - -c` reaches the renderers)."""
  def far(u: Tensor) -> Tensor: return ((u * a + (-5 * a)) * u + 8 * a) * u + (-4 * a)     # 1 <= |u| < 2
  def near(u: Tensor) -> Tensor: return (u * (a + 2) + (-(a + 3))) * u * u + 1.0          # |u| < 1
  return [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]


@onnx_op("GridSample")
def grid_sample(ctx: NodeContext):
  x, grid = ctx.input(0), ctx.input(1)
  mode = attr_str(ctx, "mode", "linear" if ctx.opset >= 20 else "bilinear")
  mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
  padding = attr_str(ctx, "padding_mode", "zeros")
  align = bool(ctx.attr("align_corners", 0))
  n, c = x.shape[:2]
  dims = x.shape[2:]
  nd = len(dims)
  out_sp = grid.shape[1:-1]
  pts = prod(out_sp)
  g = grid.cast(dtypes.float32).reshape(n, pts, nd)
  xf = x._float()
  acc = xf.reshape(n, c, 1, *dims)                                    # contract the last axis first
  for k in range(nd - 1, -1, -1):
    size = dims[k]
    comp = g.shrink((None, None, (nd - 1 - k, nd - k))).reshape(n, pts)   # grid is ordered x, y, (z)
    coord = (comp + 1) / 2.0 * (size - 1) if align else ((comp + 1) * size - 1) / 2.0
    lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
    if mode == "nearest": coord = coord.round()
    if padding == "border": coord = (coord < lo).where(coord.clip(0.0, size - 1.0),
                                                       (coord > hi).where(coord.clip(0.0, size - 1.0), coord))
    elif padding == "reflection": coord = _reflect(coord, lo, hi)
    if mode == "nearest": taps = [(coord.trunc(), None)]
    else:
      base = coord.floor()
      t = coord - base
      if mode == "linear": taps = [(base, 1 - t), (base + 1, t)]
      else:
        taps = [(base + (j - 1), w) for j, w in enumerate(_cubic_weights(t, -0.75))]
    weights = None                                                    # (n, pts, size)
    for pos, wt in taps:
      if padding == "border": pos = pos.clip(0.0, size - 1.0)
      elif padding == "reflection": pos = _reflect(pos, lo, hi).trunc()
      hit = nn.one_hot(pos.cast(dtypes.int32), size).cast(dtypes.float32)
      term = hit if wt is None else hit * wt.unsqueeze(-1)
      weights = term if weights is None else weights + term
    # acc (n, c, pts or 1, dims[0..k]) -> contract axis k
    wk = weights.reshape(n, 1, pts, *([1] * k), size)
    acc = (acc * wk).sum(-1)
  return acc.reshape(n, c, *out_sp).cast(x.dtype)


# ---------------------------------------------------------------- regions of interest
def _roi_axis(start: Tensor, length: Tensor, pooled: int, grid: int, size: int):
  """Bilinear taps of RoiAlign's sample points along one axis: for rois (R,), the sample coordinates
  start + p*bin + (g + 0.5)*bin/grid, p < pooled, g < grid, as (R, pooled*grid) low/high indices and weights
  (zero for samples outside [-1, size])."""
  r = start.shape[0]
  dev = start.device
  p = Tensor.arange(pooled, dtype=dtypes.float32, device=dev).reshape(1, pooled, 1)
  g = (Tensor.arange(grid, dtype=dtypes.float32, device=dev) + 0.5).reshape(1, 1, grid) * (1.0 / grid)
  bin_size = (length * (1.0 / pooled)).reshape(r, 1, 1)
  c = (start.reshape(r, 1, 1) + (p + g) * bin_size).reshape(r, pooled * grid)
  valid = (c >= -1.0).logical_and(c <= float(size)).cast(dtypes.float32)
  c = c.maximum(0.0)
  low = c.trunc()
  edge = low >= size - 1
  low = edge.where(float(size - 1), low)
  high = edge.where(float(size - 1), low + 1)
  c = edge.where(low, c)
  frac = c - low
  return low.cast(dtypes.int32), high.cast(dtypes.int32), (1.0 - frac) * valid, frac * valid


@onnx_op("RoiAlign")
def roi_align(ctx: NodeContext):
  x, rois, batch_idx = ctx.input(0), ctx.input(1), ctx.input(2)
  ph, pw = int(ctx.attr("output_height", 1)), int(ctx.attr("output_width", 1))
  ratio = int(ctx.attr("sampling_ratio", 0))
  scale = float(ctx.attr("spatial_scale", 1.0))
  mode = attr_str(ctx, "mode", "avg").lower()
  half_pixel = attr_str(ctx, "coordinate_transformation_mode", "half_pixel" if ctx.opset >= 16 else
                    "output_half_pixel") == "half_pixel"
  n, c, h, w = x.shape
  r = rois.shape[0]
  boxes = rois.cast(dtypes.float32) * scale - (0.5 if half_pixel else 0.0)
  def col(i: int) -> Tensor: return boxes.shrink((None, (i, i + 1))).reshape(r)
  x0, y0, x1, y1 = col(0), col(1), col(2), col(3)
  rw, rh = x1 - x0, y1 - y0
  if not half_pixel: rw, rh = rw.maximum(1.0), rh.maximum(1.0)
  if ratio > 0: gh = gw = ratio
  else:
    if not ctx.is_const(1): raise ctx.fail("sampling_ratio 0 (adaptive) needs constant rois")
    b = np.asarray(ctx.const_value(1), dtype=np.float64) * scale - (0.5 if half_pixel else 0.0)
    hs, ws = b[:, 3] - b[:, 1], b[:, 2] - b[:, 0]
    if not half_pixel: hs, ws = np.maximum(hs, 1.0), np.maximum(ws, 1.0)
    grids_h, grids_w = np.ceil(hs / ph).astype(int), np.ceil(ws / pw).astype(int)
    if len(set(grids_h.tolist())) > 1 or len(set(grids_w.tolist())) > 1:
      raise ctx.fail("sampling_ratio 0 with rois that need different sampling grids is not supported")
    gh, gw = max(int(grids_h[0]), 1), max(int(grids_w[0]), 1)
  xr = nn.masked_select_sum(nn.one_hot(batch_idx, n).reshape(r, n, 1, 1, 1), x._float().unsqueeze(0), 1)
  ylo, yhi, wylo, wyhi = _roi_axis(y0, rh, ph, gh, h)                 # (R, ph*gh)
  xlo, xhi, wxlo, wxhi = _roi_axis(x0, rw, pw, gw, w)
  if mode == "avg":
    def taps(lo, hi, wlo, whi, size, pooled, grid):
      weights = nn.one_hot(lo, size) * wlo.unsqueeze(-1) + nn.one_hot(hi, size) * whi.unsqueeze(-1)
      return weights.reshape(r, pooled, grid, size).sum(2)
    ay, ax = taps(ylo, yhi, wylo, wyhi, h, ph, gh), taps(xlo, xhi, wxlo, wxhi, w, pw, gw)
    rows = (xr.unsqueeze(2) * ay.reshape(r, 1, ph, h, 1)).sum(3)        # (R, C, ph, W)
    out = (rows.unsqueeze(3) * ax.reshape(r, 1, 1, pw, w)).sum(-1) * (1.0 / max(gh * gw, 1))
    return out.cast(x.dtype)
  if mode != "max": raise ctx.fail(f"unknown mode {mode!r}")
  yi = Tensor.stack([ylo, yhi], -1).reshape(r, ph * gh * 2)              # taps interleaved (sample, corner)
  xi = Tensor.stack([xlo, xhi], -1).reshape(r, pw * gw * 2)
  wy = Tensor.stack([wylo, wyhi], -1).reshape(r, 1, ph * gh * 2, 1)
  wx = Tensor.stack([wxlo, wxhi], -1).reshape(r, 1, 1, pw * gw * 2)
  rows = nn.masked_select_sum(nn.one_hot(yi, h).reshape(r, 1, ph * gh * 2, h, 1), xr.unsqueeze(2), 3)
  vals = nn.masked_select_sum(nn.one_hot(xi, w).reshape(r, 1, 1, pw * gw * 2, w), rows.unsqueeze(3), 4)
  vals = (vals * wy * wx).reshape(r, c, ph, gh * 2, pw, gw * 2)
  return vals.max((3, 5)).cast(x.dtype)
