"""ONNX control flow, built by unrolling or selecting: If is inlined (a constant condition picks a branch;
otherwise both branches are built and selected with a `where`), Loop is unrolled when its trip count and
condition fold to constants, Scan is always unrolled (Scan-8's batch axis once per row). The builders take the graph
being imported (anything with `run_subgraph`, `device_const` and `opsets`) and the scope to read inputs from."""
from __future__ import annotations
import numpy as np
import onnx
from tgc.ir import dtypes
from tgc.frontend.tensor import Tensor
from tgc.frontend.onnx.loading import attribute_value
from tgc.frontend.onnx.registry import NodeContext, OnnxError, onnx_op
from tgc.frontend.onnx.scope import GraphBuilder, Scope

def _attr(node: onnx.NodeProto, name: str, default=None):
  """The value of attribute `name` of `node` (`default` when it is not set)."""
  for a in node.attribute:
    if a.name == name: return attribute_value(a)
  return default


def _on_device(g: GraphBuilder, scope: Scope, v) -> Tensor:
  """A value of the graph as a Tensor: a compile-time constant (array, dtype) made a device constant."""
  return v if not isinstance(v, tuple) else g.device_const("", v, scope.device, False)


def _if(g: GraphBuilder, node, label: str, scope: Scope) -> list:
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
    tx, ty = _on_device(g, scope, x), _on_device(g, scope, y)
    if tx.shape != ty.shape or tx.dtype != ty.dtype:
      raise OnnxError(f"node {label!r} (If): with a data-dependent condition both branches must give the same "
                      f"shape and dtype; output {i} is {tx.shape} {tx.dtype.name} vs {ty.shape} {ty.dtype.name}")
    outs.append(c.where(tx, ty))
  return outs


def _loop(g: GraphBuilder, node, label: str, scope: Scope) -> list:
  """Loop unrolled. A condition computed on the device (a graph input, or the body's from data) unrolls the loop to
  its trip count with every step predicated (`_Predicated`): a step after the condition turned false leaves the
  carried values as they were and adds a row of zeros to each scan output, whose rows that ran are counted at run
  time (`GraphBuilder.note_rows`)."""
  body = _attr(node, "body")
  names = list(node.input) + [""] * max(0, 2 - len(node.input))
  trip = scope.lookup(names[0], label, "Loop") if names[0] else None
  cond = scope.lookup(names[1], label, "Loop") if names[1] else None
  if trip is not None and not isinstance(trip, tuple):
    raise OnnxError(f"node {label!r} (Loop): the trip count M ({names[0]!r}) must be a compile-time constant to unroll "
                    f"the loop; pin the graph input that sets it as a constant (--const)")
  if trip is None and cond is None:
    raise OnnxError(f"node {label!r} (Loop): a loop without trip count and condition never ends")
  max_trips = int(np.asarray(trip[0]).reshape(-1)[0]) if trip is not None else None
  running = _flag(cond) if cond is not None else True
  carried = [scope.lookup(n, label, "Loop") for n in names[2:]]
  n_carried = len(carried)
  scans: list[list] = [[] for _ in range(len(body.output) - 1 - n_carried)]
  predicated = _Predicated(g, scope, label)
  it = 0
  while running is not False and (max_trips is None or it < max_trips):
    if it >= MAX_UNROLLED: raise OnnxError(f"node {label!r} (Loop): more than {MAX_UNROLLED} iterations to unroll")
    if isinstance(running, Tensor) and (max_trips is None or max_trips > MAX_UNROLLED):
      raise OnnxError(f"node {label!r} (Loop): its condition is computed on the device, so it is unrolled to its trip "
                      f"count (M), which must be known at compile time and at most {MAX_UNROLLED}; "
                      + ("it has none" if max_trips is None else f"it is {max_trips}"))
    step_cond = running if isinstance(running, Tensor) else (np.array(running), dtypes.bool)
    outs = g.run_subgraph(body, scope, [(np.array(it, np.int64), dtypes.int64), step_cond] + carried)
    new_carried, values = outs[1:1 + n_carried], outs[1 + n_carried:]
    if isinstance(running, Tensor): new_carried, values = predicated.step(running, carried, new_carried, values)
    else: predicated.ran += 1
    carried = new_carried
    for s, v in zip(scans, values): s.append(v)
    running = _flag(outs[0]) if running is True else predicated.both(running, _flag(outs[0]))
    it += 1
  results = list(carried)
  for i, s in enumerate(scans):
    if not s:
      raise OnnxError(f"node {label!r} (Loop): scan output {i} of a loop that runs zero times has an unknown shape")
    if all(isinstance(v, tuple) for v in s): results.append((np.stack([v[0] for v in s]), s[0][1]))
    else:
      results.append(Tensor.stack([_on_device(g, scope, v) for v in s]))
      if predicated.rows is not None: g.note_rows(results[-1], predicated.rows)
  return results


MAX_UNROLLED = 100000       # iterations a Loop is unrolled to at most


def _flag(v):
  """A loop condition: a Python bool when it is a compile-time constant, else the device's boolean scalar."""
  if isinstance(v, tuple): return bool(np.asarray(v[0]).reshape(-1)[0]) if np.asarray(v[0]).size else False
  return v.reshape(()) if v.numel() == 1 else v


class _Predicated:
  """The steps of a Loop whose condition is computed on the device: each step's results are kept where the
  condition held when the step began (`step`), and the steps that ran are counted (`rows`, an int64 scalar on the
  device: the length of the scan outputs)."""

  def __init__(self, g: GraphBuilder, scope: Scope, label: str):
    self.g, self.scope, self.label = g, scope, label
    self.rows: Tensor | None = None
    self.ran = 0         # steps before the condition was computed on the device: they all ran

  def step(self, running: Tensor, old: list, new: list, values: list) -> tuple[list, list]:
    if running.numel() != 1:
      raise OnnxError(f"node {self.label!r} (Loop): the condition must have one element, got shape {running.shape}")
    if running.dtype != dtypes.bool: running = running.cast(dtypes.bool)
    kept = []
    for i, (o, n) in enumerate(zip(old, new)):
      if isinstance(o, list) or isinstance(n, list):
        raise OnnxError(f"node {self.label!r} (Loop): loop-carried sequences need a condition known at compile time")
      o, n = _on_device(self.g, self.scope, o), _on_device(self.g, self.scope, n)
      if o.shape != n.shape or o.dtype != n.dtype:
        raise OnnxError(f"node {self.label!r} (Loop): with a condition computed on the device, loop-carried value "
                        f"{i} must keep its shape and dtype; it goes from {o.shape} {o.dtype.name} to {n.shape} "
                        f"{n.dtype.name}")
      kept.append(running.where(n, o))
    rows = []
    for v in values:
      if isinstance(v, list):
        raise OnnxError(f"node {self.label!r} (Loop): scan outputs of sequences need a condition known at compile time")
      v = _on_device(self.g, self.scope, v)
      rows.append(running.where(v, v.zeros_like()))
    ran = running.cast(dtypes.int64)
    self.rows = ran + self.ran if self.rows is None else self.rows + ran
    return kept, rows

  def both(self, running: Tensor, cond) -> Tensor | bool:
    """The condition of the next step: this one's and the body's."""
    if cond is False: return False
    return running if cond is True else running & (cond if cond.dtype == dtypes.bool else cond.cast(dtypes.bool))


def _scan(g: GraphBuilder, node, label: str, scope: Scope) -> list:
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


def _scan_core(g: GraphBuilder, scope: Scope, label: str, body, state: list, xs: list, in_axes, in_dirs, out_axes,
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
    res = [_on_device(g, scope, v) for v in res]
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


BUILDERS = {"If": _if, "Loop": _loop, "Scan": _scan}


def is_control_flow(node: onnx.NodeProto) -> bool:
  return node.op_type in BUILDERS and node.domain in ("", "ai.onnx")


def build(g: GraphBuilder, node: onnx.NodeProto, label: str, scope: Scope) -> list:
  """The outputs of a control-flow node (Tensors or (array, dtype) constants), in the node's output order."""
  return BUILDERS[node.op_type](g, node, label, scope)


@onnx_op(*BUILDERS)
def _control_flow_stub(ctx: NodeContext):
  """Registered so that the operator table lists If, Loop and Scan as supported; they need the scope rather than a
  NodeContext, so the importer builds them with `build` and this never runs."""
  raise ctx.fail("control flow is built by the importer, not by a handler")
