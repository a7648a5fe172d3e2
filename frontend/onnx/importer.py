"""ONNX import: an `OnnxGraph` maps a loaded model (`loading.prepare`) onto lazy Tensor ops.

Building the graph pins symbolic input dims (`input_shapes`; a `-1` or `0` dim_value counts as symbolic) or bakes
inputs in as constants (`consts`), checks every tensor's size against `limits` on its shape, checks each node against
its ONNX schema (`node_checks`; handlers check axes and window attributes against the ranks) and maps it through the
handler table (`registry.OPS`), control flow through `control_flow`, operators that ONNX defines as functions
through their function body (`functions`). Constant subgraphs fold: a node whose inputs are all compile-time
constants runs right away on the "numpy" device (Shape and Size read static shapes), unless that would turn small
weights into much bigger data. The constructor does one analysis build on placeholders, which gives the output
shapes and dtypes; calling the `OnnxGraph` builds the lazy graph on the inputs' device, where nothing is computed
except the folded constants, which become Tensors (weights) once per device."""
from __future__ import annotations
import contextlib
import numpy as np
import onnx
from tgc.ir import DType, Ops, UOp, dtypes, lowp, provenance
from tgc.ir.config import config
from tgc.ir.sint import is_static
from tgc.frontend import buffers
from tgc.frontend.limits import SizeLimits, TensorTooLarge
from tgc.frontend.tensor import Tensor
from tgc.frontend.onnx import control_flow, model_state, node_checks, run_time_sizes, shape_values
from tgc.frontend.onnx.dtypes import ONNX_DTYPES, array_to_tensor, host_values, onnx_dtype, to_onnx_type
from tgc.frontend.onnx.functions import function_body, resolved_attrs
from tgc.frontend.onnx.loading import (attribute_value, collect_types, node_label, op_key, opset_versions, prepare,
                                       sparse_to_dense, static_shapes, tensor_proto_to_array, toposort,
                                       unsupported_message, unsupported_nodes, value_dims)
from tgc.frontend.onnx.registry import OPS, NodeContext, OnnxError, first_line
from tgc.frontend.onnx.scope import Scope

GROWN_FOLD_MIN = 4096    # elements: a folded value at least this big that takes more bytes than its inputs is not kept


def _nbytes(v: tuple) -> int:
  return lowp.storage_nbytes(v[1], v[0].size)


def _grows_weights(op: str, vals: list, outs: list) -> bool:
  """Whether a folded node turns its constant inputs into bigger data (int8 weights dequantized to float32, float16
  weights cast up, a fill): the node then stays a computation in the model, so the weights stay small. Small values
  (shape arithmetic) are always folded, except 8-bit weight matrices and kernels dequantized: the convolution or
  matrix product they feed reads their 8-bit values, however few (dot-product instructions)."""
  outs = [o for o in outs if o is not None]
  if op == "DequantizeLinear" and isinstance(vals[0], tuple) and vals[0][1] in (dtypes.int8, dtypes.uint8) \
     and vals[0][0].ndim >= 2:
    return True
  if not outs or max(o[0].size for o in outs) < GROWN_FOLD_MIN: return False
  return sum(_nbytes(o) for o in outs) > sum(_nbytes(v) for v in vals if isinstance(v, tuple))


class OnnxGraph:
  """An imported ONNX graph. `inputs`/`outputs`: lists of (name, shape, dtype); `weights`: initializers by name.
  Call it with one Tensor per input to build the lazy outputs (a list of Tensors)."""

  def __init__(self, model: onnx.ModelProto, what: str, base_dir: str, input_shapes: dict | None,
               consts: dict | None, limits: SizeLimits | None = None, dims: dict | None = None,
               states: dict | None = None, max_context: int | None = None, build: bool = True):
    self.model, self.name = model, what
    self.limits = limits
    self.graph = model.graph
    self.opsets = opset_versions(model)
    self.base_dir = base_dir
    self.weights: dict[str, np.ndarray] = {}
    self._weight_dtypes: dict[str, DType] = {}
    for t in self.graph.initializer:
      self.weights[t.name] = tensor_proto_to_array(t, base_dir)
      self._weight_dtypes[t.name] = onnx_dtype(t.data_type, f"initializer {t.name!r}")
    for sp in self.graph.sparse_initializer:
      self.weights[sp.values.name] = sparse_to_dense(sp)
      self._weight_dtypes[sp.values.name] = onnx_dtype(sp.values.data_type, f"initializer {sp.values.name!r}")
    self.sizes = run_time_sizes.SizeNames(dims or {})
    self.states: list[tuple[str, str, int]] = []    # (input, output, axis of its length) of each state
    self._hold_states(states or {}, max_context)
    self._set_inputs(input_shapes or {}, consts or {})
    self.sizes.check_all_used()
    self._folded: dict[tuple, list] = {}
    self.dequantized: dict = {}     # DequantizeLinear outputs: UOp -> quantized_compute.Dequantized
    self._declared: dict[str, int] = {}
    collect_types(self.graph, self._declared)
    self._declared_shapes = static_shapes(self.graph, self._declared) if limits is not None else {}
    # names whose dtype is exactly the model's: inputs, weights, declared values (storage-only results cast back)
    self.typed_names = set(self._declared) | set(self.weights) | {i.name for i in self.graph.input}
    self._device_consts: dict[tuple[str, str], Tensor] = {}
    # BUFFER -> name of each initializer made a tensor while building (`device_const`); while it builds, the
    # initializers' arrays by id (an Identity or a loop's carried value of an initializer is that very array)
    self.weight_names: dict[UOp, str] = {}
    self._initializer_arrays: dict[int, tuple[np.ndarray, str]] = {}
    bad = self.unsupported()
    if bad: raise OnnxError(unsupported_message(bad))
    # the graph's outputs, then a row count of each scan output whose rows are counted at run time (a Loop whose
    # condition is computed on the device: `output_rows`, output -> its count); both filled in place by each build
    self.output_names = [o.name for o in self.graph.output]
    self.output_rows: dict[str, str] = {}
    self._rows: dict[UOp, Tensor] = {}
    self._outputs: list[tuple[str, tuple, DType]] | None = None
    if build: _ = self.outputs

  @property
  def outputs(self) -> list[tuple[str, tuple, DType]]:
    """(name, shape, dtype) of each output: the graph built on placeholder inputs the first time it is asked."""
    if self._outputs is None:
      placeholders = [Tensor(buffers.new_buffer("numpy", shape, dt), "numpy") for _, shape, dt in self.inputs]
      outs = self._build("numpy", placeholders)
      self._outputs = [(name, tuple(t.shape), t.dtype) for name, t in zip(self.output_names, outs)]
    return self._outputs

  # ------------------------------------------------------------ inputs
  def _hold_states(self, given: dict, max_context: int | None) -> None:
    """The states the artifact keeps (with a capacity `max_context`): their lengths become sizes it tracks."""
    if max_context is None:
      if given: raise OnnxError("--state needs --max-context (the number of entries each state can hold)")
      return
    if not isinstance(max_context, int) or max_context < 1:
      raise OnnxError(f"--max-context must be a positive number of entries, not {max_context!r}")
    inputs = {i.name: i for i in self.graph.input if i.name not in self.weights}
    for name, out in model_state.state_pairs(list(inputs), [o.name for o in self.graph.output], given):
      axis, length = model_state.length_dim(name, value_dims(inputs[name].type))
      self.sizes.hold(length, max_context - 1)
      self.states.append((name, out, axis))

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
      dims = value_dims(tp)
      if v.name in consts:
        arr = np.asarray(consts[v.name])
        if dims is not None and (len(dims) != arr.ndim or any(isinstance(d, int) and d != s
                                                                for d, s in zip(dims, arr.shape))):
          raise OnnxError(f"consts: input {v.name!r} has shape {tuple(arr.shape)}, the model declares "
                          f"{_dims_text(dims)}")
        self.pinned[v.name] = (host_values(arr, dt) if not dt.storage_only else np.asarray(arr), dt)
        continue
      shape = input_shapes.get(v.name)
      if shape is not None:
        shape = tuple(self.sizes.given_dim(s, v.name) for s in shape)
        if dims is not None and (len(dims) != len(shape) or any(isinstance(d, int) and d != s
                                                                 for d, s in zip(dims, shape))):
          raise OnnxError(f"input_shapes: input {v.name!r} given shape {_dims_text(shape)}, the model declares "
                          f"{_dims_text(dims)}")
        if any(isinstance(s, int) and s < 0 for s in shape):
          raise OnnxError(f"input_shapes: input {v.name!r} has a negative dim {shape}")
      else:
        if dims is None:
          raise OnnxError(f"input {v.name!r}: its shape is unknown; give it (input_shapes, --input-shape "
                          f"{v.name}=d0,d1,...)")
        shape = tuple(self.sizes.declared_dim(d, v.name, axis) for axis, d in enumerate(dims))
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
    return unsupported_nodes(self.graph, self.opsets)

  # ------------------------------------------------------------ building
  def __call__(self, *args) -> list[Tensor]:
    if len(args) != len(self.inputs):
      names = ", ".join(n for n, _, _ in self.inputs)
      raise OnnxError(f"model {self.name}: expected {len(self.inputs)} inputs ({names}), got {len(args)}", self.name)
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
    scope = Scope(None, device, self, top=True)
    for name, (arr, dt) in self.weights_with_dtypes():
      scope.consts[name] = (arr, dt)
      self._initializer_arrays[id(arr)] = (arr, name)
    for name, (arr, dt) in self.pinned.items(): scope.consts[name] = (arr, dt)
    for (name, _, _), t in zip(self.inputs, inputs): scope.tensors[name] = t
    self._rows = {}
    try:
      with provenance.call_sites(False):       # the nodes are named by the model, not by Python call sites
        self.run_nodes(self._nodes(), scope)
        outs = [scope.tensor(o.name) for o in self.graph.output]
    finally: self._initializer_arrays = {}
    return outs + self._row_outputs(outs)

  def _row_outputs(self, outs: list[Tensor]) -> list[Tensor]:
    """The row counts of the outputs whose rows are counted at run time, as more outputs named `<output>_rows`
    (made unique); `output_names` and `output_rows` say which is which."""
    names = [o.name for o in self.graph.output]
    taken = set(names) | {n for n, _, _ in self.inputs}
    self.output_rows.clear()
    extra, counts = [], []
    for name, t in zip(names, outs):
      rows = self.rows_of(t)
      if rows is None: continue
      count, k = f"{name}_rows", 1
      while count in taken: count, k = f"{name}_rows{k}", k + 1
      taken.add(count)
      self.output_rows[name] = count
      extra.append(count)
      counts.append(rows)
    self.output_names[:] = names + extra
    return counts

  def note_rows(self, t: Tensor, rows: Tensor) -> None:
    """`t` is a scan output padded to its loop's trip count; `rows` (int64 scalar) how many of its rows ran."""
    self._rows[t.uop] = rows

  def rows_of(self, t) -> Tensor | None:
    return self._rows.get(t.uop) if isinstance(t, Tensor) else None

  def weights_with_dtypes(self):
    for name, arr in self.weights.items():
      dt = self._weight_dtypes[name]
      yield name, (host_values(arr, dt), dt)

  def _nodes(self) -> list[onnx.NodeProto]:
    return list(self.graph.node)

  def run_nodes(self, nodes, scope: Scope, named: bool = True) -> None:
    """Build `nodes` in `scope`; with `named`, the UOps of each node record it as their origin (a function body's
    nodes are not named: they belong to the node the function expands)."""
    for i, node in enumerate(nodes):
      label = node_label(node, i)
      with provenance.origin(label, node.op_type) if named else contextlib.nullcontext():
        self._run_one(node, label, scope, i)

  def _run_one(self, node: onnx.NodeProto, label: str, scope: Scope, i: int) -> None:
    if control_flow.is_control_flow(node):
      outs = control_flow.build(self, node, label, scope)
      for name, v in zip(node.output, outs):
        if name: scope.set(name, v)
    elif op_key(node) in OPS: self._run_node(node, label, scope, i)
    else: self._run_function(node, label, scope)

  def _run_function(self, node: onnx.NodeProto, label: str, scope: Scope) -> None:
    """An operator without a handler whose ONNX schema defines it as a function: build the function body."""
    domain = "" if node.domain == "ai.onnx" else node.domain
    resolved = onnx.NodeProto()
    resolved.CopyFrom(node)
    del resolved.attribute[:]
    resolved.attribute.extend(resolved_attrs(node, scope.attrs_of_call()))
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
      raise OnnxError(unsupported_message([(op_key(node), scope.opset(domain), label)]))
    child = Scope(scope, scope.device, self, top=False)
    child.opsets = {("" if o.domain == "ai.onnx" else o.domain): int(o.version) for o in fn.opset_import}
    child.ref_attrs = {a.name: a for a in fn.attribute_proto}
    child.ref_attrs.update({a.name: a for a in resolved.attribute})
    for k, formal in enumerate(fn.input):
      if k < len(vals) and vals[k] is not None: child.set(formal, vals[k])
      else: child.absent.add(formal)
    self.run_nodes(list(fn.node), child, named=False)
    for name, formal in zip(node.output, fn.output):
      if name: scope.set(name, child.lookup(formal, label, node.op_type))

  def _run_node(self, node: onnx.NodeProto, label: str, scope: Scope, index: int) -> None:
    key = op_key(node)
    fn = OPS[key]
    domain = "" if node.domain == "ai.onnx" else node.domain
    attrs = {a.name: attribute_value(a) for a in resolved_attrs(node, scope.attrs_of_call())}
    names = [n if n and not scope.is_absent(n) else "" for n in node.input]
    while names and not names[-1]: names.pop()
    vals = [scope.lookup(n, label, node.op_type) if n else None for n in names]
    _check_node(node, label, scope, domain, attrs, names, vals)
    if scope.attrs_of_call() is None: self._check_declared(node, label)
    holds_sizes = any(shape_values.is_shape_value(v) for v in vals)
    sized = self._fold_sizes(node, attrs, vals, scope.opset(domain), holds_sizes)
    if sized is not None:
      _store(scope, node, label, sized)
      return
    # constants holding sizes known only at run time that did not fold are computed at run time
    fold = not holds_sizes and (all(v is None or isinstance(v, tuple) for v in vals) or
                                node.op_type in ("Shape", "Size"))
    run_time = holds_sizes or any(isinstance(v, Tensor) and not is_static(v.shape) for v in vals)
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
        res = _call(fn, ctx, node.op_type, label, run_time)
        res = self._check_outputs(node, label, self._declared_types(node, res))
        Tensor.realize_all(*[t for t in res if t is not None])
        outs = [(t.numpy(), t.dtype) if t is not None else None for t in res]
        if cache_key is not None: self._folded[cache_key] = outs
      self._pass_names(vals, outs)
      if not _grows_weights(node.op_type, vals, outs) or node.op_type in ("Shape", "Size"):
        _store(scope, node, label, outs)
        return
    tins = [None if v is None else scope.as_tensor(n, v) for n, v in zip(names, vals)]
    ctx = NodeContext(node.op_type, label, tins, attrs, scope.opset(domain), len(node.output),
                      const_value, is_const, domain, {"device": scope.device, "graph": self})
    res = _call(fn, ctx, node.op_type, label, run_time)
    _store(scope, node, label, self._check_outputs(node, label, self._declared_types(node, res)))

  def _pass_names(self, vals: list, outs: list) -> None:
    """A folded node's outputs that are an initializer input unchanged (an Identity, a reshape back to its own
    shape, a cast to its own type) are that initializer: its name goes with them."""
    for v in vals:
      named = self._initializer_arrays.get(id(v[0])) if isinstance(v, tuple) else None
      if named is None or named[0] is not v[0]: continue
      for o in outs:
        if isinstance(o, tuple) and o[1] == v[1] and o[0].dtype == v[0].dtype and o[0].shape == v[0].shape and \
           np.array_equal(o[0], v[0]):
          self._initializer_arrays.setdefault(id(o[0]), (o[0], named[1]))

  @staticmethod
  def _fold_sizes(node: onnx.NodeProto, attrs: dict, vals: list, opset: int, holds_sizes: bool) -> list | None:
    """Shape arithmetic on sizes known only at run time (`shape_values`; `holds_sizes`: a constant input holds such
    sizes): the folded outputs, or None."""
    first = vals[0] if vals else None
    if node.op_type in ("Shape", "Size") and isinstance(first, Tensor) and not is_static(first.shape):
      return [shape_values.of_shape(tuple(first.shape), node.op_type, attrs)]
    if node.op_type in ("Shape", "Size") and shape_values.is_shape_value(first):
      return [shape_values.of_shape(first[0].shape, node.op_type, attrs)]
    if not holds_sizes: return None
    if not all(v is None or isinstance(v, tuple) for v in vals): return None
    return shape_values.fold(node.op_type, attrs, vals, opset)

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
    if shape_values.is_shape_value(value): t = shape_values.as_tensor(value, device)
    else: t = array_to_tensor(arr, device, dt)
    if cache: self._device_consts[key] = t
    initializer = self._initializer_arrays.get(id(arr))
    if initializer is not None and initializer[0] is arr and t.uop.op is Ops.BUFFER:
      self.weight_names.setdefault(t.uop, initializer[1])
    return t

  def run_subgraph(self, graph: onnx.GraphProto, outer: Scope, inputs: list) -> list:
    """Build a subgraph in a child scope; inputs and outputs are Tensors or (array, dtype) constants."""
    scope = Scope(outer, outer.device, self, top=False)
    for t in graph.initializer:
      dt = onnx_dtype(t.data_type, f"initializer {t.name!r}")
      scope.consts[t.name] = (host_values(tensor_proto_to_array(t), dt), dt)
    for v, val in zip(graph.input, inputs): scope.set(v.name, val)
    order = toposort(graph, outer.all_names() | {v.name for v in graph.input})
    self.run_nodes(order, scope)
    return [scope.lookup(o.name, graph.name or "subgraph", "output") for o in graph.output]


def _check_node(node: onnx.NodeProto, label: str, scope: Scope, domain: str, attrs: dict, names: list,
                vals: list) -> None:
  """The model's own nodes against their schemas (node_checks); nodes of a function body that ONNX defines are
  built from values the checked call already passed."""
  if scope.attrs_of_call() is not None: return
  opset = scope.opset(domain)
  node_checks.check_flag_attributes(node.op_type, domain, opset, label, attrs)
  types = [None if v is None else v[1] if isinstance(v, tuple) else v.dtype for v in vals]
  loose = frozenset(i for i, n in enumerate(names) if n and n not in scope.graph.typed_names)
  node_checks.check_input_types(node.op_type, domain, opset, label, names, types, loose)


def _dims_text(dims) -> str:
  return "(" + ", ".join(run_time_sizes.dim_text(d) for d in dims) + ("," if len(dims) == 1 else "") + ")"


def _call(fn, ctx: NodeContext, op: str, label: str, run_time: bool) -> list:
  """The handler's outputs; its errors as OnnxErrors naming the node (`run_time`: the node's inputs have or hold
  sizes known only at run time, so a TypeError is a handler needing a number where there is a size)."""
  try: res = fn(ctx)
  except OnnxError: raise
  except TypeError as e:
    if not run_time: raise OnnxError(f"node {label!r} ({op}): {first_line(e)}") from e
    raise OnnxError(f"node {label!r} ({op}): not supported over sizes known only at run time "
                    f"({first_line(e)})") from e
  except (ValueError, NotImplementedError, IndexError, ZeroDivisionError) as e:
    raise OnnxError(f"node {label!r} ({op}): {first_line(e)}") from e
  return list(res) if isinstance(res, (list, tuple)) else [res]


def _store(scope: Scope, node: onnx.NodeProto, label: str, outs: list) -> None:
  for i, name in enumerate(node.output):
    if not name: continue
    if i >= len(outs) or outs[i] is None:
      raise OnnxError(f"node {label!r} ({node.op_type}): output {i} ({name!r}) is not produced")
    scope.set(name, outs[i])


def load_model(src, input_shapes: dict[str, tuple] | None = None, consts: dict[str, np.ndarray] | None = None,
               limits: SizeLimits | None = None, dims: dict[str, tuple[int, int]] | None = None,
               states: dict[str, str] | None = None, max_context: int | None = None, build: bool = True) -> OnnxGraph:
  """Load, check and import an ONNX model from a path, bytes or a ModelProto. With `limits`, every graph input
  and node output is checked on its shape before anything is computed (OnnxError naming the input or node).
  `dims` (name -> (lowest, highest)) keeps the input dims of those names (dim_params, or names given in
  `input_shapes`) as sizes known only at run time. With `max_context`, the model's states (`states`: input ->
  output, else found by name; `model_state`) hold up to that many entries, their lengths tracked at run time.
  `build`: build the graph now on placeholder inputs (its handlers' errors raised here, `outputs` known); else
  when it is first called or its `outputs` asked (a compile builds it once, as it traces it)."""
  model, what, base_dir = prepare(src)
  return OnnxGraph(model, what, base_dir, input_shapes, consts, limits, dims, states, max_context, build)
