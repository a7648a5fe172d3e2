"""The frontend: lazy Tensor API, nn layers, jit/trace capture, ONNX import."""
from frontend.tensor import Tensor
from ir import dtypes

__all__ = ["Tensor", "dtypes"]
