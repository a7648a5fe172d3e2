"""The frontend: lazy Tensor API, nn layers, jit/trace capture, ONNX import."""
from tgc.frontend.tensor import Tensor
from tgc.ir import dtypes

__all__ = ["Tensor", "dtypes"]
