"""`tgc inspect` of a model: a Tensor-API model traced and lowered without writing anything, or an ONNX file read
with ONNX shape inference and each node marked by whether tgc has a handler for its operator. (An artifact folder
is inspected from its manifest alone: `aot.artifact.open_artifact`.)"""
from __future__ import annotations
from dataclasses import dataclass
import onnx
from onnx import shape_inference
from tgc.codegen.compiled import CompiledModel
from tgc.frontend.onnx.registry import OPS
from tgc.aot import models
from tgc.aot.compile import build_compiled
from tgc.aot.errors import UserError, describe
from tgc.aot.targets import make_target


def inspect_model(model: str, target: str = "c", input_shapes: dict | None = None, consts: dict | None = None
                  ) -> CompiledModel:
  """Trace and lower a Tensor-API model without writing anything (for `tgc inspect`)."""
  spec = models.parse_model_spec(model)
  cm, _ = build_compiled(spec, make_target(target), None, input_shapes, consts)
  return cm


def kernel_traffic(cm: CompiledModel) -> dict:
  """Per kernel of a GPU model, its global-memory traffic per work-group (codegen.traffic.Traffic): loads per
  output, reads per distinct element, vector loads."""
  from tgc.codegen.traffic import kernel_traffic as traffic
  return {name: traffic(ast, cm.target, list(cm.kernels[name].opts), weights)
          for name, (ast, weights) in cm.asts.items()}


@dataclass
class OnnxNodeInfo:
  index: int
  name: str
  op: str
  supported: bool
  inputs: list[tuple[str, list | None]]
  outputs: list[tuple[str, list | None]]


def inspect_onnx(path: str) -> tuple[list[tuple[str, list | None, str]], list[OnnxNodeInfo]]:
  """The graph inputs (name, shape, dtype) and every node with the shapes ONNX shape inference gives and
  whether tgc's importer has a handler for its operator."""
  try: model = onnx.load(path)
  except Exception as error: raise UserError(f"{path}: cannot read the ONNX model ({describe(error)})") from error
  try: model = shape_inference.infer_shapes(model)
  except Exception: pass   # shapes are then shown as unknown
  shapes: dict[str, tuple[list | None, str]] = {}
  for vi in list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output):
    shapes[vi.name] = _value_info_shape(vi)
  for init in model.graph.initializer:
    shapes[init.name] = (list(init.dims), onnx.helper.tensor_dtype_to_np_dtype(init.data_type).name)
  initialized = {i.name for i in model.graph.initializer}
  graph_inputs = [(i.name, *shapes[i.name]) for i in model.graph.input if i.name not in initialized]
  nodes = []
  for k, node in enumerate(model.graph.node):
    key = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}:{node.op_type}"
    nodes.append(OnnxNodeInfo(k, node.name or f"#{k}", key, key in OPS or node.op_type in OPS and not node.domain,
                              [(n, shapes.get(n, (None, ""))[0]) for n in node.input if n],
                              [(n, shapes.get(n, (None, ""))[0]) for n in node.output if n]))
  return graph_inputs, nodes


def _value_info_shape(vi) -> tuple[list | None, str]:
  t = vi.type.tensor_type
  dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name if t.elem_type else ""
  if not t.HasField("shape"): return None, dtype
  return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in t.shape.dim], dtype
