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
(aot.models). `conv2d_integers` is the same form on the integers of an 8-bit convolution, exact (4U and the tiles in
int16, the products summed in int32), for targets whose 8-bit products cost what int16 ones do (`integers_apply`,
`enabled(integers=True)`)."""
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
_integers = contextvars.ContextVar("winograd_integers", default=False)


@contextlib.contextmanager
def enabled(on: bool = True, integers: bool = False):
  """Within the block, `applies` may say yes (the convolutions traced there are for a target that wants them), and
  `integers_apply` with `integers` (a target that wants 8-bit convolutions on int16 tiles)."""
  token, token_integers = _enabled.set(on), _integers.set(integers)
  try: yield
  finally:
    _enabled.reset(token)
    _integers.reset(token_integers)


def applies(x, weight_shape: tuple, strides, pads, dilations, group: int) -> bool:
  """Whether a convolution of `x` by constant float32 weights of `weight_shape` runs in Winograd's form: enabled, 2-D,
  3x3, stride 1, no dilation, one group, sizes known at compile time, at least MIN_CHANNELS channels in and out and an
  output of at least MIN_SIDE x MIN_SIDE whose sides are even (an odd side cuts the last output tiles in two: the
  kernel storing the output phases is then not cut into one per phase, and each element selects its phase)."""
  if not _enabled.get() or x.dtype != dtypes.float32: return False
  return _shape_applies(x, weight_shape, strides, pads, dilations, group)


def _shape_applies(x, weight_shape: tuple, strides, pads, dilations, group: int) -> bool:
  """The shapes of `applies` (and of `integers_apply`)."""
  if len(weight_shape) != 4 or x.ndim != 4: return False
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
  v, tiles = _input_tiles(x, pads)
  u = type(x)(np.ascontiguousarray(transformed_weights(w).transpose(0, 2, 1)), x.device)   # (16, cin, cout)
  y = _output_tiles(v.matmul(u), tiles)                                                  # products (16, tiles, cout)
  return y if bias is None else y + bias.cast(dtypes.float32).reshape(1, w.shape[0], 1, 1)


def conv2d_integers(xq, zero: int, w: np.ndarray, pads):
  """conv(xq - zero, w) in int32 for 8-bit `xq` (batch, cin, H, W) and constant integer weights `w` (cout, cin, 3,
  3), exactly where `integers_apply` says so: every step on integers, the tiles stored as int16 (|Bᵀ d B| <= 4 *
  255), the weights as 4 G g Gᵀ (integers: 2G is; |4U| <= 9 max|w|) in int16, the 16 products summed in int32
  (pmaddwd's pairs: codegen/dot.py), Aᵀ M A four times the sum, divided by 4 exactly."""
  d = xq.cast(dtypes.int32) - zero                                     # |d| <= 255; padding 0 is xq's zero point
  v, tiles = _input_tiles(d, pads, dtypes.int16)
  u = type(xq)(np.ascontiguousarray(quadrupled_weights(w).transpose(0, 2, 1)), xq.device)    # (16, cin, cout)
  return _output_tiles(v.cast(dtypes.int32).matmul(u.cast(dtypes.int32)), tiles).idiv(4)


def integers_apply(xq, w: np.ndarray, strides, pads, dilations, group: int) -> bool:
  """Whether `conv2d_integers` takes the convolution of the 8-bit `xq` by the integer weights `w`: integer tiles
  enabled (`enabled(integers=True)`), the shapes `applies` takes, and no sum leaving int32: |Bᵀ d B| <= 4 * 255
  times the sum of |4U| over the 16 positions and the input channels, for each output channel, bounds every partial
  sum of the products and of Aᵀ M A (from the weights' values: 257 input channels of weights all -128 fit, a
  quantized 3x3 layer of 512 under half the range)."""
  if not _integers.get() or xq.dtype not in (dtypes.uint8, dtypes.int8) or w.dtype.kind not in "iu": return False
  if not _shape_applies(xq, w.shape, strides, pads, dilations, group): return False
  per_output = np.abs(quadrupled_weights(w).astype(np.int64)).sum(axis=(0, 2))
  return 4 * 255 * int(per_output.max(initial=0)) < 1 << 31


def quadrupled_weights(w: np.ndarray) -> np.ndarray:
  """4U = (2G) g (2G)ᵀ of integer weights for each of the 16 tile positions, int16, (16, out channels, in
  channels), position nu*4 + xi."""
  g2 = (2 * G).astype(np.int64)
  u = np.einsum("xi,nj,ocij->nxoc", g2, g2, np.asarray(w, np.int64))
  return u.reshape(TILE * TILE, w.shape[0], w.shape[1]).astype(np.int16)


def _input_tiles(x, pads, stored=None):
  """Bᵀ d B of every 4x4 input tile d (tiles 2 apart) of `x` (batch, cin, H, W) padded by `pads`, computed in x's
  type and stored in `stored` (default: x's; narrower integers hold the values while the arithmetic stays in the
  32-bit lanes the kernels vectorize), as (16, batch * tile rows * tile columns, cin), position nu*4 + xi, and what
  `_output_tiles` needs of the shapes."""
  stored = stored or x.dtype
  m, a = OUT, TILE
  bs, cin, h, wd = x.shape
  (top, bottom), (left, right) = pads
  oh, ow = h + top + bottom - 2, wd + left + right - 2
  th, tw = -(-oh // m), -(-ow // m)                                                    # output tiles
  # the image's even and odd columns, unpadded: planes[j][b, y, v, c] = x[b, c, y, 2v + j] (no negative index, so
  # a producer fused into this kernel selects its phase by a constant)
  half = -(-wd // m)
  xc = x.permute(0, 2, 3, 1).pad(((0, 0), (0, 0), (0, m * half - wd), (0, 0))).reshape(bs, h, half, m, cin)
  planes = functional.stack([xc[:, :, :, j] for j in range(m)], 0)                      # (m, bs, h, half, cin)
  planes = planes.cast(stored).contiguous().cast(x.dtype)
  columns = [_shifted(planes[(j - left) % m], 2, (j - left) // m, tw, 1) for j in range(a)]   # tile column j
  transformed = _combine(columns, B_T)                                                   # Bᵀ over the columns: nu
  v = [t for c in transformed for t in _combine([_shifted(c, 1, i - top, th, m) for i in range(a)], B_T)]
  v = functional.stack(v, 0).cast(stored).contiguous().reshape(a * a, bs * th * tw, cin)   # position nu*a + xi
  return v, (bs, th, tw, oh, ow)


def _output_tiles(products, tiles):
  """Aᵀ M A of the 16 products M (16, tiles, cout) as the output (batch, cout, oh, ow)."""
  m, a = OUT, TILE
  bs, th, tw, oh, ow = tiles
  cout = products.shape[-1]
  per_position = [products[k].reshape(bs, th, tw, cout) for k in range(a * a)]
  rows = []
  for p in range(m):
    # output row p: Aᵀ over each tile column's rows (xi), then Aᵀ over the columns (nu) for output columns q
    by_column = [_combine([per_position[nu * a + xi] for xi in range(a)], A_T[p:p + 1])[0] for nu in range(a)]
    rows.append(functional.stack(_combine(by_column, A_T), 3))                         # (bs, th, tw, q, cout)
  y = functional.stack(rows, 2).reshape(bs, m * th, m * tw, cout).permute(0, 3, 1, 2)
  return y.shrink(((0, bs), (0, cout), (0, oh), (0, ow)))


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
