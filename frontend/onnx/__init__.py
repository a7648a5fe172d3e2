"""ONNX import: `load_model(path | bytes | ModelProto, input_shapes=, consts=)` gives an `OnnxGraph` whose call
builds the lazy Tensor graph.

Modules: `registry` (the operator table, `NodeContext`, `OnnxError`), `dtypes` (element types and values),
`loading` (reading, ordering and checking a model), `functions` (operators ONNX defines as function bodies),
`scope` (values by name while building), `control_flow` (If, Loop, Scan), `node_checks` (schema checks),
`importer` (`OnnxGraph`, `load_model`).

Operator handlers live in one module per family: `ops_elementwise`, `ops_reduce`, `ops_shape`, `ops_indexing`,
`ops_linalg`, `ops_conv`, `ops_normalization`, `ops_attention`, `ops_rnn`, `ops_quantization`, `ops_signal`,
`ops_spatial`, `ops_ml`, `ops_training`, `ops_contrib` (com.microsoft quantized ops of onnxruntime's QOperator
models) and `ops_contrib_quant` (its integer matrix products: QGemm, DynamicQuantizeMatMul, MatMulIntegerToFloat,
DynamicQuantizeLSTM), composed from `compose` and `compose_nn`, reading nodes through `node_helpers`; they register
themselves in `registry.OPS` when imported here. Each handler maps one node onto lazy Tensor ops, following the ONNX
spec for every opset in use and onnx.reference where the spec leaves room. Attributes arrive without defaults
applied; inputs that set shapes (Reshape's shape, Slice's starts, sizes, scales, k, axes) must fold to compile-time
constants and are read with `ctx.const_value`. Random operators (Bernoulli, RandomNormal, training-mode Dropout) are not
supported."""
from tgc.frontend.onnx.registry import OPS, NodeContext, OnnxError, onnx_op
from tgc.frontend.onnx.dtypes import ONNX_DTYPES, onnx_dtype
from tgc.frontend.onnx.importer import OnnxGraph, load_model
from tgc.frontend.onnx import (ops_attention, ops_contrib, ops_contrib_quant, ops_conv, ops_elementwise, ops_indexing,
                               ops_linalg, ops_ml, ops_normalization, ops_quantization, ops_reduce, ops_rnn, ops_shape,
                               ops_signal, ops_spatial, ops_training)

HANDLER_MODULES = (ops_elementwise, ops_reduce, ops_shape, ops_indexing, ops_linalg, ops_conv, ops_normalization,
                   ops_attention, ops_rnn, ops_quantization, ops_signal, ops_spatial, ops_ml, ops_training,
                   ops_contrib, ops_contrib_quant)   # imported for their registrations

__all__ = ["OPS", "NodeContext", "OnnxError", "onnx_op", "OnnxGraph", "load_model", "ONNX_DTYPES", "onnx_dtype"]
