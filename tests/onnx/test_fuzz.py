"""Fuzzing `tgc compile` with mutated ONNX files.

Eleven small valid models (MLP, Gemm+Softmax, conv+pool, reshape/transpose chains, reductions, concat/split,
broadcasting, slice/gather, batch norm, casts, padding) are mutated with a seeded generator: byte-level mutations of
the serialized file (flipped, inserted, zeroed or duplicated bytes, truncation) and protobuf-field mutations (input,
output and initializer dims and dtypes, attribute values, node input names, op types, dangling inputs, cycles,
duplicate producers, opset and IR versions, initializer data). Each file goes through the `tgc compile` click command
in-process (CliRunner) in a worker process, under a per-case time limit. It must end in

- success: the artifact then runs on seeded inputs and, when `onnx.reference.ReferenceEvaluator` accepts the
  model, matches it (`aot.validate.default_tolerance`, as `tgc validate`), or
- a clean error: exit code 2 and a one-line message.

Exit 3, any other exit, an uncaught exception, a hang (time limit) or a crash of the worker fails the case, and so
does compiling a model that the reference refuses and ONNX's strict shape inference rejects (an out-of-range axis,
say: tgc must report it, not guess). Known bugs are listed in KNOWN_FAILURES (xfail strict) with their reason.

    python tests/onnx/test_fuzz.py --summary            # every mutant, a table of outcomes
    python tests/onnx/test_fuzz.py --show ID            # the mutation of one case, and its outcome"""
from __future__ import annotations
import os
import pickle
import random
import select
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEED = 20240611
MUTANTS = 300
CASE_TIMEOUT_S = 90           # one compile + run + reference; cold kernel caches make the first cases slower
MAX_RUN_BYTES = 64 << 20      # artifacts needing more I/O + arena memory are compiled but not run
OPSET = 17

# case id -> reason: mutants that expose a known importer bug (they must fail: xfail strict; remove an entry once
# its bug is fixed)
KNOWN_FAILURES: dict[str, str] = {}


# ---------------------------------------------------------------- seed models
def _vi(name, elem, shape): return helper.make_tensor_value_info(name, elem, shape)
def _init(name, arr): return numpy_helper.from_array(np.asarray(arr), name)


def _model(name, nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
  g = helper.make_graph(nodes, name, inputs, outputs, list(inits))
  m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="tgc-fuzz")
  m.ir_version = 8
  onnx.checker.check_model(m)
  return m


def seed_models() -> dict[str, onnx.ModelProto]:
  rng = np.random.default_rng(0)
  f32 = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
  F, I64 = TensorProto.FLOAT, TensorProto.INT64
  out = {}
  out["mlp"] = _model("mlp", [
    helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
    helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["o"]),
    helper.make_node("Add", ["o", "b2"], ["y"])],
    [_vi("x", F, [2, 8])], [_vi("y", F, [2, 4])],
    [_init("w1", f32(8, 16)), _init("b1", f32(16)), _init("w2", f32(16, 4)), _init("b2", f32(4))])
  out["gemm_softmax"] = _model("gemm_softmax", [
    helper.make_node("Gemm", ["x", "w", "b"], ["g"], transB=1, alpha=0.5),
    helper.make_node("Softmax", ["g"], ["y"], axis=-1)],
    [_vi("x", F, [3, 5])], [_vi("y", F, [3, 4])], [_init("w", f32(4, 5)), _init("b", f32(4))])
  out["conv"] = _model("conv", [
    helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
    helper.make_node("Relu", ["c"], ["r"]),
    helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
    [_vi("x", F, [1, 2, 8, 8])], [_vi("y", F, [1, 4, 4, 4])], [_init("w", f32(4, 2, 3, 3)), _init("b", f32(4))])
  out["reshape_transpose"] = _model("reshape_transpose", [
    helper.make_node("Reshape", ["x", "s1"], ["a"]), helper.make_node("Transpose", ["a"], ["b"], perm=[1, 0]),
    helper.make_node("Reshape", ["b", "s2"], ["c"]), helper.make_node("Transpose", ["c"], ["y"], perm=[2, 0, 1])],
    [_vi("x", F, [2, 3, 4])], [_vi("y", F, [2, 4, 3])],
    [_init("s1", np.array([6, 4], np.int64)), _init("s2", np.array([4, 3, 2], np.int64))])
  out["reductions"] = _model("reductions", [
    helper.make_node("ReduceSum", ["x", "ax"], ["s"], keepdims=1),
    helper.make_node("ReduceMax", ["x"], ["m"], axes=[2], keepdims=0),
    helper.make_node("ReduceMean", ["x"], ["mean"], axes=[0, 2], keepdims=1),
    helper.make_node("Sub", ["x", "s"], ["d"]), helper.make_node("Add", ["d", "mean"], ["y"])],
    [_vi("x", F, [3, 4, 5])], [_vi("y", F, [3, 4, 5]), _vi("m", F, [3, 4])], [_init("ax", np.array([1], np.int64))])
  out["concat"] = _model("concat", [
    helper.make_node("Concat", ["a", "b"], ["c"], axis=1),
    helper.make_node("Split", ["c", "sp"], ["p", "q"], axis=1),
    helper.make_node("Mul", ["p", "q"], ["y"])],
    [_vi("a", F, [2, 3]), _vi("b", F, [2, 5])], [_vi("y", F, [2, 4])], [_init("sp", np.array([4, 4], np.int64))])
  out["broadcast"] = _model("broadcast", [
    helper.make_node("Mul", ["y0", "two"], ["y2"]), helper.make_node("Add", ["x", "y2"], ["s"]),
    helper.make_node("Sigmoid", ["s"], ["g"]), helper.make_node("Greater", ["s", "zero"], ["c"]),
    helper.make_node("Where", ["c", "g", "s"], ["y"])],
    [_vi("x", F, [4, 1, 3]), _vi("y0", F, [5, 3])], [_vi("y", F, [4, 5, 3])],
    [_init("two", np.array(2.0, np.float32)), _init("zero", np.array(0.0, np.float32))])
  out["slice_gather"] = _model("slice_gather", [
    helper.make_node("Slice", ["x", "st", "en", "axs", "stp"], ["s"]),
    helper.make_node("Gather", ["s", "idx"], ["g"], axis=1), helper.make_node("Neg", ["g"], ["y"])],
    [_vi("x", F, [6, 5])], [_vi("y", F, [3, 2])],
    [_init("st", np.array([1, 0], np.int64)), _init("en", np.array([6, 5], np.int64)),
     _init("axs", np.array([0, 1], np.int64)), _init("stp", np.array([2, 1], np.int64)),
     _init("idx", np.array([4, 0], np.int64))])
  out["batchnorm"] = _model("batchnorm", [
    helper.make_node("BatchNormalization", ["x", "sc", "bi", "mu", "var"], ["n"], epsilon=1e-5),
    helper.make_node("Relu", ["n"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["p"]),
    helper.make_node("Flatten", ["p"], ["y"], axis=1)],
    [_vi("x", F, [2, 3, 4, 4])], [_vi("y", F, [2, 3])],
    [_init("sc", f32(3)), _init("bi", f32(3)), _init("mu", f32(3)),
     _init("var", rng.uniform(0.5, 1.5, 3).astype(np.float32))])
  out["cast_clip"] = _model("cast_clip", [
    helper.make_node("Cast", ["x"], ["f"], to=F), helper.make_node("Clip", ["f", "lo", "hi"], ["c"]),
    helper.make_node("Cast", ["c"], ["i"], to=I64), helper.make_node("Mul", ["i", "k"], ["y"])],
    [_vi("x", TensorProto.INT32, [4, 4])], [_vi("y", I64, [4, 4])],
    [_init("lo", np.array(-1.0, np.float32)), _init("hi", np.array(2.0, np.float32)),
     _init("k", np.array([3], np.int64))])
  out["pad_pool"] = _model("pad_pool", [
    helper.make_node("Pad", ["x", "pads"], ["p"], mode="reflect"),
    helper.make_node("AveragePool", ["p"], ["a"], kernel_shape=[3, 3], strides=[1, 1]),
    helper.make_node("Tanh", ["a"], ["y"])],
    [_vi("x", F, [1, 1, 5, 5])], [_vi("y", F, [1, 1, 5, 5])],
    [_init("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))])
  return out


# ---------------------------------------------------------------- mutations
DIMS = [0, 1, 2, 3, 5, 7, 64, -1, -7, 1 << 31]
DTYPES = [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.INT8,
          TensorProto.INT32, TensorProto.INT64, TensorProto.UINT8, TensorProto.BOOL, TensorProto.STRING,
          TensorProto.COMPLEX64, TensorProto.FLOAT8E4M3FN, TensorProto.INT4, 0, 99]
OP_TYPES = ["Relu", "Add", "MatMul", "Conv", "Reshape", "Softmax", "Transpose", "Concat", "Identity", "Sum", "Gemm",
            "ReduceSum", "Cast", "Where", "Split", "NoSuchOp", "Loop", "If", "Shape", "Gather", "Slice", "Expand"]
INTS = [-(1 << 40), -5, -2, -1, 0, 1, 2, 3, 4, 9, 1 << 31]
FLOATS = [float("nan"), float("inf"), -float("inf"), -1.0, 0.0, 1e-30, 1e30, 3.5]


def _values(m: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
  return list(m.graph.input) + list(m.graph.output)


def _names(m: onnx.ModelProto) -> list[str]:
  names = [v.name for v in m.graph.input] + [t.name for t in m.graph.initializer]
  for n in m.graph.node: names += [o for o in n.output if o]
  return names


def _mut_dim(m, rng):
  choices = [(v, "value") for v in _values(m) if v.type.tensor_type.shape.dim] + \
            [(t, "init") for t in m.graph.initializer if t.dims]
  if not choices: return "dim: nothing to change"
  target, kind = rng.choice(choices)
  dims = target.type.tensor_type.shape.dim if kind == "value" else target.dims
  axis = rng.randrange(len(dims))
  value = rng.choice(DIMS)
  if kind == "value":
    if rng.random() < 0.15:
      dims[axis].dim_param = "N"
      return f"dim: {target.name}[{axis}] = 'N'"
    dims[axis].dim_value = value
  else:
    if value < 0: value = 3
    dims[axis] = value
  return f"dim: {target.name}[{axis}] = {value}"


def _mut_rank(m, rng):
  v = rng.choice(_values(m))
  dims = v.type.tensor_type.shape.dim
  if dims and rng.random() < 0.5:
    del dims[rng.randrange(len(dims))]
    return f"rank: drop a dim of {v.name}"
  dims.add().dim_value = rng.choice([1, 2])
  return f"rank: add a dim to {v.name}"


def _mut_dtype(m, rng):
  dt = rng.choice(DTYPES)
  where = rng.random()
  if where < 0.5:
    v = rng.choice(_values(m))
    v.type.tensor_type.elem_type = dt
    return f"dtype: {v.name} -> {dt}"
  if where < 0.8 and m.graph.initializer:
    t = rng.choice(list(m.graph.initializer))
    t.data_type = dt
    return f"dtype: initializer {t.name} -> {dt}"
  casts = [n for n in m.graph.node if n.op_type == "Cast"]
  if casts:
    n = rng.choice(casts)
    for a in n.attribute:
      if a.name == "to": a.i = dt
    return f"dtype: Cast to -> {dt}"
  v = rng.choice(_values(m))
  v.type.tensor_type.elem_type = dt
  return f"dtype: {v.name} -> {dt}"


def _mut_attribute(m, rng):
  nodes = [n for n in m.graph.node if n.attribute]
  if not nodes or rng.random() < 0.05:
    n = rng.choice(list(m.graph.node))
    name = rng.choice(["axis", "perm", "kernel_shape", "pads", "keepdims", "bogus", "to", "epsilon"])
    val = rng.choice([rng.choice(INTS), [rng.choice(INTS) for _ in range(rng.randrange(1, 5))], rng.choice(FLOATS)])
    n.attribute.append(helper.make_attribute(name, val))
    return f"attribute: add {n.op_type}.{name} = {val}"
  n = rng.choice(nodes)
  a = rng.choice(list(n.attribute))
  if rng.random() < 0.15:
    n.attribute.remove(a)
    return f"attribute: remove {n.op_type}.{a.name}"
  if a.type == onnx.AttributeProto.INT: a.i = rng.choice(INTS)
  elif a.type == onnx.AttributeProto.FLOAT: a.f = rng.choice(FLOATS)
  elif a.type == onnx.AttributeProto.INTS:
    if a.ints and rng.random() < 0.7: a.ints[rng.randrange(len(a.ints))] = rng.choice(INTS)
    elif a.ints and rng.random() < 0.5: del a.ints[rng.randrange(len(a.ints))]
    else: a.ints.append(rng.choice(INTS))
  elif a.type == onnx.AttributeProto.STRING: a.s = rng.choice([b"", b"edge", b"wrap", b"constant", b"\xff\xfe"])
  else: a.type = onnx.AttributeProto.FLOAT
  return f"attribute: {n.op_type}.{a.name} -> {helper.get_attribute_value(a)}"


def _mut_input_name(m, rng):
  n = rng.choice(list(m.graph.node))
  if not n.input: return "input name: node without inputs"
  i = rng.randrange(len(n.input))
  r = rng.random()
  new = "dangling_input" if r < 0.35 else "" if r < 0.5 else rng.choice(_names(m))
  old, n.input[i] = n.input[i], new
  return f"input name: {n.op_type} input {i} {old!r} -> {new!r}"


def _mut_op_type(m, rng):
  n = rng.choice(list(m.graph.node))
  old, n.op_type = n.op_type, rng.choice(OP_TYPES)
  return f"op type: {old} -> {n.op_type}"


def _mut_graph(m, rng):
  nodes = list(m.graph.node)
  r = rng.random()
  if r < 0.25 and len(nodes) > 1:       # a cycle: an early node reads a later node's output
    i = rng.randrange(len(nodes) - 1)
    j = rng.randrange(i + 1, len(nodes))
    if nodes[i].input:
      nodes[i].input[0] = nodes[j].output[0]
      return f"cycle: {nodes[i].op_type}#{i} reads {nodes[j].output[0]!r}"
  if r < 0.45:
    i = rng.randrange(len(nodes))
    del m.graph.node[i]
    return f"remove node {nodes[i].op_type}#{i}"
  if r < 0.6:
    n = rng.choice(nodes)
    m.graph.node.append(n)
    return f"duplicate node {n.op_type}"
  if r < 0.7:
    o = rng.choice(list(m.graph.output))
    o.name = rng.choice(["nope", "", rng.choice(_names(m))])
    return f"graph output renamed to {o.name!r}"
  if r < 0.8:
    if m.graph.initializer:
      t = rng.choice(list(m.graph.initializer))
      m.graph.initializer.remove(t)
      return f"remove initializer {t.name}"
  if r < 0.9:
    m.graph.input.append(helper.make_tensor_value_info(rng.choice(_names(m)), TensorProto.FLOAT, [2]))
    return "duplicate graph input name"
  n = rng.choice(nodes)
  n.output[0] = rng.choice(_names(m))
  return f"output name: {n.op_type} writes {n.output[0]!r}"


def _mut_opset(m, rng):
  r = rng.random()
  if r < 0.5:
    m.opset_import[0].version = rng.choice([1, 5, 7, 11, 13, 19, 23, 30, 1000])
    return f"opset {m.opset_import[0].version}"
  if r < 0.65:
    del m.opset_import[:]
    return "no opset import"
  if r < 0.8:
    m.ir_version = rng.choice([0, 1, 3, 11, 99])
    return f"ir_version {m.ir_version}"
  n = rng.choice(list(m.graph.node))
  n.domain = rng.choice(["ai.onnx.ml", "com.microsoft", "nope"])
  return f"node domain {n.domain}"


def _mut_initializer_data(m, rng):
  if not m.graph.initializer: return "initializer data: none"
  t = rng.choice(list(m.graph.initializer))
  r = rng.random()
  if r < 0.4 and t.raw_data:
    t.raw_data = t.raw_data[:rng.randrange(len(t.raw_data))]
    return f"initializer {t.name}: raw data truncated"
  if r < 0.6:
    t.raw_data = bytes(rng.randrange(256) for _ in range(rng.choice([1, 3, 8, 40])))
    return f"initializer {t.name}: random raw data"
  if r < 0.8 and t.raw_data:   # special float values or extreme integers in the data
    arr = numpy_helper.to_array(t).copy()
    if arr.size:
      flat = arr.reshape(-1)
      flat[rng.randrange(flat.size)] = rng.choice(FLOATS) if arr.dtype.kind == "f" else rng.choice(INTS[1:-1])
      t.CopyFrom(numpy_helper.from_array(arr, t.name))
      return f"initializer {t.name}: value {flat.tolist()[:8]}"
  t.data_location = onnx.TensorProto.EXTERNAL
  del t.external_data[:]
  t.external_data.add(key="location", value=rng.choice(["missing.bin", "../../etc/passwd", ""]))
  return f"initializer {t.name}: external data"


FIELD_MUTATIONS = [_mut_dim, _mut_dim, _mut_rank, _mut_dtype, _mut_dtype, _mut_attribute, _mut_attribute,
                   _mut_attribute, _mut_input_name, _mut_op_type, _mut_graph, _mut_graph, _mut_opset,
                   _mut_initializer_data]


def _mut_bytes(data: bytes, rng) -> tuple[bytes, str]:
  b = bytearray(data)
  r = rng.random()
  if r < 0.35:
    k = rng.choice([1, 2, 4, 8])
    for _ in range(k):
      i = rng.randrange(len(b))
      b[i] ^= 1 << rng.randrange(8)
    return bytes(b), f"bytes: {k} bit flips"
  if r < 0.5:
    i = rng.randrange(len(b))
    return bytes(b[:i]), f"bytes: truncated at {i} of {len(b)}"
  if r < 0.65:
    i = rng.randrange(len(b))
    return bytes(b[:i]) + bytes(rng.randrange(256) for _ in range(rng.choice([1, 4, 16]))) + bytes(b[i:]), \
      f"bytes: random insert at {i}"
  if r < 0.8:
    i = rng.randrange(len(b))
    j = min(len(b), i + rng.choice([1, 8, 64]))
    b[i:j] = bytes(j - i)
    return bytes(b), f"bytes: zeroed {i}:{j}"
  if r < 0.9:
    i = rng.randrange(len(b))
    j = min(len(b), i + rng.choice([4, 32]))
    return bytes(b[:j]) + bytes(b[i:j]) + bytes(b[j:]), f"bytes: duplicated {i}:{j}"
  i = rng.randrange(len(b))
  b[i] = rng.choice([0x00, 0xff, 0x7f, 0x80])
  return bytes(b), f"bytes: byte {i} = {b[i]:#x}"


def mutants(count: int = MUTANTS, seed: int = SEED) -> list[tuple[str, bytes, str]]:
  """(case id, serialized model, what was mutated): the seed models themselves first, then `count` mutants."""
  rng = random.Random(seed)
  models = seed_models()
  names = sorted(models)
  out = [(f"seed-{n}", models[n].SerializeToString(), "unmutated") for n in names]
  for k in range(count):
    name = names[k % len(names)]
    m = onnx.ModelProto()
    m.CopyFrom(models[name])
    if rng.random() < 0.3:
      data, what = _mut_bytes(m.SerializeToString(), rng)
    else:
      steps = [rng.choice(FIELD_MUTATIONS)(m, rng) for _ in range(1 if rng.random() < 0.75 else 2)]
      what = "; ".join(steps)
      try: data = m.SerializeToString()
      except Exception as error:   # a mutation protobuf cannot encode (e.g. an invalid UTF-8 string)
        data, what = models[name].SerializeToString()[:-1], f"{what} (unencodable, truncated instead: {error})"
    out.append((f"{name}-{k:03d}", data, what))
  return out


# ---------------------------------------------------------------- one case (in the worker)
def _one_line_error(stderr: str) -> str | None:
  """The error line of a failed compile, or None when stderr is not exactly one error line (progress lines from a
  long compile, 'tgc: <name>: lowering kernel ...', are allowed before it)."""
  lines = [ln for ln in stderr.splitlines() if ln.strip()]
  progress = (" lowering kernel ", " kernels lowered ")
  lines = [ln for ln in lines if not (ln.startswith("tgc: ") and any(p in ln for p in progress))]
  return lines[0] if len(lines) == 1 else None


def _storage_only(art) -> bool:
  from tgc.ir import dtypes
  for spec in art.inputs + art.outputs:
    dt = getattr(dtypes, str(spec.get("tgc_dtype", "")), None)
    if dt is not None and getattr(dt, "storage_only", False): return True
  return False


def _first_line(error: BaseException) -> str:
  text = str(error).strip()
  return text.splitlines()[0] if text else ""


def _invalid(data: bytes) -> str:
  """Why ONNX's own strict shape and type inference rejects the model (nodes sorted first: tgc accepts nodes out
  of order on purpose), or "" when it accepts it."""
  model = onnx.load_from_string(data)
  nodes, done = list(model.graph.node), {i.name for i in model.graph.input} | {t.name for t in model.graph.initializer}
  order = []
  while nodes:
    ready = [n for n in nodes if all(x in done or not x for x in n.input)]
    if not ready: return ""      # a real cycle: the importer's own check reports those
    for n in ready:
      order.append(n)
      nodes.remove(n)
      done.update(n.output)
  del model.graph.node[:]
  model.graph.node.extend(order)
  try: onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
  except Exception as error: return _first_line(error)
  return ""


def run_case(data: bytes, seed: int, workdir: str) -> tuple[str, str]:
  """(outcome, detail). Outcomes: "error2" (clean refusal), "ok" (ran and matched the reference), "ok-unchecked"
  (ran; the reference refused the model, or storage-only types), "ok-not-run" (too large to run); failures:
  "exit3", "exit<N>", "exception", "not-one-line", "mismatch", "run-error", and "accepted-invalid" (compiled a
  model that the reference refuses and ONNX's strict shape inference rejects: an attribute or input tgc should
  have reported)."""
  import warnings
  from click.testing import CliRunner
  from tgc.aot.cli import cli
  from tgc.aot import artifact, validate
  path = os.path.join(workdir, "fuzz.onnx")
  out = os.path.join(workdir, "out")
  with open(path, "wb") as f: f.write(data)
  result = CliRunner().invoke(cli, ["compile", path, "-o", out], catch_exceptions=True)
  stderr = result.stderr if hasattr(result, "stderr") else result.output
  if result.exception is not None and not isinstance(result.exception, SystemExit):
    return "exception", f"{type(result.exception).__name__}: {result.exception}"
  if result.exit_code == 3: return "exit3", stderr.strip()
  if result.exit_code == 2:
    line = _one_line_error(stderr)
    if line is None: return "not-one-line", stderr.strip()
    return "error2", line
  if result.exit_code != 0: return f"exit{result.exit_code}", stderr.strip()
  try:
    art = artifact.open_artifact(out)
    io_bytes = sum(int(np.prod(s["shape"])) * np.dtype(s["dtype"]).itemsize for s in art.inputs + art.outputs)
    if io_bytes + int(art.manifest.get("arena_bytes", 0)) > MAX_RUN_BYTES: return "ok-not-run", f"{io_bytes} bytes"
    feeds = artifact.random_inputs(art, seed)
    got = artifact.run_artifact(out, feeds)
  except Exception as error:
    return "run-error", f"{type(error).__name__}: {error}"
  if _storage_only(art): return "ok-unchecked", "storage-only dtypes"
  try:
    from onnx.reference import ReferenceEvaluator
    with warnings.catch_warnings(), np.errstate(all="ignore"):
      warnings.simplefilter("ignore")
      model = onnx.load_from_string(data)
      ref = ReferenceEvaluator(model).run(None, feeds)
      names = [o.name for o in model.graph.output]
  except Exception as error:
    why = f"reference refused: {type(error).__name__}: {_first_line(error)}"
    invalid = _invalid(data)
    if invalid: return "accepted-invalid", f"{why}; ONNX strict shape inference: {invalid}"
    return "ok-unchecked", why
  for name, r in zip(names, ref):
    if name not in got: return "mismatch", f"output {name!r} missing from the artifact"
    r = np.asarray(r)
    rtol, atol = validate.default_tolerance(got[name].dtype)
    max_abs, _, ok, note = validate.compare(got[name], r, rtol, atol)
    if not ok or got[name].dtype != r.dtype:
      return "mismatch", f"output {name!r}: {got[name].dtype} vs reference {r.dtype}, max abs {max_abs:.3g} ({note})"
  return "ok", ""


def _worker() -> None:
  """Serve cases over stdin/stdout (length-prefixed pickles); everything else printed goes to stderr."""
  proto_in, proto_out = sys.stdin.buffer, os.fdopen(os.dup(1), "wb")
  os.dup2(2, 1)
  sys.path.insert(0, ROOT)
  workdir = tempfile.mkdtemp(prefix="tgc-fuzz-")
  while True:
    head = proto_in.read(8)
    if len(head) < 8: return
    data, seed = pickle.loads(proto_in.read(struct.unpack("<Q", head)[0]))
    start = time.perf_counter()
    try: outcome, detail = run_case(data, seed, workdir)
    except BaseException as error:   # run_case itself failed: report it as a failure of the case
      outcome, detail = "exception", f"harness: {type(error).__name__}: {error}"
    reply = pickle.dumps((outcome, detail[:2000], time.perf_counter() - start))
    proto_out.write(struct.pack("<Q", len(reply)) + reply)
    proto_out.flush()


class Worker:
  """A worker process running cases one at a time; restarted after a crash or a hang."""

  def __init__(self):
    self.proc: subprocess.Popen | None = None

  def _start(self) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT, env=env)

  def _read(self, n: int, deadline: float) -> bytes | None:
    buf = b""
    fd = self.proc.stdout.fileno()
    while len(buf) < n:
      left = deadline - time.monotonic()
      if left <= 0 or not select.select([fd], [], [], left)[0]: return None
      chunk = os.read(fd, n - len(buf))
      if not chunk: return b""
      buf += chunk
    return buf

  def run(self, data: bytes, seed: int = 0, timeout: float = CASE_TIMEOUT_S) -> tuple[str, str, float]:
    if self.proc is None or self.proc.poll() is not None: self._start()
    msg = pickle.dumps((data, seed))
    start = time.monotonic()
    try:
      self.proc.stdin.write(struct.pack("<Q", len(msg)) + msg)
      self.proc.stdin.flush()
    except BrokenPipeError:
      return self._died(start)
    deadline = start + timeout
    head = self._read(8, deadline)
    if head is None: return self._hung(timeout)
    if len(head) < 8: return self._died(start)
    body = self._read(struct.unpack("<Q", head)[0], deadline)
    if body is None: return self._hung(timeout)
    return pickle.loads(body)

  def _hung(self, timeout: float) -> tuple[str, str, float]:
    self.close()
    return "hang", f"no result within {timeout} s", timeout

  def _died(self, start: float) -> tuple[str, str, float]:
    code = self.proc.wait()
    self.proc = None
    return "crash", f"worker died with status {code}", time.monotonic() - start

  def close(self) -> None:
    if self.proc is not None:
      if self.proc.poll() is None:
        self.proc.kill()
      self.proc.wait()
      self.proc = None


# ---------------------------------------------------------------- tests
OK_OUTCOMES = ("ok", "ok-unchecked", "ok-not-run", "error2")
CASES = mutants()


def _params():
  out = []
  for case_id, data, what in CASES:
    marks = [pytest.mark.xfail(strict=True, reason=KNOWN_FAILURES[case_id])] if case_id in KNOWN_FAILURES else []
    out.append(pytest.param(data, what, id=case_id, marks=marks))
  return out


@pytest.fixture(scope="module")
def worker():
  w = Worker()
  yield w
  w.close()


def test_mutants_are_deterministic():
  again = mutants()
  assert [(i, d) for i, d, _ in again] == [(i, d) for i, d, _ in CASES]
  assert len({d for _, d, _ in CASES}) > 0.8 * len(CASES), "too many identical mutants"


@pytest.mark.parametrize("data,what", _params())
def test_mutant(worker, data, what):
  outcome, detail, _ = worker.run(data, seed=len(data))
  assert outcome in OK_OUTCOMES, f"{what}: {outcome}: {detail}"
  if outcome.startswith("ok") and what == "unmutated": assert outcome == "ok", f"seed model: {outcome}: {detail}"


def _main(argv) -> int:
  import argparse
  import collections
  ap = argparse.ArgumentParser(description="run the fuzz cases and summarize")
  ap.add_argument("--summary", action="store_true")
  ap.add_argument("--show", default=None, help="one case id")
  ap.add_argument("--save", default=None, help="write failing mutants into this folder")
  ap.add_argument("-v", dest="verbose", action="store_true", help="print every case")
  args = ap.parse_args(argv)
  w = Worker()
  counts: collections.Counter = collections.Counter()
  start = time.perf_counter()
  try:
    for case_id, data, what in CASES:
      if args.show and case_id != args.show: continue
      outcome, detail, secs = w.run(data, seed=len(data))
      counts[outcome] += 1
      bad = outcome not in OK_OUTCOMES
      if bad or args.show or args.verbose:
        print(f"{'FAIL' if bad else 'ok  '} {case_id} [{secs:.1f}s] {what}: {outcome}: {detail[:300]}", flush=True)
      if bad and args.save:
        os.makedirs(args.save, exist_ok=True)
        with open(os.path.join(args.save, f"{case_id}.onnx"), "wb") as f: f.write(data)
  finally:
    w.close()
  print(", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + f" ({time.perf_counter() - start:.0f} s)")
  return 0


if __name__ == "__main__":
  if sys.argv[1:2] == ["--worker"]: _worker()
  else: sys.exit(_main(sys.argv[1:]))
