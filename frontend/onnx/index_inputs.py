"""Integer graph inputs that index a table: how many rows the smallest such table has. Random test inputs of an
ONNX model (`tgc validate`) stay below it, so a token-type id of a BERT model (a table of 2 rows) is 0 or 1 rather
than an index out of range, which ONNX leaves undefined."""
from __future__ import annotations
import onnx

# nodes that pass an integer tensor's values on unchanged: their output indexes what their input does
_PASS_ON = {"Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity", "Expand", "Transpose"}


def index_bounds(model: onnx.ModelProto) -> dict[str, int]:
  """Graph input name -> the rows of the smallest initializer it selects from as a Gather's indices (along the
  Gather's axis), directly or through nodes that pass its values on; inputs that index no initializer are absent."""
  graph = model.graph
  shapes = {t.name: tuple(t.dims) for t in graph.initializer}
  readers: dict[str, list[onnx.NodeProto]] = {}
  for node in graph.node:
    for name in node.input: readers.setdefault(name, []).append(node)
  out: dict[str, int] = {}
  for value in graph.input:
    if value.name in shapes: continue
    seen, stack = {value.name}, [value.name]
    while stack:
      name = stack.pop()
      for node in readers.get(name, ()):
        if node.op_type in _PASS_ON and node.input[0] == name:
          for o in node.output:
            if o not in seen: seen.add(o); stack.append(o)
        elif node.op_type == "Gather" and len(node.input) > 1 and node.input[1] == name and node.input[0] in shapes:
          table = shapes[node.input[0]]
          axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
          if table and -len(table) <= axis < len(table):
            rows = table[axis]
            out[value.name] = min(out.get(value.name, rows), rows)
  return out


