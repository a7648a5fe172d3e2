"""Example model: a two-layer MLP written with the Tensor API, weights seeded. `build()` returns (fn, inputs) with a
named input ("features") and named outputs ("logits", "probs"), the dict forms `tgc compile` accepts."""
from __future__ import annotations
import numpy as np
from tgc import Tensor
from tgc.frontend.nn import Linear


class TinyMLP:
  def __init__(self, features: int = 16, hidden: int = 32, classes: int = 4):
    Tensor.manual_seed(42)
    self.fc1 = Linear(features, hidden)
    self.fc2 = Linear(hidden, classes)

  def __call__(self, features: Tensor) -> dict[str, Tensor]:
    logits = self.fc2(self.fc1(features).relu())
    return {"logits": logits, "probs": logits.softmax(-1)}


def build():
  model = TinyMLP()
  x = Tensor(np.random.default_rng(0).standard_normal((2, 16), dtype=np.float32))
  return model, {"features": x}
