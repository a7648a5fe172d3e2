"""ONNX operators that pick or place elements by index or mask: Gather, GatherElements, GatherND, Scatter,
ScatterElements, ScatterND, TensorScatter, OneHot, Trilu, ReverseSequence, and Compress, NonZero and Unique, whose
output shape depends on data: they work only on constants, i.e. when the importer folds them."""
from __future__ import annotations
import numpy as np
from tgc.ir import dtypes
from tgc.frontend.tensor import Tensor
from tgc.frontend import functional
from tgc.frontend.onnx.registry import onnx_op
from tgc.frontend.onnx.dtypes import array_to_tensor, host_values
from tgc.frontend.onnx import compose as C
from tgc.frontend.onnx.node_helpers import first_input, node_device


# ---------------------------------------------------------------- gathers and scatters
@onnx_op("Gather")
def _gather(ctx):
  x = ctx.inputs[0]
  axis = ctx.axis(ctx.attr("axis", 0), x.ndim)
  if ctx.is_const(1):
    idx = np.asarray(ctx.const_value(1))
    if idx.size <= 64: return C.take_const(x, axis, idx)
  return C.take(x, axis, ctx.inputs[1])


@onnx_op("GatherElements")
def _gather_elements(ctx):
  x, idx = ctx.inputs[0], ctx.inputs[1]
  return functional.gather(x, ctx.axis(ctx.attr("axis", 0), x.ndim), C.index_int(idx))


@onnx_op("GatherND")
def _gather_nd(ctx):
  return C.gather_nd(ctx.inputs[0], ctx.inputs[1], ctx.attr("batch_dims", 0))


@onnx_op("ScatterElements", "Scatter")
def _scatter_elements(ctx):
  data, idx, upd = ctx.inputs[0], ctx.inputs[1], ctx.inputs[2]
  axis = ctx.axis(ctx.attr("axis", 0), data.ndim)
  return C.scatter_elements(data, idx, upd.cast(data.dtype), axis, ctx.attr("reduction", "none"))


@onnx_op("ScatterND")
def _scatter_nd(ctx):
  data, idx, upd = ctx.inputs[0], ctx.inputs[1], ctx.inputs[2]
  return C.scatter_nd(data, idx, upd.cast(data.dtype), ctx.attr("reduction", "none"))


@onnx_op("TensorScatter")
def _tensor_scatter(ctx):
  """Write `update` into `past_cache` along `axis` at each batch row's write index (circular: modulo the cache
  length); positions the update does not cover keep the cache."""
  past, upd = ctx.inputs[0], ctx.inputs[1]
  axis = ctx.axis(ctx.attr("axis", -2), past.ndim)
  maxlen, seq = past.shape[axis], upd.shape[axis]
  nb = past.shape[0]
  w = C.index_int(ctx.input(2)) if ctx.input(2) is not None else Tensor.zeros(nb, dtype=dtypes.int32,
                                                                               device=past.device)
  shape = [1] * past.ndim
  shape[axis] = maxlen
  p = C.arange(maxlen, past.device).reshape(tuple(shape))
  wshape = [1] * past.ndim
  wshape[0] = nb
  j = p - w.reshape(tuple(wshape))
  if ctx.attr("mode", "linear") == "circular": j = j.mod(maxlen)
  valid = (j >= 0).logical_and(j < seq)
  idx = valid.where(j, j.zeros_like())._broadcast_to(past.shape)
  picked = upd._broadcast_to(past.shape) if seq == 1 else functional.gather(upd, axis, idx)
  return valid._broadcast_to(past.shape).where(picked, past)


# ---------------------------------------------------------------- masks and selections
@onnx_op("OneHot")
def _one_hot(ctx):
  idx, values = ctx.inputs[0], ctx.inputs[2]
  depth = int(np.asarray(ctx.const_value(1)).reshape(-1)[0])
  if idx.dtype.is_float: idx = idx.cast(dtypes.int64)
  off = values.shrink(((0, 1),)).reshape(())
  on = values.shrink(((1, 2),)).reshape(())
  return C.one_hot(idx, depth, ctx.axis(ctx.attr("axis", -1), idx.ndim, extra=1), off, on)


@onnx_op("Trilu")
def _trilu(ctx):
  x = first_input(ctx)
  k = 0
  if ctx.input(1) is not None: k = int(np.asarray(ctx.const_value(1)).reshape(-1)[0]) if ctx.is_const(1) else \
    ctx.inputs[1]
  rows, cols = x.shape[-2], x.shape[-1]
  mask = C.triangle_mask(rows, cols, k, bool(ctx.attr("upper", 1)), x.device)
  return mask.where(x, x.zeros_like())


@onnx_op("ReverseSequence")
def _reverse_sequence(ctx):
  x, lens = ctx.inputs[0], ctx.inputs[1]
  bax, tax = ctx.attr("batch_axis", 1), ctx.attr("time_axis", 0)
  if {bax, tax} != {0, 1}: raise ctx.fail(f"batch_axis {bax} and time_axis {tax} must be 0 and 1, one each")
  nb, nt = x.shape[bax], x.shape[tax]
  t = C.arange(nt, x.device).reshape(1, nt)
  lens2 = C.index_int(lens).reshape(nb, 1)
  src = (t < lens2).where(lens2 - 1 - t, t)                     # (nb, nt)
  shape = [1] * x.ndim
  shape[bax], shape[tax] = nb, nt
  src = src if bax < tax else src.permute(1, 0)
  src = src.reshape(tuple(shape))._broadcast_to(x.shape)
  return functional.gather(x, tax, src)


# ---------------------------------------------------------------- data-dependent shapes (constants only)
@onnx_op("Compress")
def _compress(ctx):
  x = first_input(ctx)
  cond = np.asarray(ctx.const_value(1)).reshape(-1).astype(bool)
  axis = ctx.attr("axis", None)
  if axis is None: x, axis = x.reshape(-1), 0
  axis = ctx.axis(axis, x.ndim)
  idx = np.nonzero(cond[:x.shape[axis]])[0]
  return C.take_const(x, axis, idx)


@onnx_op("NonZero")
def _nonzero(ctx):
  arr = np.asarray(ctx.const_value(0))
  nz = np.array(np.nonzero(arr if arr.ndim else arr.reshape(1)), np.int64).reshape(max(arr.ndim, 1), -1)
  return array_to_tensor(nz, node_device(ctx))


@onnx_op("Unique")
def _unique(ctx):
  arr = np.asarray(ctx.const_value(0))
  dt = ctx.inputs[0].dtype
  axis = ctx.attr("axis", None)
  sorted_ = ctx.attr("sorted", 1)
  if axis is None:
    flat = arr.reshape(-1)
    y, idx, inv, cnt = np.unique(flat, return_index=True, return_inverse=True, return_counts=True)
  else:
    axis = ctx.axis(axis, arr.ndim)
    y, idx, inv, cnt = np.unique(arr, axis=axis, return_index=True, return_inverse=True, return_counts=True)
  inv = inv.reshape(-1)
  if not sorted_:
    order = np.argsort(idx, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    y = np.take(y, order, axis=0 if axis is None else axis)
    idx, cnt, inv = idx[order], cnt[order], rank[inv]
  dev = node_device(ctx)
  return [array_to_tensor(host_values(y, dt), dev, dt)] + [array_to_tensor(v.astype(np.int64), dev)
                                                           for v in (idx, inv, cnt)]
