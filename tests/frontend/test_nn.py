"""nn layers (Linear, Conv2d, BatchNorm2d, LayerNorm, Embedding) against numpy on every device, state dict naming
and loading, safetensors round trips (exact, every dtype, 0-d and size-0 tensors) and seeded initialization.

Tolerance: REDUCE (rtol 1e-4, atol 1e-4) for every layer output (they sum over features or windows)."""
from __future__ import annotations
import math

import numpy as np
import pytest

from tgc.frontend import Tensor, dtypes, nn

REDUCE = dict(rtol=1e-4, atol=1e-4)
def nonzero(shape, seed: int = 0, low: float = 0.1, high: float = 2.0) -> np.ndarray:
  g = np.random.default_rng(seed)
  return (g.uniform(low, high, shape) * g.choice([-1.0, 1.0], size=shape)).astype(np.float32)


def tensor(a, device: str) -> Tensor: return Tensor(np.asarray(a), device=device)


def close(t: Tensor, expected, tol=REDUCE) -> None:
  out = t.numpy()
  assert out.shape == np.shape(expected) and out.dtype == np.float32
  np.testing.assert_allclose(out, expected, **tol)


def np_conv2d(x, w, b, stride, padding, groups):
  """Direct 2-D convolution (float64) through numpy's sliding windows."""
  x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
  kh, kw = w.shape[2:]
  win = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))[:, :, ::stride, ::stride]
  cin_g, rc = w.shape[1], w.shape[0] // groups
  outs = [np.einsum("bchwij,ocij->bohw", win[:, g * cin_g:(g + 1) * cin_g], w[g * rc:(g + 1) * rc])
          for g in range(groups)]
  return np.concatenate(outs, 1) + b.reshape(1, -1, 1, 1)


# ---------------------------------------------------------------- layers
def test_linear(device):
  Tensor.manual_seed(1)
  layer = nn.Linear(33, 7, device=device)
  x = nonzero((5, 33), seed=2)
  w, b = layer.weight.numpy(), layer.bias.numpy()
  assert w.shape == (7, 33) and b.shape == (7,)
  close(layer(tensor(x, device)), x @ w.T + b)
  no_bias = nn.Linear(4, 3, bias=False, device=device)
  assert no_bias.bias is None
  x3 = nonzero((2, 3, 4), seed=3)
  close(no_bias(tensor(x3, device)), x3 @ no_bias.weight.numpy().T)
  with pytest.raises(ValueError, match=r"Linear: input \(5, 32\)"): layer(tensor(nonzero((5, 32)), device))


@pytest.mark.parametrize("stride,padding,groups", [(1, 1, 1), (2, 0, 2)], ids=str)
def test_conv2d(device, stride, padding, groups):
  Tensor.manual_seed(4)
  layer = nn.Conv2d(4, 6, 3, stride=stride, padding=padding, groups=groups, device=device)
  assert layer.weight.shape == (6, 4 // groups, 3, 3) and layer.bias.shape == (6,)
  x = nonzero((2, 4, 7, 9), seed=5)
  expected = np_conv2d(x, layer.weight.numpy(), layer.bias.numpy(), stride, padding, groups)
  close(layer(tensor(x, device)), expected)


def test_conv2d_bad_groups():
  with pytest.raises(ValueError, match="groups=3"): nn.Conv2d(4, 6, 3, groups=3, device="numpy")


def test_batchnorm2d_inference(device):
  bn = nn.BatchNorm2d(3, eps=1e-3, device=device)
  stats = {name: nonzero((3,), seed=k) for k, name in enumerate(("weight", "bias", "running_mean"))}
  stats["running_var"] = np.abs(nonzero((3,), seed=9))
  nn.load_state_dict(bn, {**{k: tensor(v, device) for k, v in stats.items()},
                          "num_batches_tracked": tensor(np.array(5, np.int64), device)})
  x = nonzero((2, 3, 5, 7), seed=6)
  c = lambda v: v.reshape(1, 3, 1, 1)  # noqa: E731
  expected = (x - c(stats["running_mean"])) / np.sqrt(c(stats["running_var"]) + 1e-3) * c(stats["weight"]) + \
    c(stats["bias"])
  close(bn(tensor(x, device)), expected)
  with pytest.raises(ValueError, match="3 channels"): bn(tensor(nonzero((2, 4, 5, 5)), device))


def test_batchnorm2d_training_updates_running_stats(device):
  bn = nn.BatchNorm2d(3, momentum=0.2, device=device)
  x = nonzero((4, 3, 5, 3), seed=7)
  Tensor.training = True
  try: out = bn(tensor(x, device))
  finally: Tensor.training = False
  mean, var = x.mean((0, 2, 3)), x.var((0, 2, 3))
  close(out, (x - mean.reshape(1, 3, 1, 1)) / np.sqrt(var.reshape(1, 3, 1, 1) + 1e-5))
  n = x.size // 3
  close(bn.running_mean, 0.2 * mean)
  close(bn.running_var, 0.8 + 0.2 * var * n / (n - 1))
  assert bn.num_batches_tracked.numpy() == 1


@pytest.mark.parametrize("shape", [7, (3, 5)], ids=str)
def test_layernorm(device, shape):
  ln = nn.LayerNorm(shape, eps=1e-4, device=device)
  norm_shape = (shape,) if isinstance(shape, int) else shape
  w, b = nonzero(norm_shape, seed=8), nonzero(norm_shape, seed=9)
  nn.load_state_dict(ln, {"weight": tensor(w, device), "bias": tensor(b, device)})
  x = nonzero((2, 3, 5, 7)[:4 - len(norm_shape)] + norm_shape, seed=10)
  axes = tuple(range(-len(norm_shape), 0))
  expected = (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + 1e-4) * w + b
  close(ln(tensor(x, device)), expected)
  with pytest.raises(ValueError, match="normalized_shape"): ln(tensor(nonzero((2, 6)), device))


def test_layernorm_without_affine(device):
  ln = nn.LayerNorm(5, elementwise_affine=False, device=device)
  assert nn.get_state_dict(ln) == {}
  x = nonzero((3, 5), seed=11)
  close(ln(tensor(x, device)), (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5))


def test_embedding(device):
  Tensor.manual_seed(12)
  emb = nn.Embedding(11, 5, device=device)
  table = emb.weight.numpy()
  idx = np.array([[0, 10, 3], [-1, 4, 4]], np.int32)
  out = emb(tensor(idx, device)).numpy()
  np.testing.assert_array_equal(out, table[idx])        # a selection: exact
  np.testing.assert_array_equal(emb([2, 7]).numpy(), table[[2, 7]])
  with pytest.raises(TypeError, match="integer"): emb(tensor(np.float32([1.0]), device))


def test_small_model_end_to_end(device):
  class Net:
    def __init__(self):
      self.conv = nn.Conv2d(2, 4, 3, padding=1, device=device)
      self.bn = nn.BatchNorm2d(4, device=device)
      self.head = [nn.Linear(4 * 3 * 3, 5, device=device)]

    def __call__(self, x: Tensor) -> Tensor:
      x = self.bn(self.conv(x)).relu().max_pool2d(2)
      return self.head[0](x.flatten(1)).softmax()

  Tensor.manual_seed(13)
  net = Net()
  p = {k: v.numpy() for k, v in nn.get_state_dict(net).items()}
  x = nonzero((2, 2, 6, 7), seed=14)
  h = np_conv2d(x, p["conv.weight"], p["conv.bias"], 1, 1, 1)
  h = (h - p["bn.running_mean"].reshape(1, -1, 1, 1)) / np.sqrt(p["bn.running_var"].reshape(1, -1, 1, 1) + 1e-5)
  h = np.maximum(h * p["bn.weight"].reshape(1, -1, 1, 1) + p["bn.bias"].reshape(1, -1, 1, 1), 0)
  h = h[:, :, :6, :6].reshape(2, 4, 3, 2, 3, 2).max((3, 5)).reshape(2, -1)
  logits = h @ p["head.0.weight"].T + p["head.0.bias"]
  e = np.exp(logits - logits.max(-1, keepdims=True))
  close(net(tensor(x, device)), e / e.sum(-1, keepdims=True))


# ---------------------------------------------------------------- initialization
def test_seeded_init_is_reproducible_and_bounded():
  Tensor.manual_seed(3)
  a = nn.Linear(27, 8, device="numpy")
  Tensor.manual_seed(3)
  b = nn.Linear(27, 8, device="numpy")
  np.testing.assert_array_equal(a.weight.numpy(), b.weight.numpy())
  np.testing.assert_array_equal(a.bias.numpy(), b.bias.numpy())
  c = nn.Linear(27, 8, device="numpy")
  assert not np.array_equal(a.weight.numpy(), c.weight.numpy())
  bound = 1 / math.sqrt(27)        # torch's default: kaiming_uniform(a=sqrt(5)) gives 1/sqrt(fan_in)
  assert np.abs(a.weight.numpy()).max() <= bound + 1e-6 and np.abs(a.weight.numpy()).max() > bound / 2
  assert np.abs(a.bias.numpy()).max() <= bound + 1e-6
  conv = nn.Conv2d(3, 4, (3, 2), device="numpy")
  bound = 1 / math.sqrt(3 * 3 * 2)
  assert np.abs(conv.weight.numpy()).max() <= bound + 1e-6 and np.abs(conv.bias.numpy()).max() <= bound + 1e-6
  bn = nn.BatchNorm2d(4, device="numpy")
  np.testing.assert_array_equal(bn.weight.numpy(), np.ones(4, np.float32))
  np.testing.assert_array_equal(bn.running_var.numpy(), np.ones(4, np.float32))


# ---------------------------------------------------------------- state dicts
class Block:
  def __init__(self, device):
    self.conv = nn.Conv2d(2, 3, 3, device=device)
    self.norm = nn.LayerNorm(3, device=device)
    self.unused = None


class Model:
  def __init__(self, device="numpy"):
    self.stem = nn.Linear(4, 2, device=device)
    self.blocks = [Block(device), Block(device)]
    self.heads = {"cls": nn.Linear(3, 5, bias=False, device=device)}
    self.scale = Tensor.ones(1, device=device)
    self.name = "not a tensor"


def test_get_state_dict_names():
  names = sorted(nn.get_state_dict(Model()))
  assert names == sorted(["stem.weight", "stem.bias", "scale", "heads.cls.weight"] +
                         [f"blocks.{i}.{p}" for i in range(2) for p in ("conv.weight", "conv.bias", "norm.weight",
                                                                         "norm.bias")])
  bn_names = sorted(nn.get_state_dict(nn.BatchNorm2d(2, device="numpy")))
  assert bn_names == ["bias", "num_batches_tracked", "running_mean", "running_var", "weight"]


def test_load_state_dict(device):
  Tensor.manual_seed(20)
  source = Model("numpy")
  Tensor.manual_seed(21)
  target = Model(device)
  state = nn.get_state_dict(source)
  nn.load_state_dict(target, state)                      # moved from numpy to `device`
  for name, t in nn.get_state_dict(target).items():
    assert t.device == device
    np.testing.assert_array_equal(t.numpy(), state[name].numpy(), err_msg=name)


def test_load_state_dict_errors():
  model = Model()
  state = nn.get_state_dict(Model())
  with pytest.raises(ValueError, match=r"missing keys \['stem.bias'\]"):
    nn.load_state_dict(model, {k: v for k, v in state.items() if k != "stem.bias"})
  with pytest.raises(ValueError, match=r"unexpected keys \['extra'\]"):
    nn.load_state_dict(model, {**state, "extra": Tensor.ones(1, device="numpy")})
  with pytest.raises(ValueError, match=r"stem.weight has shape \(4, 2\) in the state dict but \(2, 4\)"):
    nn.load_state_dict(model, {**state, "stem.weight": Tensor.ones(4, 2, device="numpy")})
  partial = {"stem.bias": Tensor(np.float32([7, 8]), device="numpy")}
  nn.load_state_dict(model, partial, strict=False)
  np.testing.assert_array_equal(model.stem.bias.numpy(), [7, 8])


# ---------------------------------------------------------------- safetensors
ROUND_TRIP_DTYPES = [np.float32, np.float16, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                     np.uint32, np.bool_]


def test_safetensors_round_trip_is_exact(tmp_path, device):
  g = np.random.default_rng(30)
  state = {}
  for dt in ROUND_TRIP_DTYPES:
    if dt == np.bool_: arr = g.random((3, 5)) > 0.5
    elif np.dtype(dt).kind == "f": arr = g.standard_normal((3, 5)).astype(dt)
    else: arr = g.integers(np.iinfo(dt).min, np.iinfo(dt).max, (3, 5), dtype=dt, endpoint=True)
    state[f"t.{np.dtype(dt).name}"] = arr
  state["scalar"] = np.array(2.5, np.float32)
  state["empty"] = np.zeros((0, 4), np.float32)
  state["special"] = np.array([np.nan, np.inf, -np.inf, -0.0, 1e-40], np.float32)
  tensors = {}
  for name, arr in list(state.items()):
    try: tensors[name] = tensor(arr, device)
    except TypeError:                   # a dtype this device cannot hold (float64 without cl_khr_fp64)
      state.pop(name)
  path = tmp_path / "state.safetensors"
  nn.safe_save(tensors, path, metadata={"format": "tgc"})
  loaded = nn.safe_load(path, device=device)
  assert sorted(loaded) == sorted(state)
  for name, arr in state.items():
    t = loaded[name]
    assert t.device == device and t.shape == arr.shape and t.dtype == dtypes.from_numpy(arr.dtype), name
    out = t.numpy()
    assert out.tobytes() == arr.tobytes(), name                 # bit-exact, NaN and -0.0 included
  # a model saved, loaded into a fresh one, gives the same outputs
  Tensor.manual_seed(31)
  model = Model(device)
  nn.safe_save(nn.get_state_dict(model), tmp_path / "model.safetensors")
  Tensor.manual_seed(32)
  fresh = Model(device)
  nn.load_state_dict(fresh, nn.safe_load(tmp_path / "model.safetensors", device=device))
  x = tensor(nonzero((3, 4), seed=33), device)
  np.testing.assert_array_equal(fresh.stem(x).numpy(), model.stem(x).numpy())


def test_safetensors_file_is_standard(tmp_path):
  from safetensors.numpy import load_file
  arr = np.arange(6, dtype=np.float32).reshape(2, 3)
  nn.safe_save({"w": Tensor(arr, device="numpy"), "raw": np.int32([1, 2])}, tmp_path / "x.safetensors")
  back = load_file(str(tmp_path / "x.safetensors"))
  np.testing.assert_array_equal(back["w"], arr)
  np.testing.assert_array_equal(back["raw"], [1, 2])


def test_safe_load_errors(tmp_path):
  with pytest.raises(FileNotFoundError): nn.safe_load(tmp_path / "missing.safetensors")
  bad = tmp_path / "bad.safetensors"
  bad.write_bytes(b"not a safetensors file")
  with pytest.raises(ValueError, match="bad.safetensors"): nn.safe_load(bad)
