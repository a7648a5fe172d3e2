"""ONNX signal processing: the window functions (Hann, Hamming, Blackman), DFT, STFT and MelWeightMatrix.
Sizes, lengths and frame steps are compile-time constants; complex values are a trailing axis of 2 (real, imag)."""
from __future__ import annotations
import math
import numpy as np
from tgc.ir import dtypes
from tgc.frontend.tensor import Tensor
from tgc.frontend.onnx.registry import NodeContext, onnx_op
from tgc.frontend.onnx import compose_nn as nn
from tgc.frontend.onnx.dtypes import ONNX_DTYPES
from tgc.frontend.onnx.node_helpers import const_input, has_input, node_device


# ---------------------------------------------------------------- window functions
def _window(ctx: NodeContext, terms: list[tuple[float, int]]):
  """sum_j a_j * cos(2 pi m_j n / N) for n < size, N = size (periodic) or size - 1 (symmetric)."""
  size = int(const_input(ctx, 0, "size").reshape(-1)[0])
  out_dt = ONNX_DTYPES.get(int(ctx.attr("output_datatype", 1)), dtypes.float32)
  periodic = int(ctx.attr("periodic", 1))
  denom = size if periodic else size - 1
  n = Tensor.arange(size, dtype=dtypes.float32, device=ctx.input(0).device)
  out = None
  for a, m in terms:
    term = (n * (2 * math.pi * m / denom)).cos() * a if m else Tensor.full((size,), a, dtypes.float32, n.device)
    out = term if out is None else out + term
  return out.cast(out_dt)


@onnx_op("HannWindow")
def hann_window(ctx: NodeContext): return _window(ctx, [(0.5, 0), (-0.5, 1)])


@onnx_op("HammingWindow")
def hamming_window(ctx: NodeContext):
  alpha = 25.0 / 46.0
  return _window(ctx, [(alpha, 0), (-(1 - alpha), 1)])


@onnx_op("BlackmanWindow")
def blackman_window(ctx: NodeContext): return _window(ctx, [(0.42, 0), (-0.5, 1), (0.08, 2)])


# ---------------------------------------------------------------- Fourier transforms and mel filter banks
def _complex_parts(x: Tensor):
  last = x.shape[-1]
  lead = [None] * (x.ndim - 1)
  re = x.shrink(tuple(lead + [(0, 1)])).reshape(x.shape[:-1])
  im = x.shrink(tuple(lead + [(1, 2)])).reshape(x.shape[:-1]) if last == 2 else None
  return re, im


@onnx_op("DFT")
def dft(ctx: NodeContext):
  x = ctx.input(0)
  if ctx.opset >= 20:
    axis = ctx.axis(const_input(ctx, 2, "axis").reshape(-1)[0], x.ndim, "axis (input 2)") if has_input(ctx, 2) else \
      x.ndim - 2
  else: axis = ctx.axis(ctx.attr("axis", 1), x.ndim)
  if axis == x.ndim - 1: raise ctx.fail("axis must not be the last (complex) axis")
  inverse, onesided = bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0))
  n = x.shape[axis]
  length = int(const_input(ctx, 1, "dft_length").reshape(-1)[0]) if has_input(ctx, 1) else \
    (2 * (n - 1) if inverse and onesided else n)
  re, im = _complex_parts(x)
  re, im = nn.move_axis(re, axis, -1), nn.move_axis(im, axis, -1) if im is not None else None
  if inverse and onesided:
    if im is None: im = re.zeros_like()
    re, im = nn.hermitian_extend(re, im, length)
    out_re, _ = nn.dft_last(re, im, length, True, False)
    return nn.move_axis(out_re, -1, axis).unsqueeze(-1).cast(x.dtype)
  out_re, out_im = nn.dft_last(re, im, length, inverse, onesided)
  out = Tensor.stack([out_re, out_im], -1)
  return nn.move_axis(out, -2, axis).cast(x.dtype)


@onnx_op("STFT")
def stft(ctx: NodeContext):
  x = ctx.input(0)
  step = int(const_input(ctx, 1, "frame_step").reshape(-1)[0])
  window = ctx.input(2)
  if has_input(ctx, 3): frame = int(const_input(ctx, 3, "frame_length").reshape(-1)[0])
  elif window is not None: frame = window.shape[0]
  else: frame = x.shape[-2]
  onesided = bool(ctx.attr("onesided", 1))
  n_frames = 1 + (x.shape[-2] - frame) // step
  re, im = _complex_parts(x)                                         # (batch, length)
  def frames(t: Tensor) -> Tensor:
    return nn.windows(t, (frame,), (step,), (1,), [(0, 0)]).shrink((None, (0, n_frames), None))
  re = frames(re)
  im = frames(im) if im is not None else None
  if window is not None:
    re = re * window.reshape(1, 1, frame)
    im = im * window.reshape(1, 1, frame) if im is not None else None
  out_re, out_im = nn.dft_last(re, im, frame, False, onesided)
  return Tensor.stack([out_re, out_im], -1).cast(x.dtype)


@onnx_op("MelWeightMatrix")
def mel_weight_matrix(ctx: NodeContext):
  mels, dft_len, rate, lo_hz, hi_hz = (const_input(ctx, i, name).reshape(()) for i, name in
                                       enumerate(("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz",
                                                  "upper_edge_hertz")))
  out_dt = ONNX_DTYPES.get(int(ctx.attr("output_datatype", 1)), dtypes.float32)
  n_mels, bins = int(mels), int(dft_len) // 2 + 1
  # the triangle edges (spectrogram bin numbers) follow from the constant inputs, computed as the reference does
  lo_mel = 2595 * np.log1p(lo_hz / 700) / np.log(10)
  hi_mel = 2595 * np.log1p(hi_hz / 700) / np.log(10)
  edges = np.arange(0, n_mels + 2) * ((hi_mel - lo_mel) / (n_mels + 2)) + lo_mel
  edges = (((dft_len + 1) * (700 * np.expm1(edges / 2595 * np.log(10)))) // rate).astype(int)
  dev = node_device(ctx)
  j = Tensor.arange(bins, dtype=dtypes.float32, device=dev).reshape(bins, 1)
  def row(values) -> Tensor: return Tensor(np.asarray(values, np.float32).reshape(1, n_mels), device=dev)
  left, center, right = row(edges[:-2]), row(edges[1:-1]), row(edges[2:])
  rise = (j - left) / (center - left).maximum(1.0)
  fall = (right - j) / (right - center).maximum(1.0)
  out = ((j >= left).logical_and(j <= center)).where(rise, 0.0)
  out = ((j >= center).logical_and(j < right)).where(fall, out)
  out = ((j == center).logical_and(center == left)).where(1.0, out)
  return out.cast(out_dt)
