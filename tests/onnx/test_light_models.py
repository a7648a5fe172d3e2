"""The real-architecture ONNX models of the onnx wheel (resnet50, squeezenet, shufflenet, densenet121, inception
v1/v2, vgg19, bvlc_alexnet, zfnet512) compiled by the real pipeline into C artifacts and run: as shipped against the
stored output (onnx's own tolerances), and with seeded random weights and input against onnxruntime. The small
ones run by default; the others are marked slow (`pytest --runslow`). scripts/light_models.py prints the timings.
Tolerances and the randomization are documented in light_models.py."""
from __future__ import annotations
import os
import sys
import warnings

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import light_models as lm  # noqa: E402

# compile + run of both variants on a 2-core machine: the default set stays within about two minutes
FAST = ("squeezenet", "shufflenet")


def _params():
  return [pytest.param(n, marks=() if n in FAST else pytest.mark.slow) for n in lm.NAMES]


def _load(name: str):
  if not lm.available(name): pytest.skip(f"light_{name}.onnx is not in this onnx wheel ({lm.data_dir()})")
  return lm.load(name)


@pytest.mark.parametrize("name", _params())
def test_stored_output(name):
  model = _load(name)
  got = lm.run_tgc(model, lm.dummy_inputs(model)).outputs
  ref = lm.stored_output(name)
  assert len(got) == 1 and got[0].shape == ref.shape and got[0].dtype == ref.dtype
  assert lm.stored_ok(name, got[0], ref), f"max abs error {lm.max_abs_error(got[0], ref):.3g}"


@pytest.mark.parametrize("name", _params())
def test_random_weights_vs_onnxruntime(name):
  pytest.importorskip("onnxruntime", reason="onnxruntime (pip) is the reference for the light models")
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    model = lm.randomized(_load(name), seed=0)
  assert not any(n.op_type == "ConstantOfShape" for n in model.graph.node)
  feeds = lm.random_inputs(model, seed=0)
  ref = lm.run_onnxruntime(model, feeds)[0][0]
  got = lm.run_tgc(model, feeds).outputs[0]
  assert got.shape == ref.shape
  assert np.isfinite(ref).all() and float(np.std(ref)) > 0, "degenerate reference: the randomization is too weak"
  assert lm.random_ok(got, ref), \
    f"max abs error {lm.max_abs_error(got, ref):.3g}, scaled {lm.scaled_error(got, ref):.3g}"


def test_randomized_is_deterministic():
  model = _load("squeezenet")
  a, b = lm.randomized(model, seed=3, calibrate=False), lm.randomized(model, seed=3, calibrate=False)
  assert a.SerializeToString() == b.SerializeToString()
  c = lm.randomized(model, seed=4, calibrate=False)
  assert a.SerializeToString() != c.SerializeToString()
