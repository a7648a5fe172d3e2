"""Reading an ONNX model before anything is built: the file (or bytes, or a ModelProto) parsed, external data
loaded, local functions inlined, nodes sorted topologically (naming a node on a cycle, an output produced twice or
an input nobody produces), every operator without a handler or function body listed in one error, the ONNX checker
and shape inference run (`prepare`). Also what reading a graph needs everywhere: tensors and attributes as numpy
values, the names a node or subgraph reads, node labels for messages, opset versions, and the shapes and element
types the model declares."""
from __future__ import annotations
import heapq
import os
from typing import Any
import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, numpy_helper
from onnx.external_data_helper import _get_all_tensors, load_external_data_for_model, uses_external_data
from onnx import inliner
from tgc.ir import DType
from tgc.frontend.onnx.dtypes import ONNX_DTYPES, onnx_dtype
from tgc.frontend.onnx.functions import has_function
from tgc.frontend.onnx.registry import OPS, OnnxError, first_line

def tensor_proto_to_array(t: TensorProto, base_dir: str | None = None) -> np.ndarray:
  if t.data_type == TensorProto.STRING: raise OnnxError(f"tensor {t.name!r}: string tensors are not supported")
  onnx_dtype(t.data_type, f"tensor {t.name!r}")
  try: return numpy_helper.to_array(t, base_dir or "")
  except Exception as e: raise OnnxError(f"tensor {t.name!r}: cannot read its data: {first_line(e)}") from e


def attribute_value(a: AttributeProto) -> Any:
  """An attribute as Python: ints, floats, str, lists of them, numpy arrays for tensors, GraphProto for graphs."""
  t = a.type
  if t == AttributeProto.FLOAT: return float(a.f)
  if t == AttributeProto.INT: return int(a.i)
  if t == AttributeProto.STRING: return a.s.decode("utf-8", "replace")
  if t == AttributeProto.TENSOR: return tensor_proto_to_array(a.t)
  if t == AttributeProto.SPARSE_TENSOR: return sparse_to_dense(a.sparse_tensor)
  if t == AttributeProto.GRAPH: return a.g
  if t == AttributeProto.FLOATS: return [float(v) for v in a.floats]
  if t == AttributeProto.INTS: return [int(v) for v in a.ints]
  if t == AttributeProto.STRINGS: return [s.decode("utf-8", "replace") for s in a.strings]
  if t == AttributeProto.TENSORS: return [tensor_proto_to_array(x) for x in a.tensors]
  if t == AttributeProto.GRAPHS: return list(a.graphs)
  if t == AttributeProto.TYPE_PROTO: return a.tp
  return None


def sparse_to_dense(sp) -> np.ndarray:
  values = tensor_proto_to_array(sp.values)
  idx = numpy_helper.to_array(sp.indices).astype(np.int64)
  dense = np.zeros(tuple(sp.dims), values.dtype)
  if idx.ndim == 1: dense.reshape(-1)[idx] = values
  else: dense[tuple(idx.T)] = values
  return dense


# ---------------------------------------------------------------- reading the file
def prepare(src) -> tuple[onnx.ModelProto, str, str]:
  """The model of a path, bytes or a ModelProto, ready to import: external data loaded, local functions inlined,
  nodes in topological order, every operator buildable (else one OnnxError listing all that are not), checked by
  the ONNX checker, with inferred shapes where inference succeeds. Returns (model, a name for messages, the folder
  external data is relative to)."""
  model, what, base_dir = read_model(src)
  load_external_data(model, base_dir, what)
  if model.functions: model = inliner.inline_local_functions(model)
  model = sorted_model(model)
  bad = unsupported_nodes(model.graph, opset_versions(model))
  if bad: raise OnnxError(unsupported_message(bad))
  if model.ByteSize() <= onnx.checker.MAXIMUM_PROTOBUF:   # the checker cannot take larger models in memory
    try: onnx.checker.check_model(model)
    except Exception as e: raise OnnxError(f"invalid ONNX model {what}: {first_line(e)}", what) from e
  try: model = onnx.shape_inference.infer_shapes(model)
  except Exception: pass  # inference is advisory: handlers compute every shape themselves
  return model, what, base_dir


def parse_model(src: bytes, what: str) -> onnx.ModelProto:
  model = onnx.ModelProto()
  try: model.ParseFromString(src)
  except Exception as e: raise OnnxError(f"cannot parse ONNX model {what}: {first_line(e)}", what) from e
  if not model.HasField("graph"): raise OnnxError(f"cannot parse ONNX model {what}: it has no graph", what)
  return model


def _external_tensors(model: onnx.ModelProto):
  return [t for t in _get_all_tensors(model) if uses_external_data(t)]


def load_external_data(model: onnx.ModelProto, base_dir: str, what: str) -> None:
  """Every tensor stored outside the model file, read from its file (relative to `base_dir`)."""
  tensors = _external_tensors(model)
  if not tensors: return
  for t in tensors:
    info = {e.key: e.value for e in t.external_data}
    loc = info.get("location", "")
    path = os.path.join(base_dir, loc)
    if not loc or not os.path.isfile(path):
      raise OnnxError(f"external data file {loc!r} of tensor {t.name!r} not found (model {what}, looked in "
                      f"{base_dir or '.'})", what)
  try: load_external_data_for_model(model, base_dir)
  except Exception as e: raise OnnxError(f"cannot load external data of model {what}: {first_line(e)}", what) from e


def read_model(src) -> tuple[onnx.ModelProto, str, str]:
  """(model, a name for messages, the folder external data is relative to)."""
  if isinstance(src, onnx.ModelProto): return src, "<ModelProto>", os.getcwd()
  if isinstance(src, (bytes, bytearray, memoryview)): return parse_model(bytes(src), "<bytes>"), "<bytes>", os.getcwd()
  path = os.fspath(src)
  try:
    with open(path, "rb") as f: data = f.read()
  except OSError as e: raise OnnxError(f"cannot read ONNX model {path}: {e.strerror or e}", path) from e
  return parse_model(data, path), path, os.path.dirname(os.path.abspath(path))


# ---------------------------------------------------------------- node order
def subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
  out = []
  for a in node.attribute:
    if a.type == AttributeProto.GRAPH: out.append(a.g)
    elif a.type == AttributeProto.GRAPHS: out.extend(a.graphs)
  return out


def free_names(graph: onnx.GraphProto) -> set[str]:
  """Names a (sub)graph reads from its enclosing scopes."""
  defined = {i.name for i in graph.input} | {t.name for t in graph.initializer} | \
            {t.values.name for t in graph.sparse_initializer}
  for n in graph.node: defined.update(o for o in n.output if o)
  used: set[str] = set()
  for n in graph.node:
    used.update(node_reads(n))
  used.update(o.name for o in graph.output)
  return used - defined


def node_reads(node: onnx.NodeProto) -> set[str]:
  """Every name a node reads: its inputs and what its subgraphs read from outside."""
  names = {i for i in node.input if i}
  for g in subgraphs(node): names |= free_names(g)
  return names


def node_label(node: onnx.NodeProto, index: int) -> str:
  if node.name: return node.name
  return f"{node.op_type}->{node.output[0]}" if len(node.output) and node.output[0] else f"{node.op_type}#{index}"


def toposort(graph: onnx.GraphProto, outer: set[str]) -> list[onnx.NodeProto]:
  nodes = list(graph.node)
  return [nodes[i] for i in _topo_order(graph, outer)]


def _topo_order(graph: onnx.GraphProto, outer: set[str]) -> list[int]:
  """Node positions in a topological order (stable: ties keep file order). Raises OnnxError naming a node on a
  cycle, an output produced twice or an input nobody produces."""
  nodes = list(graph.node)
  for i, n in enumerate(nodes):
    for name in list(n.input) + list(n.output):
      if not isinstance(name, str):   # protobuf hands back bytes for names that are not valid UTF-8
        raise OnnxError(f"node {i} ({n.op_type}): tensor name {name!r} is not valid UTF-8")
  producer: dict[str, int] = {}
  for i, n in enumerate(nodes):
    for o in n.output:
      if not o: continue
      if o in producer:
        raise OnnxError(f"node {node_label(n, i)!r} ({n.op_type}): output {o!r} is also produced by node "
                        f"{node_label(nodes[producer[o]], producer[o])!r}")
      producer[o] = i
  available = outer | {i.name for i in graph.input} | {t.name for t in graph.initializer} | \
    {t.values.name for t in graph.sparse_initializer}
  deps: list[set[int]] = []
  for i, n in enumerate(nodes):
    d = set()
    for name in sorted(node_reads(n)):
      if name in producer: d.add(producer[name])
      elif name not in available:
        raise OnnxError(f"node {node_label(n, i)!r} ({n.op_type}): input {name!r} is not produced by any node, "
                        f"graph input or initializer")
    deps.append(d)
  users: list[list[int]] = [[] for _ in nodes]
  for i, d in enumerate(deps):
    for j in d: users[j].append(i)
  missing = [len(d) for d in deps]
  ready = [i for i, m in enumerate(missing) if m == 0]
  heapq.heapify(ready)
  order = []
  while ready:
    i = heapq.heappop(ready)
    order.append(i)
    for u in users[i]:
      missing[u] -= 1
      if missing[u] == 0: heapq.heappush(ready, u)
  if len(order) != len(nodes):
    # every unfinished node waits for an unfinished one: walk back until a node repeats, it is on a cycle
    seen, cur = set(), next(i for i, m in enumerate(missing) if m > 0)
    while cur not in seen:
      seen.add(cur)
      cur = min(j for j in deps[cur] if missing[j] > 0)
    n = nodes[cur]
    raise OnnxError(f"graph {graph.name!r} has a cycle through node {node_label(n, cur)!r} ({n.op_type})")
  return order


def sorted_model(model: onnx.ModelProto) -> onnx.ModelProto:
  """The model with its nodes in topological order (the same object when they already are)."""
  order = _topo_order(model.graph, set())
  for n in model.graph.node:
    for g in subgraphs(n): _check_subgraph(g, set())
  if order == list(range(len(order))): return model
  nodes = [onnx.NodeProto() for _ in order]
  for dst, i in zip(nodes, order): dst.CopyFrom(model.graph.node[i])
  out = onnx.ModelProto()
  out.CopyFrom(model)
  del out.graph.node[:]
  out.graph.node.extend(nodes)
  return out


def _check_subgraph(graph: onnx.GraphProto, outer: set[str]) -> None:
  # outer-scope names were checked by the enclosing graph; only cycles inside matter here
  toposort(graph, outer | free_names(graph))
  for n in graph.node:
    for g in subgraphs(n): _check_subgraph(g, outer)


# ---------------------------------------------------------------- what the model declares
def op_key(node: onnx.NodeProto) -> str:
  return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}:{node.op_type}"


def opset_versions(model: onnx.ModelProto) -> dict[str, int]:
  out = {}
  for o in model.opset_import: out["" if o.domain == "ai.onnx" else o.domain] = int(o.version)
  return out


def value_dims(tp: onnx.TypeProto) -> list | None:
  """A declared shape: ints for fixed dims; for dynamic ones the dim_param, None (no name), or the text of a -1 or 0
  dim_value (what exporters such as paddle2onnx write for "dynamic": pinned like a dim_param)."""
  tt = tp.tensor_type
  if not tt.HasField("shape"): return None
  return [(d.dim_value if d.dim_value > 0 else str(d.dim_value)) if d.HasField("dim_value") else (d.dim_param or None)
          for d in tt.shape.dim]


def collect_types(graph: onnx.GraphProto, out: dict[str, int]) -> None:
  for v in list(graph.value_info) + list(graph.output) + list(graph.input):
    if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type: out[v.name] = v.type.tensor_type.elem_type
  for n in graph.node:
    for g in subgraphs(n): collect_types(g, out)


def static_shapes(graph: onnx.GraphProto, types: dict[str, int]) -> dict[str, tuple[tuple[int, ...], DType]]:
  """name -> (shape, dtype) of the values shape inference (or the model) declares with every dim a number."""
  out = {}
  for v in list(graph.value_info) + list(graph.output):
    dims = value_dims(v.type) if v.type.HasField("tensor_type") else None
    dt = ONNX_DTYPES.get(types.get(v.name, 0))
    if dims is not None and dt is not None and all(isinstance(d, int) for d in dims): out[v.name] = (tuple(dims), dt)
  return out


# ---------------------------------------------------------------- operators tgc cannot build
def unsupported_nodes(graph: onnx.GraphProto, opsets: dict[str, int]) -> list[tuple[str, int, str]]:
  """(operator, opset, node label) of every node, subgraphs included, that has no handler and no ONNX function
  definition to build it from."""
  out = []

  def walk(g: onnx.GraphProto) -> None:
    for i, n in enumerate(g.node):
      key = op_key(n)
      opset = opsets.get("" if n.domain == "ai.onnx" else n.domain, 0)
      if key not in OPS and not has_function(n.op_type, n.domain, opset): out.append((key, opset, node_label(n, i)))
      for sub in subgraphs(n): walk(sub)
  walk(graph)
  return out


def unsupported_message(bad: list[tuple[str, int, str]]) -> str:
  groups: dict[tuple[str, int], list[str]] = {}
  for op, opset, name in bad: groups.setdefault((op, opset), []).append(name)
  parts = []
  for (op, opset), names in groups.items():
    shown = ", ".join(repr(n) for n in names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    parts.append(f"{op} (opset {opset}) at node{'s' if len(names) > 1 else ''} {shown}")
  return f"unsupported ONNX operator{'s' if len(groups) > 1 else ''}: " + "; ".join(parts)
