"""A transformer encoder layer over a sequence of any length from 1 to 256 tokens: the length `T` is a `Variable`,
a size known only at run time, so one artifact serves every length (`tgc compile examples/encoder_any_length.py:build
--target c -o out`; `tgc validate out` checks the shortest, a middle and the longest length)."""
from tgc import Tensor, Variable, nn

DIM, HEADS = 64, 4


class EncoderLayer:
  def __init__(self, dim: int = DIM, heads: int = HEADS):
    self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))
    self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
    self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
    self.dim, self.heads = dim, heads

  def __call__(self, x: Tensor) -> Tensor:
    t, hd = x.shape[1], self.dim // self.heads
    q = self.q(x).reshape(1, t, self.heads, hd).permute(0, 2, 1, 3)
    k = self.k(x).reshape(1, t, self.heads, hd).permute(0, 2, 3, 1)
    v = self.v(x).reshape(1, t, self.heads, hd).permute(0, 2, 1, 3)
    attention = ((q @ k) * (1 / hd ** 0.5)).softmax(-1)
    mixed = (attention @ v).permute(0, 2, 1, 3).reshape(1, t, self.dim)
    x = self.norm1(x + self.o(mixed))
    return self.norm2(x + self.down(self.up(x).gelu()))


def build():
  return EncoderLayer(), {"tokens": Tensor.empty(1, Variable("T", 1, 256), DIM)}
