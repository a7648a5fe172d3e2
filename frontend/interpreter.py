"""The numpy interpreter: evaluates an un-scheduled lazy graph op by op. It shares nothing with the code
generator, which makes it the independent reference for Tensor-API models (and the "numpy" device)."""
from __future__ import annotations
import numpy as np
from tgc.ir import Ops, GroupOp, UOp, lowp
from tgc.ir.exec import exec_alu, exec_cast
from tgc.frontend import buffers


def evaluate(roots: list[UOp], buffer_data) -> list[np.ndarray]:
  """Evaluate `roots`; `buffer_data(buf_uop)` returns the numpy array of a BUFFER node (in its shape)."""
  cache: dict[UOp, np.ndarray] = {}
  for r in roots:
    for n in r.toposort():
      if n not in cache: cache[n] = _eval(n, [cache[s] for s in n.src], buffer_data)
  return [cache[r] for r in roots]


def _eval(n: UOp, src: list[np.ndarray], buffer_data) -> np.ndarray:
  if n.op is Ops.BUFFER and n.dtype.storage_only: return lowp.unpack(buffer_data(n), n.dtype, n.shape)
  if n.op is Ops.BUFFER: return np.asarray(buffer_data(n)).reshape(n.shape)
  if n.op is Ops.CONST and n.dtype.storage_only: return lowp.encode_array(np.array([n.arg]), n.dtype)[0]
  if n.op is Ops.CONST: return np.array(n.arg, dtype=n.dtype.numpy)
  if n.op is Ops.ARANGE: return np.arange(n.arg, dtype=n.dtype.numpy)
  x = src[0] if src else None
  if n.op is Ops.RESHAPE: return x.reshape(n.arg)
  if n.op is Ops.PERMUTE: return x.transpose(n.arg)
  if n.op is Ops.EXPAND: return np.broadcast_to(x, n.arg)
  if n.op is Ops.PAD: return np.pad(x, n.arg)
  if n.op is Ops.SHRINK: return x[tuple(slice(b, e) for b, e in n.arg)]
  if n.op is Ops.FLIP: return np.flip(x, n.arg) if n.arg else x
  if n.op is Ops.CONTIGUOUS: return x
  if n.op is Ops.CAST:
    # storage-only values are carried as uint32 bit patterns: decode/encode them with ir.lowp
    if n.src[0].dtype.storage_only: x = lowp.decode_array(x, n.src[0].dtype)
    if n.dtype.storage_only: return lowp.encode_array(x, n.dtype, n.arg is not False)
    return exec_cast(x, n.dtype)
  if n.op is Ops.BITCAST: return buffers.host_array(x).view(n.dtype.numpy)
  if n.op is Ops.REDUCE_AXIS:
    op, axes = n.arg
    fn = {Ops.ADD: np.add, Ops.MAX: np.maximum, Ops.MUL: np.multiply}[op]
    if x.size == 0 and op is Ops.MAX: return np.full(n.shape, _min_value(n.dtype.numpy), n.dtype.numpy)
    with np.errstate(all="ignore"):
      return fn.reduce(x, axis=tuple(axes), keepdims=True).astype(n.dtype.numpy, copy=False)
  if n.op is Ops.WHERE and n.dtype.storage_only: return np.where(src[0], src[1], src[2]).astype(np.uint32)
  if n.op in GroupOp.ALU: return exec_alu(n.op, n.dtype, *src)
  raise NotImplementedError(f"interpreter: {n.op}")


def _min_value(npdt):
  if npdt.kind == 'f': return -np.inf
  if npdt.kind == 'b': return False
  return np.iinfo(npdt).min
