"""Shape and value-range arithmetic shared by the Tensor, its compositions (`functional`) and the ONNX handlers:
products of dims, ceiling division, numpy broadcasting of two shapes, and the lowest and highest value of a dtype
(what max pooling and scatter reductions pad with). Pure functions on ints and dtypes; nothing here builds a
graph. Dims known only at run time are `ir.sint` expressions."""
from __future__ import annotations
import math
from typing import Sequence
from tgc.ir import DType
from tgc.ir.sint import sint, is_static, prod as sym_prod


def prod(xs) -> sint:
  """The product of `xs` as a Python int (1 for none); a size expression when a dim is known only at run time."""
  xs = list(xs)
  if not is_static(xs): return sym_prod(xs)
  out = 1
  for x in xs: out *= int(x)
  return out


def ceildiv(a: sint, b: int) -> sint:
  """ceil(a / b) for a >= 0, b > 0 (a size expression divides as C does, truncating: written (a + b - 1) / b)."""
  return -(-a // b) if is_static(a) else (a + b - 1) // b


def broadcast_shape(a: Sequence[int], b: Sequence[int], op: str = "op") -> tuple[int, ...]:
  """The numpy broadcast of shapes `a` and `b`; a ValueError naming `op` when they do not broadcast."""
  n = max(len(a), len(b))
  a2, b2 = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
  out = []
  for x, y in zip(a2, b2):
    if x != y and x != 1 and y != 1: raise ValueError(f"{op}: shapes {tuple(a)} and {tuple(b)} cannot broadcast")
    out.append(y if x == 1 else x)
  return tuple(out)


def lowest(dt: DType):
  """The smallest value of a dtype: -inf for floats, False for bool, the minimum of an integer type."""
  if dt.is_float: return -math.inf
  if dt.is_bool: return False
  return 0 if dt.is_unsigned else -(1 << (8 * dt.itemsize - 1))


def highest(dt: DType):
  """The largest value of a dtype: inf for floats, True for bool, the maximum of an integer type."""
  if dt.is_float: return math.inf
  if dt.is_bool: return True
  return (1 << (8 * dt.itemsize - (0 if dt.is_unsigned else 1))) - 1
