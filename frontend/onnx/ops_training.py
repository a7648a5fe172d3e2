"""ONNX training operators: the losses NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, and the optimizer
steps of the ai.onnx.preview.training domain (Adagrad, Momentum, Adam) over groups of (parameter, gradient,
state) inputs."""
from __future__ import annotations
import math
from tgc.ir import dtypes
from tgc.frontend.tensor import Tensor
from tgc.frontend.onnx.registry import NodeContext, onnx_op
from tgc.frontend.onnx import compose as C
from tgc.frontend.onnx import compose_nn as nn
from tgc.frontend.onnx.node_helpers import attr_str, declared_outputs


# ---------------------------------------------------------------- losses
def _gather_class(x: Tensor, target: Tensor) -> Tensor:
  """x (N, C, d...), target (N, d...) -> x[n, target[n, d...], d...] (0 where the target is out of range)."""
  c = x.shape[1]
  hit = nn.one_hot(target, c)                                          # (N, d..., C)
  return nn.masked_select_sum(hit, nn.move_axis(x, 1, -1), -1)


def _nll(ctx: NodeContext, logp: Tensor, target: Tensor, weight, reduction: str, ignore_index):
  picked = -_gather_class(logp, target)
  if weight is not None: w = nn.gather_last(weight, target.reshape(-1)).reshape(target.shape)
  else: w = None
  if ignore_index is not None:
    keep = target.cast(dtypes.int64) != int(ignore_index)
    w = keep.where(w if w is not None else 1.0, 0.0).cast(logp.dtype)
  loss = picked * w if w is not None else picked
  if reduction == "none": return loss
  if reduction == "sum": return loss.sum()
  if reduction != "mean": raise ctx.fail(f"unknown reduction {reduction!r}")
  return loss.sum() / w.sum() if w is not None else loss.mean()


@onnx_op("NegativeLogLikelihoodLoss")
def negative_log_likelihood_loss(ctx: NodeContext):
  x = ctx.input(0)
  loss = _nll(ctx, x, ctx.input(1), ctx.input(2), attr_str(ctx, "reduction", "mean"), ctx.attr("ignore_index"))
  return loss.cast(x.dtype)


@onnx_op("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy_loss(ctx: NodeContext):
  x = ctx.input(0)
  logp = x.log_softmax(1)
  loss = _nll(ctx, logp, ctx.input(1), ctx.input(2), attr_str(ctx, "reduction", "mean"), ctx.attr("ignore_index"))
  return declared_outputs(ctx, [loss.cast(x.dtype), logp.cast(x.dtype)])


# ---------------------------------------------------------------- ai.onnx.preview.training
def _optimizer_groups(ctx: NodeContext, per: int) -> list[list[Tensor]]:
  rest = ctx.inputs[2:]
  n = len(rest) // per
  return [[rest[i + k * n] for k in range(per)] for i in range(n)]


@onnx_op("ai.onnx.preview.training:Adagrad")
def _adagrad(ctx):
  r, t = ctx.inputs[0].reshape(()), ctx.inputs[1].reshape(())
  decay, eps, norm = ctx.attr("decay_factor", 0.0), ctx.attr("epsilon", 0.0), ctx.attr("norm_coefficient", 0.0)
  xs, hs = [], []
  for x, g, h in _optimizer_groups(ctx, 3):
    rate = r / (t.cast(r.dtype) * decay + 1)
    g_reg = x * norm + g
    h_new = h + g_reg * g_reg
    xs.append((x - rate * g_reg / (h_new.sqrt() + eps)).cast(x.dtype))
    hs.append(h_new.cast(h.dtype))
  return xs + hs


@onnx_op("ai.onnx.preview.training:Momentum")
def _momentum(ctx):
  r, t = ctx.inputs[0].reshape(()), ctx.inputs[1].reshape(())
  alpha, beta, norm = ctx.attr("alpha"), ctx.attr("beta"), ctx.attr("norm_coefficient")
  nesterov = ctx.attr("mode", "standard") == "nesterov"
  xs, vs = [], []
  for x, g, v in _optimizer_groups(ctx, 3):
    g_reg = x * norm + g
    beta_adj = (t > 0).where(C.scalar(beta, g_reg.dtype, x.device), C.scalar(1.0, g_reg.dtype, x.device))
    v_new = v * alpha + g_reg * beta_adj
    step = (g_reg + v_new * alpha) if nesterov else v_new
    xs.append((x - r * step).cast(x.dtype))
    vs.append(v_new.cast(v.dtype))
  return xs + vs


@onnx_op("ai.onnx.preview.training:Adam")
def _adam(ctx):
  r, t = ctx.inputs[0].reshape(()), ctx.inputs[1].reshape(())
  alpha, beta = ctx.attr("alpha", 0.9), ctx.attr("beta", 0.999)
  eps, norm, post = ctx.attr("epsilon", 0.0), ctx.attr("norm_coefficient", 0.0), ctx.attr("norm_coefficient_post", 0.0)
  tf = t.cast(dtypes.float64)
  corr = ((1 - (tf * math.log(beta)).exp()).sqrt() / (1 - (tf * math.log(alpha)).exp())).cast(r.dtype)
  r_adj = (t > 0).where(r * corr, r)
  xs, vs, hs = [], [], []
  for x, g, v, h in _optimizer_groups(ctx, 4):
    g_reg = x * norm + g
    v_new = v * alpha + g_reg * (1 - alpha)
    h_new = h * beta + g_reg * g_reg * (1 - beta)
    x_new = (x - r_adj * (v_new / (h_new.sqrt() + eps))) * (1 - post)
    xs.append(x_new.cast(x.dtype))
    vs.append(v_new.cast(v.dtype))
    hs.append(h_new.cast(h.dtype))
  return xs + vs + hs
