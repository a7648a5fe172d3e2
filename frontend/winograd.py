"""Winograd's F(2x2, 3x3) convolution: a 3x3 stride-1 convolution as 16 matrix products over 4x4 tiles of the
image, 2.25x fewer multiplications than the direct sum (Lavin and Gray, "Fast Algorithms for Convolutional Neural
Networks", 2016).

  V = Bᵀ d B     each 4x4 input tile d (tiles 2 apart) and channel: sums of strided views, no multiplications
  U = G g Gᵀ     each 3x3 kernel g: computed here with numpy, the weights being compile-time constants
  M = V · U      for each of the 16 positions of a tile: (tiles x in channels) . (in channels x out channels)
  Y = Aᵀ M A     each 2x2 output tile

The image is first split into its even and odd columns, so each tile's columns are contiguous reads; the 16
transformed tiles and the 4 output phases are stacks that the scheduler cuts into one kernel per piece
(codegen/pieces.py); every intermediate keeps channels last. `applies` says where it pays (docs/benchmarks.md: 32+
channels, even output sides of 14 or more); whoever traces a model for a target that wants it sets `enabled`
(aot.models)."""
from __future__ import annotations
import contextlib
import contextvars
import numpy as np
from tgc.ir import dtypes
from tgc.frontend import functional

TILE, OUT = 4, 2                  # a 4x4 input tile gives a 2x2 output tile
B_T = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64)
G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], np.float64)
A_T = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)
MIN_CHANNELS = 32                 # in and out channels: fewer, and the transforms cost more than the products save
MIN_SIDE = 14                     # output rows and columns: a 7x7 map wastes a fourth of its 4x4 output tiles

_enabled = contextvars.ContextVar("winograd", default=False)


@contextlib.contextmanager
def enabled(on: bool = True):
  """Within the block, `applies` may say yes (the convolutions traced there are for a target that wants them)."""
  token = _enabled.set(on)
  try: yield
  finally: _enabled.reset(token)


def applies(x, weight_shape: tuple, strides, pads, dilations, group: int) -> bool:
  """Whether a convolution of `x` by constant float32 weights of `weight_shape` runs in Winograd's form: enabled, 2-D,
  3x3, stride 1, no dilation, one group, sizes known at compile time, at least MIN_CHANNELS channels in and out and an
  output of at least MIN_SIDE x MIN_SIDE whose sides are even (an odd side cuts the last output tiles in two: the
  kernel storing the output phases is then not cut into one per phase, and each element selects its phase)."""
  if not _enabled.get() or x.dtype != dtypes.float32 or len(weight_shape) != 4 or x.ndim != 4: return False
  if tuple(weight_shape[2:]) != (3, 3) or group != 1 or any(s != 1 for s in strides) or any(d != 1 for d in dilations):
    return False
  if not all(isinstance(s, int) for s in x.shape): return False
  out = [x.shape[2 + a] + pads[a][0] + pads[a][1] - 2 for a in range(2)]
  return min(weight_shape[:2]) >= MIN_CHANNELS and min(out) >= MIN_SIDE and all(n % OUT == 0 for n in out)


def _combine(pieces: list, matrix: np.ndarray) -> list:
  """[sum_j matrix[i, j] * pieces[j] for each row i]: zero terms left out, +-1 as additions and subtractions."""
  out = []
  for row in matrix:
    acc = None
    for c, p in zip(row, pieces):
      if c == 0: continue
      term = p if c == 1 else -p if c == -1 else p * float(c)
      acc = term if acc is None else acc + term
    out.append(acc)
  return out


def transformed_weights(w: np.ndarray) -> np.ndarray:
  """U for each of the 16 tile positions, (16, out channels, in channels), position nu*4 + xi (column nu, row xi)."""
  u = np.einsum("xi,nj,ocij->nxoc", G, G, np.asarray(w, np.float64))
  return u.reshape(TILE * TILE, w.shape[0], w.shape[1]).astype(np.float32)


def conv2d(x, w: np.ndarray, bias, pads):
  """conv(x, w) + bias for `x` (batch, cin, H, W), constant weights `w` (cout, cin, 3, 3), `pads` ((top, bottom),
  (left, right)), stride 1: the same values as the direct sum up to rounding. The intermediates keep channels last
  (as the layouts give convolutions' activations: codegen/layouts.py), so every step reads and writes contiguous
  channels."""
  m, a = OUT, TILE
  bs, cin, h, wd = x.shape
  cout = w.shape[0]
  (top, bottom), (left, right) = pads
  oh, ow = h + top + bottom - 2, wd + left + right - 2
  th, tw = -(-oh // m), -(-ow // m)                                                    # output tiles
  # the image's even and odd columns, unpadded: planes[j][b, y, v, c] = x[b, c, y, 2v + j] (no negative index, so
  # a producer fused into this kernel selects its phase by a constant)
  half = -(-wd // m)
  xc = x.permute(0, 2, 3, 1).pad(((0, 0), (0, 0), (0, m * half - wd), (0, 0))).reshape(bs, h, half, m, cin)
  planes = functional.stack([xc[:, :, :, j] for j in range(m)], 0).contiguous()        # (m, bs, h, half, cin)
  columns = [_shifted(planes[(j - left) % m], 2, (j - left) // m, tw, 1) for j in range(a)]   # tile column j
  transformed = _combine(columns, B_T)                                                   # Bᵀ over the columns: nu
  v = [t for c in transformed for t in _combine([_shifted(c, 1, i - top, th, m) for i in range(a)], B_T)]
  v = functional.stack(v, 0).contiguous().reshape(a * a, bs * th * tw, cin)           # position nu*a + xi
  u = type(x)(np.ascontiguousarray(transformed_weights(w).transpose(0, 2, 1)), x.device)   # (16, cin, cout)
  products = v.matmul(u)                                                                 # (16, tiles, cout)
  tiles = [products[k].reshape(bs, th, tw, cout) for k in range(a * a)]
  rows = []
  for p in range(m):
    # output row p: Aᵀ over each tile column's rows (xi), then Aᵀ over the columns (nu) for output columns q
    by_column = [_combine([tiles[nu * a + xi] for xi in range(a)], A_T[p:p + 1])[0] for nu in range(a)]
    rows.append(functional.stack(_combine(by_column, A_T), 3))                         # (bs, th, tw, q, cout)
  y = functional.stack(rows, 2).reshape(bs, m * th, m * tw, cout).permute(0, 3, 1, 2)
  y = y.shrink(((0, bs), (0, cout), (0, oh), (0, ow)))
  return y if bias is None else y + bias.cast(dtypes.float32).reshape(1, cout, 1, 1)


def _shifted(t, axis: int, start: int, count: int, step: int):
  """t[.., start + step*k, ..] for k < count along `axis`, zero where that index is outside t (a padded view)."""
  size = t.shape[axis]
  before = max(0, -start)
  after = max(0, start + step * (count - 1) + 1 - size)
  padded = t.pad(tuple((before, after) if d == axis else (0, 0) for d in range(t.ndim)))
  first = start + before
  index = [slice(None)] * t.ndim
  index[axis] = slice(first, first + step * (count - 1) + 1, step)
  return padded[tuple(index)]
