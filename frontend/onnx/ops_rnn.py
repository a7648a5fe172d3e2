"""ONNX recurrent layers: RNN, GRU and LSTM, unrolled over the static sequence length, forward, reverse or
bidirectional, with per-batch sequence lengths, clipping, peepholes and the activation functions the attributes
name."""
from __future__ import annotations
from tgc.ir import dtypes
from tgc.frontend.tensor import Tensor
from tgc.frontend.onnx.registry import NodeContext, onnx_op
from tgc.frontend.onnx import compose_nn as nn
from tgc.frontend.onnx.node_helpers import attr_floats, attr_str, attr_strs, declared_outputs


# ---------------------------------------------------------------- activations
def _activation(name: str, alpha, beta):
  n = name.lower()
  if n == "relu": return lambda t: t.relu()
  if n == "tanh": return lambda t: t.tanh()
  if n == "sigmoid": return lambda t: t.sigmoid()
  if n == "affine": return lambda t: t * (1.0 if alpha is None else alpha) + (0.0 if beta is None else beta)
  if n == "leakyrelu": return lambda t: t.leaky_relu(0.01 if alpha is None else alpha)
  if n == "thresholdedrelu":
    a = 1.0 if alpha is None else alpha
    return lambda t: (t > a).where(t, 0.0)
  if n == "scaledtanh":
    a, b = (1.0 if alpha is None else alpha), (1.0 if beta is None else beta)
    return lambda t: a * (t * b).tanh()
  if n == "hardsigmoid":
    a, b = (0.2 if alpha is None else alpha), (0.5 if beta is None else beta)
    return lambda t: (t * a + b).clip(0.0, 1.0)
  if n == "elu": return lambda t: t.elu(1.0 if alpha is None else alpha)
  if n == "softsign": return lambda t: t / (1 + t.abs())
  if n == "softplus": return lambda t: t.softplus()
  raise ValueError(f"unknown activation {name!r}")


_NEEDS_ALPHA = {"affine", "leakyrelu", "thresholdedrelu", "scaledtanh", "hardsigmoid", "elu"}
_NEEDS_BETA = {"affine", "scaledtanh", "hardsigmoid"}


def _activations(ctx: NodeContext, defaults: list[str], num_dirs: int) -> list[list]:
  """Per direction, the activation functions (attribute `activations` with its alpha/beta lists, consumed in
  order by the functions that take them)."""
  names = attr_strs(ctx, "activations") or defaults * num_dirs
  if len(names) == len(defaults) and num_dirs == 2: names = names * 2
  alphas, betas = list(attr_floats(ctx, "activation_alpha", [])), list(attr_floats(ctx, "activation_beta", []))
  fns = []
  for name in names:
    a = alphas.pop(0) if name.lower() in _NEEDS_ALPHA and alphas else None
    b = betas.pop(0) if name.lower() in _NEEDS_BETA and betas else None
    try: fns.append(_activation(name, a, b))
    except ValueError as e: raise ctx.fail(str(e)) from None
  per = len(defaults)
  return [fns[d * per:(d + 1) * per] for d in range(num_dirs)]


# ---------------------------------------------------------------- the unrolled recurrence
def _reverse_by_length(x: Tensor, lengths: Tensor, time_axis: int, batch_axis: int) -> Tensor:
  """Reverse the first lengths[b] steps along time_axis of every batch entry b (the rest stays)."""
  others = [a for a in range(x.ndim) if a not in (time_axis, batch_axis)]
  xt = x.permute([batch_axis] + others + [time_axis])               # (B, ..., T)
  t_len = x.shape[time_axis]
  t = Tensor.arange(t_len, device=x.device).reshape(1, t_len)
  ln = lengths.cast(dtypes.int32).reshape(-1, 1)
  src = (t < ln).where(ln - 1 - t, t)                                # (B, T)
  hit = nn.one_hot(src, t_len).reshape((x.shape[batch_axis],) + (1,) * len(others) + (t_len, t_len))
  y = nn.masked_select_sum(hit, xt.unsqueeze(-2), -1)                # (B, ..., T)
  order = [batch_axis] + others + [time_axis]
  return y.permute([order.index(a) for a in range(x.ndim)])


def _rnn_common(ctx: NodeContext, gates: int, defaults: list[str], hidden: int | None = None):
  """The inputs and attributes every recurrent layer reads; `hidden` when R is not laid out [dirs, gates*h, h]."""
  x, w, r = ctx.input(0), ctx.input(1), ctx.input(2)
  b, lens, h0 = ctx.input(3), ctx.input(4), ctx.input(5)
  layout = int(ctx.attr("layout", 0))
  direction = attr_str(ctx, "direction", "forward")
  num_dirs = 2 if direction == "bidirectional" else 1
  if w.shape[0] != num_dirs: raise ctx.fail(f"W has {w.shape[0]} directions but direction is {direction!r}")
  hidden = r.shape[-1] if hidden is None else hidden
  if layout: x = x.transpose(0, 1)
  if h0 is not None and layout: h0 = h0.transpose(0, 1)
  seq, batch = x.shape[0], x.shape[1]
  if b is None: b = Tensor.zeros(num_dirs, 2 * gates * hidden, dtype=x.dtype, device=x.device)
  if h0 is None: h0 = Tensor.zeros(num_dirs, batch, hidden, dtype=x.dtype, device=x.device)
  clip = ctx.attr("clip")
  acts = _activations(ctx, defaults, num_dirs)
  return dict(x=x, w=w, r=r, b=b, lens=lens, h0=h0, layout=layout, direction=direction, num_dirs=num_dirs,
              hidden=hidden, seq=seq, batch=batch, clip=None if clip is None else float(clip), acts=acts)


def _clip(t: Tensor, clip):
  return t if clip is None else t.clip(-clip, clip)


def _run_directions(p: dict, step, states0: list[Tensor]):
  """Unroll `step(d, x_proj_t, states, t) -> states` (states[0] is H) over time for each direction; handles
  reverse order and per-batch sequence lengths (steps past a sequence's end keep the state and output 0)."""
  x, lens = p["x"], p["lens"]
  seq = p["seq"]
  ys, finals = [], []
  for d in range(p["num_dirs"]):
    reverse = p["direction"] == "reverse" or d == 1
    xd = x
    if reverse: xd = _reverse_by_length(x, lens, 0, 1) if lens is not None else x.flip(0)
    proj = p["project"](d, xd)                                        # (seq, batch, gates*hidden)
    states = [s[d] for s in states0]
    outs = []
    for t in range(seq):
      new = step(d, proj[t], states, t)
      if lens is not None:
        alive = (lens.cast(dtypes.int32) > t).reshape(-1, 1)
        new = [alive.where(n, s) for n, s in zip(new, states)]
        outs.append(alive.where(new[0], 0.0).cast(new[0].dtype))
      else: outs.append(new[0])
      states = new
    y = Tensor.stack(outs, 0)                                          # (seq, batch, hidden)
    if reverse: y = _reverse_by_length(y, lens, 0, 1) if lens is not None else y.flip(0)
    ys.append(y)
    finals.append(states)
  y = Tensor.stack(ys, 1)                                              # (seq, dirs, batch, hidden)
  final = [Tensor.stack([f[i] for f in finals], 0) for i in range(len(states0))]
  if p["layout"]:
    y = y.permute(2, 0, 1, 3)
    final = [f.transpose(0, 1) for f in final]
  return y, final


def _projector(p: dict, gates: int):
  w, b, hidden = p["w"], p["b"], p["hidden"]
  def project(d: int, xd: Tensor) -> Tensor:
    wb = b[d].shrink(((0, gates * hidden),))
    return xd.matmul(w[d].T) + wb
  return project


# ---------------------------------------------------------------- RNN, GRU, LSTM
@onnx_op("RNN")
def rnn(ctx: NodeContext):
  p = _rnn_common(ctx, 1, ["Tanh"])
  p["project"] = _projector(p, 1)
  hidden = p["hidden"]
  def step(d, xp, states, t):
    rb = p["b"][d].shrink(((hidden, 2 * hidden),))
    return [p["acts"][d][0](_clip(xp + states[0].matmul(p["r"][d].T) + rb, p["clip"]))]
  y, (yh,) = _run_directions(p, step, [p["h0"]])
  return declared_outputs(ctx, [y.cast(p["x"].dtype), yh.cast(p["x"].dtype)])


@onnx_op("GRU")
def gru(ctx: NodeContext):
  p = _rnn_common(ctx, 3, ["Sigmoid", "Tanh"])
  p["project"] = _projector(p, 3)
  h = p["hidden"]
  linear_before_reset = bool(ctx.attr("linear_before_reset", 0))
  def part(t: Tensor, i: int) -> Tensor: return t.shrink(tuple([None] * (t.ndim - 1) + [(i * h, (i + 1) * h)]))
  def step(d, xp, states, t):
    f, g = p["acts"][d]
    hp = states[0]
    r_w = p["r"][d]                                                   # (3h, h): z, r, h
    rb = p["b"][d].shrink(((3 * h, 6 * h),))
    hz_r = hp.matmul(part(r_w.T, 0).cat(part(r_w.T, 1), dim=1)) + part(rb, 0).cat(part(rb, 1))
    z = f(_clip(part(xp, 0) + part(hz_r, 0), p["clip"]))
    r = f(_clip(part(xp, 1) + part(hz_r, 1), p["clip"]))
    rh_w, rh_b = part(r_w.T, 2), part(rb, 2)
    if linear_before_reset: cand = part(xp, 2) + r * (hp.matmul(rh_w) + rh_b)
    else: cand = part(xp, 2) + (r * hp).matmul(rh_w) + rh_b
    hn = g(_clip(cand, p["clip"]))
    return [(1 - z) * hn + z * hp]
  y, (yh,) = _run_directions(p, step, [p["h0"]])
  return declared_outputs(ctx, [y.cast(p["x"].dtype), yh.cast(p["x"].dtype)])


@onnx_op("LSTM")
def lstm(ctx: NodeContext):
  p = _rnn_common(ctx, 4, ["Sigmoid", "Tanh", "Tanh"])
  p["project"] = _projector(p, 4)
  h = p["hidden"]
  def pre_gates(d, t, xp, hp):
    return xp + hp.matmul(p["r"][d].T) + p["b"][d].shrink(((4 * h, 8 * h),))
  return lstm_recurrence(ctx, p, pre_gates)


def lstm_recurrence(ctx: NodeContext, p: dict, pre_gates):
  """The LSTM cell unrolled over `p` (from `_rnn_common`, its "project" set): `pre_gates(d, t, xp, hp)` is the gate
  input (i, o, f, c) of direction d at step t before the peepholes: the step's input projection plus the recurrence
  plus the biases. Returns the node's declared outputs Y, Y_h, Y_c."""
  h, batch, num_dirs = p["hidden"], p["batch"], p["num_dirs"]
  x = p["x"]
  c0 = ctx.input(6)
  if c0 is None: c0 = Tensor.zeros(num_dirs, batch, h, dtype=x.dtype, device=x.device)
  elif p["layout"]: c0 = c0.transpose(0, 1)
  peep = ctx.input(7)
  coupled = bool(ctx.attr("input_forget", 0))
  def part(t: Tensor, i: int) -> Tensor: return t.shrink(tuple([None] * (t.ndim - 1) + [(i * h, (i + 1) * h)]))
  def step(d, xp, states, t):
    f, g, hact = p["acts"][d]
    hp, cp = states
    gates = pre_gates(d, t, xp, hp)                                    # i, o, f, c
    pi = po = pf = None
    if peep is not None: pi, po, pf = (part(peep[d], k) for k in range(3))
    gi = part(gates, 0) + (cp * pi if pi is not None else 0)
    gf = part(gates, 2) + (cp * pf if pf is not None else 0)
    i = f(_clip(gi, p["clip"]))
    fg = (1 - i) if coupled else f(_clip(gf, p["clip"]))
    cand = g(_clip(part(gates, 3), p["clip"]))
    c = fg * cp + i * cand
    go = part(gates, 1) + (c * po if po is not None else 0)
    o = f(_clip(go, p["clip"]))
    return [o * hact(c), c]
  y, (yh, yc) = _run_directions(p, step, [p["h0"], c0])
  return declared_outputs(ctx, [y.cast(x.dtype), yh.cast(x.dtype), yc.cast(x.dtype)])
