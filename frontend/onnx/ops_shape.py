"""ONNX shape and movement operators: Shape, Size, Constant, ConstantOfShape, Range, EyeLike, Reshape, Flatten,
Transpose, Squeeze, Unsqueeze, Expand, Concat, Split, Slice, Pad, Tile, DepthToSpace, SpaceToDepth, CenterCropPad,
and the optional-value queries. Movement becomes index arithmetic, never a copy; inputs that set shapes
(Reshape's shape, Slice's starts, Pad's pads, ...) must fold to compile-time constants."""
from __future__ import annotations
import math
import numpy as np
from tgc.ir import dtypes
from tgc.ir.sint import is_static, provably_le
from tgc.frontend.shapes import broadcast_shape, ceildiv, prod
from tgc.frontend.tensor import Tensor
from tgc.frontend import functional
from tgc.frontend.onnx.registry import NodeContext, onnx_op
from tgc.frontend.onnx.dtypes import onnx_dtype, array_to_tensor, host_values, array_dtype
from tgc.frontend.onnx import compose as C, shape_values
from tgc.frontend.onnx.node_helpers import const_ints, first_input, node_device


# ---------------------------------------------------------------- shapes, constants and ranges
@onnx_op("Shape")
def _shape(ctx):
  shape = list(first_input(ctx).shape)
  start, end = shape_values.shape_span(len(shape), ctx.attrs)
  return array_to_tensor(np.array(shape[start:end], np.int64).reshape(-1), node_device(ctx))


@onnx_op("Size")
def _size(ctx): return array_to_tensor(np.array(first_input(ctx).numel(), np.int64), node_device(ctx))


@onnx_op("Constant")
def _constant(ctx):
  a = ctx.attrs
  if "value" in a: return array_to_tensor(a["value"], node_device(ctx))
  if "sparse_value" in a: return array_to_tensor(a["sparse_value"], node_device(ctx))
  if "value_float" in a: return array_to_tensor(np.array(a["value_float"], np.float32), node_device(ctx))
  if "value_floats" in a: return array_to_tensor(np.array(a["value_floats"], np.float32), node_device(ctx))
  if "value_int" in a: return array_to_tensor(np.array(a["value_int"], np.int64), node_device(ctx))
  if "value_ints" in a: return array_to_tensor(np.array(a["value_ints"], np.int64).reshape(-1), node_device(ctx))
  raise ctx.fail("string constants are not supported" if any(k.startswith("value_string") for k in a)
                 else "no value attribute")


@onnx_op("ConstantOfShape")
def _constant_of_shape(ctx):
  shape = const_ints(ctx, 0)
  value = ctx.attr("value", None)
  if value is None: return Tensor.full(tuple(shape), 0.0, dtypes.float32, node_device(ctx))
  dt = array_dtype(value)
  v = host_values(value, dt).reshape(-1)[0].item()
  if dt.storage_only: return Tensor.full(tuple(shape), v, dtypes.float32, node_device(ctx)).cast(dt)
  return Tensor.full(tuple(shape), v, dt, node_device(ctx))


@onnx_op("Range")
def _range(ctx):
  start, limit, delta = (np.asarray(ctx.const_value(i)).reshape(()) for i in range(3))
  dt = ctx.inputs[0].dtype
  if not is_static([v.item() for v in (start, limit, delta)]): return _sized_range(ctx, start, limit, delta, dt)
  n = max(int(math.ceil((float(limit) - float(start)) / float(delta))), 0) if float(delta) else 0
  if n == 0: return Tensor.zeros(0, dtype=dt, device=node_device(ctx))
  i = Tensor.arange(n, dtype=dt if not dt.is_float else dtypes.float64, device=node_device(ctx))
  if dt.is_float: return (i * float(delta) + float(start)).cast(dt)
  return i * int(delta) + int(start)


def _sized_range(ctx, start, limit, delta, dt):
  """Range up to a size known only at run time: integer start and step that are known, the limit at least start."""
  start, limit, delta = start.item(), limit.item(), delta.item()
  if dt.is_float or not is_static([start, delta]) or delta < 1 or not provably_le(start, limit):
    raise ctx.fail("a range over a size known only at run time needs integers, a known start and a positive step")
  count = ceildiv(limit - start, int(delta))
  return Tensor.arange(count, dtype=dt, device=node_device(ctx)) * int(delta) + int(start)


@onnx_op("EyeLike")
def _eye_like(ctx):
  x = first_input(ctx)
  dt = onnx_dtype(ctx.attr("dtype"), f"node {ctx.name!r} (EyeLike)") if ctx.attr("dtype") is not None else x.dtype
  rows, cols = x.shape
  k = ctx.attr("k", 0)
  diff = C.arange(cols, x.device).reshape(1, cols) - C.arange(rows, x.device).reshape(rows, 1)
  return (diff == k).cast(dt)


# ---------------------------------------------------------------- reshapes and transposes
@onnx_op("Reshape")
def _reshape(ctx):
  x = first_input(ctx)
  if ctx.opset < 5: shape = list(ctx.attr("shape"))
  else: shape = const_ints(ctx, 1)
  allowzero = ctx.attr("allowzero", 0)
  if not allowzero: shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
  return x.reshape(tuple(shape))


@onnx_op("Flatten")
def _flatten(ctx):
  x = first_input(ctx)
  axis = int(ctx.attr("axis", 1))
  if not -x.ndim <= axis <= x.ndim:
    raise ctx.fail(f"attribute axis {axis} is out of range for a rank-{x.ndim} input (allowed: {-x.ndim}..{x.ndim})")
  if axis < 0: axis += x.ndim
  return x.reshape(prod(x.shape[:axis]), prod(x.shape[axis:]))


@onnx_op("Transpose")
def _transpose(ctx):
  x = first_input(ctx)
  perm = ctx.attr("perm", None)
  return x.permute(tuple(ctx.perm(perm, x.ndim)) if perm is not None else tuple(reversed(range(x.ndim))))


def _axes_what(ctx: NodeContext, opset_input: int) -> str:
  return "axes (input 1)" if ctx.opset >= opset_input else "attribute axes"


def _axes_arg(ctx: NodeContext, opset_input: int):
  if ctx.opset >= opset_input: return const_ints(ctx, 1) if ctx.input(1) is not None else None
  return ctx.attr("axes", None)


@onnx_op("Squeeze")
def _squeeze(ctx):
  x = first_input(ctx)
  axes = _axes_arg(ctx, 13)
  if axes is None: return x.reshape(tuple(s for s in x.shape if s != 1))
  axes = set(ctx.axes(axes, x.ndim, _axes_what(ctx, 13)))
  for a in axes:
    if x.shape[a] != 1: raise ctx.fail(f"cannot squeeze axis {a} of size {x.shape[a]} (shape {x.shape})")
  return x.reshape(tuple(s for i, s in enumerate(x.shape) if i not in axes))


@onnx_op("Unsqueeze")
def _unsqueeze(ctx):
  x = first_input(ctx)
  axes = _axes_arg(ctx, 13) or []
  axes = sorted(ctx.axes(axes, x.ndim, _axes_what(ctx, 13), extra=len(axes)))
  shape = list(x.shape)
  for a in axes: shape.insert(a, 1)
  return x.reshape(tuple(shape))


@onnx_op("Expand")
def _expand(ctx):
  x = first_input(ctx)
  shape = broadcast_shape(x.shape, tuple(const_ints(ctx, 1)), "Expand")
  return x._broadcast_to(shape)


# ---------------------------------------------------------------- concatenation, split, slice
@onnx_op("Concat")
def _concat(ctx):
  xs = [t for t in ctx.inputs if t is not None]
  axis = ctx.axis(ctx.attr("axis", 0), xs[0].ndim)
  if len(xs) == 1: return xs[0]
  return functional.cat(xs, axis)


@onnx_op("Split")
def _split(ctx):
  x = first_input(ctx)
  axis = ctx.axis(ctx.attr("axis", 0), x.ndim)
  n = x.shape[axis]
  if ctx.opset >= 13 and ctx.input(1) is not None: sizes = const_ints(ctx, 1)
  elif ctx.opset < 13 and ctx.attr("split", None): sizes = list(ctx.attr("split"))
  else:
    parts = ctx.attr("num_outputs", None) or ctx.num_outputs
    if ctx.attr("num_outputs", None) is not None:
      size = -(-n // parts)
      sizes = [min(size, n - i * size) for i in range(parts)]
    else:
      if n % parts: raise ctx.fail(f"cannot split axis of size {n} into {parts} equal parts")
      sizes = [n // parts] * parts
  if sum(sizes) != n: raise ctx.fail(f"split sizes {sizes} do not add up to {n}")
  out, off = [], 0
  for s in sizes:
    out.append(x.shrink(tuple((off, off + s) if i == axis else None for i in range(x.ndim))))
    off += s
  return out


@onnx_op("Slice")
def _slice(ctx):
  x = first_input(ctx)
  if ctx.opset < 10:
    starts, ends = ctx.attr("starts"), ctx.attr("ends")
    axes = ctx.attr("axes", None)
    steps = None
  else:
    starts, ends = const_ints(ctx, 1), const_ints(ctx, 2)
    axes = const_ints(ctx, 3) if ctx.input(3) is not None else None
    steps = const_ints(ctx, 4) if ctx.input(4) is not None else None
  axes = list(range(len(starts))) if axes is None else \
    ctx.axes(axes, x.ndim, "attribute axes" if ctx.opset < 10 else "axes (input 3)")
  steps = steps or [1] * len(starts)
  if not is_static([*starts, *ends, *(x.shape[a] for a in axes)]):
    return _sized_slice(ctx, x, axes, starts, ends, steps)
  idx = [slice(None)] * x.ndim
  for a, s, e, st in zip(axes, starts, ends, steps):
    if st == 0: raise ctx.fail("slice step cannot be 0")
    idx[a] = slice(s, e, st)
  return functional.getitem(x, tuple(idx))


def _sized_slice(ctx, x, axes, starts, ends, steps):
  """A Slice where a start, an end or the sliced axis is a size known only at run time: step 1, clamped as ONNX
  says where the sizes' ranges decide the clamping."""
  arg = [None] * x.ndim
  for a, s, e, st in zip(axes, starts, ends, steps):
    if st != 1: raise ctx.fail(f"a step of {st} over sizes known only at run time is not supported (step 1 only)")
    b, e = shape_values.clamped_index(s, x.shape[a]), shape_values.clamped_index(e, x.shape[a])
    if b is None or e is None or not provably_le(b, e):
      raise ctx.fail(f"cannot tell where slice {s}:{e} of axis {a} starts and ends for every size in range")
    arg[a] = (b, e)
  return x.shrink(tuple(arg))


# ---------------------------------------------------------------- padding, tiling, blocks
@onnx_op("Pad")
def _pad(ctx):
  x = first_input(ctx)
  mode = ctx.attr("mode", "constant")
  value = None
  if ctx.opset < 11:
    pads = list(ctx.attr("pads", ctx.attr("paddings", [])))
    v = ctx.attr("value", 0.0)
    if v: value = C.scalar(v, x.dtype, x.device)
    axes = list(range(x.ndim))
  else:
    pads = const_ints(ctx, 1)
    if ctx.input(2) is not None: value = ctx.inputs[2]
    axes = ctx.axes(const_ints(ctx, 3), x.ndim, "axes (input 3)") if ctx.input(3) is not None else list(range(x.ndim))
  if len(pads) != 2 * len(axes): raise ctx.fail(f"pads {pads} do not match {len(axes)} axes")
  pairs = [(0, 0)] * x.ndim
  for k, a in enumerate(axes): pairs[a] = (pads[k], pads[k + len(axes)])
  if mode == "constant":
    return C.pad(x, pairs, "constant", value)
  if mode not in ("reflect", "edge", "wrap"): raise ctx.fail(f"unknown pad mode {mode!r}")
  return C.pad(x, pairs, mode)


@onnx_op("Tile")
def _tile(ctx):
  x = first_input(ctx)
  reps = const_ints(ctx, 1)
  if len(reps) != x.ndim: raise ctx.fail(f"repeats {reps} do not match rank {x.ndim}")
  if any(r == 0 for r in reps):
    return x.shrink(tuple((0, 0) if r == 0 else None for r in reps)).repeat(tuple(max(r, 1) for r in reps))
  return x.repeat(tuple(reps))


@onnx_op("DepthToSpace")
def _depth_to_space(ctx):
  x = first_input(ctx)
  bs = ctx.attr("blocksize")
  b, c, h, w = x.shape
  if ctx.attr("mode", "DCR") == "DCR":
    y = x.reshape(b, bs, bs, c // (bs * bs), h, w).permute(0, 3, 4, 1, 5, 2)
  else:
    y = x.reshape(b, c // (bs * bs), bs, bs, h, w).permute(0, 1, 4, 2, 5, 3)
  return y.reshape(b, c // (bs * bs), h * bs, w * bs)


@onnx_op("SpaceToDepth")
def _space_to_depth(ctx):
  x = first_input(ctx)
  bs = ctx.attr("blocksize")
  b, c, h, w = x.shape
  y = x.reshape(b, c, h // bs, bs, w // bs, bs)
  y = y.permute(0, 3, 5, 1, 2, 4) if ctx.attr("mode", "DCR") == "DCR" else y.permute(0, 1, 3, 5, 2, 4)
  return y.reshape(b, c * bs * bs, h // bs, w // bs)


@onnx_op("CenterCropPad")
def _center_crop_pad(ctx):
  x = first_input(ctx)
  shape = const_ints(ctx, 1)
  axes = ctx.axes(ctx.attr("axes", list(range(x.ndim))), x.ndim)
  for a, target in zip(axes, shape):
    n = x.shape[a]
    if target < n:
      start = (n - target) // 2
      x = x.shrink(tuple((start, start + target) if i == a else None for i in range(x.ndim)))
    elif target > n:
      before = (target - n) // 2
      x = x.pad(tuple((before, target - n - before) if i == a else (0, 0) for i in range(x.ndim)))
  return x


# ---------------------------------------------------------------- optional values
@onnx_op("OptionalHasElement")
def _optional_has_element(ctx):
  return Tensor.full((), ctx.input(0) is not None, dtypes.bool, node_device(ctx))


@onnx_op("OptionalGetElement")
def _optional_get_element(ctx):
  if ctx.input(0) is None: raise ctx.fail("the optional input is empty")
  return ctx.inputs[0]
