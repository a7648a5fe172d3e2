"""Size limits of the tensors a model may hold, checked on shapes alone before anything is allocated.

Kernels index every tensor with 32-bit integer arithmetic, so an artifact can hold tensors of at most 2**31 - 1
elements; `max_bytes` caps the storage of any one tensor (inputs, outputs, weights, intermediates). The ONNX importer
checks every graph input and node output with `SizeLimits.check` (naming the input, node and tensor), `trace`
every buffer it is about to capture or fold and every reduction's length; a tensor over a limit is a
`TensorTooLarge` error with one line that names it."""
from __future__ import annotations
import math
from dataclasses import dataclass
from tgc.ir.sint import highest
from tgc.ir import DType, lowp

MAX_ELEMENTS = 2**31 - 1          # int32 index arithmetic in kernels
DEFAULT_MAX_BYTES = 16 << 30      # per tensor: 16 GiB


class TensorTooLarge(ValueError):
  """A tensor beyond what an artifact can index or beyond the byte limit; the message names it."""


def nbytes(shape: tuple[int, ...], dtype: DType) -> int:
  """Bytes of a tensor's storage (sub-byte types packed)."""
  numel = math.prod(shape)
  return lowp.storage_nbytes(dtype, numel) if dtype.storage_only else numel * dtype.itemsize


def size_text(n: int) -> str:
  for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
    if n >= size: return f"{n} bytes ({n / size:.1f} {unit})"
  return f"{n} bytes"


@dataclass(frozen=True)
class SizeLimits:
  max_bytes: int = DEFAULT_MAX_BYTES
  max_elements: int = MAX_ELEMENTS

  def problem(self, shape: tuple[int, ...], dtype: DType) -> str | None:
    """Why a tensor of `shape` and `dtype` is refused (at the largest sizes of dims known at run time), or None."""
    shape = tuple(highest(s) for s in shape)
    numel = math.prod(shape)
    if numel > self.max_elements:
      return (f"shape {list(shape)} has {numel} elements; artifacts index tensors with 32-bit integers (at most "
              f"{self.max_elements} elements)")
    size = nbytes(shape, dtype)
    if size > self.max_bytes:
      return (f"shape {list(shape)} {dtype.name} takes {size_text(size)}, over the limit of "
              f"{size_text(self.max_bytes)} per tensor (--max-bytes)")
    return None

  def check(self, what: str, shape: tuple[int, ...], dtype: DType) -> None:
    """Raise TensorTooLarge("<what>: <problem>") when the tensor is over a limit."""
    problem = self.problem(tuple(shape), dtype)
    if problem: raise TensorTooLarge(f"{what}: {problem}")

  def check_reduction(self, shape: tuple[int, ...], axes: tuple[int, ...]) -> None:
    """Raise TensorTooLarge when reducing `shape` over `axes` takes more steps per result than kernels can count
    (their loop counters are 32-bit too)."""
    extent = math.prod(highest(shape[i]) for i in axes)
    if extent > self.max_elements:
      raise TensorTooLarge(f"a reduction over {extent} elements per result (of shape {list(shape)}); kernels count "
                           f"with 32-bit integers (at most {self.max_elements})")
