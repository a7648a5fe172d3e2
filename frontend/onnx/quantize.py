"""Post-training int8 quantization of a float ONNX model as a pure ONNX -> ONNX rewrite (QDQ form).

`quantizable(model)` finds the Conv, MatMul and Gemm nodes of the main graph whose weights are float32 initializers
(directly or through an Identity) and the float activations that feed them. `quantize_model(model, ranges)` writes
each such weight as int8, symmetric per output channel (zero point 0, scale max|w| / 127: Conv along axis 0,
MatMul's B (K, N) along axis 1, Gemm's B along 0 with transB, else 1) read through a DequantizeLinear, and puts a
QuantizeLinear -> DequantizeLinear pair (uint8, asymmetric, one scale and zero point per tensor, the range widened
to hold 0) on every activation given a range. That is the form `quantized_compute.py` computes on the 8-bit values
(an 8-bit activation times int8 weights, scales applied once per output). Biases stay float. The rewrite depends
only on the model and the ranges: the same ranges give the same model, byte for byte."""
from __future__ import annotations
import copy
import re
from dataclasses import dataclass
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

WEIGHT_LIMIT = 127          # symmetric int8 weights: -127..127 (no -128, so the range is symmetric)
ACTIVATION_LEVELS = 255     # uint8 activations: 0..255
MIN_OPSET = 13              # per-axis DequantizeLinear


class QuantizeError(ValueError):
  """A model the rewrite cannot quantize (the message names the model element)."""


@dataclass(frozen=True)
class Site:
  """One node to quantize: its index in the graph, the activation (input 0), the weight initializer it reads
  (through an Identity when `via` names that Identity's output) and the weight's output-channel axis."""
  index: int
  node: str
  op: str
  activation: str
  weight: str
  axis: int
  via: str | None = None


def _opset(model: onnx.ModelProto) -> int:
  return next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def _attr(node: onnx.NodeProto, name: str, default):
  for a in node.attribute:
    if a.name == name: return helper.get_attribute_value(a)
  return default


def _float_weight(init: onnx.TensorProto | None, ndim: tuple[int, ...]) -> bool:
  return init is not None and init.data_type == TensorProto.FLOAT and len(init.dims) in ndim


def _weight_axis(node: onnx.NodeProto) -> tuple[tuple[int, ...], int] | None:
  """The weight ranks the node's fast integer path takes and the output-channel axis of its weight, or None."""
  if node.op_type == "Conv": return (3, 4, 5), 0
  if node.op_type == "MatMul": return (2,), 1
  if node.op_type == "Gemm" and not _attr(node, "transA", 0) and float(_attr(node, "alpha", 1.0)) == 1.0:
    return (2,), 0 if _attr(node, "transB", 0) else 1
  return None


def quantizable(model: onnx.ModelProto) -> list[Site]:
  """The Conv, MatMul and Gemm nodes of the main graph whose weight (input 1) is a float32 initializer of the rank
  the integer path takes (read directly or through an Identity) and whose input 0 is no initializer."""
  graph = model.graph
  inits = {t.name: t for t in graph.initializer}
  identities = {n.output[0]: n.input[0] for n in graph.node if n.op_type == "Identity" and n.input
                and n.input[0] in inits}
  sites = []
  for i, node in enumerate(graph.node):
    shape = _weight_axis(node) if node.domain in ("", "ai.onnx") and len(node.input) > 1 else None
    if shape is None or not node.input[0] or node.input[0] in inits: continue
    via = node.input[1] if node.input[1] in identities else None
    weight = identities[via] if via else node.input[1]
    if not _float_weight(inits.get(weight), shape[0]): continue
    sites.append(Site(i, node.name or f"{node.op_type}_{i}", node.op_type, node.input[0], weight, shape[1], via))
  return sites


def activations(model: onnx.ModelProto) -> list[str]:
  """The activation tensors that feed quantizable nodes, each once, in graph order."""
  return list(dict.fromkeys(s.activation for s in quantizable(model)))


# ---------------------------------------------------------------- scales
def weight_quantized(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
  """Symmetric int8 values and one float32 scale per index of `axis` (max |w| / 127; 1 for an all-zero channel)."""
  w = np.asarray(w, np.float32)
  other = tuple(a for a in range(w.ndim) if a != axis)
  peak = np.abs(w).max(axis=other) if w.size else np.zeros(w.shape[axis], np.float32)
  scale = np.where(peak > 0, peak / np.float32(WEIGHT_LIMIT), np.float32(1)).astype(np.float32)
  shape = tuple(-1 if a == axis else 1 for a in range(w.ndim))
  q = np.clip(np.rint(w / scale.reshape(shape)), -WEIGHT_LIMIT, WEIGHT_LIMIT).astype(np.int8)
  return q, scale


def activation_params(lo: float, hi: float) -> tuple[np.float32, np.uint8]:
  """uint8 scale and zero point of a range, widened to hold 0 (so 0 is exact: padding, ReLU's zeros)."""
  lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
  if not (np.isfinite(lo) and np.isfinite(hi)): raise QuantizeError(f"range [{lo}, {hi}] is not finite")
  scale = np.float32((hi - lo) / ACTIVATION_LEVELS)
  if not scale > 0: return np.float32(1), np.uint8(0)
  zero = int(np.clip(np.rint(-lo / float(scale)), 0, ACTIVATION_LEVELS))
  return scale, np.uint8(zero)


# ---------------------------------------------------------------- the rewrite
class _Names:
  """Fresh tensor and node names: a model name made of safe characters plus a suffix, never one the graph has."""

  def __init__(self, graph: onnx.GraphProto):
    self.taken = {t.name for t in graph.initializer} | {v.name for v in graph.input} | \
                 {v.name for v in graph.output} | {v.name for v in graph.value_info} | \
                 {o for n in graph.node for o in n.output} | {n.name for n in graph.node if n.name}

  def __call__(self, base: str, suffix: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9_.:/-]", "_", base)[:200] + suffix
    name, k = stem, 1
    while name in self.taken:
      name, k = f"{stem}_{k}", k + 1
    self.taken.add(name)
    return name


def quantize_model(model: onnx.ModelProto, ranges: dict[str, tuple[float, float]],
                   sites: list[Site] | None = None, means: dict[str, np.ndarray] | None = None,
                   weights: bool = True) -> onnx.ModelProto:
  """A new model: the weights of every quantizable node (`sites`, default all) int8 per output channel, and a
  QuantizeLinear -> DequantizeLinear pair on every activation in `ranges` ((lowest, highest) as calibrated).
  `means` (activation -> its mean per channel: `mean_axis`) corrects each node's bias by what rounding its weights
  shifts the mean output by (`bias_shift`). `weights=False` leaves the weights float (the activations' share of the
  error: bench/quantize_budget.py)."""
  if _opset(model) < MIN_OPSET:
    raise QuantizeError(f"opset {_opset(model)}: quantizing needs opset {MIN_OPSET} or newer (per-channel "
                        f"DequantizeLinear); convert the model with onnx.version_converter first")
  sites = quantizable(model) if sites is None else sites
  if not sites: raise QuantizeError("no Conv, MatMul or Gemm node with a float32 initializer as its weight")
  out = copy.deepcopy(model)
  graph = out.graph
  names = _Names(graph)
  inits = {t.name: t for t in graph.initializer}
  new_inits: list[onnx.TensorProto] = []
  biases = {graph.node[s.index].input[2] for s in sites if len(graph.node[s.index].input) > 2}
  before: dict[int, list[onnx.NodeProto]] = {}
  after: dict[int, list[onnx.NodeProto]] = {}
  quantized: dict[tuple[str, int], str] = {}
  for site in sites if weights else []:
    key = (site.weight, site.axis)
    w = numpy_helper.to_array(inits[site.weight])
    if key not in quantized:
      quantized[key] = _weight_dq(site, w, names, new_inits, before.setdefault(site.index, []))
    node = graph.node[site.index]
    node.input[1] = quantized[key]
    mean = (means or {}).get(site.activation)
    if mean is not None: _correct_bias(site, node, w, np.asarray(mean), inits, names, new_inits, after)
  acts = {}
  for site in sites:
    if site.activation not in ranges: continue
    if site.activation not in acts:
      acts[site.activation] = _activation_qdq(site.activation, ranges[site.activation], names, new_inits,
                                              before.setdefault(site.index, []))
    graph.node[site.index].input[0] = acts[site.activation]
  _quantize_pool_inputs(graph, acts, ranges, names, new_inits, before)
  nodes = [n for i, node in enumerate(graph.node) for n in before.get(i, []) + [node] + after.get(i, [])]
  graph.ClearField("node")
  graph.node.extend(nodes)
  graph.initializer.extend(new_inits)
  if weights: _prune(graph, {s.weight for s in sites} | biases)
  onnx.checker.check_model(out)
  return out


def _quantize_pool_inputs(graph: onnx.GraphProto, acts: dict, ranges: dict, names: _Names, inits: list,
                          before: dict) -> None:
  """A quantized activation computed by a MaxPool from a tensor nothing else reads gets the same quantization on
  that input too: max commutes with the (increasing) rounding, so the values are the same, and the pooling reads
  8-bit values instead of a float tensor (the convolution before it stores 8 bits)."""
  read: dict[str, int] = {}
  for node in graph.node:
    for x in node.input: read[x] = read.get(x, 0) + 1
  outputs = {v.name for v in graph.output}
  for i, node in enumerate(graph.node):
    if node.op_type != "MaxPool" or node.output[0] not in acts or len([o for o in node.output if o]) != 1: continue
    x = node.input[0]
    if read.get(x) != 1 or x in outputs: continue
    node.input[0] = _activation_qdq(x, ranges[node.output[0]], names, inits, before.setdefault(i, []))


def mean_axis(op: str) -> int:
  """The axis of a quantizable node's activation that its weights reduce over (Conv: channels; else the last)."""
  return 1 if op == "Conv" else -1


def activation_axes(sites: list[Site]) -> dict[str, int]:
  """Each activation the sites read, once, in graph order, with the `mean_axis` of the first node reading it."""
  axes: dict[str, int] = {}
  for s in sites: axes.setdefault(s.activation, mean_axis(s.op))
  return axes


def bias_shift(site: Site, node: onnx.NodeProto, w: np.ndarray, mean: np.ndarray) -> np.ndarray | None:
  """How much the int8 weights move each output's mean: (dequantized - float weights) applied to the
  activation's mean per channel; None when the mean does not fit the weights."""
  q, scale = weight_quantized(w, site.axis)
  delta = (q.astype(np.float64) * scale.reshape(tuple(-1 if a == site.axis else 1 for a in range(w.ndim)))
           - w.astype(np.float64))
  mean = mean.astype(np.float64)
  if site.op == "Conv":
    group = int(_attr(node, "group", 1))
    if mean.size != w.shape[1] * group or w.shape[0] % group: return None
    rows = mean.reshape(group, -1)[np.arange(w.shape[0]) // (w.shape[0] // group)]
    return (delta.reshape(w.shape[0], w.shape[1], -1).sum(axis=2) * rows).sum(axis=1)
  k = w.shape[1] if site.axis == 0 else w.shape[0]
  if mean.size != k: return None
  return delta @ mean if site.axis == 0 else mean @ delta


def _correct_bias(site: Site, node: onnx.NodeProto, w: np.ndarray, mean: np.ndarray, inits: dict, names: _Names,
                  new_inits: list, after: dict) -> None:
  """Subtract `bias_shift` from the node's bias (a new initializer; a Conv or Gemm without one gets one, a MatMul
  an Add after it)."""
  shift = bias_shift(site, node, w, mean)
  if shift is None or not np.any(shift): return
  beta = float(_attr(node, "beta", 1.0)) if site.op == "Gemm" else 1.0
  if beta == 0.0: return
  has_bias = site.op in ("Conv", "Gemm") and len(node.input) > 2 and node.input[2] in inits
  if site.op in ("Conv", "Gemm") and len(node.input) > 2 and node.input[2] and not has_bias: return
  if has_bias:
    bias = numpy_helper.to_array(inits[node.input[2]]).astype(np.float64)
    value, name = bias - shift / beta, names(node.input[2], "_corrected")
  else: value, name = -shift / beta, names(site.weight, "_bias_correction")
  new_inits.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
  if site.op in ("Conv", "Gemm"):
    while len(node.input) < 3: node.input.append("")
    node.input[2] = name
    return
  raw = names(node.output[0], "_uncorrected")
  after.setdefault(site.index, []).append(helper.make_node("Add", [raw, name], [node.output[0]],
                                                           name=names(site.node, "_bias_correction")))
  node.output[0] = raw


def _weight_dq(site: Site, w: np.ndarray, names: _Names, inits: list, nodes: list) -> str:
  q, scale = weight_quantized(w, site.axis)
  qn, sn, zn = (names(site.weight, s) for s in ("_quantized", "_scale", "_zero_point"))
  inits += [numpy_helper.from_array(q, qn), numpy_helper.from_array(scale, sn),
            numpy_helper.from_array(np.zeros(scale.shape, np.int8), zn)]
  out = names(site.weight, "_dequantized")
  nodes.append(helper.make_node("DequantizeLinear", [qn, sn, zn], [out], name=names(site.weight, "_dequantize"),
                                axis=site.axis))
  return out


def _activation_qdq(name: str, rng: tuple[float, float], names: _Names, inits: list, nodes: list) -> str:
  scale, zero = activation_params(*rng)
  sn, zn, qn, dn = (names(name, s) for s in ("_scale", "_zero_point", "_quantized", "_dequantized"))
  inits += [numpy_helper.from_array(np.array(scale, np.float32), sn), numpy_helper.from_array(np.array(zero), zn)]
  nodes.append(helper.make_node("QuantizeLinear", [name, sn, zn], [qn], name=names(name, "_quantize")))
  nodes.append(helper.make_node("DequantizeLinear", [qn, sn, zn], [dn], name=names(name, "_dequantize")))
  return dn


def _prune(graph: onnx.GraphProto, weights: set[str]) -> None:
  """Drop the Identity nodes no one reads any more and the float weights they or the quantized nodes read."""
  outputs = {v.name for v in graph.output}
  while True:
    read = {x for n in graph.node for x in n.input} | outputs
    dead = [n for n in graph.node if n.op_type == "Identity" and n.output[0] not in read and n.input[0] in weights]
    if not dead: break
    for n in dead: graph.node.remove(n)
  read = {x for n in graph.node for x in n.input} | outputs
  for sub in (x for n in graph.node for a in n.attribute if a.type == onnx.AttributeProto.GRAPH for x in [a.g]):
    read |= {x for n in sub.node for x in n.input}
  keep = [t for t in graph.initializer if t.name not in weights or t.name in read]
  if len(keep) != len(graph.initializer):
    graph.ClearField("initializer")
    graph.initializer.extend(keep)


def with_outputs(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
  """A copy of the model that also returns the float tensors `names` (those not already outputs or inputs): what
  calibration reads the activations' ranges from."""
  out = copy.deepcopy(model)
  have = {v.name for v in out.graph.output} | {v.name for v in out.graph.input}
  wanted = [n for n in names if n not in have]
  try: known = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info if v.name in wanted}
  except Exception: known = {}    # noqa: BLE001 (shapes are a courtesy: the importer infers its own)
  for name in wanted:
    info = known.get(name)
    if info is None or not info.type.tensor_type.HasField("shape"):
      info = helper.make_tensor_value_info(name, TensorProto.FLOAT, [f"{name}_dim"])
      info.type.tensor_type.shape.ClearField("dim")
    out.graph.output.append(info)
  return out
