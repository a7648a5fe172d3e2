"""The real-architecture ONNX models shipped inside the onnx wheel (`onnx/backend/test/data/light/light_*.onnx`)
and what tests and scripts/light_models.py do with them.

Every weight of these models is made in the graph by a ConstantOfShape node (all 0.02), so the stored outputs
(`light_*_output_0.pb`) come from a nearly uniform network. Two checks per model:

- `stored`: the model as shipped, on the input onnx's own backend test runner feeds (`arange(n) / n` in the input's
  shape), against the stored output with onnx's own tolerances (rtol 1e-3, densenet121 2e-3; atol 1e-7).
- `random`: every ConstantOfShape-made weight replaced by a seeded random initializer of the same shape (He-scaled
  conv/gemm weights, small biases, BatchNormalization statistics with positive variance; the layer before a final
  softmax scaled so the softmax is not saturated), a seeded normal input, against onnxruntime (the reference for
  large models): max abs error <= RANDOM_RTOL * max |reference|.

Both compile through `aot.onnx_backend.TgcBackend` (the real pipeline into an artifact, run by the artifact
runtime); `run_tgc` times the compile (pipeline + building the artifact's library) and the run separately."""
from __future__ import annotations
import os
import time
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

NAMES = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet",
         "vgg19", "zfnet512")
# onnx's own tolerances for the stored outputs (onnx.backend.test.case.model)
STORED_RTOL = {"densenet121": 2e-3}
STORED_ATOL = 1e-7
# random weights: float32 accumulation order differs from onnxruntime's (im2col/GEMM, Winograd) in deep networks;
# errors are relative to the largest reference value (random deep networks reach large activations)
RANDOM_RTOL = 1e-4
LOGIT_STD = 2.0           # standard deviation the calibrated logits get before a final softmax


def data_dir() -> str:
  return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def model_path(name: str) -> str:
  return os.path.join(data_dir(), f"light_{name}.onnx")


def available(name: str) -> bool:
  return os.path.isfile(model_path(name)) and os.path.isfile(stored_output_path(name))


def stored_output_path(name: str) -> str:
  return os.path.join(data_dir(), f"light_{name}_output_0.pb")


def load(name: str) -> onnx.ModelProto:
  return onnx.load(model_path(name))


def stored_output(name: str) -> np.ndarray:
  return numpy_helper.to_array(onnx.load_tensor(stored_output_path(name)))


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
  inits = {t.name for t in model.graph.initializer}
  return [i for i in model.graph.input if i.name not in inits]


def _shape(vi: onnx.ValueInfoProto) -> tuple[int, ...]:
  return tuple(d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim)


def dummy_inputs(model: onnx.ModelProto) -> dict[str, np.ndarray]:
  """What onnx's backend test runner feeds these models (`generate_dummy_data(random=False)`)."""
  out = {}
  for vi in graph_inputs(model):
    shape = _shape(vi)
    n = int(np.prod(shape))
    out[vi.name] = (np.arange(n).reshape(shape) / n).astype(np.float32)
  return out


def random_inputs(model: onnx.ModelProto, seed: int) -> dict[str, np.ndarray]:
  rng = np.random.default_rng(seed)
  return {vi.name: rng.standard_normal(_shape(vi)).astype(np.float32) for vi in graph_inputs(model)}


def _role(name: str, consumers: dict[str, list[tuple[onnx.NodeProto, int]]]) -> tuple[str, int, onnx.NodeProto | None]:
  """(op, input index, node) of the first real consumer of `name`, looking through Unsqueeze/Reshape."""
  seen = set()
  while name not in seen:
    seen.add(name)
    uses = consumers.get(name, [])
    if not uses: return "", -1, None
    node, index = uses[0]
    if node.op_type in ("Unsqueeze", "Reshape", "Squeeze", "Flatten") and index == 0:
      name = node.output[0]
      continue
    return node.op_type, index, node
  return "", -1, None


def _attr(node: onnx.NodeProto | None, name: str, default):
  if node is None: return default
  for a in node.attribute:
    if a.name == name: return onnx.helper.get_attribute_value(a)
  return default


def _feeds_relu(name: str, consumers: dict[str, list[tuple[onnx.NodeProto, int]]]) -> bool:
  """Whether the output `name` reaches a Relu directly or through a BatchNormalization."""
  for node, _ in consumers.get(name, []):
    if node.op_type == "Relu": return True
    if node.op_type == "BatchNormalization" and _feeds_relu(node.output[0], consumers): return True
  return False


def _random_weight(shape: tuple[int, ...], role: tuple[str, int, onnx.NodeProto | None],
                   consumers: dict[str, list[tuple[onnx.NodeProto, int]]], rng: np.random.Generator) -> np.ndarray:
  op, index, node = role
  normal = rng.standard_normal(shape)
  gain = 2.0 if node is not None and _feeds_relu(node.output[0], consumers) else 1.0
  if op == "Conv" and index == 1 and len(shape) >= 2:
    value = normal * np.sqrt(gain / int(np.prod(shape[1:])))
  elif op == "Gemm" and index == 1 and len(shape) == 2:
    value = normal * np.sqrt(gain / (shape[1] if _attr(node, "transB", 0) else shape[0]))
  elif op == "BatchNormalization" and index == 1: value = 1.0 + 0.1 * normal
  elif op == "BatchNormalization" and index == 4: value = rng.uniform(0.5, 1.5, shape)
  elif op == "Mul": value = 1.0 + 0.1 * normal
  else: value = 0.05 * normal                       # biases, BN offsets and means, Add operands
  return value.astype(np.float32)


# ops between the last Conv/Gemm and the final Softmax that commute with a positive scale of their input
_HOMOGENEOUS = ("Relu", "GlobalAveragePool", "AveragePool", "MaxPool", "Reshape", "Flatten", "Dropout", "Identity",
                "Squeeze", "Unsqueeze")


def _calibrate(model: onnx.ModelProto, feeds: dict[str, np.ndarray], target_std: float) -> None:
  """Scale the weight and bias of the layer before a final Softmax so that the logits' standard deviation is
  `target_std` (one onnxruntime run): random deep networks otherwise end in a saturated, one-hot softmax."""
  g = model.graph
  if not g.node or g.node[-1].op_type != "Softmax": return
  producers = {o: n for n in g.node for o in n.output}
  name = g.node[-1].input[0]
  node = producers.get(name)
  while node is not None and node.op_type in _HOMOGENEOUS:
    node = producers.get(node.input[0])
  inits = {t.name: i for i, t in enumerate(g.initializer)}
  if node is None or node.op_type not in ("Conv", "Gemm") or any(x not in inits for x in node.input[1:]): return
  probe = onnx.ModelProto()
  probe.CopyFrom(model)
  probe.graph.output.append(onnx.ValueInfoProto(name=name))
  logits = run_onnxruntime(probe, feeds)[0][-1]
  std = float(np.std(logits))
  if not np.isfinite(std) or std == 0: return
  for x in node.input[1:]:
    t = g.initializer[inits[x]]
    t.CopyFrom(numpy_helper.from_array((numpy_helper.to_array(t) * (target_std / std)).astype(np.float32), x))


def randomized(model: onnx.ModelProto, seed: int = 0, calibrate: bool = True) -> onnx.ModelProto:
  """A copy of `model` where every ConstantOfShape node with a constant shape becomes a seeded random initializer
  of that shape (same name); initializers (and their graph inputs) left unused are dropped. With `calibrate`, the
  last layer is scaled (on `random_inputs(model, seed)`, with onnxruntime) so a final softmax is not saturated."""
  rng = np.random.default_rng(seed)
  out = onnx.ModelProto()
  out.CopyFrom(model)
  g = out.graph
  inits = {t.name: t for t in g.initializer}
  consumers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
  for n in g.node:
    for i, x in enumerate(n.input): consumers.setdefault(x, []).append((n, i))
  keep, new_inits = [], []
  for n in g.node:
    if n.op_type == "ConstantOfShape" and n.input and n.input[0] in inits:
      shape = tuple(int(d) for d in numpy_helper.to_array(inits[n.input[0]]).reshape(-1))
      value = _random_weight(shape, _role(n.output[0], consumers), consumers, rng)
      new_inits.append(numpy_helper.from_array(value, n.output[0]))
    else: keep.append(n)
  del g.node[:]
  g.node.extend(keep)
  g.initializer.extend(new_inits)
  used = {x for n in g.node for x in n.input} | {o.name for o in g.output}
  remaining = [t for t in g.initializer if t.name in used]
  del g.initializer[:]
  g.initializer.extend(remaining)
  names = {t.name for t in g.initializer}
  inputs = [i for i in g.input if i.name not in inits or i.name in names]
  if out.ir_version < 4:   # IR 3: every initializer is also a graph input
    inputs += [onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in new_inits]
  del g.input[:]
  g.input.extend(inputs)
  if calibrate: _calibrate(out, random_inputs(out, seed), LOGIT_STD)
  return out


@dataclass
class TgcRun:
  outputs: list[np.ndarray]
  compile_s: float          # pipeline (import, trace, lower, write) + building the artifact's library
  pipeline_s: float         # the pipeline alone (what `tgc compile` reports)
  run_s: float              # median of the timed runs of the artifact
  kernels: int
  weights_bytes: int


def run_tgc(model: onnx.ModelProto, feeds: dict[str, np.ndarray], target: str = "c", runs: int = 1) -> TgcRun:
  """Compile with the tgc ONNX backend and run the artifact `runs` times (the first run's outputs)."""
  from tgc.aot.onnx_backend import TgcBackend
  start = time.perf_counter()
  rep = TgcBackend.prepare(model, target)
  compile_s = time.perf_counter() - start
  try:
    times, outs = [], None
    for _ in range(max(1, runs)):
      t = time.perf_counter()
      got = rep.run(feeds)
      times.append(time.perf_counter() - t)
      if outs is None: outs = [np.asarray(o) for o in got]
    report = rep.last.report
    return TgcRun(outs, compile_s, report.seconds, float(np.median(times)), report.kernels, report.weights_bytes)
  finally:
    rep.close()


def run_onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> tuple[list[np.ndarray], float]:
  """onnxruntime's outputs (CPU provider) and its run time."""
  import onnxruntime as ort
  options = ort.SessionOptions()
  options.log_severity_level = 3
  session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
  start = time.perf_counter()
  outs = session.run(None, feeds)
  return [np.asarray(o) for o in outs], time.perf_counter() - start


def max_abs_error(got: np.ndarray, ref: np.ndarray) -> float:
  diff = np.abs(np.asarray(got, np.float64) - np.asarray(ref, np.float64))
  return float(diff.max()) if diff.size else 0.0


def scaled_error(got: np.ndarray, ref: np.ndarray) -> float:
  """Max abs error over the largest |reference| value."""
  scale = float(np.abs(np.asarray(ref, np.float64)).max()) if np.size(ref) else 0.0
  return max_abs_error(got, ref) / scale if scale > 0 else max_abs_error(got, ref)


def stored_ok(name: str, got: np.ndarray, ref: np.ndarray) -> bool:
  """onnx's own check for these models: elementwise |got - ref| <= atol + rtol * |ref|."""
  return got.shape == ref.shape and bool(np.allclose(got, ref, rtol=STORED_RTOL.get(name, 1e-3), atol=STORED_ATOL))


def random_ok(got: np.ndarray, ref: np.ndarray) -> bool:
  return got.shape == ref.shape and scaled_error(got, ref) <= RANDOM_RTOL
