"""ONNX matrix products and linear algebra: MatMul, Gemm, Einsum and Det."""
from __future__ import annotations
from tgc.ir import promote
from tgc.frontend.onnx.registry import NodeContext, onnx_op
from tgc.frontend.onnx import compose as C
from tgc.frontend.onnx import compose_nn as nn
from tgc.frontend.onnx.node_helpers import attr_str, first_input
from tgc.frontend.onnx.quantized_compute import quantized_matmul


@onnx_op("MatMul")
def matmul(ctx: NodeContext):
  a, b = ctx.input(0), ctx.input(1)
  dt = promote(a.dtype, b.dtype)
  if a.ndim == 1 and b.ndim == 1: return (a.cast(dt) * b.cast(dt)).sum(0, dtype=dt)
  quantized = quantized_matmul(ctx, a, b)
  return quantized if quantized is not None else a.matmul(b)


@onnx_op("Gemm")
def gemm(ctx: NodeContext):
  a, b, c = ctx.input(0), ctx.input(1), ctx.input(2)
  alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
  plain = not ctx.attr("transA", 0) and alpha == 1.0
  quantized = quantized_matmul(ctx, a, b, bool(ctx.attr("transB", 0))) if plain else None
  if quantized is not None:
    return quantized + (c * beta if beta != 1.0 else c) if c is not None and beta != 0.0 else quantized
  if ctx.attr("transA", 0): a = a.T
  if ctx.attr("transB", 0): b = b.T
  y = a.matmul(b)
  if alpha != 1.0: y = y * alpha
  if c is not None and beta != 0.0: y = y + (c * beta if beta != 1.0 else c)
  return y.cast(a.dtype)


@onnx_op("Einsum")
def einsum(ctx: NodeContext):
  return nn.einsum(attr_str(ctx, "equation", ""), [t for t in ctx.inputs if t is not None])


@onnx_op("Det")
def _det(ctx):
  x = first_input(ctx)
  return C.det(x).cast(x.dtype)
