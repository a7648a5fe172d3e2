"""ONNX element types and the values that go with them: the table from TensorProto element types to ir dtypes
(storage-only ones included: bfloat16, float8, int4/uint4, float4e2m1, int2/uint2), the ir dtype of a numpy array
(ml_dtypes' types too), the host values the Tensor API takes for a dtype, and Tensors made from arrays (weights,
folded constants, inputs)."""
from __future__ import annotations
import numpy as np
import onnx
from onnx import TensorProto
from tgc.ir import DType, dtypes
from tgc.frontend.tensor import Tensor
from tgc.frontend.onnx.registry import OnnxError

ONNX_DTYPES: dict[int, DType] = {
  TensorProto.FLOAT: dtypes.float32, TensorProto.DOUBLE: dtypes.float64, TensorProto.FLOAT16: dtypes.float16,
  TensorProto.INT8: dtypes.int8, TensorProto.INT16: dtypes.int16, TensorProto.INT32: dtypes.int32,
  TensorProto.INT64: dtypes.int64, TensorProto.UINT8: dtypes.uint8, TensorProto.UINT16: dtypes.uint16,
  TensorProto.UINT32: dtypes.uint32, TensorProto.UINT64: dtypes.uint64, TensorProto.BOOL: dtypes.bool,
  TensorProto.BFLOAT16: dtypes.bfloat16, TensorProto.FLOAT8E4M3FN: dtypes.float8e4m3fn,
  TensorProto.FLOAT8E4M3FNUZ: dtypes.float8e4m3fnuz, TensorProto.FLOAT8E5M2: dtypes.float8e5m2,
  TensorProto.FLOAT8E5M2FNUZ: dtypes.float8e5m2fnuz, TensorProto.INT4: dtypes.int4, TensorProto.UINT4: dtypes.uint4,
  TensorProto.FLOAT4E2M1: dtypes.float4e2m1,
}


for _name, _dt in (("INT2", dtypes.int2), ("UINT2", dtypes.uint2)):
  if hasattr(TensorProto, _name): ONNX_DTYPES[getattr(TensorProto, _name)] = _dt


def onnx_dtype(elem_type: int, what: str) -> DType:
  """The ir dtype of an ONNX TensorProto element type; OnnxError naming `what` when there is none."""
  if elem_type in ONNX_DTYPES: return ONNX_DTYPES[elem_type]
  name = TensorProto.DataType.Name(elem_type) if elem_type in TensorProto.DataType.values() else str(elem_type)
  raise OnnxError(f"{what}: element type {name} is not supported")


def to_onnx_type(dtype: DType) -> int:
  for k, v in ONNX_DTYPES.items():
    if v == dtype: return k
  raise OnnxError(f"dtype {dtype.name} has no ONNX element type")


def array_dtype(arr: np.ndarray) -> DType:
  """The ir dtype of a numpy array, ml_dtypes' low-precision types included (bfloat16, float8, int4, ...)."""
  arr = np.asarray(arr)
  if arr.dtype.kind in "biuf" and arr.dtype.type.__module__ == "numpy": return dtypes.from_numpy(arr.dtype)
  try: return ONNX_DTYPES[onnx.helper.np_dtype_to_tensor_dtype(arr.dtype)]
  except (KeyError, ValueError, TypeError) as e:
    raise OnnxError(f"numpy dtype {arr.dtype} is not supported") from e


def host_values(arr: np.ndarray, dtype: DType) -> np.ndarray:
  """What the Tensor API takes for `dtype`: the array itself, or for storage-only types its values as float32
  (float types) or int32 (integer types)."""
  arr = np.asarray(arr)
  if not dtype.storage_only: return arr.astype(dtype.numpy, copy=False)
  return arr.astype(np.float32 if dtype.is_float else np.int32)


def array_to_tensor(arr: np.ndarray, device: str, dtype: DType | None = None, uniform_as_const: bool = True) -> Tensor:
  """A Tensor on `device` holding `arr` (ml_dtypes arrays keep their low-precision type). With `uniform_as_const`
  (weights and folded constants; not model inputs, which must stay buffers) an array of more than one element
  that holds a single value becomes a broadcast constant instead of a buffer."""
  arr = np.asarray(arr)
  dtype = dtype or array_dtype(arr)
  vals = host_values(arr, dtype)
  if uniform_as_const and vals.size > 1 and not dtype.storage_only:
    flat = vals.reshape(-1)
    if (flat == flat[0]).all() and (vals.dtype.kind != 'f' or len(set(np.signbit(flat).tolist())) == 1):
      return Tensor.full(vals.shape, flat[0].item(), dtype, device)
  return Tensor(vals, device=device, dtype=dtype)
