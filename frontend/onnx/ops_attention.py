"""ONNX transformer operators: Attention (grouped heads, past key/value caches, causal and sliding-window
masks, softcap), RotaryEmbedding, LinearAttention (the gated/delta recurrent state update, unrolled over the
sequence) and SwiGLU."""
from __future__ import annotations
import math
import numpy as np
from tgc.ir import dtypes
from tgc.frontend.tensor import Tensor
from tgc.frontend.onnx.registry import NodeContext, onnx_op
from tgc.frontend.onnx import compose_nn as nn
from tgc.frontend.onnx.dtypes import ONNX_DTYPES
from tgc.frontend.onnx.node_helpers import attr_str, declared_outputs


# ---------------------------------------------------------------- gated units and rotary position embeddings
@onnx_op("SwiGLU")
def swiglu(ctx: NodeContext):
  a, b = ctx.input(0), ctx.input(1)
  alpha = float(ctx.attr("alpha", 1.0))
  return (a * (a * alpha).sigmoid().cast(a.dtype) * b).cast(a.dtype)


@onnx_op("RotaryEmbedding")
def rotary_embedding(ctx: NodeContext):
  x, cos, sin, pos = ctx.input(0), ctx.input(1), ctx.input(2), ctx.input(3)
  interleaved = bool(ctx.attr("interleaved", 0))
  if x.ndim == 4: xs = x.permute(0, 2, 1, 3)                          # (B, S, H, D)
  else:
    heads = int(ctx.attr("num_heads", 0))
    if not heads: raise ctx.fail("3-D input needs the num_heads attribute")
    xs = x.reshape(x.shape[0], x.shape[1], heads, x.shape[2] // heads)
  b, s, h, d = xs.shape
  rd = int(ctx.attr("rotary_embedding_dim", 0)) or d
  half = rd // 2
  if pos is not None:                                                 # caches (max_pos, half) indexed by position
    hit = nn.one_hot(pos, cos.shape[0]).reshape(b, s, cos.shape[0], 1)
    cos = nn.masked_select_sum(hit, cos.reshape(1, 1, *cos.shape), 2)
    sin = nn.masked_select_sum(hit, sin.reshape(1, 1, *sin.shape), 2)
  cos, sin = cos.reshape(b, s, 1, half), sin.reshape(b, s, 1, half)
  rot = xs.shrink((None, None, None, (0, rd)))
  if interleaved:
    pairs = rot.reshape(b, s, h, half, 2)
    x1 = pairs.shrink((None,) * 4 + ((0, 1),)).reshape(b, s, h, half)
    x2 = pairs.shrink((None,) * 4 + ((1, 2),)).reshape(b, s, h, half)
  else:
    x1, x2 = rot.shrink((None, None, None, (0, half))), rot.shrink((None, None, None, (half, rd)))
  real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
  rot = Tensor.stack([real, imag], -1).reshape(b, s, h, rd) if interleaved else real.cat(imag, dim=-1)
  out = rot.cat(xs.shrink((None, None, None, (rd, d))), dim=-1) if rd < d else rot
  out = out.cast(x.dtype)
  return out.permute(0, 2, 1, 3) if x.ndim == 4 else out.reshape(x.shape)


# ---------------------------------------------------------------- attention
def _neg_inf_where(allowed: Tensor, dt) -> Tensor:
  """0 where allowed, -inf elsewhere: an additive attention bias."""
  return allowed.where(Tensor.full((), 0.0, dt, allowed.device), Tensor.full((), -math.inf, dt, allowed.device))


def _masked_softmax(x: Tensor) -> Tensor:
  """Softmax over the last axis that gives 0 (not NaN) for rows that are entirely -inf."""
  m = x.max(-1, keepdim=True)
  safe = (m == -math.inf).where(0.0, m).cast(x.dtype)
  e = (x - safe).exp().cast(x.dtype)
  s = e.sum(-1, keepdim=True)
  return e / (s == 0).where(1.0, s).cast(x.dtype)


def _heads_4d(t: Tensor, heads: int) -> Tensor:
  b, s, hidden = t.shape
  return t.reshape(b, s, heads, hidden // heads).permute(0, 2, 1, 3)


def _attention_bias(ctx: NodeContext, mask, past_k, nonpad, q_len: int, kv_len: int, bias_dt, dev) -> Tensor:
  """The additive bias of the attention scores, (q_len, kv_len) or broadcast to the mask's shape: the mask (a
  boolean one as 0/-inf, padded with masked positions to kv_len), the causal and sliding-window limits (query i
  sits at i plus the past length, or at its place in the non-padded sequence when there is no past) and the keys
  past each batch entry's non-padded length."""
  bias = Tensor.zeros(q_len, kv_len, dtype=bias_dt, device=dev)
  if mask is not None and mask.shape[-1] < kv_len:
    fill = False if mask.dtype.is_bool else -math.inf
    mask = mask.pad(((0, 0),) * (mask.ndim - 1) + ((0, kv_len - mask.shape[-1]),), value=fill)
  i_idx = Tensor.arange(q_len, device=dev).reshape(q_len, 1)
  j_idx = Tensor.arange(kv_len, device=dev).reshape(1, kv_len)
  if past_k is None and nonpad is not None: offset = (nonpad.cast(dtypes.int32) - q_len).reshape(-1, 1, 1, 1)
  else: offset = past_k.shape[2] if past_k is not None else 0
  if mask is not None: mask_bias = _neg_inf_where(mask, bias_dt) if mask.dtype.is_bool else mask.cast(bias_dt)
  if ctx.attr("is_causal", 0):
    base = mask_bias if mask is not None else bias
    bias = base + _neg_inf_where(j_idx <= i_idx + offset, bias_dt)
  elif mask is not None: bias = bias + mask_bias
  left, right = int(ctx.attr("left_window_size", -1)), int(ctx.attr("right_window_size", -1))
  if left >= 0 or right >= 0:
    diff = i_idx + offset - j_idx
    allowed = None
    if left >= 0: allowed = diff <= left
    if right >= 0: allowed = (-diff <= right) if allowed is None else allowed.logical_and(-diff <= right)
    bias = bias + _neg_inf_where(allowed, bias_dt)
  if nonpad is not None:
    keep = j_idx.reshape(1, 1, 1, kv_len) < nonpad.cast(dtypes.int32).reshape(-1, 1, 1, 1)
    bias = bias + _neg_inf_where(keep, bias_dt)
  return bias


@onnx_op("Attention")
def attention(ctx: NodeContext):
  q, k, v, mask, past_k, past_v, nonpad = (ctx.input(i) for i in range(7))
  rank3 = q.ndim == 3
  if rank3:
    qh, kvh = ctx.attr("q_num_heads"), ctx.attr("kv_num_heads")
    if qh is None or kvh is None: raise ctx.fail("3-D inputs need q_num_heads and kv_num_heads")
    q, k, v = _heads_4d(q, int(qh)), _heads_4d(k, int(kvh)), _heads_4d(v, int(kvh))
  dt = q.dtype
  scale = ctx.attr("scale")
  scale = 1.0 / math.sqrt(q.shape[3]) if scale is None else float(scale)
  root = float(np.asarray(np.sqrt(scale), dtype=dt.compute.numpy)) if not dt.storage_only else math.sqrt(scale)
  if past_k is not None: k = past_k.cat(k, dim=2)
  if past_v is not None: v = past_v.cat(v, dim=2)
  present_k, present_v = k, v
  batch, q_len, kv_len = q.shape[0], q.shape[2], k.shape[2]
  bias = _attention_bias(ctx, mask, past_k, nonpad, q_len, kv_len, dt.compute, q.device)
  heads_q, heads_kv = q.shape[1], k.shape[1]
  if heads_q != heads_kv and heads_q % heads_kv == 0:
    reps = heads_q // heads_kv
    def repeat(t: Tensor) -> Tensor:
      return t.unsqueeze(2).expand(t.shape[0], heads_kv, reps, *t.shape[2:]).reshape(t.shape[0], heads_q, *t.shape[2:])
    k, v = repeat(k), repeat(v)
  qk = (q * root).cast(dt).matmul((k.transpose(2, 3) * root).cast(dt)).cast(dt)
  softcap = float(ctx.attr("softcap", 0.0) or 0.0)
  if softcap > 0: qk = ((qk / softcap).tanh() * softcap).cast(dt)
  qk_bias = (qk + bias).cast(dt)
  mode = int(ctx.attr("qk_matmul_output_mode", 0))
  qk_out = qk_bias if mode == 2 else qk
  precision = ONNX_DTYPES.get(int(ctx.attr("softmax_precision", 0) or 0))
  probs = _masked_softmax(qk_bias.cast(precision) if precision is not None else qk_bias.cast(dt.compute))
  masked_rows = bias.max(-1, keepdim=True) == -math.inf
  probs = masked_rows.where(0.0, probs).cast(probs.dtype)
  if mode == 3: qk_out = probs
  y = probs.cast(dt).matmul(v).cast(dt)
  if rank3: y = y.permute(0, 2, 1, 3).reshape(batch, q_len, -1)
  return declared_outputs(ctx, [y, present_k, present_v, qk_out.cast(dt)])


@onnx_op("LinearAttention")
def linear_attention(ctx: NodeContext):
  q, k, v, past, decay, beta = (ctx.input(i) for i in range(6))
  rule = attr_str(ctx, "update_rule", "gated_delta")
  hq, hkv = int(ctx.attr("q_num_heads", 0)), int(ctx.attr("kv_num_heads", 0))
  if not hq or not hkv or hq % hkv: raise ctx.fail("q_num_heads must be a positive multiple of kv_num_heads")
  gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
  if gating and decay is None: raise ctx.fail(f"update_rule {rule!r} needs the decay input")
  if delta and beta is None: raise ctx.fail(f"update_rule {rule!r} needs the beta input")
  b, t, _ = q.shape
  dk, dv = q.shape[-1] // hq, v.shape[-1] // hkv
  group = hq // hkv
  f32 = dtypes.float32
  q4, k4, v4 = (_heads_4d(a, h).cast(f32) for a, h in ((q, hq), (k, hkv), (v, hkv)))
  if decay is not None:
    decay4 = decay.reshape(b, t, hkv, 1).permute(0, 2, 1, 3) if decay.shape[-1] == hkv else _heads_4d(decay, hkv)
    decay4 = decay4.cast(f32)
  if beta is not None: beta4 = beta.reshape(b, t, beta.shape[-1], 1).permute(0, 2, 1, 3).cast(f32)
  state = past.cast(f32) if past is not None else Tensor.zeros(b, hkv, dk, dv, device=q.device)
  scale = float(ctx.attr("scale", 0.0) or 0.0) or 1.0 / math.sqrt(dk)
  def step(a: Tensor, i: int) -> Tensor:
    return a.shrink((None, None, (i, i + 1), None)).reshape(*a.shape[:2], a.shape[3])
  outs = []
  for i in range(t):
    qt, kt, vt = step(q4, i), step(k4, i), step(v4, i)
    if gating: state = state * step(decay4, i).exp().unsqueeze(-1)
    if delta:
      retrieved = (state * kt.unsqueeze(-1)).sum(2)                     # (B, Hkv, dv)
      vt = step(beta4, i) * (vt - retrieved)
    state = state + kt.unsqueeze(-1) * vt.unsqueeze(-2)
    read = state if group == 1 else \
      state.unsqueeze(2).expand(b, hkv, group, dk, dv).reshape(b, hq, dk, dv)
    outs.append((qt.unsqueeze(-1) * read).sum(2) * scale)               # (B, Hq, dv)
  y = Tensor.stack(outs, 2).permute(0, 2, 1, 3).reshape(b, t, hq * dv).cast(q.dtype)
  return declared_outputs(ctx, [y, state.cast(past.dtype if past is not None else q.dtype)])
