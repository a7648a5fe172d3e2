"""ONNX import: `load_model(path | bytes | ModelProto, input_shapes=, consts=)` gives an `OnnxGraph` whose call
builds the lazy Tensor graph. Operator handlers live in `ops_basic` (elementwise, reductions, shapes and
movement) and `ops_nn` (convolution, pooling, norms, matmul, recurrent and quantized ops, ...); both register
themselves in `registry.OPS` on import."""
import importlib
from tgc.frontend.onnx.registry import OPS, NodeContext, OnnxError, onnx_op
from tgc.frontend.onnx.importer import OnnxGraph, load_model, ONNX_DTYPES, onnx_dtype
from tgc.frontend.onnx import ops_basic  # noqa: F401  (registers handlers)

try: importlib.import_module("tgc.frontend.onnx.ops_nn")
except ModuleNotFoundError as _e:
  if _e.name != "tgc.frontend.onnx.ops_nn": raise

__all__ = ["OPS", "NodeContext", "OnnxError", "onnx_op", "OnnxGraph", "load_model", "ONNX_DTYPES", "onnx_dtype"]
