"""The arrays users give and get at an artifact's boundary, and the storage arrays its API takes and fills.

Ordinary tensors are the same on both sides. A storage-only tensor (bfloat16, float8, float4e2m1, int4/uint4,
int2/uint2; the manifest's `tgc_dtype`) is stored as bit patterns in the manifest's `dtype` (uint16 or uint8; sub-byte
types packed low bits first into the front of an array of the tensor's shape, of which the API reads `nbytes`).
Users hold its values instead, in the numpy dtype `.npy` files can hold (`value_dtype`, the manifest's
`npy_dtype`): float32 for the float types, int8 for int4/int2, uint8 for uint4/uint2.

`to_storage` takes, for a storage-only input, its values (floats converted as ONNX Cast does: round to nearest even,
saturating to the largest finite value; integers range-checked) or its raw bit patterns, one element per
element, in the storage dtype. `from_storage` gives an output's values. Problems raise `ArtifactError` naming the
input."""
from __future__ import annotations
import numpy as np
from tgc.ir import DType, dtypes, lowp
from tgc.runtimes.base import ArtifactError


def storage_type(spec: dict) -> DType | None:
  """The storage-only tgc dtype of a manifest tensor entry, or None for an ordinary tensor."""
  dt = getattr(dtypes, str(spec.get("tgc_dtype", "")), None)
  return dt if isinstance(dt, DType) and dt.storage_only else None


def value_dtype(spec: dict) -> np.dtype:
  """The numpy dtype of a tensor's values as users read and write them (`npy_dtype` in the manifest)."""
  dt = storage_type(spec)
  return lowp.value_numpy(dt) if dt is not None else np.dtype(spec["dtype"])


def storage_from_bits(bits: np.ndarray, spec: dict) -> np.ndarray:
  """Element bit patterns -> the storage array the artifact's API takes (packed into the front for sub-byte)."""
  dt = storage_type(spec)
  shape = tuple(spec["shape"])
  packed = lowp.pack(bits, dt)
  if lowp.per_word(dt) == 1: return packed.reshape(shape)
  out = np.zeros(shape, np.dtype(spec["dtype"]))
  out.reshape(-1)[:packed.size] = packed
  return out


def bits_from_storage(arr: np.ndarray, spec: dict) -> np.ndarray:
  """The storage array of a tensor -> its element bit patterns (uint32, the tensor's shape)."""
  dt = storage_type(spec)
  raw = np.asarray(arr).reshape(-1)[:lowp.storage_nbytes(dt, int(np.prod(spec["shape"]))) // dt.itemsize]
  return lowp.unpack(raw, dt, tuple(spec["shape"]))


def to_storage(name: str, arr: np.ndarray, spec: dict) -> np.ndarray:
  """A user's array for input `name` as the artifact takes it (shape and dtype checked)."""
  arr = np.asarray(arr)
  shape, storage = tuple(spec["shape"]), np.dtype(spec["dtype"])
  if arr.shape != shape:
    raise ArtifactError(f"input {name!r} has shape {list(arr.shape)}; the model takes {list(shape)}")
  dt = storage_type(spec)
  if dt is None:
    if arr.dtype != storage:
      got = arr.dtype.name if arr.dtype.isnative else arr.dtype.str
      raise ArtifactError(f"input {name!r} has dtype {got}; the model takes {storage.name}")
    return arr
  values = lowp.value_numpy(dt)
  if arr.dtype == values:
    if dt in lowp.INT_RANGES: _check_range(name, arr, dt, *lowp.INT_RANGES[dt])
    return storage_from_bits(lowp.encode_array(arr, dt), spec)
  if arr.dtype == storage:     # raw bit patterns, one element per element
    if dt.elem_bits < 8: _check_range(name, arr, dt, 0, (1 << dt.elem_bits) - 1, "bit patterns")
    return storage_from_bits(arr, spec)
  raws = f"{storage.name} bit patterns" if storage != values else "bit patterns"
  raise ArtifactError(f"input {name!r} has dtype {arr.dtype.name}; the model takes {dt.name}: give {values.name} "
                      f"values" + (f" or {raws}" if storage != values else ""))


def _check_range(name: str, arr: np.ndarray, dt: DType, lo: int, hi: int, what: str = "values") -> None:
  bad = np.flatnonzero((arr < lo) | (arr > hi))
  if bad.size:
    where = np.unravel_index(bad[0], arr.shape) if arr.ndim else ()
    raise ArtifactError(f"input {name!r}: {bad.size} {what} do not fit {dt.name} ({lo}..{hi}), e.g. "
                        f"{arr.reshape(-1)[bad[0]].item()} at index {list(map(int, where))}")


def from_storage(arr: np.ndarray, spec: dict) -> np.ndarray:
  """An artifact's output as users get it: storage-only bit patterns decoded to values (`value_dtype`)."""
  dt = storage_type(spec)
  if dt is None: return np.asarray(arr)
  return lowp.decode_array(bits_from_storage(arr, spec), dt).astype(lowp.value_numpy(dt))
