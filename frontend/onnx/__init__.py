"""ONNX import: `load_model(path | bytes | ModelProto, input_shapes=, consts=)` gives an `OnnxGraph` whose call
builds the lazy Tensor graph.

Modules: `registry` (the operator table, `NodeContext`, `OnnxError`), `dtypes` (element types and values),
`loading` (reading, ordering and checking a model), `functions` (operators ONNX defines as function bodies),
`scope` (values by name while building), `control_flow` (If, Loop, Scan), `node_checks` (schema checks),
`importer` (`OnnxGraph`, `load_model`). Operator handlers live in `ops_basic` (elementwise, reductions, shapes and
movement), `ops_nn` (convolution, pooling, norms, matmul, recurrent and quantized ops, ...) and `ops_contrib`
(com.microsoft quantized ops of onnxruntime's QOperator models), composed from `compose` and `compose_nn`; they
register themselves in `registry.OPS` when imported here."""
from tgc.frontend.onnx.registry import OPS, NodeContext, OnnxError, onnx_op
from tgc.frontend.onnx.dtypes import ONNX_DTYPES, onnx_dtype
from tgc.frontend.onnx.importer import OnnxGraph, load_model
from tgc.frontend.onnx import ops_basic, ops_contrib, ops_nn

HANDLER_MODULES = (ops_basic, ops_nn, ops_contrib)   # imported for their registrations

__all__ = ["OPS", "NodeContext", "OnnxError", "onnx_op", "OnnxGraph", "load_model", "ONNX_DTYPES", "onnx_dtype"]
