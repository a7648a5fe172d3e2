"""Neural-network layers on the lazy Tensor (tinygrad-style: plain classes whose Tensor attributes are the
parameters) and state dicts: `get_state_dict` / `load_state_dict` with dotted names ("layer1.weight",
"blocks.0.norm.bias"), and `safe_save` / `safe_load` for safetensors files.

Initialization follows torch's defaults and draws from `Tensor`'s seeded generator (`Tensor.manual_seed`), so a
model built after the same seed has the same weights."""
from __future__ import annotations
import math
import os
from typing import Any
import numpy as np
from tgc.ir import dtypes
from tgc.frontend.tensor import Tensor


def _pair(v, name: str) -> tuple[int, int]:
  if isinstance(v, int): return (v, v)
  v = tuple(int(x) for x in v)
  if len(v) != 2: raise ValueError(f"{name}: expected an int or 2 ints, got {v}")
  return v


class Linear:
  """y = x @ weight.T + bias with weight (out_features, in_features)."""

  def __init__(self, in_features: int, out_features: int, bias: bool = True, device: str | None = None):
    self.in_features, self.out_features = in_features, out_features
    self.weight = Tensor.kaiming_uniform(out_features, in_features, a=math.sqrt(5), device=device)
    bound = 1 / math.sqrt(in_features) if in_features else 0.0
    self.bias = Tensor.uniform(out_features, low=-bound, high=bound, device=device) if bias else None

  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim == 0 or x.shape[-1] != self.in_features:
      raise ValueError(f"Linear: input {x.shape} does not end in in_features={self.in_features}")
    return x.linear(self.weight.T, self.bias)


class Conv2d:
  """2-D convolution with torch's arguments; weight (out_channels, in_channels/groups, kh, kw)."""

  def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
               groups: int = 1, bias: bool = True, device: str | None = None):
    if groups < 1 or in_channels % groups or out_channels % groups:
      raise ValueError(f"Conv2d: in_channels={in_channels} and out_channels={out_channels} must be divisible by "
                       f"groups={groups}")
    self.kernel_size = _pair(kernel_size, "Conv2d kernel_size")
    self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
    self.weight = Tensor.kaiming_uniform(out_channels, in_channels // groups, *self.kernel_size, a=math.sqrt(5),
                                         device=device)
    fan_in = (in_channels // groups) * self.kernel_size[0] * self.kernel_size[1]
    bound = 1 / math.sqrt(fan_in) if fan_in else 0.0
    self.bias = Tensor.uniform(out_channels, low=-bound, high=bound, device=device) if bias else None

  def __call__(self, x: Tensor) -> Tensor:
    return x.conv2d(self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class BatchNorm2d:
  """Batch normalization over (N, C, H, W) per channel. In inference (the default, `Tensor.training` False) it
  uses running_mean/running_var; in training it uses the batch statistics and updates the running ones."""

  def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1, affine: bool = True,
               track_running_stats: bool = True, device: str | None = None):
    self.num_features, self.eps, self.momentum = num_features, eps, momentum
    self.weight = Tensor.ones(num_features, device=device) if affine else None
    self.bias = Tensor.zeros(num_features, device=device) if affine else None
    if track_running_stats:
      self.running_mean = Tensor.zeros(num_features, device=device)
      self.running_var = Tensor.ones(num_features, device=device)
      self.num_batches_tracked = Tensor.zeros((), dtype=dtypes.int64, device=device)
    else: self.running_mean = self.running_var = self.num_batches_tracked = None

  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim < 2 or x.shape[1] != self.num_features:
      raise ValueError(f"BatchNorm2d: input {x.shape} does not have {self.num_features} channels in dim 1")
    if Tensor.training or self.running_mean is None:
      axes = tuple(a for a in range(x.ndim) if a != 1)
      mean = x.mean(axes)
      var = x.var(axes, correction=0)
      if Tensor.training and self.running_mean is not None:
        n = x.numel() // self.num_features
        unbiased = var * (n / max(n - 1, 1))
        self.running_mean.assign((1 - self.momentum) * self.running_mean + self.momentum * mean)
        self.running_var.assign((1 - self.momentum) * self.running_var + self.momentum * unbiased)
        self.num_batches_tracked.assign(self.num_batches_tracked + 1)
    else: mean, var = self.running_mean, self.running_var
    return x.batchnorm(self.weight, self.bias, mean, (var + self.eps).rsqrt())


class LayerNorm:
  """Normalizes over the last len(normalized_shape) axes, then scales and shifts elementwise."""

  def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, device: str | None = None):
    self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    self.eps = eps
    self.weight = Tensor.ones(*self.normalized_shape, device=device) if elementwise_affine else None
    self.bias = Tensor.zeros(*self.normalized_shape, device=device) if elementwise_affine else None

  def __call__(self, x: Tensor) -> Tensor:
    n = len(self.normalized_shape)
    if x.ndim < n or x.shape[x.ndim - n:] != self.normalized_shape:
      raise ValueError(f"LayerNorm: input {x.shape} does not end in normalized_shape {self.normalized_shape}")
    y = x.layernorm(axis=tuple(range(-n, 0)), eps=self.eps)
    if self.weight is not None: y = y * self.weight + self.bias
    return y


class Embedding:
  """A lookup table (num_embeddings, embedding_dim): integer indices of any shape -> (*shape, embedding_dim).
  The lookup is an `arange == index` mask summed against the table (no data-dependent loads)."""

  def __init__(self, num_embeddings: int, embedding_dim: int, device: str | None = None):
    self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
    bound = math.sqrt(6.0 / (num_embeddings + embedding_dim))
    self.weight = Tensor.uniform(num_embeddings, embedding_dim, low=-bound, high=bound, device=device)

  def __call__(self, idx) -> Tensor:
    if not isinstance(idx, Tensor): idx = Tensor(np.asarray(idx, dtype=np.int32), self.weight.device)
    if not idx.dtype.is_int: raise TypeError(f"Embedding: indices must be integer, got {idx.dtype.name}")
    return self.weight[idx]


# ---------------------------------------------------------------- state dicts
def get_state_dict(obj: Any, prefix: str = "") -> dict[str, Tensor]:
  """Every Tensor reachable from `obj` through attributes, lists/tuples (by position) and dicts (by key),
  named by the dotted path; None attributes are skipped."""
  if isinstance(obj, Tensor): return {prefix.rstrip("."): obj}
  if isinstance(obj, (list, tuple)):
    out: dict[str, Tensor] = {}
    for i, v in enumerate(obj): out.update(get_state_dict(v, f"{prefix}{i}."))
    return out
  if isinstance(obj, dict):
    out = {}
    for k, v in obj.items(): out.update(get_state_dict(v, f"{prefix}{k}."))
    return out
  if hasattr(obj, "__dict__"):
    out = {}
    for k, v in vars(obj).items(): out.update(get_state_dict(v, f"{prefix}{k}."))
    return out
  return {}


def load_state_dict(obj: Any, state: dict[str, Tensor], strict: bool = True) -> None:
  """Copy `state` into the tensors of `obj` (moved to each parameter's device and cast to its dtype). Shapes
  must match; with `strict`, every parameter must be present and every key must name a parameter."""
  params = get_state_dict(obj)
  if strict:
    missing = sorted(set(params) - set(state))
    unexpected = sorted(set(state) - set(params))
    if missing or unexpected:
      raise ValueError(f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}")
  for name, param in params.items():
    if name not in state: continue
    value = state[name]
    if not isinstance(value, Tensor): value = Tensor(np.asarray(value), param.device)
    if value.shape != param.shape:
      raise ValueError(f"load_state_dict: {name} has shape {value.shape} in the state dict but {param.shape} "
                       f"in the model")
    param.assign(value.to(param.device).cast(param.dtype))


def safe_save(state: dict[str, Tensor], path: str | os.PathLike, metadata: dict[str, str] | None = None) -> None:
  """Write a state dict to a safetensors file (values are realized and copied to the host)."""
  from safetensors.numpy import save_file
  arrays = {}
  for name, t in state.items():
    if isinstance(t, Tensor):
      if t.dtype.storage_only: raise TypeError(f"safe_save: {name} has storage-only dtype {t.dtype.name}")
      arrays[name] = np.array(t.numpy(), order="C")   # ascontiguousarray would make 0-d 1-d
    else: arrays[name] = np.array(t, order="C")
  save_file(arrays, os.fspath(path), metadata=metadata)


def safe_load(path: str | os.PathLike, device: str | None = None) -> dict[str, Tensor]:
  """Read a safetensors file into Tensors on `device` (dtypes kept as stored)."""
  from safetensors.numpy import load_file
  try: arrays = load_file(os.fspath(path))
  except FileNotFoundError: raise
  except Exception as error:
    raise ValueError(f"safe_load: cannot read {os.fspath(path)!r} as safetensors ({error})") from None
  return {name: Tensor(arr, device=device, dtype=dtypes.from_numpy(arr.dtype)) for name, arr in arrays.items()}
