"""Realized data behind BUFFER nodes: a registry from buffer id to (device, storage)."""
from __future__ import annotations
import itertools
import weakref
import numpy as np
from tgc.ir import Ops, UOp, DType, lowp
from tgc.ir.sint import highest_prod, simplified

_ids = itertools.count()
_storage: dict[int, object] = {}
_device: dict[int, str] = {}


def new_buffer(device: str, shape: tuple[int, ...], dtype: DType, storage=None) -> UOp:
  """A BUFFER node; its storage is freed when the node is garbage collected."""
  bid = next(_ids)
  u = UOp(Ops.BUFFER, dtype, (), (bid, tuple(simplified(s) for s in shape)))
  _device[bid] = device
  if storage is not None: _storage[bid] = storage
  weakref.finalize(u, _free, bid)
  return u


def _free(bid: int):
  _storage.pop(bid, None)
  _device.pop(bid, None)


def buffer_id(u: UOp) -> int: return u.arg[0]
def device_of(u: UOp) -> str: return _device[u.arg[0]]
def storage(u: UOp): return _storage[u.arg[0]]
def has_storage(u: UOp) -> bool: return u.arg[0] in _storage
def set_storage(u: UOp, s) -> None: _storage[u.arg[0]] = s


def nbytes(u: UOp) -> int:
  """Bytes of a buffer's elements (at the largest size of a dim known only at run time)."""
  n = highest_prod(u.arg[1])
  if u.dtype.storage_only: return lowp.storage_nbytes(u.dtype, n)
  return n * u.dtype.itemsize


def host_array(arr) -> np.ndarray:
  """A C-contiguous array with the same shape (np.ascontiguousarray would turn a 0-d array into 1-d)."""
  return np.require(np.asarray(arr), requirements="C")
