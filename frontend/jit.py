"""Capture: `jit` (TinyJit semantics: call 1 eager, call 2 captures the kernels it launches, call 3+ replays them
with the new input buffers and builds no graph) and `trace` (the capture directly, for ahead-of-time compiles).
A `Capture` is target-independent: kernel ASTs, the buffers each binds, input/output specs and weights."""
from __future__ import annotations
import hashlib
import math
import time
from dataclasses import dataclass, field
import numpy as np
from tgc.ir.sint import highest_prod, is_static, provably_le, sint
from tgc.ir import Ops, GroupOp, UOp, DType, lowp, provenance, substitute
from tgc.codegen.schedule import ScheduleItem, schedule, find_realize_points, placed_kernel, rewrites_itself
from tgc.frontend import buffers, realize as _realize
from tgc.frontend.interpreter import evaluate
from tgc.frontend.limits import SizeLimits, TensorTooLarge
from tgc.frontend.tensor import Tensor, canonical_device


class JitError(RuntimeError):
  """Misuse of jit/trace."""


class NothingTracedError(JitError):
  """The function given to jit/trace computed no Tensor ("didn't JIT anything!")."""


@dataclass(frozen=True)
class TensorSpec:
  name: str
  shape: tuple[int, ...]
  dtype: DType


@dataclass(frozen=True)
class StateSpec:
  """A tensor a model carries from one call to the next (a KV cache), kept where it is computed. The model reads it
  as input `input`: the first `length` entries along `axis` of a buffer of `shape` (its capacity); it returns it
  grown to `grown` entries as output `output`, whose first `length` entries are the input's. A call writes only
  the entries after them, in place."""
  input: str
  output: str
  shape: tuple[int, ...]
  dtype: DType
  axis: int
  length: UOp               # a Variable: the entries held before a call
  grown: sint               # the entries held after it


class StateError(JitError):
  """A declared state the model does not append to (the message names it)."""


@dataclass
class Capture:
  """What a model launches, independent of any target. `items` bind BUFFER nodes: `inputs` (filled by the caller),
  `weights` (constant data), `outputs`, `states` (kept by the artifact between calls), and the rest are
  intermediates."""
  items: list[ScheduleItem]
  inputs: list[tuple[TensorSpec, UOp]]
  outputs: list[tuple[TensorSpec, UOp]]
  weights: dict[UOp, np.ndarray] = field(default_factory=dict)
  seconds: dict[str, float] = field(default_factory=dict)     # time of each phase of `trace` (build, fold, schedule)
  states: list[tuple[StateSpec, UOp]] = field(default_factory=list)
  weight_names: dict[UOp, str] = field(default_factory=dict)   # the weights named by the model (weight -> name)

  def intermediates(self) -> list[UOp]:
    fixed = {b for _, b in self.inputs} | {b for _, b in self.outputs} | set(self.weights) | \
      {b for _, b in self.states}
    out: list[UOp] = []
    for it in self.items:
      for b in it.bufs:
        if b not in fixed and b not in out: out.append(b)
    return out


_active: list[str] = []     # "jit" while a jit call is running; nested calls are refused


def _flatten_tensors(ret) -> list[Tensor]:
  if isinstance(ret, Tensor): return [ret]
  if isinstance(ret, (list, tuple)): return [t for r in ret for t in _flatten_tensors(r)]
  if isinstance(ret, dict): return [t for k in ret for t in _flatten_tensors(ret[k])]
  return []


def _input_tensors(args, kwargs) -> list[Tensor]:
  return [a for a in list(args) + [kwargs[k] for k in sorted(kwargs)] if isinstance(a, Tensor)]


class TinyJit:
  """Decorator: `@jit def step(x): ...`. Inputs must be realized tensors; outputs alias the captured buffers."""

  def __init__(self, fn):
    self.fn = fn
    self.calls = 0
    self.items: list[ScheduleItem] = []
    self.input_bufs: list[UOp] = []
    self.specs: list[tuple] = []
    self.ret = None
    self.device: str | None = None
    self._bound: list = []

  def reset(self):
    self.__init__(self.fn)

  def _check_inputs(self, ins: list[Tensor]):
    for i, t in enumerate(ins):
      if t.uop.op is not Ops.BUFFER:
        raise JitError(f"JIT inputs must be real buffers; use .clone() (input {i} is a lazy {t.uop.op.name})")
    ids = [buffers.buffer_id(t.uop) for t in ins]
    if len(set(ids)) != len(ids): raise JitError("duplicate inputs to JIT")

  def __call__(self, *args, **kwargs):
    if _active: raise JitError("nested jit is not supported: a jit function called another jit function")
    ins = _input_tensors(args, kwargs)
    for t in ins:
      if t.uop.op is not Ops.BUFFER and self.calls < 2: t.realize()
    self._check_inputs(ins)
    _active.append("jit")
    try:
      if self.calls == 0: ret = self._eager(args, kwargs)
      elif self.calls == 1: ret = self._capture(ins, args, kwargs)
      else: ret = self._replay(ins)
    finally: _active.pop()
    self.calls += 1
    return ret

  def _eager(self, args, kwargs):
    ret = self.fn(*args, **kwargs)
    Tensor.realize_all(*_flatten_tensors(ret))
    return ret

  def _capture(self, ins, args, kwargs):
    captured: list[ScheduleItem] = []
    hook = lambda items, roots, outs: captured.extend(items)   # noqa: E731
    _realize.capture_hooks.append(hook)
    try:
      ret = self.fn(*args, **kwargs)
      Tensor.realize_all(*_flatten_tensors(ret))
    finally: _realize.capture_hooks.remove(hook)
    if not captured: raise NothingTracedError("didn't JIT anything!")
    self.items, self.ret = captured, ret
    self.input_bufs = [t.uop for t in ins]
    self.specs = [(t.shape, t.dtype, t.device) for t in ins]
    self.device = ins[0].device if ins else _flatten_tensors(ret)[0].device
    return ret

  def _replay(self, ins):
    if len(ins) != len(self.specs):
      raise JitError(f"JIT args mismatch: {len(ins)} tensor inputs, captured with {len(self.specs)}")
    for i, (t, (shape, dtype, device)) in enumerate(zip(ins, self.specs)):
      if (t.shape, t.dtype, t.device) != (shape, dtype, device):
        raise JitError(f"JIT args mismatch on input {i}: got {t.shape} {t.dtype.name} on {t.device}, "
                       f"captured {shape} {dtype.name} on {device}")
    if not self._bound:
      for it in self.items:
        prg, fn = _realize.get_kernel(it.ast, self.device)
        self._bound.append((fn, prg, [self.input_bufs.index(b) if b in self.input_bufs else buffers.storage(b)
                                      for b in it.bufs]))
    new_storage = [buffers.storage(t.uop) for t in ins]
    for fn, prg, args in self._bound:
      fn(*[new_storage[a] if isinstance(a, int) else a for a in args], global_size=prg.global_size,
         local_size=prg.local_size)
    _realize.stats["kernels"] += len(self._bound)
    return self.ret


jit = TinyJit


PORTABLE_MAX_BUFFERS = 8    # WebGPU's default storage-buffer limit, the smallest of all targets


class TensorTooLargeError(JitError):
  """trace met a tensor over its `SizeLimits`; the message names it."""


def placeholder(shape: tuple[int, ...], dtype: DType, device: str | None = None) -> Tensor:
  """An input for `trace`: a buffer with a shape and dtype but no data (tracing never reads input values)."""
  device = canonical_device(device)
  return Tensor(buffers.new_buffer(device, tuple(shape), dtype), device)


def trace(fn, *example_inputs: Tensor, input_names: list[str] | None = None,
          output_names: list[str] | None = None, max_buffers: int | None = PORTABLE_MAX_BUFFERS,
          limits: SizeLimits | None = None, states: list[tuple[int, int, int, UOp]] | None = None,
          weight_names: dict[UOp, str] | None = None) -> Capture:
  """Run `fn` once on example inputs and return the capture without running any kernel. Parts of the graph that
  do not depend on an input are evaluated now (constant folding) and become weights. Kernels bind at most
  `max_buffers` buffers, so the capture fits every target. Inputs may be `placeholder`s. With `limits`, every
  input, output and tensor the capture would hold in a buffer is checked before anything is folded or
  scheduled (TensorTooLargeError). `states`: (input position, output position, axis, length Variable) of each
  state (`StateSpec`): that example input is the state's whole buffer, `fn` gets its first `length` entries along
  `axis`, the output's value lives in that buffer and its kernel writes only the entries after them (in place;
  what reads the output reads the buffer). `weight_names` (BUFFER -> name; read after `fn` ran, so `fn` may fill
  it as it builds) names weights: a folded weight holding the same values as a named one keeps its name
  (`Capture.weight_names`)."""
  if _active: raise JitError("nested jit is not supported: trace called inside a jit function")
  for i, t in enumerate(example_inputs):
    if not isinstance(t, Tensor): raise JitError(f"trace: input {i} is not a Tensor")
  in_names = input_names or [f"input_{i}" for i in range(len(example_inputs))]
  for name, t in zip(in_names, example_inputs): _check_size(limits, f"input {name!r}", t.uop)
  for t in example_inputs: t.realize()
  ids = [buffers.buffer_id(t.uop) for t in example_inputs]
  if len(set(ids)) != len(ids): raise JitError("duplicate inputs to JIT")
  input_bufs = [t.uop for t in example_inputs]
  states = states or []
  start = time.perf_counter()
  with provenance.call_sites(): ret = fn(*_state_views(list(example_inputs), states))
  outs = _flatten_tensors(ret)
  if not outs: raise NothingTracedError("didn't JIT anything! (the function returned no Tensor)")
  out_names = output_names or [f"output_{i}" for i in range(len(outs))]
  for name, t in zip(out_names, outs): _check_size(limits, f"output {name!r}", t.uop)
  specs = [_state_spec(example_inputs[i], outs[o], in_names[i], out_names[o], axis, length)
           for i, o, axis, length in states]
  kept = [o for o in range(len(outs)) if o not in {o for _, o, _, _ in states}]
  # per state: the grown value (placed in the state's buffer) and its first entries (checked to be the input's)
  grown = [outs[o].uop for _, o, _, _ in states]
  kept_part = [_along(outs[o], st.axis, 0, st.length) for (_, o, _, _), st in zip(states, specs)]
  built = time.perf_counter()
  names = dict(weight_names or {})
  roots = _fold_constants([outs[o].uop for o in kept] + grown + kept_part, set(input_bufs), limits, names)
  roots, grown, kept_part = roots[:len(kept)], roots[len(kept):len(kept) + len(grown)], roots[len(kept) + len(grown):]
  folded = time.perf_counter()
  state_bufs = [input_bufs[i] for i, _, _, _ in states]
  items, out_bufs = _schedule_capture(roots, list(zip(specs, grown, kept_part, state_bufs)), input_bufs, max_buffers)
  for it in items:
    for b in it.bufs: _check_size(limits, "an intermediate tensor", b)
  weights = _weights_read(items, input_bufs)
  seconds = {"build": built - start, "fold": folded - built, "schedule": time.perf_counter() - folded}
  state_inputs = {i for i, _, _, _ in states}
  return Capture(items,
                 [(TensorSpec(n, t.shape, t.dtype), b) for k, (n, t, b) in
                  enumerate(zip(in_names, example_inputs, input_bufs)) if k not in state_inputs],
                 [(TensorSpec(out_names[o], outs[o].shape, outs[o].dtype), b) for o, b in zip(kept, out_bufs)],
                 weights, seconds, list(zip(specs, state_bufs)), {b: names[b] for b in weights if b in names})


def _state_views(inputs: list[Tensor], states: list[tuple[int, int, int, UOp]]) -> list[Tensor]:
  """What the traced function gets: each state's buffer shrunk to its first `length` entries."""
  for i, _, axis, length in states:
    inputs[i] = inputs[i].shrink(tuple((0, length) if k == axis else None for k in range(inputs[i].ndim)))
  return inputs


def _schedule_capture(roots: list[UOp], states: list[tuple[StateSpec, UOp, UOp, UOp]], input_bufs: list[UOp],
                      max_buffers: int | None) -> tuple[list[ScheduleItem], list[UOp]]:
  """The kernels computing `roots` and each state's grown value (`states`: spec, grown value, its first entries,
  the state's buffer), and the buffer of each root. A state's first entries are checked to be the input's; its
  grown value is computed into the state's buffer from its length on."""
  def new_buffer(shape, dtype): return buffers.new_buffer("capture", shape, dtype)
  placed = {}
  for st, grown, part, buf in states:
    _check_kept(st, part, buf, new_buffer)
    placed[grown] = (buf, tuple(st.length if k == st.axis else 0 for k in range(len(st.shape))))
  items, out_bufs = schedule(roots + [g for _, g, _, _ in states], new_buffer, max_buffers, placed=placed)
  # an output that is an input, a weight or another output's buffer still gets its own buffer (a copy kernel)
  out_bufs = list(out_bufs[:len(roots)])
  for i, b in enumerate(out_bufs):
    if b in input_bufs or buffers.device_of(b) != "capture" or b in out_bufs[:i]:
      more, (out_bufs[i],) = schedule([UOp(Ops.CONTIGUOUS, b.dtype, (b,))], new_buffer)
      items += more
  return items, out_bufs


def _weights_read(items: list[ScheduleItem], input_bufs: list[UOp]) -> dict[UOp, np.ndarray]:
  """The buffers the kernels read that no kernel writes and no caller fills, with their data."""
  written = {it.bufs[0] for it in items}
  weights = {}
  for it in items:
    for b in it.bufs:
      if b not in written and b not in input_bufs and b not in weights: weights[b] = _read(b)
  return weights


def _state_spec(buf: Tensor, out: Tensor, in_name: str, out_name: str, axis: int, length: UOp) -> StateSpec:
  """The StateSpec of a state held in `buf` and returned as `out`; a StateError when `out` cannot be it."""
  what = f"state {in_name!r} -> {out_name!r}"
  same_dims = out.ndim == buf.ndim and all(a == b for k, (a, b) in enumerate(zip(out.shape, buf.shape)) if k != axis)
  if out.dtype != buf.dtype or not same_dims:
    raise StateError(f"{what}: the output is {out.dtype.name} {out.shape}, the state {buf.dtype.name} with "
                     f"{buf.shape[axis]} entries along dim {axis} of {buf.shape}")
  grown = out.shape[axis]
  if not provably_le(length, grown):     # whether it fits the capacity is checked by each call
    raise StateError(f"{what}: the output's size along dim {axis} ({grown}) can be less than the state's length")
  return StateSpec(in_name, out_name, tuple(buf.shape), buf.dtype, axis, length, grown)


def _along(t: Tensor, axis: int, begin: sint, end: sint) -> UOp:
  return t.shrink(tuple((begin, end) if k == axis else None for k in range(t.ndim))).uop


def _check_kept(st: StateSpec, part: UOp, buf: UOp, new_buffer) -> None:
  """A StateError unless writing the output's first `length` entries back into the state changes nothing (the
  output is the input with entries appended, as a KV cache's Concat makes it)."""
  item = placed_kernel(part, buf, new_buffer)
  if item is not None and not rewrites_itself(item):
    raise StateError(f"state {st.input!r} -> {st.output!r}: the output's first entries along dim {st.axis} are not "
                     f"the input's (only a state that a call appends to, such as a KV cache's Concat, stays in place)")


def _read(b: UOp) -> np.ndarray:
  """A weight's data as the kernels read it: values, or for storage-only dtypes the (packed) storage words."""
  return _realize.raw_storage(b) if b.dtype.storage_only else _realize.to_numpy(b)


def _grows(n: UOp) -> bool:
  """Whether holding `n`'s value would take more bytes than the buffers it is computed from (int8 weights
  dequantized to float32, float16 weights cast up): such values stay computed in the kernels, weights stay small."""
  sources = {b for b in n.toposort() if b.op is Ops.BUFFER}
  source_bytes = sum(lowp.storage_nbytes(b.dtype, math.prod(b.arg[1])) for b in sources)
  return bool(sources) and lowp.storage_nbytes(n.dtype, highest_prod(n.shape)) > source_bytes


def _check_size(limits: SizeLimits | None, what: str, u: UOp) -> None:
  """`limits` on the tensor of node `u` (and, for a reduce, on its length), as a TensorTooLargeError."""
  if limits is None: return
  try:
    limits.check(what, u.shape, u.dtype)
    if u.op is Ops.REDUCE_AXIS: limits.check_reduction(u.src[0].shape, u.arg[1])
  except TensorTooLarge as error: raise TensorTooLargeError(str(error)) from None


def _shared_weights(roots: list[UOp], inputs: set[UOp], names: dict[UOp, str]) -> list[UOp]:
  """Weights with the same contents become one buffer. A Loop body that carries its weights as loop state (Keras
  LSTMs through tf2onnx) hands every unrolled step a copy of the same values: as one buffer they are stored once,
  and the steps' work on them (packed matmul panels, the reductions batched over steps) is one and the same."""
  shaped: dict[tuple, dict[UOp, None]] = {}
  for r in roots:
    for n in r.toposort():
      if n.op is Ops.BUFFER and n not in inputs: shaped.setdefault((n.dtype, n.arg[1]), {})[n] = None
  mapping: dict[UOp, UOp] = {}
  for bufs in (list(b) for b in shaped.values() if len(b) > 1):
    alike: dict[bytes, list[UOp]] = {}      # the same first and last elements: maybe the same contents
    for b in bufs:
      flat = np.ascontiguousarray(_read(b)).reshape(-1)
      alike.setdefault(flat[:16].tobytes() + flat[-16:].tobytes(), []).append(b)
    first: dict[bytes, UOp] = {}
    for b in (b for same in alike.values() if len(same) > 1 for b in same):
      digest = hashlib.sha256(np.ascontiguousarray(_read(b)).tobytes()).digest()
      if digest in first: mapping[b] = first[digest]
      else: first[digest] = b
  for b, kept in mapping.items():     # the buffer kept has a name if either had one
    if kept not in names and b in names: names[kept] = names[b]
  return [substitute(r, mapping) for r in roots] if mapping else roots


def _fold_constants(roots: list[UOp], inputs: set[UOp], limits: SizeLimits | None = None,
                    names: dict[UOp, str] | None = None) -> list[UOp]:
  """Replace what depends on no input by its value: kernel-sized subgraphs (realize points) and the constant
  arithmetic feeding input-dependent ops (a BatchNorm's scale and shift: computed once here, not per element in a
  kernel) become BUFFERs holding their values, unless a value is bigger than the buffers it comes from (`_grows`);
  one-element values and weights become CONSTs (no buffer, no load). With `limits`, every tensor that will be
  held in a buffer (folded or computed by a kernel) and every reduction is checked first. Weights with the same
  contents become one buffer first (`_shared_weights`). `names` (weight -> name) gets the names of the buffers
  made here that hold a named weight's values (`_same_values`)."""
  names = {} if names is None else names
  roots = _shared_weights(roots, inputs, names)
  depends: dict[UOp, bool] = {}
  # index arithmetic: computed from ARANGEs (and constants) alone, e.g. a causal mask or a gather's comparison:
  # cheaper computed in the kernel that uses it than loaded, and a kernel sees through it (True / False / None:
  # constants alone)
  index_math: dict[UOp, bool | None] = {}
  users: dict[UOp, list[UOp]] = {}
  for r in roots:
    for n in r.toposort():
      if n in depends: continue
      # sizes known only at run time are inputs too: what has one cannot be computed now
      depends[n] = n in inputs or n.op is Ops.DEFINE_VAR or not is_static(n.shape) or any(depends[s] for s in n.src)
      kinds = {index_math[s] for s in n.src}
      index_math[n] = True if n.op is Ops.ARANGE else None if n.op is Ops.CONST else \
        (False if False in kinds or not n.src else True if True in kinds else None)
      for s in n.src: users.setdefault(s, []).append(n)
  realize = find_realize_points(roots)
  for n in depends:
    if n in realize or n.op is Ops.REDUCE_AXIS: _check_size(limits, "an intermediate tensor", n)
  rootset = set(roots)

  def arithmetic(n: UOp) -> bool:
    return not depends[n] and n.op in GroupOp.Elementwise and not n.dtype.storage_only and not _grows(n) and \
      not index_math[n]

  def boundary(n: UOp) -> bool:   # constant arithmetic used by something that is not constant arithmetic
    return arithmetic(n) and (n in rootset or any(not arithmetic(u) for u in users.get(n, ())))

  # in graph order (depends is filled in one): the folded buffers are numbered the same in every compile
  points = [n for n in depends if not depends[n] and n.op is not Ops.BUFFER and not _grows(n) and
            ((n in realize and n.op is not Ops.CONST) or boundary(n))]
  scalars = [n for n in depends if n.op is Ops.BUFFER and n not in inputs and math.prod(n.arg[1]) == 1 and
             not n.dtype.storage_only and n not in rootset]
  for n in points: _check_size(limits, "an intermediate tensor", n)
  if not points and not scalars: return roots
  vals = evaluate(points + scalars, lambda b: _read(b) if b.dtype.storage_only else _read(b).reshape(b.arg[1]))
  mapping = {}
  for p, v in zip(points + scalars, vals):
    if v.size == 1 and not p.dtype.storage_only and p not in rootset:
      mapping[p] = UOp(Ops.RESHAPE, p.dtype, (UOp.const(p.dtype, v.reshape(()).item()),), tuple(v.shape))
    elif v.size > 1 and not p.dtype.storage_only and p not in rootset and (v == v.flat[0]).all():
      # one value everywhere (a broadcast bound of a clip): a constant, not a buffer of copies
      one = UOp(Ops.RESHAPE, p.dtype, (UOp.const(p.dtype, v.flat[0].item()),), (1,) * v.ndim)
      mapping[p] = UOp(Ops.EXPAND, p.dtype, (one,), tuple(v.shape))
    else:
      mapping[p] = buffers.new_buffer("numpy", v.shape, p.dtype, lowp.pack(v, p.dtype) if p.dtype.storage_only
                                      else buffers.host_array(v))
      source = _same_values(p)
      if source in names: names[mapping[p]] = names[source]
  return [substitute(r, mapping) for r in roots]


def _same_values(n: UOp) -> UOp:
  """The buffer whose values `n` is, element for element, when it is one: a copy or reshapes of it back to its
  shape (a weight passed through an Identity or a loop's state); else `n`."""
  source = n
  while source.op in (Ops.CONTIGUOUS, Ops.RESHAPE) or (source.op is Ops.CAST and source.dtype == source.src[0].dtype):
    source = source.src[0]
  return source if source.op is Ops.BUFFER and source.arg[1] == n.shape and source.dtype == n.dtype else n
