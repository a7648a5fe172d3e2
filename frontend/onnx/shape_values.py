"""Shape arithmetic with sizes known only at run time.

Exporters compute shapes in the graph: `Shape`, then `Gather`, `Concat`, `Mul`, ... into a `Reshape` or `Expand`.
The importer folds these to compile-time constants (an array and its dtype). When a dim is an `ir.sint` size
expression, the folded value is a numpy object array of ints and size expressions: a *shape value*. The operators
exporters use on shapes are computed here on those arrays, elementwise with numpy's broadcasting; a result whose
elements are all known settles back to a plain integer array. A comparison or choice the sizes' ranges cannot
decide, and every other operator, is not folded (`fold` gives None): the importer then computes it at run time from
the sizes (`as_tensor`)."""
from __future__ import annotations
from typing import Callable
import numpy as np
from tgc.ir import DType, UOp, dtypes
from tgc.ir.sint import highest, lowest, prod, provably_le, same, simplified
from tgc.frontend.tensor import Tensor
from tgc.frontend.onnx.dtypes import onnx_dtype

def is_shape_value(v) -> bool:
  """Whether a scope value is a constant holding sizes known only at run time."""
  return isinstance(v, tuple) and isinstance(v[0], np.ndarray) and v[0].dtype == object


def settle(arr: np.ndarray, dtype: DType) -> tuple:
  """`arr` with each size in canonical form; a plain array of `dtype` when every element is known."""
  if not isinstance(arr, np.ndarray): arr = objects([arr], ())
  flat = [simplified(v) if isinstance(v, UOp) else int(v) for v in arr.reshape(-1)]
  if all(isinstance(v, int) for v in flat): return np.array(flat, dtype=dtype.numpy).reshape(arr.shape), dtype
  return objects(flat, arr.shape), dtype


def objects(values: list, shape: tuple) -> np.ndarray:
  """An object array of `shape` holding `values` (numpy would try to read a size expression as a sequence)."""
  out = np.empty(len(values), dtype=object)
  out[:] = values
  return out.reshape(shape)


def of_shape(shape: tuple, op: str, attrs: dict) -> tuple:
  """Shape or Size of a tensor whose shape has sizes known only at run time."""
  if op == "Size": return settle(objects([prod(shape)], ()), dtypes.int64)
  start, end = shape_span(len(shape), attrs)
  dims = list(shape[start:end])
  return settle(objects(dims, (len(dims),)), dtypes.int64)


def shape_span(rank: int, attrs: dict) -> tuple[int, int]:
  """The dims [start, end) an ONNX Shape node returns: its start and end attributes, negative ones counted from the
  end, clamped to [0, rank]."""
  return tuple(min(max(v + rank if v < 0 else v, 0), rank) for v in (attrs.get("start", 0), attrs.get("end", rank)))


def as_tensor(value: tuple, device: str) -> Tensor:
  """A shape value as a Tensor computed at run time from the sizes (each element a scalar read of a size)."""
  arr, dt = value
  parts = [Tensor.size_value(v, dt, device).reshape(1) for v in arr.reshape(-1)]
  flat = parts[0] if len(parts) == 1 else parts[0].cat(*parts[1:])
  return flat.reshape(arr.shape)


def clamped_index(v, n):
  """An ONNX Slice start or end `v` on an axis of size `n` (negative counts from the end, then clamped to
  [0, n]) where a size is known only at run time; None when the sizes' ranges do not decide the clamping."""
  if isinstance(v, int) and v >= highest(n): return n          # INT64_MAX: to the end
  if isinstance(v, int) and v < 0:
    if -v > lowest(n): return None
    v = simplified(n + v)
  if provably_le(v, n): return v
  if provably_le(n, v): return n
  return None


# ---------------------------------------------------------------- elementwise helpers
def _truncating_div(a, b):
  """ONNX integer Div (truncates toward zero; sizes are never negative, so floor division of the expressions)."""
  if isinstance(a, UOp) or isinstance(b, UOp): return a // b
  q = abs(a) // abs(b)
  return q if (a >= 0) == (b >= 0) else -q


def _decided_max(a, b):
  """max(a, b) where the sizes' ranges tell it; None where they do not."""
  if same(a, b) or lowest(a) >= highest(b): return a
  if lowest(b) >= highest(a): return b
  return None


def _decided_min(a, b):
  if same(a, b) or highest(a) <= lowest(b): return a
  if highest(b) <= lowest(a): return b
  return None


def _decided_equal(a, b):
  if same(a, b): return True
  if highest(a) < lowest(b) or highest(b) < lowest(a): return False
  return None


class Undecided(Exception):
  """A comparison the sizes' ranges cannot decide: the node is computed at run time."""


def _elementwise(fn: Callable, *arrs) -> np.ndarray:
  def checked(*xs):
    out = fn(*xs)
    if out is None: raise Undecided
    return out
  return np.frompyfunc(checked, len(arrs), 1)(*arrs)


_BINARY: dict[str, Callable] = {
  "Add": lambda a, b: a + b,
  "Sub": lambda a, b: a - b,
  "Mul": lambda a, b: a * b,
  "Div": _truncating_div,
  "Max": _decided_max,
  "Min": _decided_min,
}


# ---------------------------------------------------------------- the folded operators
def _ints(v) -> list[int]:
  """A shape-setting operand (axes, starts, a target shape) that must be known: its ints."""
  flat = np.asarray(v[0]).reshape(-1)
  if any(isinstance(x, UOp) for x in flat): raise Undecided
  return [int(x) for x in flat]


def _axes(attrs: dict, vals: list, opset_input: int, opset: int):
  if opset >= opset_input: return _ints(vals[1]) if len(vals) > 1 and vals[1] is not None else None
  return attrs.get("axes")


def _unsqueeze(attrs, vals, opset):
  a = vals[0][0]
  axes = _axes(attrs, vals, 13, opset) or []
  n = a.ndim + len(axes)
  for ax in sorted(x % n for x in axes): a = np.expand_dims(a, ax)
  return a


def _squeeze(attrs, vals, opset):
  a = vals[0][0]
  axes = _axes(attrs, vals, 13, opset)
  return np.squeeze(a, axis=None if axes is None else tuple(x % a.ndim for x in axes))


def _reshape(attrs, vals, opset):
  a, shape = vals[0][0], _ints(vals[1])
  if not attrs.get("allowzero", 0): shape = [a.shape[i] if s == 0 else s for i, s in enumerate(shape)]
  return a.reshape(shape)


def _slice(attrs, vals, opset):
  a = vals[0][0]
  starts, ends = _ints(vals[1]), _ints(vals[2])
  axes = _ints(vals[3]) if len(vals) > 3 and vals[3] is not None else list(range(len(starts)))
  steps = _ints(vals[4]) if len(vals) > 4 and vals[4] is not None else [1] * len(starts)
  idx = [slice(None)] * a.ndim
  for ax, s, e, st in zip(axes, starts, ends, steps): idx[ax % a.ndim] = slice(s, e, st)
  return a[tuple(idx)]


def _gather(attrs, vals, opset):
  a, idx = vals[0][0], np.asarray(vals[1][0]).astype(np.int64)
  axis = attrs.get("axis", 0) % a.ndim
  return np.take(a, np.where(idx < 0, idx + a.shape[axis], idx), axis=axis)


def _cast(attrs, vals, opset):
  to = onnx_dtype(attrs["to"], "Cast")
  if not to.is_int: raise Undecided        # sizes as floats are computed at run time
  return vals[0][0], to


def _reduce_prod(attrs, vals, opset):
  """The product of all elements (how exporters flatten a shape); other axes are not folded."""
  if attrs.get("axes") or len(vals) > 1 and vals[1] is not None: raise Undecided
  a = vals[0][0]
  return objects([prod(a.reshape(-1).tolist())], (1,) * a.ndim if attrs.get("keepdims", 1) else ())


def _binary(op: str):
  def fold(attrs, vals, opset):
    return _elementwise(_BINARY[op], vals[0][0], vals[1][0])
  return fold


_FOLDS: dict[str, Callable] = {
  "Identity": lambda attrs, vals, opset: vals[0][0],
  "Neg": lambda attrs, vals, opset: -vals[0][0],
  "Cast": _cast,
  "Unsqueeze": _unsqueeze,
  "Squeeze": _squeeze,
  "Reshape": _reshape,
  "Flatten": lambda attrs, vals, opset: vals[0][0].reshape(
      int(np.prod(vals[0][0].shape[:attrs.get("axis", 1)])), -1),
  "Concat": lambda attrs, vals, opset: np.concatenate([v[0] for v in vals if v is not None], axis=attrs["axis"]),
  "Slice": _slice,
  "Gather": _gather,
  "Expand": lambda attrs, vals, opset: np.broadcast_to(vals[0][0], np.broadcast_shapes(
      vals[0][0].shape, tuple(_ints(vals[1])))).copy(),
  "Equal": lambda attrs, vals, opset: (_elementwise(_decided_equal, vals[0][0], vals[1][0]), dtypes.bool),
  "Where": lambda attrs, vals, opset: np.where(np.asarray(vals[0][0]).astype(bool), vals[1][0], vals[2][0]),
  "ReduceProd": _reduce_prod,
  **{op: _binary(op) for op in _BINARY},
}


def fold(op: str, attrs: dict, vals: list, opset: int) -> list | None:
  """The outputs of a node whose constant inputs hold sizes known only at run time, or None when it is not folded
  (an operator not listed above, or a comparison the sizes' ranges do not decide)."""
  rule = _FOLDS.get(op)
  if rule is None or any(v is not None and not (v[1].is_int or v[1].is_bool) for v in vals): return None
  operands = [v if v is None or is_shape_value(v) else (np.asarray(v[0]).astype(object), v[1]) for v in vals]
  if op == "Where" and is_shape_value(vals[0]): return None
  try: out = rule(attrs, operands, opset)
  except Undecided: return None
  arr, dt = out if isinstance(out, tuple) else (out, _result_dtype(op, vals))
  if dt.is_bool:
    flat = [bool(v) for v in np.asarray(arr).reshape(-1)]
    return [(np.array(flat, dtype=bool).reshape(np.shape(arr)), dt)]
  return [settle(arr, dt)]


def _result_dtype(op: str, vals: list) -> DType:
  data = vals[1] if op == "Where" else vals[0]
  return data[1]
