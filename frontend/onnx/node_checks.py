"""Checks of one model node against its ONNX operator schema (onnx.defs), before its handler runs.

- Input element types: each input's type must be one the schema allows for its formal parameter, and inputs
  that share a type variable (`T` of Add's A and B, say) must have the same type. A node result whose type the
  model does not declare may hold a storage-only type (bfloat16, float8, int4, ...) in its compute type (float32,
  int32): for such an input that pair is not reported.
- Flag attributes (keepdims, transA, ceil_mode, ...) must be 0 or 1: runtimes disagree on other values, so they
  are reported rather than guessed.

Operators without a schema (custom domains) are not checked. Errors are one line naming the node, the input or
attribute and the bad value."""
from __future__ import annotations
import functools
from typing import NamedTuple
import onnx
from onnx import TensorProto
from tgc.ir import DType, dtypes
from tgc.frontend.onnx.dtypes import ONNX_DTYPES
from tgc.frontend.onnx.registry import OnnxError

FLAG_ATTRIBUTES = frozenset({
  "align_corners", "allowzero", "antialias", "broadcast", "ceil_mode", "center_point_box", "count_include_pad",
  "detect_negative", "detect_positive", "exclude_outside", "exclusive", "fmod", "input_forget", "interleaved",
  "inverse", "is_causal", "is_test", "keepdims", "largest", "layout", "linear_before_reset", "new_axis",
  "noop_with_empty_axes", "onesided", "periodic", "reverse", "saturate", "select_last_index", "sorted", "spatial",
  "storage_order", "training_mode", "transA", "transB", "upper",
})


class Formal(NamedTuple):
  """One formal input of a schema: its name, its type variable (None for a fixed type), the element types it
  allows (empty: not a tensor input, unchecked), whether it is variadic and whether its values must agree."""
  name: str
  type_var: str | None
  allowed: frozenset
  variadic: bool
  homogeneous: bool


class Signature(NamedTuple):
  version: int
  inputs: tuple
  int_attributes: frozenset


def _tensor_types(type_strs) -> frozenset:
  out = set()
  for t in type_strs:
    if t.startswith("optional(") and t.endswith(")"): t = t[len("optional("):-1]
    if t.startswith("tensor(") and t.endswith(")"): out.add(t[len("tensor("):-1])
  return frozenset(out)


@functools.lru_cache(maxsize=None)
def signature(op_type: str, domain: str, opset: int) -> Signature | None:
  """The schema of `op_type` in effect at `opset` of `domain`, reduced to what the checks need; None if none."""
  try: schema = onnx.defs.get_schema(op_type, opset, domain)
  except Exception: return None
  constraints = {c.type_param_str: _tensor_types(c.allowed_type_strs) for c in schema.type_constraints}
  variadic = onnx.defs.OpSchema.FormalParameterOption.Variadic
  inputs = []
  for f in schema.inputs:
    var = f.type_str if f.type_str in constraints else None
    allowed = constraints[var] if var is not None else _tensor_types([f.type_str])
    inputs.append(Formal(f.name, var, allowed, f.option == variadic, bool(f.is_homogeneous)))
  ints = frozenset(n for n, a in schema.attributes.items() if a.type == onnx.defs.OpSchema.AttrType.INT)
  return Signature(int(schema.since_version), tuple(inputs), ints)


@functools.lru_cache(maxsize=1)
def _type_names() -> dict[DType, str]:
  return {v: TensorProto.DataType.Name(k).lower() for k, v in ONNX_DTYPES.items()}


def type_name(dt: DType) -> str:
  """The ONNX type name of an ir dtype, as schemas spell it inside tensor(...): float, int64, bfloat16, ..."""
  return _type_names().get(dt, dt.name)


def _by_type_name(name: str) -> DType | None:
  return next((dt for dt, n in _type_names().items() if n == name), None)


def _compute_type(dt: DType) -> DType:
  """What the Tensor layer computes a storage-only type in."""
  if not dt.storage_only: return dt
  return dtypes.float32 if dt.is_float else dtypes.int32


def _may_be_held_as(held: DType, declared: DType) -> bool:
  """Whether `held` may stand for `declared` (or the other way round): a storage-only type and its compute type."""
  return (declared.storage_only and _compute_type(declared) == held) or \
    (held.storage_only and _compute_type(held) == declared)


def _formal_of(sig: Signature, i: int) -> Formal | None:
  if i < len(sig.inputs) - 1 or (i < len(sig.inputs) and not sig.inputs[-1].variadic): return sig.inputs[i]
  if sig.inputs and sig.inputs[-1].variadic: return sig.inputs[-1]
  return None


def check_input_types(op_type: str, domain: str, opset: int, label: str, names: list[str],
                      types: list[DType | None], loose: frozenset = frozenset()) -> None:
  """OnnxError when an input's element type is not allowed by the schema, or inputs sharing a type variable
  disagree. `types[i]` is None for an omitted input; `loose` holds the positions of undeclared node results
  (their compute type may stand for a storage-only type)."""
  sig = signature(op_type, domain, opset)
  if sig is None: return
  where = f"node {label!r} ({op_type})"
  first: dict[str, tuple[int, DType]] = {}
  for i, (name, dt) in enumerate(zip(names, types)):
    formal = _formal_of(sig, i)
    if dt is None or formal is None or not formal.allowed: continue
    tname = type_name(dt)
    if tname not in formal.allowed:
      allowed = [_by_type_name(t) for t in formal.allowed]
      if i not in loose or not any(a is not None and _may_be_held_as(dt, a) for a in allowed):
        shown = ", ".join(sorted(formal.allowed))
        raise OnnxError(f"{where}: input {i} ({name!r}, {formal.name}) has element type {tname}, which "
                        f"{op_type}-{sig.version} does not accept (allowed: {shown})")
    if formal.type_var is None or (formal.variadic and not formal.homogeneous): continue
    if formal.type_var not in first:
      first[formal.type_var] = (i, dt)
      continue
    j, other = first[formal.type_var]
    if other != dt and not ((i in loose or j in loose) and _may_be_held_as(dt, other)):
      raise OnnxError(f"{where}: input {i} ({name!r}) has element type {tname} but input {j} ({names[j]!r}) has "
                      f"{type_name(other)}; both are of type {formal.type_var}, which must be the same")


def check_flag_attributes(op_type: str, domain: str, opset: int, label: str, attrs: dict) -> None:
  """OnnxError when a 0/1 flag attribute of the schema (keepdims, transB, ...) has another value."""
  sig = signature(op_type, domain, opset)
  if sig is None: return
  for name, value in attrs.items():
    if name in FLAG_ATTRIBUTES and name in sig.int_attributes and isinstance(value, int) and value not in (0, 1):
      raise OnnxError(f"node {label!r} ({op_type}): attribute {name} is {value}; it must be 0 or 1")
