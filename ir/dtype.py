"""Data types of the IR: compute types with numpy promotion, and storage-only low-precision types."""
from __future__ import annotations
from dataclasses import dataclass
import numpy as np


@dataclass(frozen=True, eq=True)
class DType:
  """A scalar type, or a vector of `count` lanes of one (`vec`). `np` is the numpy name of its storage;
  `storage_only` types are held packed and computed in `compute` (float32 or int32)."""
  name: str
  itemsize: int          # bytes of the storage unit (packed types: bytes per storage word); vectors: of one lane
  kind: str              # 'b' bool, 'i' signed, 'u' unsigned, 'f' float
  np: str                # numpy dtype name of the storage unit
  storage_only: bool = False
  bits: int = 0          # bits per element (packed types hold 8//bits elements per byte)
  count: int = 1         # lanes: 1 for scalars

  def __repr__(self):
    return f"dtypes.{self.name}" if self.count == 1 else f"dtypes.{self.scalar.name}.vec({self.count})"
  def vec(self, n: int) -> DType:
    """The vector of `n` lanes of this scalar type (n == 1: the scalar itself)."""
    if self.count != 1: raise ValueError(f"{self!r} is already a vector")
    return self if n == 1 else DType(f"{self.name}x{n}", self.itemsize, self.kind, self.np, self.storage_only,
                                     self.bits, n)
  @property
  def scalar(self) -> DType:
    """The type of one lane."""
    return self if self.count == 1 else dtypes.by_name(self.name.rsplit("x", 1)[0])
  @property
  def is_float(self) -> bool: return self.kind == 'f'
  @property
  def is_int(self) -> bool: return self.kind in 'iu'
  @property
  def is_unsigned(self) -> bool: return self.kind == 'u'
  @property
  def is_bool(self) -> bool: return self.kind == 'b'
  @property
  def compute(self) -> DType:
    """The type arithmetic on this type is done in."""
    if not self.storage_only: return self
    return dtypes.float32 if self.is_float else dtypes.int32
  @property
  def numpy(self) -> np.dtype: return np.dtype(self.np)
  @property
  def elem_bits(self) -> int: return self.bits or self.itemsize * 8


def _d(name, itemsize, kind, npname, storage_only=False, bits=0):
  return DType(name, itemsize, kind, npname, storage_only, bits)


class dtypes:
  """The dtype table. Storage-only types store their bit patterns in the listed numpy type."""
  bool = _d("bool", 1, 'b', "bool")
  int8 = _d("int8", 1, 'i', "int8")
  int16 = _d("int16", 2, 'i', "int16")
  int32 = _d("int32", 4, 'i', "int32")
  int64 = _d("int64", 8, 'i', "int64")
  uint8 = _d("uint8", 1, 'u', "uint8")
  uint16 = _d("uint16", 2, 'u', "uint16")
  uint32 = _d("uint32", 4, 'u', "uint32")
  uint64 = _d("uint64", 8, 'u', "uint64")
  float16 = _d("float16", 2, 'f', "float16")
  float32 = _d("float32", 4, 'f', "float32")
  float64 = _d("float64", 8, 'f', "float64")
  # storage-only: bit patterns kept in unsigned integers, computed in float32/int32
  bfloat16 = _d("bfloat16", 2, 'f', "uint16", True, 16)
  float8e4m3fn = _d("float8e4m3fn", 1, 'f', "uint8", True, 8)
  float8e4m3fnuz = _d("float8e4m3fnuz", 1, 'f', "uint8", True, 8)
  float8e5m2 = _d("float8e5m2", 1, 'f', "uint8", True, 8)
  float8e5m2fnuz = _d("float8e5m2fnuz", 1, 'f', "uint8", True, 8)
  int4 = _d("int4", 1, 'i', "uint8", True, 4)
  uint4 = _d("uint4", 1, 'u', "uint8", True, 4)
  float4e2m1 = _d("float4e2m1", 1, 'f', "uint8", True, 4)
  int2 = _d("int2", 1, 'i', "uint8", True, 2)
  uint2 = _d("uint2", 1, 'u', "uint8", True, 2)
  index = _d("index", 4, 'i', "int32")   # loop indices and address arithmetic inside kernels

  @staticmethod
  def all() -> list[DType]: return [v for v in vars(dtypes).values() if isinstance(v, DType)]
  @staticmethod
  def by_name(name: str) -> DType:
    for d in dtypes.all():
      if d.name == name: return d
    raise ValueError(f"unknown dtype {name!r}")
  @staticmethod
  def from_numpy(npdt) -> DType:
    npdt = np.dtype(npdt)
    for d in (dtypes.bool, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16,
              dtypes.uint32, dtypes.uint64, dtypes.float16, dtypes.float32, dtypes.float64):
      if d.numpy == npdt: return d
    raise ValueError(f"numpy dtype {npdt} has no tgc dtype")

  @staticmethod
  def from_py(x) -> DType:
    """Python scalars: bool -> bool, int -> int32, float -> float32 (as tinygrad)."""
    if isinstance(x, (bool, np.bool_)): return dtypes.bool
    if isinstance(x, (int, np.integer)): return dtypes.int32
    return dtypes.float32


STANDARD = (dtypes.bool, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16,
            dtypes.uint32, dtypes.uint64, dtypes.float16, dtypes.float32, dtypes.float64)


def promote(a: DType, b: DType) -> DType:
  """Result type of a binary op, as numpy promotes (storage-only types promote through their compute type)."""
  if a == b: return a
  if a.storage_only or b.storage_only:
    if a.storage_only and b.storage_only: return dtypes.float32 if (a.is_float or b.is_float) else dtypes.int32
    other, lp = (b, a) if a.storage_only else (a, b)
    if lp.is_float: return other if other.is_float and other.itemsize >= 4 else dtypes.float32
    return promote(other, dtypes.int32)
  return dtypes.from_numpy(np.promote_types(a.numpy, b.numpy))


def least_upper_float(d: DType) -> DType:
  """The float type math functions (exp, sqrt, ...) compute in for `d`."""
  return d if d.is_float and not d.storage_only else dtypes.float32
