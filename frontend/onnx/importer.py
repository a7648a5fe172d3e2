"""ONNX import: load and validate a model, then map its graph onto lazy Tensor ops.

`load_model` parses the file (external data too), runs the ONNX checker and shape inference, sorts the nodes
(naming a node on a cycle), pins symbolic input dims, lists every operator without a handler in one error, and
does one analysis build on placeholders: that checks each node against its ONNX schema (`node_checks`; handlers
check axes and window attributes against the ranks), folds every constant subgraph (nodes whose inputs are all
compile-time constants run right away on the "numpy" device; Shape and Size read static shapes) and gives the
output shapes and dtypes. Calling the `OnnxGraph` builds the lazy graph on the inputs' device; nothing is computed
there except the folded constants, which become Tensors (weights) once per device.

If is inlined (a constant condition picks a branch; otherwise both branches are built and selected with a
`where`), Loop is unrolled when its trip count and condition fold to constants, Scan is always unrolled.
Operators without a handler whose ONNX schema defines them as a function (e.g. Attention, RMSNormalization) are
built from that function body; `unsupported()` lists what has neither."""
from __future__ import annotations
import contextlib
import heapq
import os
from typing import Any
import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, numpy_helper
from tgc.ir import DType, dtypes, lowp, provenance
from tgc.frontend import buffers
from tgc.frontend.limits import SizeLimits, TensorTooLarge
from tgc.frontend.tensor import Tensor
from tgc.frontend.onnx.registry import OPS, NodeContext, OnnxError, onnx_op
from tgc.frontend.onnx import node_checks

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
CONTROL_FLOW = ("If", "Loop", "Scan")


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


def tensor_proto_to_array(t: TensorProto, base_dir: str | None = None) -> np.ndarray:
  if t.data_type == TensorProto.STRING: raise OnnxError(f"tensor {t.name!r}: string tensors are not supported")
  onnx_dtype(t.data_type, f"tensor {t.name!r}")
  try: return numpy_helper.to_array(t, base_dir or "")
  except Exception as e: raise OnnxError(f"tensor {t.name!r}: cannot read its data: {_one_line(e)}") from e


def attribute_value(a: AttributeProto) -> Any:
  """An attribute as Python: ints, floats, str, lists of them, numpy arrays for tensors, GraphProto for graphs."""
  t = a.type
  if t == AttributeProto.FLOAT: return float(a.f)
  if t == AttributeProto.INT: return int(a.i)
  if t == AttributeProto.STRING: return a.s.decode("utf-8", "replace")
  if t == AttributeProto.TENSOR: return tensor_proto_to_array(a.t)
  if t == AttributeProto.SPARSE_TENSOR: return _sparse(a.sparse_tensor)
  if t == AttributeProto.GRAPH: return a.g
  if t == AttributeProto.FLOATS: return [float(v) for v in a.floats]
  if t == AttributeProto.INTS: return [int(v) for v in a.ints]
  if t == AttributeProto.STRINGS: return [s.decode("utf-8", "replace") for s in a.strings]
  if t == AttributeProto.TENSORS: return [tensor_proto_to_array(x) for x in a.tensors]
  if t == AttributeProto.GRAPHS: return list(a.graphs)
  if t == AttributeProto.TYPE_PROTO: return a.tp
  return None


def _sparse(sp) -> np.ndarray:
  values = tensor_proto_to_array(sp.values)
  idx = numpy_helper.to_array(sp.indices).astype(np.int64)
  dense = np.zeros(tuple(sp.dims), values.dtype)
  if idx.ndim == 1: dense.reshape(-1)[idx] = values
  else: dense[tuple(idx.T)] = values
  return dense


def _one_line(e: BaseException) -> str:
  text = str(e).strip()
  lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
  return lines[0] if lines else type(e).__name__


# ---------------------------------------------------------------- loading and validation
def _parse(src, what: str) -> onnx.ModelProto:
  model = onnx.ModelProto()
  try: model.ParseFromString(src)
  except Exception as e: raise OnnxError(f"cannot parse ONNX model {what}: {_one_line(e)}") from e
  if not model.HasField("graph"): raise OnnxError(f"cannot parse ONNX model {what}: it has no graph")
  return model


def _external_tensors(model: onnx.ModelProto):
  from onnx.external_data_helper import _get_all_tensors, uses_external_data
  return [t for t in _get_all_tensors(model) if uses_external_data(t)]


def _load_external(model: onnx.ModelProto, base_dir: str, what: str) -> None:
  tensors = _external_tensors(model)
  if not tensors: return
  for t in tensors:
    info = {e.key: e.value for e in t.external_data}
    loc = info.get("location", "")
    path = os.path.join(base_dir, loc)
    if not loc or not os.path.isfile(path):
      raise OnnxError(f"external data file {loc!r} of tensor {t.name!r} not found (model {what}, looked in "
                      f"{base_dir or '.'})")
  from onnx.external_data_helper import load_external_data_for_model
  try: load_external_data_for_model(model, base_dir)
  except Exception as e: raise OnnxError(f"cannot load external data of model {what}: {_one_line(e)}") from e


def _read_model(src) -> tuple[onnx.ModelProto, str, str]:
  """(model, a name for messages, the folder external data is relative to)."""
  if isinstance(src, onnx.ModelProto): return src, "<ModelProto>", os.getcwd()
  if isinstance(src, (bytes, bytearray, memoryview)): return _parse(bytes(src), "<bytes>"), "<bytes>", os.getcwd()
  path = os.fspath(src)
  try:
    with open(path, "rb") as f: data = f.read()
  except OSError as e: raise OnnxError(f"cannot read ONNX model {path}: {e.strerror or e}") from e
  return _parse(data, path), path, os.path.dirname(os.path.abspath(path))


def _subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
  out = []
  for a in node.attribute:
    if a.type == AttributeProto.GRAPH: out.append(a.g)
    elif a.type == AttributeProto.GRAPHS: out.extend(a.graphs)
  return out


def _free_names(graph: onnx.GraphProto) -> set[str]:
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
  for g in _subgraphs(node): names |= _free_names(g)
  return names


def node_label(node: onnx.NodeProto, index: int) -> str:
  if node.name: return node.name
  return f"{node.op_type}->{node.output[0]}" if len(node.output) and node.output[0] else f"{node.op_type}#{index}"


def _toposort(graph: onnx.GraphProto, outer: set[str]) -> list[onnx.NodeProto]:
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


def _sorted_model(model: onnx.ModelProto) -> onnx.ModelProto:
  """The model with its nodes in topological order (the same object when they already are)."""
  order = _topo_order(model.graph, set())
  for n in model.graph.node:
    for g in _subgraphs(n): _check_subgraph(g, set())
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
  _toposort(graph, outer | _free_names(graph))
  for n in graph.node:
    for g in _subgraphs(n): _check_subgraph(g, outer)


GROWN_FOLD_MIN = 4096    # elements: a folded value at least this big that takes more bytes than its inputs is not kept


def _nbytes(v: tuple) -> int:
  return lowp.storage_nbytes(v[1], v[0].size)


def _grows_weights(vals: list, outs: list) -> bool:
  """Whether a folded node turns its constant inputs into bigger data (int8 weights dequantized to float32, float16
  weights cast up, a fill): the node then stays a computation in the model, so the weights stay small. Small values
  (shape arithmetic) are always folded."""
  outs = [o for o in outs if o is not None]
  if not outs or max(o[0].size for o in outs) < GROWN_FOLD_MIN: return False
  return sum(_nbytes(o) for o in outs) > sum(_nbytes(v) for v in vals if isinstance(v, tuple))


def _op_key(node: onnx.NodeProto) -> str:
  return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}:{node.op_type}"


def _opsets(model: onnx.ModelProto) -> dict[str, int]:
  out = {}
  for o in model.opset_import: out["" if o.domain == "ai.onnx" else o.domain] = int(o.version)
  return out


def _value_dims(tp: onnx.TypeProto) -> list | None:
  """A declared shape: ints for fixed dims; for dynamic ones the dim_param, None (no name), or the text of a -1 or 0
  dim_value (what exporters such as paddle2onnx write for "dynamic": pinned like a dim_param)."""
  tt = tp.tensor_type
  if not tt.HasField("shape"): return None
  return [(d.dim_value if d.dim_value > 0 else str(d.dim_value)) if d.HasField("dim_value") else (d.dim_param or None)
          for d in tt.shape.dim]


class OnnxGraph:
  """An imported ONNX graph. `inputs`/`outputs`: lists of (name, shape, dtype); `weights`: initializers by name.
  Call it with one Tensor per input to build the lazy outputs (a list of Tensors)."""

  def __init__(self, model: onnx.ModelProto, what: str, base_dir: str, input_shapes: dict | None,
               consts: dict | None, limits: SizeLimits | None = None):
    self.model, self.name = model, what
    self.limits = limits
    self.graph = model.graph
    self.opsets = _opsets(model)
    self.base_dir = base_dir
    self.weights: dict[str, np.ndarray] = {}
    self._weight_dtypes: dict[str, DType] = {}
    for t in self.graph.initializer:
      self.weights[t.name] = tensor_proto_to_array(t, base_dir)
      self._weight_dtypes[t.name] = onnx_dtype(t.data_type, f"initializer {t.name!r}")
    for sp in self.graph.sparse_initializer:
      self.weights[sp.values.name] = _sparse(sp)
      self._weight_dtypes[sp.values.name] = onnx_dtype(sp.values.data_type, f"initializer {sp.values.name!r}")
    self._set_inputs(input_shapes or {}, consts or {})
    self._folded: dict[tuple, list] = {}
    self._declared: dict[str, int] = {}
    _collect_types(self.graph, self._declared)
    self._declared_shapes = _static_shapes(self.graph, self._declared) if limits is not None else {}
    # names whose dtype is exactly the model's: inputs, weights, declared values (storage-only results cast back)
    self.typed_names = set(self._declared) | set(self.weights) | {i.name for i in self.graph.input}
    self._device_consts: dict[tuple[str, str], Tensor] = {}
    bad = self.unsupported()
    if bad: raise OnnxError(_unsupported_message(bad))
    placeholders = [Tensor(buffers.new_buffer("numpy", shape, dt), "numpy") for _, shape, dt in self.inputs]
    outs = self._build("numpy", placeholders)
    self.outputs = [(o.name, tuple(t.shape), t.dtype) for o, t in zip(self.graph.output, outs)]

  # ------------------------------------------------------------ inputs
  def _set_inputs(self, input_shapes: dict, consts: dict) -> None:
    graph_inputs = [i for i in self.graph.input if i.name not in self.weights]
    names = [i.name for i in graph_inputs]
    for kind, given in (("input_shapes", input_shapes), ("consts", consts)):
      for k in given:
        if k not in names:
          raise OnnxError(f"{kind}: unknown input {k!r}; the model's inputs are: {', '.join(names) or '(none)'}")
    self.inputs: list[tuple[str, tuple, DType]] = []
    self.pinned: dict[str, tuple[np.ndarray, DType]] = {}
    for v in graph_inputs:
      tp = v.type
      if tp.WhichOneof("value") == "optional_type" and tp.optional_type.elem_type.HasField("tensor_type"):
        tp = tp.optional_type.elem_type       # an optional tensor that is given is a tensor
      which = tp.WhichOneof("value")
      if which != "tensor_type":
        raise OnnxError(f"input {v.name!r}: {which or 'unknown'} inputs are not supported (tensors only)")
      dt = onnx_dtype(tp.tensor_type.elem_type, f"input {v.name!r}")
      dims = _value_dims(tp)
      if v.name in consts:
        arr = np.asarray(consts[v.name])
        if dims is not None and (len(dims) != arr.ndim or any(isinstance(d, int) and d != s
                                                                for d, s in zip(dims, arr.shape))):
          raise OnnxError(f"consts: input {v.name!r} has shape {tuple(arr.shape)}, the model declares "
                          f"{_dims_str(dims)}")
        self.pinned[v.name] = (host_values(arr, dt) if not dt.storage_only else np.asarray(arr), dt)
        continue
      shape = input_shapes.get(v.name)
      if shape is not None:
        shape = tuple(int(s) for s in shape)
        if dims is not None and (len(dims) != len(shape) or any(isinstance(d, int) and d != s
                                                                 for d, s in zip(dims, shape))):
          raise OnnxError(f"input_shapes: input {v.name!r} given shape {shape}, the model declares "
                          f"{_dims_str(dims)}")
        if any(s < 0 for s in shape): raise OnnxError(f"input_shapes: input {v.name!r} has a negative dim {shape}")
      else:
        if dims is None:
          raise OnnxError(f"input {v.name!r}: its shape is unknown; give it (input_shapes, --input-shape "
                          f"{v.name}=d0,d1,...)")
        for axis, d in enumerate(dims):
          if not isinstance(d, int):
            legacy = " (a dim_value of -1 or 0 is an unknown size)" if d in ("-1", "0") else ""
            raise OnnxError(f"input {v.name!r}: dimension {axis} ({d or '?'}) is unknown{legacy}; give the input's "
                            f"shape (input_shapes, --input-shape {v.name}=d0,d1,...)")
        shape = tuple(dims)
      self._check_size(f"input {v.name!r}", shape, dt)
      self.inputs.append((v.name, shape, dt))

  def _check_size(self, what: str, shape: tuple, dtype: DType) -> None:
    """OnnxError naming `what` when a tensor is over `limits` (checked on its shape, before any allocation)."""
    if self.limits is None: return
    try: self.limits.check(what, tuple(shape), dtype)
    except TensorTooLarge as error: raise OnnxError(str(error)) from None

  def _check_declared(self, node: onnx.NodeProto, label: str) -> None:
    """The node's outputs whose shapes shape inference knows, checked before its handler runs (handlers of
    constant nodes compute their values right away)."""
    if self.limits is None: return
    for name in node.output:
      declared = self._declared_shapes.get(name)
      if declared is not None:
        self._check_size(f"node {label!r} ({node.op_type}) output {name!r}", declared[0], declared[1])

  def _check_outputs(self, node: onnx.NodeProto, label: str, outs: list) -> list:
    for name, t in zip(node.output, outs):
      if t is not None: self._check_size(f"node {label!r} ({node.op_type}) output {name!r}", t.shape, t.dtype)
    return outs

  # ------------------------------------------------------------ support
  def unsupported(self) -> list[tuple[str, int, str]]:
    """(op_type, opset, node name) of every node, subgraphs included, that has no handler and no ONNX function
    definition to build it from."""
    out = []

    def walk(graph):
      for i, n in enumerate(graph.node):
        key = _op_key(n)
        opset = self.opsets.get("" if n.domain == "ai.onnx" else n.domain, 0)
        if key not in OPS and not has_function(n.op_type, n.domain, opset):
          out.append((key, opset, node_label(n, i)))
        for g in _subgraphs(n): walk(g)
    walk(self.graph)
    return out

  # ------------------------------------------------------------ building
  def __call__(self, *args) -> list[Tensor]:
    if len(args) != len(self.inputs):
      names = ", ".join(n for n, _, _ in self.inputs)
      raise OnnxError(f"model {self.name}: expected {len(self.inputs)} inputs ({names}), got {len(args)}")
    from tgc.ir.config import config
    device = next((a.device for a in args if isinstance(a, Tensor)), config.device)
    tensors = []
    for a, (name, shape, dt) in zip(args, self.inputs):
      t = a if isinstance(a, Tensor) else array_to_tensor(np.asarray(a), device, dt, uniform_as_const=False)
      if tuple(t.shape) != tuple(shape): raise OnnxError(f"input {name!r}: shape {t.shape}, expected {shape}")
      if t.dtype != dt: raise OnnxError(f"input {name!r}: dtype {t.dtype.name}, expected {dt.name}")
      if t.device != device: raise OnnxError(f"input {name!r}: on device {t.device}, the other inputs on {device}")
      tensors.append(t)
    return self._build(device, tensors)

  def _build(self, device: str, inputs: list[Tensor]) -> list[Tensor]:
    scope = _Scope(None, device, self, top=True)
    for name, (arr, dt) in self.weights_with_dtypes():
      scope.consts[name] = (arr, dt)
    for name, (arr, dt) in self.pinned.items(): scope.consts[name] = (arr, dt)
    for (name, _, _), t in zip(self.inputs, inputs): scope.tensors[name] = t
    with provenance.call_sites(False):       # the nodes are named by the model, not by Python call sites
      self.run_nodes(self._nodes(), scope)
      return [scope.tensor(o.name) for o in self.graph.output]

  def weights_with_dtypes(self):
    for name, arr in self.weights.items():
      dt = self._weight_dtypes[name]
      yield name, (host_values(arr, dt), dt)

  def _nodes(self) -> list[onnx.NodeProto]:
    return list(self.graph.node)

  def run_nodes(self, nodes, scope: _Scope, named: bool = True) -> None:
    """Build `nodes` in `scope`; with `named`, the UOps of each node record it as their origin (a function body's
    nodes are not named: they belong to the node the function expands)."""
    for i, node in enumerate(nodes):
      label = node_label(node, i)
      with provenance.origin(label, node.op_type) if named else contextlib.nullcontext():
        self._run_one(node, label, scope, i)

  def _run_one(self, node: onnx.NodeProto, label: str, scope: _Scope, i: int) -> None:
    if node.op_type in CONTROL_FLOW and node.domain in ("", "ai.onnx"):
      outs = _CONTROL[node.op_type](self, node, label, scope)
      for name, v in zip(node.output, outs):
        if name: scope.set(name, v)
    elif _op_key(node) in OPS: self._run_node(node, label, scope, i)
    else: self._run_function(node, label, scope)

  def _run_function(self, node: onnx.NodeProto, label: str, scope: _Scope) -> None:
    """An operator without a handler whose ONNX schema defines it as a function: build the function body."""
    domain = "" if node.domain == "ai.onnx" else node.domain
    resolved = onnx.NodeProto()
    resolved.CopyFrom(node)
    del resolved.attribute[:]
    resolved.attribute.extend(_resolved_attrs(node, scope))
    names = list(node.input)
    vals = [scope.lookup(n, label, node.op_type) if n and not scope.is_absent(n) else None for n in names]
    types = []
    for v in vals:
      if v is None: types.append(onnx.TypeProto())
      else:
        dt, shape = (v[1], np.shape(v[0])) if isinstance(v, tuple) else (v.dtype, v.shape)
        types.append(onnx.helper.make_tensor_type_proto(to_onnx_type(dt), list(shape)))
    _check_node(node, label, scope, domain, {a.name: attribute_value(a) for a in resolved.attribute}, names, vals)
    fn = function_body(resolved, scope.opset(domain), scope.opset(""), types)
    if fn is None:
      raise OnnxError(_unsupported_message([(_op_key(node), scope.opset(domain), label)]))
    child = _Scope(scope, scope.device, self, top=False)
    child.opsets = {("" if o.domain == "ai.onnx" else o.domain): int(o.version) for o in fn.opset_import}
    child.ref_attrs = {a.name: a for a in fn.attribute_proto}
    child.ref_attrs.update({a.name: a for a in resolved.attribute})
    for k, formal in enumerate(fn.input):
      if k < len(vals) and vals[k] is not None: child.set(formal, vals[k])
      else: child.absent.add(formal)
    self.run_nodes(list(fn.node), child, named=False)
    for name, formal in zip(node.output, fn.output):
      if name: scope.set(name, child.lookup(formal, label, node.op_type))

  def _run_node(self, node: onnx.NodeProto, label: str, scope: _Scope, index: int) -> None:
    key = _op_key(node)
    fn = OPS[key]
    domain = "" if node.domain == "ai.onnx" else node.domain
    attrs = {a.name: attribute_value(a) for a in _resolved_attrs(node, scope)}
    names = [n if n and not scope.is_absent(n) else "" for n in node.input]
    while names and not names[-1]: names.pop()
    vals = [scope.lookup(n, label, node.op_type) if n else None for n in names]
    _check_node(node, label, scope, domain, attrs, names, vals)
    if scope.attrs_of_call() is None: self._check_declared(node, label)
    fold = all(v is None or isinstance(v, tuple) for v in vals) or node.op_type in ("Shape", "Size")
    consts = [v if isinstance(v, tuple) else None for v in vals]

    def const_value(i: int) -> np.ndarray:
      if i >= len(consts) or consts[i] is None:
        what = f"input {i} ({names[i]!r})" if i < len(names) else f"input {i}"
        raise OnnxError(f"node {label!r} ({node.op_type}): {what} must be a compile-time constant (an initializer, "
                        f"a Constant or a folded subgraph); pin the graph input that sets it as a constant (--const)")
      return consts[i][0]

    def is_const(i: int) -> bool: return i < len(consts) and consts[i] is not None

    if fold:
      # protobuf hands out fresh wrapper objects, so top-level nodes are keyed by position and outputs
      cache_key = (index, tuple(node.output)) if scope.top else None
      if cache_key is not None and cache_key in self._folded:
        outs = self._folded[cache_key]
      else:
        tins = []
        for v in vals:
          if v is None: tins.append(None)
          elif isinstance(v, tuple): tins.append(array_to_tensor(v[0], "numpy", v[1]))
          else: tins.append(Tensor(buffers.new_buffer("numpy", v.shape, v.dtype), "numpy"))
        ctx = NodeContext(node.op_type, label, tins, attrs, scope.opset(domain), len(node.output),
                          const_value, is_const, domain, {"device": "numpy", "graph": self})
        res = self._check_outputs(node, label, self._declared_types(node, _call(fn, ctx, node.op_type, label)))
        Tensor.realize_all(*[t for t in res if t is not None])
        outs = [(t.numpy(), t.dtype) if t is not None else None for t in res]
        if cache_key is not None: self._folded[cache_key] = outs
      if not _grows_weights(vals, outs) or node.op_type in ("Shape", "Size"):
        _store(scope, node, label, outs)
        return
    tins = [None if v is None else scope.as_tensor(n, v) for n, v in zip(names, vals)]
    ctx = NodeContext(node.op_type, label, tins, attrs, scope.opset(domain), len(node.output),
                      const_value, is_const, domain, {"device": scope.device, "graph": self})
    _store(scope, node, label,
           self._check_outputs(node, label, self._declared_types(node, _call(fn, ctx, node.op_type, label))))

  def _declared_types(self, node: onnx.NodeProto, outs: list) -> list:
    """Storage-only results (bfloat16, float8, ...) are computed in float32 by the Tensor layer: store them back in
    the type the model declares for them."""
    out = []
    for name, t in zip(node.output, outs):
      want = ONNX_DTYPES.get(self._declared.get(name, 0))
      if t is not None and want is not None and want.storage_only and t.dtype != want: t = t.cast(want)
      out.append(t)
    return out + list(outs[len(out):])

  def device_const(self, name: str, value: tuple, device: str, cache: bool) -> Tensor:
    key = (device, name)
    if cache and key in self._device_consts: return self._device_consts[key]
    arr, dt = value
    t = array_to_tensor(arr, device, dt)
    if cache: self._device_consts[key] = t
    return t

  def run_subgraph(self, graph: onnx.GraphProto, outer: _Scope, inputs: list) -> list:
    """Build a subgraph in a child scope; inputs and outputs are Tensors or (array, dtype) constants."""
    scope = _Scope(outer, outer.device, self, top=False)
    for t in graph.initializer:
      dt = onnx_dtype(t.data_type, f"initializer {t.name!r}")
      scope.consts[t.name] = (host_values(tensor_proto_to_array(t), dt), dt)
    for v, val in zip(graph.input, inputs): scope.set(v.name, val)
    order = _toposort(graph, outer.all_names() | {v.name for v in graph.input})
    self.run_nodes(order, scope)
    return [scope.lookup(o.name, graph.name or "subgraph", "output") for o in graph.output]


def _check_node(node: onnx.NodeProto, label: str, scope: _Scope, domain: str, attrs: dict, names: list,
                vals: list) -> None:
  """The model's own nodes against their schemas (node_checks); nodes of a function body that ONNX defines are
  built from values the checked call already passed."""
  if scope.attrs_of_call() is not None: return
  opset = scope.opset(domain)
  node_checks.check_flag_attributes(node.op_type, domain, opset, label, attrs)
  types = [None if v is None else v[1] if isinstance(v, tuple) else v.dtype for v in vals]
  loose = frozenset(i for i, n in enumerate(names) if n and n not in scope.graph.typed_names)
  node_checks.check_input_types(node.op_type, domain, opset, label, names, types, loose)


def _resolved_attrs(node: onnx.NodeProto, scope: _Scope) -> list[AttributeProto]:
  """The node's attributes with references to the enclosing function call's attributes filled in."""
  out = []
  call = None
  for a in node.attribute:
    if not a.ref_attr_name:
      out.append(a)
      continue
    call = scope.attrs_of_call() if call is None else call
    if call and a.ref_attr_name in call:
      b = AttributeProto()
      b.CopyFrom(call[a.ref_attr_name])
      b.name = a.name
      out.append(b)
  return out


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
                    f"{_one_line(e)}") from e
  if not data: return None
  fn = onnx.FunctionProto()
  fn.ParseFromString(data)
  return fn


def has_function(op_type: str, domain: str, opset: int) -> bool:
  try: schema = onnx.defs.get_schema(op_type, opset, domain)
  except Exception: return False
  return bool(schema.has_function or schema.has_context_dependent_function)


def _collect_types(graph: onnx.GraphProto, out: dict[str, int]) -> None:
  for v in list(graph.value_info) + list(graph.output) + list(graph.input):
    if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type: out[v.name] = v.type.tensor_type.elem_type
  for n in graph.node:
    for g in _subgraphs(n): _collect_types(g, out)


def _static_shapes(graph: onnx.GraphProto, types: dict[str, int]) -> dict[str, tuple[tuple[int, ...], DType]]:
  """name -> (shape, dtype) of the values shape inference (or the model) declares with every dim a number."""
  out = {}
  for v in list(graph.value_info) + list(graph.output):
    dims = _value_dims(v.type) if v.type.HasField("tensor_type") else None
    dt = ONNX_DTYPES.get(types.get(v.name, 0))
    if dims is not None and dt is not None and all(isinstance(d, int) for d in dims): out[v.name] = (tuple(dims), dt)
  return out


def _dims_str(dims) -> str:
  return "(" + ", ".join(str(d) if d is not None else "?" for d in dims) + ("," if len(dims) == 1 else "") + ")"


def _call(fn, ctx: NodeContext, op: str, label: str) -> list:
  try: res = fn(ctx)
  except OnnxError: raise
  except (ValueError, TypeError, NotImplementedError, IndexError, ZeroDivisionError) as e:
    raise OnnxError(f"node {label!r} ({op}): {_one_line(e)}") from e
  return list(res) if isinstance(res, (list, tuple)) else [res]


def _store(scope: _Scope, node: onnx.NodeProto, label: str, outs: list) -> None:
  for i, name in enumerate(node.output):
    if not name: continue
    if i >= len(outs) or outs[i] is None:
      raise OnnxError(f"node {label!r} ({node.op_type}): output {i} ({name!r}) is not produced")
    scope.set(name, outs[i])


def _unsupported_message(bad: list[tuple[str, int, str]]) -> str:
  groups: dict[tuple[str, int], list[str]] = {}
  for op, opset, name in bad: groups.setdefault((op, opset), []).append(name)
  parts = []
  for (op, opset), names in groups.items():
    shown = ", ".join(repr(n) for n in names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    parts.append(f"{op} (opset {opset}) at node{'s' if len(names) > 1 else ''} {shown}")
  return f"unsupported ONNX operator{'s' if len(groups) > 1 else ''}: " + "; ".join(parts)


class _Scope:
  """Values by name: Tensors, or (array, dtype) compile-time constants; subgraph scopes see their parents'."""

  def __init__(self, parent: _Scope | None, device: str, graph: OnnxGraph, top: bool):
    self.parent, self.device, self.graph, self.top = parent, device, graph, top
    self.tensors: dict[str, Tensor] = {}
    self.consts: dict[str, tuple] = {}
    self.opsets: dict[str, int] | None = None            # a function body's own opset imports
    self.ref_attrs: dict[str, AttributeProto] | None = None   # a function call's attributes
    self.absent: set[str] = set()                          # a function's formal inputs the call leaves out

  def opset(self, domain: str) -> int:
    s = self
    while s is not None:
      if s.opsets is not None and domain in s.opsets: return s.opsets[domain]
      s = s.parent
    return self.graph.opsets.get(domain, 0)

  def attrs_of_call(self) -> dict | None:
    s = self
    while s is not None:
      if s.ref_attrs is not None: return s.ref_attrs
      s = s.parent
    return None

  def is_absent(self, name: str) -> bool:
    s = self
    while s is not None:
      if name in s.consts or name in s.tensors: return False
      if name in s.absent: return True
      s = s.parent
    return False

  def set(self, name: str, v) -> None:
    if isinstance(v, tuple): self.consts[name] = v
    else: self.tensors[name] = v

  def lookup(self, name: str, label: str = "", op: str = ""):
    s = self
    while s is not None:
      if name in s.consts: return s.consts[name]
      if name in s.tensors: return s.tensors[name]
      s = s.parent
    raise OnnxError(f"node {label!r} ({op}): input {name!r} has no value")

  def owner(self, name: str) -> _Scope:
    s = self
    while s is not None:
      if name in s.consts or name in s.tensors: return s
      s = s.parent
    raise KeyError(name)

  def as_tensor(self, name: str, v) -> Tensor:
    if not isinstance(v, tuple): return v
    return self.graph.device_const(name, v, self.device, self.owner(name).top)

  def tensor(self, name: str) -> Tensor:
    return self.as_tensor(name, self.lookup(name, "graph", "output"))

  def all_names(self) -> set[str]:
    out, s = set(), self
    while s is not None:
      out |= set(s.tensors) | set(s.consts)
      s = s.parent
    return out


# ---------------------------------------------------------------- control flow
def _attr(node: onnx.NodeProto, name: str, default=None):
  for a in node.attribute:
    if a.name == name: return attribute_value(a)
  return default


def _if(g: OnnxGraph, node, label: str, scope: _Scope) -> list:
  cond = scope.lookup(node.input[0], label, "If")
  then_g, else_g = _attr(node, "then_branch"), _attr(node, "else_branch")
  if isinstance(cond, tuple):
    flag = bool(np.asarray(cond[0]).reshape(-1)[0]) if np.asarray(cond[0]).size else False
    return g.run_subgraph(then_g if flag else else_g, scope, [])
  a, b = g.run_subgraph(then_g, scope, []), g.run_subgraph(else_g, scope, [])
  c = cond.reshape(()) if cond.numel() == 1 else None
  if c is None: raise OnnxError(f"node {label!r} (If): the condition must have one element, got shape {cond.shape}")
  outs = []
  for i, (x, y) in enumerate(zip(a, b)):
    if isinstance(x, tuple) and isinstance(y, tuple) and x[1] == y[1] and np.array_equal(x[0], y[0]):
      outs.append(x)
      continue
    tx = x if not isinstance(x, tuple) else g.device_const("", x, scope.device, False)
    ty = y if not isinstance(y, tuple) else g.device_const("", y, scope.device, False)
    if tx.shape != ty.shape or tx.dtype != ty.dtype:
      raise OnnxError(f"node {label!r} (If): with a data-dependent condition both branches must give the same "
                      f"shape and dtype; output {i} is {tx.shape} {tx.dtype.name} vs {ty.shape} {ty.dtype.name}")
    outs.append(c.where(tx, ty))
  return outs


def _loop(g: OnnxGraph, node, label: str, scope: _Scope) -> list:
  body = _attr(node, "body")
  names = list(node.input) + [""] * max(0, 2 - len(node.input))
  trip = scope.lookup(names[0], label, "Loop") if names[0] else None
  cond = scope.lookup(names[1], label, "Loop") if names[1] else None
  for what, v in (("trip count M", trip), ("condition", cond)):
    if v is not None and not isinstance(v, tuple):
      raise OnnxError(f"node {label!r} (Loop): the {what} must be a compile-time constant to unroll the loop")
  if trip is None and cond is None:
    raise OnnxError(f"node {label!r} (Loop): a loop without trip count and condition never ends")
  max_trips = int(np.asarray(trip[0]).reshape(-1)[0]) if trip is not None else None
  running = bool(np.asarray(cond[0]).reshape(-1)[0]) if cond is not None else True
  carried = [scope.lookup(n, label, "Loop") for n in names[2:]]
  n_carried = len(carried)
  scans: list[list] = [[] for _ in range(len(body.output) - 1 - n_carried)]
  it = 0
  while running and (max_trips is None or it < max_trips):
    if it > 100000: raise OnnxError(f"node {label!r} (Loop): more than 100000 iterations to unroll")
    outs = g.run_subgraph(body, scope, [(np.array(it, np.int64), dtypes.int64),
                                        (np.array(running), dtypes.bool)] + carried)
    c = outs[0]
    if not isinstance(c, tuple):
      raise OnnxError(f"node {label!r} (Loop): the loop condition depends on data; only loops whose condition folds "
                      f"to a constant can be unrolled")
    running = bool(np.asarray(c[0]).reshape(-1)[0])
    carried = outs[1:1 + n_carried]
    for s, v in zip(scans, outs[1 + n_carried:]): s.append(v)
    it += 1
  results = list(carried)
  for i, s in enumerate(scans):
    if not s:
      raise OnnxError(f"node {label!r} (Loop): scan output {i} of a loop that runs zero times has an unknown shape")
    if all(isinstance(v, tuple) for v in s): results.append((np.stack([v[0] for v in s]), s[0][1]))
    else: results.append(Tensor.stack([scope.as_tensor("", v) if not isinstance(v, tuple) else
                                       g.device_const("", v, scope.device, False) for v in s]))
  return results


def _scan(g: OnnxGraph, node, label: str, scope: _Scope) -> list:
  """Scan unrolled: Scan-9+ as specified; Scan-8 (a leading batch axis, no sequence_lens) once per batch row."""
  body = _attr(node, "body")
  n_scan = _attr(node, "num_scan_inputs")
  names = list(node.input)
  v8 = g.opsets.get("", 0) < 9
  if v8:
    if names and names[0]: raise OnnxError(f"node {label!r} (Scan): sequence_lens is not supported")
    names = names[1:]
  tens = [scope.as_tensor(n, scope.lookup(n, label, "Scan")) for n in names]
  n_state = len(tens) - n_scan
  n_out = len(body.output) - n_state
  if not v8:
    return _scan_core(g, scope, label, body, tens[:n_state], tens[n_state:], _attr(node, "scan_input_axes"),
                      _attr(node, "scan_input_directions"), _attr(node, "scan_output_axes"),
                      _attr(node, "scan_output_directions"))
  rows = []
  for b in range(tens[0].shape[0]):
    row = [t.shrink(tuple((b, b + 1) if i == 0 else None for i in range(t.ndim))).squeeze(0) for t in tens]
    rows.append(_scan_core(g, scope, label, body, row[:n_state], row[n_state:], None, _attr(node, "directions"),
                           None, None))
  return [Tensor.stack([r[i] for r in rows], 0) for i in range(n_state + n_out)]


def _scan_core(g: OnnxGraph, scope: _Scope, label: str, body, state: list, xs: list, in_axes, in_dirs, out_axes,
               out_dirs) -> list:
  n_scan, n_state = len(xs), len(state)
  n_out = len(body.output) - n_state
  in_axes, in_dirs = in_axes or [0] * n_scan, in_dirs or [0] * n_scan
  out_axes, out_dirs = out_axes or [0] * n_out, out_dirs or [0] * n_out
  axes = [_scan_axis(label, "scan_input_axes", a, x.ndim) for a, x in zip(in_axes, xs)]
  steps = {x.shape[a] for x, a in zip(xs, axes)}
  if len(steps) != 1: raise OnnxError(f"node {label!r} (Scan): scan inputs disagree on the sequence length")
  n = steps.pop()
  outs: list[list[Tensor]] = [[] for _ in range(n_out)]
  for t in range(n):
    slices = []
    for x, a, d in zip(xs, axes, in_dirs):
      k = n - 1 - t if d else t
      slices.append(x.shrink(tuple((k, k + 1) if i == a else None for i in range(x.ndim))).squeeze(a))
    res = g.run_subgraph(body, scope, state + slices)
    res = [v if not isinstance(v, tuple) else g.device_const("", v, scope.device, False) for v in res]
    state = res[:n_state]
    for o, v in zip(outs, res[n_state:]): o.append(v)
  results: list = list(state)
  for o, a, d in zip(outs, out_axes, out_dirs):
    if d: o = o[::-1]
    if not o: raise OnnxError(f"node {label!r} (Scan): zero iterations give scan outputs of unknown shape")
    results.append(Tensor.stack(o, _scan_axis(label, "scan_output_axes", a, o[0].ndim + 1)))
  return results


def _scan_axis(label: str, what: str, axis: int, rank: int) -> int:
  if not -rank <= axis < rank:
    raise OnnxError(f"node {label!r} (Scan): attribute {what} has {axis}, out of range for rank {rank} "
                    f"(allowed: {-rank}..{rank - 1})")
  return axis % rank


_CONTROL = {"If": _if, "Loop": _loop, "Scan": _scan}


@onnx_op(*CONTROL_FLOW)
def _control_flow_stub(ctx: NodeContext):
  raise ctx.fail("control flow is built by the importer, not by a handler")


# ---------------------------------------------------------------- entry point
def load_model(src, input_shapes: dict[str, tuple] | None = None,
               consts: dict[str, np.ndarray] | None = None, limits: SizeLimits | None = None) -> OnnxGraph:
  """Load, check and import an ONNX model from a path, bytes or a ModelProto. With `limits`, every graph input
  and node output is checked on its shape before anything is computed (OnnxError naming the input or node)."""
  model, what, base_dir = _read_model(src)
  _load_external(model, base_dir, what)
  if model.functions:
    from onnx import inliner
    model = inliner.inline_local_functions(model)
  model = _sorted_model(model)
  pre = OnnxGraph.__new__(OnnxGraph)
  pre.graph, pre.opsets = model.graph, _opsets(model)
  bad = OnnxGraph.unsupported(pre)
  if bad: raise OnnxError(_unsupported_message(bad))
  try: onnx.checker.check_model(model)
  except Exception as e:
    # models over 2 GB cannot be checked in memory; everything else is a real error
    if not (isinstance(e, ValueError) and "2GB" in str(e).replace(" ", "")):
      raise OnnxError(f"invalid ONNX model {what}: {_one_line(e)}") from e
  try: model = onnx.shape_inference.infer_shapes(model)
  except Exception: pass  # inference is advisory: handlers compute every shape themselves
  return OnnxGraph(model, what, base_dir, input_shapes, consts, limits)
