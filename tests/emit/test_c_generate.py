"""examples/generate/generate.c: greedy generation on a C artifact whose KV cache the artifact keeps. Built with
its Makefile against a small language model (tests/onnx/test_model_state.py's decoder with embeddings and a head),
it prints the same tokens as a greedy loop over onnxruntime that passes the cache in and out, with the prompt run
in one call or in chunks; bad arguments and a full context are one-line errors."""
import os
import subprocess
import numpy as np
import pytest
from tgc.aot import compile_model
from tests.aot.aot_helpers import ROOT
from tests.onnx.test_model_state import CACHE, SEQ, decoder_model, empty_cache

ort = pytest.importorskip("onnxruntime", reason="onnxruntime's greedy loop is the reference")
VOCAB = 40


def _reference_tokens(path: str, prompt: list[int], count: int) -> list[int]:
  sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
  cache = empty_cache()
  held, feed, out = 0, prompt, []
  for _ in range(count):
    n = len(feed)
    logits, *present = sess.run(None, {"input_ids": np.array([feed], np.int64),
                                       "attention_mask": np.ones((1, held + n), np.int64),
                                       "position_ids": np.arange(held, held + n, dtype=np.int64)[None], **cache})
    cache = dict(zip(CACHE, present))
    held += n
    feed = [int(logits[0, -1].argmax())]
    out.append(feed[0])
  return out


@pytest.fixture(scope="module")
def program(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("generate")
  path = decoder_model(tmp, vocab=VOCAB)
  art = str(tmp / "art")
  compile_model(path, "c", art, dims={SEQ: (1, 4)}, max_context=24)
  exe = str(tmp / "generate")
  subprocess.run(["make", "-s", "-C", os.path.join(ROOT, "examples", "generate"), f"ART={art}", "MODEL=decoder",
                  f"OUT={exe}", "CFLAGS=-O1"], check=True, capture_output=True)
  return path, exe, os.path.join(art, "weights.safetensors")


def _generate(program, count: int, prompt: list[int]) -> subprocess.CompletedProcess:
  _, exe, weights = program
  return subprocess.run([exe, weights, str(count)] + [str(t) for t in prompt], capture_output=True, text=True)


@pytest.mark.parametrize("prompt", [[3], [5, 17, 2], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]])   # the last: 3 chunks of <= 4
def test_tokens_equal_onnxruntime_greedy(program, prompt):
  result = _generate(program, 12, prompt)
  assert result.returncode == 0, result.stderr
  tokens = [int(t) for t in result.stdout.split()]
  assert tokens == _reference_tokens(program[0], prompt, 12)
  assert len(set(tokens)) > 1                      # a model that says something
  assert "tokens/s" in result.stderr


def test_errors_are_one_line(program):
  full = _generate(program, 30, [1, 2, 3])      # 3 + 29 > 24 entries
  assert full.returncode == 1 and full.stderr.strip() == "error: the context is full (24 tokens)"
  assert len(full.stdout.split()) == 22
  bad = _generate(program, 2, [1, VOCAB])
  assert bad.returncode == 1
  assert bad.stderr.strip() == f"error: token {VOCAB} is not an id below the vocabulary size {VOCAB}"
  usage = subprocess.run([program[1]], capture_output=True, text=True)
  assert usage.returncode == 1 and usage.stderr.startswith("usage:")
