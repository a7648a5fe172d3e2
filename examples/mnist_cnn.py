"""Example model: a small CNN for 1x28x28 images written with the Tensor API, weights seeded (no download).
`build()` returns (fn, inputs): the function to compile and example inputs."""
from __future__ import annotations
import numpy as np
from tgc import Tensor
from tgc.frontend.nn import Conv2d, Linear, BatchNorm2d


class SmallCNN:
  def __init__(self):
    Tensor.manual_seed(1234)
    self.conv1 = Conv2d(1, 8, 3, padding=1)
    self.bn1 = BatchNorm2d(8)
    self.conv2 = Conv2d(8, 16, 3, padding=1)
    self.fc1 = Linear(16 * 7 * 7, 64)
    self.fc2 = Linear(64, 10)
    rng = np.random.default_rng(7)   # non-trivial running statistics
    self.bn1.running_mean = Tensor(rng.standard_normal(8, dtype=np.float32) * 0.1)
    self.bn1.running_var = Tensor(rng.uniform(0.5, 1.5, 8).astype(np.float32))

  def __call__(self, x: Tensor) -> Tensor:
    x = self.bn1(self.conv1(x)).relu().max_pool2d(2)
    x = self.conv2(x).relu().max_pool2d(2)
    x = self.fc1(x.flatten(1)).relu()
    return self.fc2(x).log_softmax(-1)


def build(device: str = "c"):
  model = SmallCNN()
  x = Tensor(np.random.default_rng(0).standard_normal((1, 1, 28, 28), dtype=np.float32), device=device)
  return model, [x]
