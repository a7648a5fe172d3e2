"""Operators that ONNX defines as functions (Attention, RMSNormalization, ...): whether an operator's schema has a
function body, the body for one node (context-dependent bodies need the input types), and a body node's attributes
with references to the calling node's attributes filled in."""
from __future__ import annotations
import onnx
from onnx import AttributeProto
from tgc.frontend.onnx.registry import OnnxError, first_line


def has_function(op_type: str, domain: str, opset: int) -> bool:
  """Whether the schema of `op_type` at `opset` of `domain` defines it as a function (context-dependent or not)."""
  try: schema = onnx.defs.get_schema(op_type, opset, domain)
  except Exception: return False
  return bool(schema.has_function or schema.has_context_dependent_function)


def function_body(node: onnx.NodeProto, opset: int, default_opset: int,
                  input_types: list) -> onnx.FunctionProto | None:
  """The function an ONNX schema defines for `node` (context-dependent ones need the input types), or None."""
  try: schema = onnx.defs.get_schema(node.op_type, opset, node.domain)
  except Exception: return None
  data = b""
  try:
    if schema.has_function:
      versions = sorted(schema.function_opset_versions)
      if versions:
        v = max([x for x in versions if x <= default_opset] or [versions[0]])
        data = schema.get_function_with_opset_version(v)
      else: data = schema.function_body.SerializeToString()
    elif schema.has_context_dependent_function:
      versions = sorted(schema.context_dependent_function_opset_versions)
      types = [t.SerializeToString() for t in input_types]
      if versions:
        v = max([x for x in versions if x <= default_opset] or [versions[0]])
        data = schema.get_context_dependent_function_with_opset_version(v, node.SerializeToString(), types)
      else: data = schema.get_context_dependent_function(node.SerializeToString(), types)
  except Exception as e:
    raise OnnxError(f"node {node.name or node.op_type!r} ({node.op_type}): cannot expand its function: "
                    f"{first_line(e)}") from e
  if not data: return None
  fn = onnx.FunctionProto()
  fn.ParseFromString(data)
  return fn


def resolved_attrs(node: onnx.NodeProto, call: dict[str, AttributeProto] | None) -> list[AttributeProto]:
  """The node's attributes with references to the attributes of the function call it is built for (`call`: the
  calling node's attributes by name; None outside a function body) filled in; a reference the call leaves unset is
  dropped (the attribute takes its default)."""
  out = []
  for a in node.attribute:
    if not a.ref_attr_name:
      out.append(a)
      continue
    if call and a.ref_attr_name in call:
      b = AttributeProto()
      b.CopyFrom(call[a.ref_attr_name])
      b.name = a.name
      out.append(b)
  return out
