"""Work-group shapes on GPU targets: a LOCAL split whose amount does not divide its axis pads the axis and guards the
tail (clamped loads, gated stores), and the GPU heuristics give every kernel of 64 or more work-items a work-group
of more than one work-item, within each target's limits. What the padded kernels compute is checked against numpy
on PoCL, on the CUDA and Metal CPU shims and (in the webgpu run) on lavapipe; the benchmark models' kernels are
lowered for every GPU target and their launch sizes inspected."""
from __future__ import annotations
import math
import os
import sys
import warnings

import numpy as np
import pytest

import cuda_cpu
import metal_check
from cpu_kernels import skip_without_cpu_compiler
from gpu_cases import CASES, elementwise_ast, programs
from tgc.codegen.lower import lower
from tgc.codegen.opts import Opt
from tgc.codegen.target import Target, as_target
from tgc.runtimes import RuntimeUnavailable, get_runtime

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPU_TARGETS = ("opencl", "cuda", "metal", "webgpu")
# (axis sizes, LOCAL opts): tails in one and in two launch dimensions, an axis padded whole into the work-group
PADDED = [((13, 111), [Opt("LOCAL", 1, 16), Opt("LOCAL", 0, 8)]), ((7, 5, 3), [Opt("LOCAL", 2, 4)]),
          ((1000,), [Opt("LOCAL", 0, 64)]), ((3, 55), [Opt("LOCAL", 1, 64)])]


def reference(sizes) -> tuple[np.ndarray, np.ndarray]:
  n = math.prod(sizes)
  x = np.random.default_rng(n).standard_normal(n, dtype=np.float32)
  return x, x * 2 + np.arange(n, dtype=np.float32)


def launch_on(execute, sizes, opts, target):
  prg = lower(elementwise_ast(*sizes), as_target(target), opts)
  assert math.prod(prg.global_size) > math.prod(sizes), "the case must have padded work-items"
  assert all(g % l == 0 for g, l in zip(prg.global_size, prg.local_size))
  x, want = reference(sizes)
  out = np.full(x.size + 64, np.nan, np.float32)    # room past the end: a tail store would land there
  execute(prg, [out, x])
  np.testing.assert_allclose(out[:x.size], want, rtol=1e-6)
  assert np.isnan(out[x.size:]).all(), "a padded work-item stored past the end"


def on_device(rt):
  def execute(prg, arrays):
    bufs = [rt.alloc(a.nbytes) for a in arrays]
    for b, a in zip(bufs, arrays): rt.copyin(b, a)
    rt.load(prg)(*bufs, global_size=prg.global_size, local_size=prg.local_size)
    rt.synchronize()
    for b, a in zip(bufs, arrays): a[:] = rt.copyout(b).view(a.dtype)
  return execute


@pytest.mark.parametrize("sizes,opts", PADDED, ids=[str(s) for s, _ in PADDED])
def test_padded_workgroups_on_opencl(opencl_runtime, sizes, opts):
  launch_on(on_device(opencl_runtime), sizes, opts, "opencl")


@pytest.mark.parametrize("sizes,opts", PADDED, ids=[str(s) for s, _ in PADDED])
def test_padded_workgroups_on_the_cuda_and_metal_shims(sizes, opts):
  skip_without_cpu_compiler()
  launch_on(lambda p, a: cuda_cpu.run_on_cpu(p.src, p.name, a, p.global_size, p.local_size), sizes, opts, "cuda")
  if metal_check.clang() is not None:
    launch_on(lambda p, a: metal_check.run_on_cpu(p.src, p.name, a, p.global_size, p.local_size), sizes, opts,
              "metal")


@pytest.mark.parametrize("sizes,opts", PADDED, ids=[str(s) for s, _ in PADDED])
def test_padded_workgroups_on_webgpu(sizes, opts):
  try: rt = get_runtime("webgpu")
  except RuntimeUnavailable as error: pytest.skip(str(error))
  launch_on(on_device(rt), sizes, opts, "webgpu")


def test_padded_split_clamps_loads_and_gates_stores():
  prg = lower(elementwise_ast(13, 111), as_target("opencl"), [Opt("LOCAL", 1, 16)])
  assert prg.global_size == (112, 13, 1) and prg.local_size == (16, 1, 1)
  assert "?" in prg.function and "if (" in prg.function        # the clamp (a select) and the store's guard
  exact = lower(elementwise_ast(13, 112), as_target("opencl"), [Opt("LOCAL", 1, 16)])
  assert "if (" not in exact.function and "?" not in exact.function


# ---------------------------------------------------------------- the heuristics' shapes

ODD = [(111, 111, 16), (13, 13, 250), (55,), (7, 7, 1280), (3, 1000), (27, 27, 8), (2, 3, 5, 7), (65,), (100000, 3)]


@pytest.mark.parametrize("target", GPU_TARGETS)
@pytest.mark.parametrize("sizes", ODD, ids=[str(s) for s in ODD])
def test_every_kernel_of_64_items_gets_a_workgroup(target, sizes):
  t = Target.make(target)
  prg = lower(elementwise_ast(*sizes), t)
  wg = math.prod(prg.local_size)
  assert wg >= min(32, math.prod(sizes)), (prg.global_size, prg.local_size)
  assert wg <= t.max_local_items and all(l <= m for l, m in zip(prg.local_size, t.max_local_size))
  padded = math.prod(prg.global_size) / math.prod(sizes)
  assert padded <= 1.25, (prg.global_size, prg.local_size)     # little waste on padding


def benchmark_models(tmp_path_factory) -> dict[str, str]:
  """The benchmark models as ONNX files (light squeezenet of the onnx wheel with random weights, MobileNetV2 and
  the transformer encoder of bench/onnx_models.py) and the example CNN (a Tensor-API model)."""
  sys.path[:0] = [os.path.join(ROOT, "bench"), os.path.join(ROOT, "tests", "onnx")]
  import light_models as lm
  import onnx_models
  folder = tmp_path_factory.mktemp("bench_models")
  out = {"example_cnn": os.path.join(ROOT, "examples", "mnist_cnn.py") + ":build"}
  models = {"mobilenet_v2": onnx_models.mobilenet_v2(), "transformer": onnx_models.transformer_encoder()}
  if lm.available("squeezenet"):
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      models["squeezenet"] = lm.randomized(lm.load("squeezenet"), 0)
  for name, model in models.items():
    path = str(folder / f"{name}.onnx")
    with open(path, "wb") as f: f.write(model.SerializeToString())
    out[name] = path
  return out


@pytest.fixture(scope="module")
def bench_models(tmp_path_factory): return benchmark_models(tmp_path_factory)


@pytest.mark.parametrize("target", ["webgpu", "cuda"])
@pytest.mark.parametrize("model", ["example_cnn", "squeezenet", "mobilenet_v2", "transformer"])
def test_benchmark_models_have_no_one_item_workgroups(bench_models, model, target):
  from tgc.aot import models
  from tgc.aot.compile import build_compiled
  if model not in bench_models: pytest.skip("light_squeezenet.onnx is not in this onnx wheel")
  cm, _ = build_compiled(models.parse_model_spec(bench_models[model]), Target.make(target))
  for name, k in cm.kernels.items():
    items = math.prod(k.global_size)
    assert math.prod(k.local_size) > 1 or items < 64, (name, k.global_size, k.local_size, k.opts)


@pytest.mark.parametrize("name", ["conv_tiles", "conv_stem_tiles", "conv_window_tiles"])
@pytest.mark.parametrize("target", ["webgpu", "opencl", "cuda", "metal"])
def test_convolutions_stage_their_shared_operands(name, target):
  """Convolutions read their shared input from workgroup-memory tiles: with a reduce loop left (3x3 over 8 channels,
  7x7 over 3 channels: the last window axis unrolled whole) or none (3x3 over one channel: filled once)."""
  case = next(c for c in CASES if c.name == name)
  _, _, progs = programs(case, target)
  conv = max(progs, key=lambda p: p.ops)
  assert conv.shared_bytes > 0, f"{name} on {target}: nothing staged ({conv.opts})"
