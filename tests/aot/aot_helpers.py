"""What the tests of the aot layer share: the example models, a toy Tensor-API model file (`write_toy_model`: a
`build` scaled by `scale`, plus models that fold, take ints and a dict, or fail in each way a user's code can),
running the `tgc` command in process, and the check of a user error (exit 2, one stderr line naming the culprit)."""
from __future__ import annotations
import textwrap
from pathlib import Path

from click.testing import CliRunner

from tgc.aot.cli import cli

ROOT = Path(__file__).resolve().parents[2]
MNIST = str(ROOT / "examples" / "mnist_cnn.py") + ":build"
MLP = str(ROOT / "examples" / "tiny_mlp.py") + ":build"

TOY_MODEL = """
import numpy as np
from tgc.frontend import Tensor
SCALE = {scale}


def build():
  rng = np.random.default_rng(3)
  w = Tensor(rng.standard_normal((8, 5), dtype=np.float32) * SCALE)
  bias = Tensor(np.linspace(-1, 1, 5, dtype=np.float32))
  def fn(x): return (x @ w + bias).relu() + 1.0
  return fn, [Tensor(rng.standard_normal((3, 8), dtype=np.float32))]


def folded():
  rng = np.random.default_rng(4)
  w = Tensor(rng.standard_normal((5, 8), dtype=np.float32))
  def fn(x): return x @ (w * 2.0).T.contiguous()
  return fn, [Tensor(rng.standard_normal((3, 8), dtype=np.float32))]


def ints():
  def fn(idx, x): return (idx.cast(x.dtype) * x).sum(axis=1)
  return fn, {{"idx": Tensor(np.zeros((2, 6), np.int32)), "x": Tensor(np.ones((2, 6), np.float32))}}


def broken():
  raise ValueError("boom in the model")


def broken_fn():
  def fn(x): raise RuntimeError("fn exploded")
  return fn, [Tensor(np.ones(3, np.float32))]


def not_a_pair():
  return 42
"""


def write_toy_model(folder: Path, scale: float = 1.0, name: str = "toy.py") -> Path:
  path = folder / name
  path.write_text(textwrap.dedent(TOY_MODEL.format(scale=scale)))
  return path


def tgc(*args):
  """`tgc ARGS` in process; an exception other than the exit is raised (so a test sees a crash as one)."""
  result = CliRunner().invoke(cli, [str(a) for a in args])
  if result.exception is not None and not isinstance(result.exception, SystemExit):
    raise result.exception
  return result


def user_error(result, *words: str) -> str:
  """Exit 2 with exactly one line on stderr that contains every word, and no traceback."""
  assert result.exit_code == 2, (result.exit_code, result.output)
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1, result.stderr
  for w in words: assert w in lines[0], (w, lines[0])
  assert "Traceback" not in result.output
  return lines[0]
