"""The benchmark models, by name or any ONNX file, for the benchmarks that compare tgc's GPU-language artifacts with
onnxruntime (bench_webgpu_browser.py, bench_gpu_cpu.py): the onnx wheel's light models (`resnet50`, `squeezenet`,
... with seeded random weights, tests/onnx/light_models.py), `mobilenet_v2` and `transformer` (onnx_models.py) and
`example_cnn` (examples/mnist_cnn.py written out as the same ONNX graph, bench_artifact.py `example_as_onnx`), and
their seeded inputs (normal floats, small integers)."""
from __future__ import annotations
import os
import re
import sys
import warnings

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _path in (os.path.join(ROOT, "bench"), os.path.join(ROOT, "tests", "onnx")):
  if _path not in sys.path: sys.path.insert(0, _path)

import light_models as lm  # noqa: E402

DEFAULT_MODELS = ("resnet50", "mobilenet_v2", "transformer", "example_cnn")
BUILT = ("mobilenet_v2", "transformer", "example_cnn")
IR_VERSION = 10           # what the models built here declare (onnxruntime-web 1.30 reads up to 13)


class ModelError(Exception):
  """A model argument that names nothing loadable: one line for the user."""


def known_models() -> tuple[str, ...]: return tuple(lm.NAMES) + BUILT


def load_onnx(spec: str, seed: int):
  """(name, ModelProto) of a model argument: an .onnx path, a light model name or one of BUILT (built here with
  an IR version onnxruntime-web reads: onnx's helpers write the newest)."""
  name, model = _load_onnx(spec, seed)
  if not spec.lower().endswith(".onnx"): model.ir_version = min(model.ir_version, IR_VERSION)
  return name, model


def _load_onnx(spec: str, seed: int):
  import onnx
  if spec.lower().endswith(".onnx"):
    if not os.path.isfile(spec): raise ModelError(f"{spec}: no such file")
    return re.sub(r"[^A-Za-z0-9_]", "_", os.path.splitext(os.path.basename(spec))[0]), onnx.load(spec)
  if spec in ("mobilenet_v2", "transformer"):
    import onnx_models
    return spec, getattr(onnx_models, "mobilenet_v2" if spec == "mobilenet_v2" else "transformer_encoder")(seed=seed)
  if spec == "example_cnn":
    from bench_artifact import example_as_onnx
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import mnist_cnn
    model, _ = mnist_cnn.build("numpy")
    return spec, example_as_onnx(model)
  if spec not in lm.NAMES: raise ModelError(f"unknown model {spec!r}: give an .onnx file or one of "
                                            f"{', '.join(known_models())}")
  if not lm.available(spec): raise ModelError(f"{lm.model_path(spec)} is not in this onnx wheel")
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    return spec, lm.randomized(lm.load(spec), seed)


def feeds_for(model, seed: int, shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
  """Seeded inputs for every graph input that is not an initializer: normal floats, integers in [0, 10)."""
  import onnx
  rng = np.random.default_rng(seed)
  inits = {t.name for t in model.graph.initializer}
  feeds = {}
  for vi in model.graph.input:
    if vi.name in inits: continue
    t = vi.type.tensor_type
    dims = shapes.get(vi.name) or tuple(d.dim_value if d.HasField("dim_value") else 0 for d in t.shape.dim)
    if any(d <= 0 for d in dims): raise ModelError(f"input {vi.name!r} has dynamic dimensions: --input-shape "
                                                   f"{vi.name}=...")
    dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.elem_type))
    feeds[vi.name] = rng.standard_normal(dims).astype(dtype) if dtype.kind == "f" else \
      rng.integers(0, 10, dims).astype(dtype)
  return feeds


def parse_shapes(items: list[str]) -> dict[str, tuple[int, ...]]:
  """--input-shape name=d0,d1,... values."""
  out = {}
  for item in items:
    name, _, dims = item.partition("=")
    try: out[name] = tuple(int(d) for d in dims.split(","))
    except ValueError: raise ModelError(f"--input-shape {item!r}: expected name=d0,d1,...") from None
  return out
