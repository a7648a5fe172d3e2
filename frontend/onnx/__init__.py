"""ONNX import: `load_model(path | bytes | ModelProto, input_shapes=, consts=)` gives an `OnnxGraph` whose call
builds the lazy Tensor graph. Operator handlers live in `ops_basic` (elementwise, reductions, shapes and
movement), `ops_nn` (convolution, pooling, norms, matmul, recurrent and quantized ops, ...) and `ops_contrib`
(com.microsoft quantized ops of onnxruntime's QOperator models); they register themselves in `registry.OPS` on
import."""
import importlib
from tgc.frontend.onnx.registry import OPS, NodeContext, OnnxError, onnx_op
from tgc.frontend.onnx.importer import OnnxGraph, load_model, ONNX_DTYPES, onnx_dtype
from tgc.frontend.onnx import ops_basic  # noqa: F401  (registers handlers)

for _module in ("tgc.frontend.onnx.ops_nn", "tgc.frontend.onnx.ops_contrib"):
  try: importlib.import_module(_module)
  except ModuleNotFoundError as _e:
    if _e.name != _module: raise

__all__ = ["OPS", "NodeContext", "OnnxError", "onnx_op", "OnnxGraph", "load_model", "ONNX_DTYPES", "onnx_dtype"]
