"""A reproducible, offline corpus of real-world ONNX models for benchmarks.

    python bench/corpus.py build [--out DIR] [--only NAME ...] [--list]
    python bench/corpus.py verify [--out DIR] [--only NAME ...]

`build` writes `DIR/<name>.onnx` for every model (default DIR: bench/.corpus, gitignored) and keeps `DIR/index.json`
up to date after each model (a list of entries: name, source, description, file, inputs with the pinned shape,
dtype and how to make a realistic value of each, outputs, opset, op counts, size, build seconds and the one-thread
onnxruntime run time measured after the build; an entry with `dims` keeps the inputs' `open` axes as dim_params in
the file, each name's range in `dims`, timed at the spec's shape). `--only` builds the named models (and the models
they are made from, if those are not in DIR yet); `--list` prints the table of builders and whether each can be
built here.
Every model is checked with `onnx.checker.check_model` and run in onnxruntime (CPUExecutionProvider, one thread)
on `feeds(entry)` before its entry is written; at the end every entry of the index is run again from the file
(`verify` does only that) and failures are reported (exit status 1).

Sources (the `source` of an entry):
- `torch-script`: torch.onnx.export(dynamo=False) of modules written here (torch only; torchvision is not used).
- `torch-dynamo`: torch.onnx.export(dynamo=True) of some of the same modules (needs onnxscript).
- `transformers`: Hugging Face transformers models from small random-init configs, eager attention, exported with
  dynamo=False through a wrapper that returns one tensor (no cache).
- `paddle2onnx`: the trained PaddleOCR models (PP-OCRv4 detector and recognizer, the direction classifier) that the
  PyPI wheel rapidocr-onnxruntime ships (downloaded with `pip download --no-deps` into DIR/.cache).
- `silero`: the Silero VAD models that the PyPI wheel silero-vad ships (LSTM inside If branches).
- `ort-quant`: onnxruntime.quantization (static QDQ per-channel and per-tensor, QOperator, dynamic) of models above.
- `tf2onnx`: Keras models (weights=None, seeded) converted with tf2onnx (needs tensorflow-cpu and tf2onnx).
- `onnx-zoo-light`: the onnx wheel's light_*.onnx architectures with seeded random weights
  (tests/onnx/light_models.py).
- `onnx-helper`: Scan and Loop graphs built with onnx.helper.

Python API (used by benchmark runners): `entries(dir)` reads the index, `feeds(entry, seed=0)` makes the inputs,
`model_path(dir, entry)` the ONNX file. The extra packages are pinned in bench/corpus-requirements.txt; builders
whose packages are missing are skipped with a one-line reason."""
from __future__ import annotations
import argparse
import contextlib
import importlib.util
import io
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import warnings
import zipfile
import zlib
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_OUT = os.path.join(HERE, ".corpus")
INDEX = "index.json"
OPSET = 17
RAPIDOCR = "rapidocr-onnxruntime==1.4.4"
SILERO = "silero-vad==6.2.3"


# ---------------------------------------------------------------------------------------------------------------------
# index and feeds (numpy + onnx only)

def entries(out_dir: str = DEFAULT_OUT) -> list[dict]:
  """The entries of DIR/index.json (an empty list if there is none)."""
  path = os.path.join(out_dir, INDEX)
  if not os.path.isfile(path): return []
  with open(path) as f:
    return json.load(f)["models"]


def entry(name: str, out_dir: str = DEFAULT_OUT) -> dict:
  for e in entries(out_dir):
    if e["name"] == name: return e
  raise KeyError(f"{name} is not in {os.path.join(out_dir, INDEX)}")


def model_path(out_dir: str, e: dict) -> str:
  return os.path.join(out_dir, e["file"])


def feeds(e: dict, seed: int = 0) -> dict[str, np.ndarray]:
  """Seeded, realistic inputs for the entry `e`: each input spec says how its values are made:
  `normal` (mean, std: images, audio, features), `uniform` (low, high), `int` (integers in [low, high): token ids,
  with high = the vocabulary size) and `fill` (value: attention masks of ones, zero states, a sample rate)."""
  rng = np.random.default_rng(seed)
  out = {}
  for spec in e["inputs"]:
    shape, dtype, kind = tuple(spec["shape"]), np.dtype(spec["dtype"]), spec.get("kind", "normal")
    if kind == "normal": value = rng.standard_normal(shape) * spec.get("std", 1.0) + spec.get("mean", 0.0)
    elif kind == "uniform": value = rng.uniform(spec["low"], spec["high"], shape)
    elif kind == "int": value = rng.integers(spec["low"], spec["high"], shape)
    elif kind == "fill": value = np.full(shape, spec["value"])
    else: raise ValueError(f"{e['name']}: unknown input kind {kind!r}")
    out[spec["name"]] = np.asarray(value).astype(dtype)
  return out


def _write_index(out_dir: str, models: list[dict]) -> None:
  path = os.path.join(out_dir, INDEX)
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    json.dump({"format": 1, "models": models}, f, indent=1)
  os.replace(tmp, path)


def _update_index(out_dir: str, e: dict | None, remove: str | None = None) -> None:
  models = [m for m in entries(out_dir) if m["name"] != (e["name"] if e else remove)]
  if e is not None: models.append(e)
  order = {name: i for i, name in enumerate(BUILDERS)}
  models.sort(key=lambda m: order.get(m["name"], len(order)))
  _write_index(out_dir, models)


# input specs

def normal(name: str, shape, std: float = 1.0, mean: float = 0.0, dtype: str = "float32") -> dict:
  return {"name": name, "shape": list(shape), "dtype": dtype, "kind": "normal", "mean": mean, "std": std}


def uniform(name: str, shape, low: float, high: float, dtype: str = "float32") -> dict:
  return {"name": name, "shape": list(shape), "dtype": dtype, "kind": "uniform", "low": low, "high": high}


def tokens(name: str, shape, vocab: int, low: int = 0, dtype: str = "int64") -> dict:
  return {"name": name, "shape": list(shape), "dtype": dtype, "kind": "int", "low": low, "high": vocab}


def fill(name: str, shape, value, dtype: str) -> dict:
  return {"name": name, "shape": list(shape), "dtype": dtype, "kind": "fill", "value": value}


def open_dims(spec: dict, **axes: int) -> dict:
  """`spec` with some axes left open in the model file: a dim_param `name` at `axis` (`name=axis`); the entry's
  `dims` gives each name's range, and `shape` the size the benchmark runs at. An entry whose sizes are multiples
  (`32*h`) says so in its `input_shapes` (as `--input-shape`), with `dims` the ranges of the multiples."""
  return {**spec, "open": {str(axis): name for name, axis in axes.items()}}


def dynamic_axes(specs: list[dict]) -> dict:
  """torch.onnx.export's dynamic_axes for the open dims of `specs`."""
  return {s["name"]: {int(a): n for a, n in s["open"].items()} for s in specs if s.get("open")}


# ---------------------------------------------------------------------------------------------------------------------
# registry

@dataclass
class Built:
  model: onnx.ModelProto
  inputs: list[dict]
  extra: dict = field(default_factory=dict)     # more fields for the entry (vocab, ...)


@dataclass
class Builder:
  name: str
  source: str
  description: str
  needs: tuple[str, ...]           # importable modules
  fn: Callable[["Context"], Built]
  bases: tuple[str, ...] = ()      # corpus models this one is made from


BUILDERS: dict[str, Builder] = {}
SOURCES = ("torch-script", "torch-dynamo", "transformers", "paddle2onnx", "silero", "ort-quant", "tf2onnx",
           "onnx-zoo-light", "onnx-helper")
NEEDS = {"torch-script": ("torch",), "torch-dynamo": ("torch", "onnxscript"), "transformers": ("torch", "transformers"),
         "paddle2onnx": (), "silero": (), "ort-quant": ("onnxruntime",), "tf2onnx": ("tensorflow", "tf2onnx"),
         "onnx-zoo-light": (), "onnx-helper": ()}
PIP_NAMES = {"tensorflow": "tensorflow-cpu"}


def register(name: str, source: str, description: str, needs: tuple[str, ...] = (), bases: tuple[str, ...] = ()):
  assert source in SOURCES, source
  def wrap(fn):
    BUILDERS[name] = Builder(name, source, description, tuple(NEEDS[source]) + tuple(needs), fn, bases)
    return fn
  return wrap


def missing(b: Builder, out_dir: str | None = None) -> list[str]:
  """The modules that builder `b` (or a corpus model it is made from and that is not in out_dir yet) needs and
  this environment lacks."""
  gone = [m for m in b.needs if importlib.util.find_spec(m) is None]
  have = {e["name"] for e in entries(out_dir) if os.path.isfile(model_path(out_dir, e))} if out_dir else set()
  for base in b.bases:
    if base not in have: gone += [m for m in missing(BUILDERS[base], out_dir) if m not in gone]
  return gone


def seed_of(name: str) -> int:
  return zlib.crc32(name.encode()) & 0x7FFFFFFF


class Context:
  def __init__(self, out_dir: str, verbose: bool = False):
    self.out = out_dir
    self.cache = os.path.join(out_dir, ".cache")
    self.verbose = verbose

  def base(self, name: str) -> str:
    """The path of corpus model `name`, built first if it is not in the corpus yet."""
    names = {e["name"] for e in entries(self.out)}
    if name not in names:
      ok, _ = build_one(self, BUILDERS[name])
      if not ok: raise RuntimeError(f"base model {name} could not be built")
    return os.path.join(self.out, f"{name}.onnx")

  def base_entry(self, name: str) -> dict:
    self.base(name)
    return entry(name, self.out)

  def pip_wheel(self, requirement: str) -> str:
    """`pip download --no-deps requirement` into the cache (once); the path of the wheel."""
    os.makedirs(self.cache, exist_ok=True)
    stem = requirement.split("==")[0].replace("-", "_").lower()
    version = requirement.split("==")[1] if "==" in requirement else ""
    def find():
      for f in sorted(os.listdir(self.cache)):
        if f.lower().startswith(f"{stem}-{version}") and f.endswith(".whl"): return os.path.join(self.cache, f)
      return None
    path = find()
    if path is None:
      proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                             requirement, "-d", self.cache], capture_output=True, text=True)
      path = find()
      if path is None: raise RuntimeError(f"pip download {requirement} failed: {proc.stderr.strip()[-500:]}")
    return path


# ---------------------------------------------------------------------------------------------------------------------
# helpers on ONNX models

def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
  inits = {t.name for t in model.graph.initializer}
  return [i for i in model.graph.input if i.name not in inits]


def pin_inputs(model: onnx.ModelProto, specs: list[dict]) -> onnx.ModelProto:
  """Set every graph input's shape to the concrete one of its spec (dynamic dims become fixed), except the axes the
  spec leaves `open` (`open_dims`): those are dim_params of the given names."""
  by_name = {s["name"]: s for s in specs}
  for vi in graph_inputs(model):
    if vi.name not in by_name: raise ValueError(f"graph input {vi.name} has no input spec")
    shape = by_name[vi.name]["shape"]
    dims = vi.type.tensor_type.shape.dim
    if len(dims) and len(dims) != len(shape):
      raise ValueError(f"input {vi.name}: rank {len(dims)} in the graph, spec shape {shape}")
    vi.type.tensor_type.shape.Clear()
    open_axes = by_name[vi.name].get("open", {})
    for axis, d in enumerate(shape):
      dim = vi.type.tensor_type.shape.dim.add()
      if str(axis) in open_axes: dim.dim_param = open_axes[str(axis)]
      else: dim.dim_value = int(d)
  names = {vi.name for vi in graph_inputs(model)}
  extra = set(by_name) - names
  if extra: raise ValueError(f"input specs for no graph input: {sorted(extra)}")
  return model


def _subgraphs(n: onnx.NodeProto):
  for a in n.attribute:
    if a.type == onnx.AttributeProto.GRAPH: yield a.g
    yield from a.graphs


def _used_names(graph: onnx.GraphProto) -> list[str]:
  """Every value name a graph's nodes read, its subgraphs' included (the outer-scope ones among them too)."""
  names = []
  for n in graph.node:
    names += list(n.input)
    for sub in _subgraphs(n): names += _used_names(sub)
  return names


def canonical_names(model: onnx.ModelProto) -> onnx.ModelProto:
  """A deterministic form of a converter's output whose graph is the same from run to run but whose node order,
  node names, intermediate value names and (deduplicated) constants' names are not (tf2onnx: counters and
  id()-ordered sets): every graph's nodes in depth-first post-order from its outputs (inputs in order), value and
  initializer names `v<i>` / `c<i>` in that order, node names `<op>_<i>`. The main graph's inputs and outputs keep
  their names; value_info (optional shape hints) is dropped."""
  counter = [0, 0, 0]
  old_limit = sys.getrecursionlimit()
  sys.setrecursionlimit(max(old_limit, 20000))
  def fresh(kind: int, stem: str) -> str:
    counter[kind] += 1
    return f"{stem}{counter[kind] - 1}"
  def canon(graph: onnx.GraphProto, outer: dict[str, str], top: bool) -> None:
    rename = dict(outer)
    inits = {t.name: t for t in graph.initializer}
    if not top:
      for vi in graph.input: rename[vi.name] = vi.name = fresh(0, "v")
    producers = {o: n for n in graph.node for o in n.output if o}
    order, seen = [], set()
    def visit(n):
      if id(n) in seen: return
      seen.add(id(n))
      deps = list(n.input)
      for sub in _subgraphs(n): deps += _used_names(sub)
      for x in deps:
        if x in producers: visit(producers[x])
      order.append(n)
    for o in graph.output:
      if o.name in producers: visit(producers[o.name])
    for n in graph.node: visit(n)          # nodes that reach no output (none in a clean graph)
    keep_names = {o.name for o in graph.output} if top else set()
    used_inits = []
    for n in order:
      for i, x in enumerate(n.input):
        if x in inits and x not in rename:
          rename[x] = fresh(1, "c")
          used_inits.append(x)
        if x in rename: n.input[i] = rename[x]
      for sub in _subgraphs(n): canon(sub, rename, False)
      for k, o in enumerate(n.output):
        if o and o not in keep_names: rename[o] = n.output[k] = fresh(0, "v")
      n.name = fresh(2, f"{n.op_type}_")
    del graph.node[:]
    graph.node.extend(order)
    for o in graph.output:
      if o.name in rename: o.name = rename[o.name]
    for name in used_inits: inits[name].name = rename[name]
    kept = [inits[name] for name in used_inits]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    del graph.value_info[:]
  try:
    canon(model.graph, {}, True)
  finally:
    sys.setrecursionlimit(old_limit)
  return model


def op_counts(model: onnx.ModelProto) -> dict[str, int]:
  counts: dict[str, int] = {}
  def walk(g):
    for n in g.node:
      key = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"
      counts[key] = counts.get(key, 0) + 1
      for a in n.attribute:
        if a.type == onnx.AttributeProto.GRAPH: walk(a.g)
        for sub in a.graphs: walk(sub)
  walk(model.graph)
  return dict(sorted(counts.items()))


def ort_session(path_or_bytes, threads: int = 1):
  import onnxruntime as ort
  so = ort.SessionOptions()
  so.intra_op_num_threads = threads
  so.inter_op_num_threads = 1
  so.log_severity_level = 3
  return ort.InferenceSession(path_or_bytes, so, providers=["CPUExecutionProvider"])


def ort_run(path: str, feed: dict[str, np.ndarray], min_runs: int = 5, min_s: float = 0.5
            ) -> tuple[list[np.ndarray], float]:
  """Run the model on one thread; (outputs, median ms of the timed runs after one warm-up)."""
  sess = ort_session(path)
  outs = sess.run(None, feed)
  times = []
  start = time.perf_counter()
  while len(times) < min_runs or (time.perf_counter() - start < min_s and len(times) < 50):
    t = time.perf_counter()
    sess.run(None, feed)
    times.append(time.perf_counter() - t)
  return outs, float(np.median(times)) * 1e3


# ---------------------------------------------------------------------------------------------------------------------
# building

def build_one(ctx: Context, b: Builder) -> tuple[bool, str]:
  """Build, check, run and index one model. (ok, message)."""
  gone = missing(b, ctx.out)
  if gone:
    via = f" (to build {', '.join(b.bases)} first)" if b.bases and not all(m in b.needs for m in gone) else ""
    return False, f"skipped {b.name}: {', '.join(PIP_NAMES.get(m, m) for m in gone)} not installed{via}"
  os.makedirs(ctx.out, exist_ok=True)
  start = time.perf_counter()
  path = os.path.join(ctx.out, f"{b.name}.onnx")
  try:
    np.random.seed(seed_of(b.name))
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      built = b.fn(ctx)
    model = pin_inputs(built.model, built.inputs)
    onnx.checker.check_model(model)
    onnx.save(model, path)
    build_s = time.perf_counter() - start
    e = {"name": b.name, "source": b.source, "description": b.description, "file": f"{b.name}.onnx",
         "inputs": built.inputs, "outputs": [o.name for o in model.graph.output],
         "opset": {(o.domain or "ai.onnx"): o.version for o in model.opset_import},
         "ops": op_counts(model), "size_bytes": os.path.getsize(path),
         "params": int(sum(int(np.prod(t.dims)) for t in model.graph.initializer)), "build_s": round(build_s, 2)}
    e.update(built.extra)
    outs, ms = ort_run(path, feeds(e))
    bad = [e["outputs"][i] for i, o in enumerate(outs)
           if np.issubdtype(np.asarray(o).dtype, np.floating) and not np.all(np.isfinite(o))]
    if bad: raise RuntimeError(f"onnxruntime output {bad} not finite")
    e["output_shapes"] = [list(np.asarray(o).shape) for o in outs]
    e["ort_ms_1t"] = round(ms, 3)
    _update_index(ctx.out, e)
    return True, (f"built {b.name:28s} {b.source:15s} {build_s:7.1f} s  {e['size_bytes'] / 2**20:7.2f} MiB  "
                  f"ort 1t {ms:8.2f} ms")
  except Exception as exc:   # one model never stops the build
    if os.path.exists(path): os.remove(path)
    _update_index(ctx.out, None, remove=b.name)
    if ctx.verbose:
      import traceback
      traceback.print_exc()
    msg = str(exc).strip().splitlines()
    return False, f"FAILED {b.name}: {type(exc).__name__}: {msg[-1] if msg else ''}"[:400]


def verify(out_dir: str, only: list[str] | None = None) -> list[str]:
  """Check and run every indexed model from its file on the corpus feeds; the failures."""
  failures = []
  for e in entries(out_dir):
    if only and e["name"] not in only: continue
    try:
      path = model_path(out_dir, e)
      onnx.checker.check_model(path)
      sess = ort_session(path)
      outs = sess.run(None, feeds(e))
      if [list(np.asarray(o).shape) for o in outs] != e.get("output_shapes", [list(np.asarray(o).shape) for o in outs]):
        raise RuntimeError("output shapes differ from the index")
    except Exception as exc:
      failures.append(f"{e['name']}: {type(exc).__name__}: {str(exc).strip()[:300]}")
  return failures


def summary(out_dir: str, only: list[str] | None = None) -> str:
  rows = ["| model | source | inputs | MiB | ort 1t ms |", "|---|---|---|---|---|"]
  for e in entries(out_dir):
    if only and e["name"] not in only: continue
    ins = ", ".join(f"{s['name']} {s['dtype']}[{'x'.join(map(str, s['shape']))}]" for s in e["inputs"])
    rows.append(f"| {e['name']} | {e['source']} | {ins} | {e['size_bytes'] / 2**20:.2f} | {e['ort_ms_1t']:.2f} |")
  return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("command", choices=("build", "verify"))
  ap.add_argument("--out", default=DEFAULT_OUT, help="corpus folder (default bench/.corpus)")
  ap.add_argument("--only", nargs="+", metavar="NAME", help="build only these models (and their bases if absent)")
  ap.add_argument("--source", nargs="+", choices=SOURCES, help="build only models of these sources")
  ap.add_argument("--list", action="store_true", help="list the builders and exit")
  ap.add_argument("--verbose", "-v", action="store_true", help="print tracebacks of failed builders")
  args = ap.parse_args(argv)
  if args.list:
    for b in BUILDERS.values():
      gone = missing(b, args.out)
      state = f"missing {', '.join(PIP_NAMES.get(m, m) for m in gone)}" if gone else "ok"
      print(f"{b.name:28s} {b.source:15s} {state:28s} {b.description}")
    return 0
  unknown = [n for n in args.only or () if n not in BUILDERS]
  if unknown:
    print(f"unknown model(s): {', '.join(unknown)}; see --list", file=sys.stderr)
    return 2
  selected = [b for b in BUILDERS.values() if (not args.only or b.name in args.only)
              and (not args.source or b.source in args.source)]
  names = [b.name for b in selected]
  if args.command == "verify":
    failures = verify(args.out, names)
    for f in failures: print("verify FAILED", f)
    print(summary(args.out, names))
    return 1 if failures else 0
  ctx = Context(args.out, args.verbose)
  t0 = time.perf_counter()
  failed, skipped = [], []
  for i, b in enumerate(selected):
    print(f"[{i + 1}/{len(selected)}] {b.name} ({b.source}) ...", flush=True)
    ok, msg = build_one(ctx, b)
    print("  " + msg, flush=True)
    if not ok: (skipped if msg.startswith("skipped") else failed).append(msg)
  print(f"build: {time.perf_counter() - t0:.0f} s; verifying every indexed model ...", flush=True)
  failures = verify(args.out, names)
  print(summary(args.out, names))
  for m in skipped: print(m)
  for m in failed: print(m)
  for f in failures: print("verify FAILED", f)
  print(f"{len([e for e in entries(args.out) if e['name'] in names])} models in {args.out}; {len(skipped)} skipped, "
        f"{len(failed)} failed to build, {len(failures)} failed verification; {time.perf_counter() - t0:.0f} s in all")
  return 1 if failed or failures else 0


# ---------------------------------------------------------------------------------------------------------------------
# torch modules (written here: torchvision does not work with the pinned torch)

_TORCH = None


def tm():
  """The torch module classes (defined on first use, so that this file imports without torch)."""
  global _TORCH
  if _TORCH is not None: return _TORCH
  import torch
  import torch.nn as nn
  import torch.nn.functional as F

  def conv_bn(cin, cout, k=3, s=1, groups=1, act=nn.ReLU, dilation=1, padding=None):
    p = (k - 1) // 2 * dilation if padding is None else padding
    layers = [nn.Conv2d(cin, cout, k, s, p, dilation=dilation, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    if act is not None: layers.append(act())
    return nn.Sequential(*layers)

  def make_div(v, d=8):
    n = max(d, int(v + d / 2) // d * d)
    return n + d if n < 0.9 * v else n

  class BasicBlock(nn.Module):
    def __init__(s, cin, cout, stride):
      super().__init__()
      s.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
      s.bn1 = nn.BatchNorm2d(cout)
      s.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
      s.bn2 = nn.BatchNorm2d(cout)
      s.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                if stride != 1 or cin != cout else None)

    def forward(s, x):
      y = F.relu(s.bn1(s.conv1(x)))
      y = s.bn2(s.conv2(y))
      return F.relu(y + (x if s.down is None else s.down(x)))

  class ResNet18(nn.Module):
    def __init__(s, classes=1000):
      super().__init__()
      s.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                             nn.MaxPool2d(3, 2, 1))
      layers, cin = [], 64
      for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
        cin = cout
      s.layers = nn.Sequential(*layers)
      s.fc = nn.Linear(512, classes)

    def forward(s, x):
      x = s.layers(s.stem(x))
      return s.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

  class InvertedResidual(nn.Module):
    def __init__(s, cin, cout, stride, t):
      super().__init__()
      hid = cin * t
      layers = [conv_bn(cin, hid, 1, act=nn.ReLU6)] if t != 1 else []
      layers += [conv_bn(hid, hid, 3, stride, groups=hid, act=nn.ReLU6), conv_bn(hid, cout, 1, act=None)]
      s.body = nn.Sequential(*layers)
      s.res = stride == 1 and cin == cout

    def forward(s, x):
      return x + s.body(x) if s.res else s.body(x)

  class MobileNetV2(nn.Module):
    def __init__(s, classes=1000):
      super().__init__()
      layers, cin = [conv_bn(3, 32, 3, 2, act=nn.ReLU6)], 32
      for t, c, n, st in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                          (6, 160, 3, 2), (6, 320, 1, 1)):
        for i in range(n):
          layers.append(InvertedResidual(cin, c, st if i == 0 else 1, t))
          cin = c
      layers.append(conv_bn(cin, 1280, 1, act=nn.ReLU6))
      s.features = nn.Sequential(*layers)
      s.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, classes))

    def forward(s, x):
      return s.classifier(torch.flatten(F.adaptive_avg_pool2d(s.features(x), 1), 1))

  class SE(nn.Module):
    def __init__(s, c, sq, act=nn.ReLU, gate=nn.Hardsigmoid):
      super().__init__()
      s.fc1, s.fc2, s.act, s.gate = nn.Conv2d(c, sq, 1), nn.Conv2d(sq, c, 1), act(), gate()

    def forward(s, x):
      return x * s.gate(s.fc2(s.act(s.fc1(F.adaptive_avg_pool2d(x, 1)))))

  class MBv3Block(nn.Module):
    def __init__(s, cin, k, exp, cout, se, act, stride):
      super().__init__()
      layers = [conv_bn(cin, exp, 1, act=act)] if exp != cin else []
      layers.append(conv_bn(exp, exp, k, stride, groups=exp, act=act))
      if se: layers.append(SE(exp, make_div(exp // 4)))
      layers.append(conv_bn(exp, cout, 1, act=None))
      s.body = nn.Sequential(*layers)
      s.res = stride == 1 and cin == cout

    def forward(s, x):
      return x + s.body(x) if s.res else s.body(x)

  class MobileNetV3Small(nn.Module):
    CFG = ((3, 16, 16, True, "RE", 2), (3, 72, 24, False, "RE", 2), (3, 88, 24, False, "RE", 1),
           (5, 96, 40, True, "HS", 2), (5, 240, 40, True, "HS", 1), (5, 240, 40, True, "HS", 1),
           (5, 120, 48, True, "HS", 1), (5, 144, 48, True, "HS", 1), (5, 288, 96, True, "HS", 2),
           (5, 576, 96, True, "HS", 1), (5, 576, 96, True, "HS", 1))

    def __init__(s, classes=1000):
      super().__init__()
      layers, cin = [conv_bn(3, 16, 3, 2, act=nn.Hardswish)], 16
      for k, exp, c, se, nl, st in s.CFG:
        layers.append(MBv3Block(cin, k, exp, c, se, nn.ReLU if nl == "RE" else nn.Hardswish, st))
        cin = c
      layers.append(conv_bn(cin, 576, 1, act=nn.Hardswish))
      s.features = nn.Sequential(*layers)
      s.classifier = nn.Sequential(nn.Linear(576, 1024), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(1024, classes))

    def forward(s, x):
      return s.classifier(torch.flatten(F.adaptive_avg_pool2d(s.features(x), 1), 1))

  class MBConv(nn.Module):
    def __init__(s, cin, cout, k, stride, t):
      super().__init__()
      hid = cin * t
      layers = [conv_bn(cin, hid, 1, act=nn.SiLU)] if t != 1 else []
      layers += [conv_bn(hid, hid, k, stride, groups=hid, act=nn.SiLU),
                 SE(hid, max(1, cin // 4), act=nn.SiLU, gate=nn.Sigmoid), conv_bn(hid, cout, 1, act=None)]
      s.body = nn.Sequential(*layers)
      s.res = stride == 1 and cin == cout

    def forward(s, x):
      return x + s.body(x) if s.res else s.body(x)

  class EfficientNetB0(nn.Module):
    CFG = ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3),
           (6, 5, 2, 192, 4), (6, 3, 1, 320, 1))

    def __init__(s, classes=1000):
      super().__init__()
      layers, cin = [conv_bn(3, 32, 3, 2, act=nn.SiLU)], 32
      for t, k, st, c, n in s.CFG:
        for i in range(n):
          layers.append(MBConv(cin, c, k, st if i == 0 else 1, t))
          cin = c
      layers.append(conv_bn(cin, 1280, 1, act=nn.SiLU))
      s.features = nn.Sequential(*layers)
      s.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, classes))

    def forward(s, x):
      return s.classifier(torch.flatten(F.adaptive_avg_pool2d(s.features(x), 1), 1))

  class LayerNorm2d(nn.Module):
    """ConvNeXt's channels_first LayerNorm, written out (mean and variance over the channel axis)."""
    def __init__(s, c, eps=1e-6):
      super().__init__()
      s.weight, s.bias, s.eps = nn.Parameter(torch.ones(c)), nn.Parameter(torch.zeros(c)), eps

    def forward(s, x):
      u = x.mean(1, keepdim=True)
      v = (x - u).pow(2).mean(1, keepdim=True)
      x = (x - u) / torch.sqrt(v + s.eps)
      return s.weight[:, None, None] * x + s.bias[:, None, None]

  class ConvNeXtBlock(nn.Module):
    def __init__(s, d):
      super().__init__()
      s.dw = nn.Conv2d(d, d, 7, padding=3, groups=d)
      s.norm = nn.LayerNorm(d, eps=1e-6)
      s.pw1, s.pw2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
      s.gamma = nn.Parameter(torch.full((d,), 0.5))

    def forward(s, x):
      y = s.dw(x).permute(0, 2, 3, 1)
      y = s.gamma * s.pw2(F.gelu(s.pw1(s.norm(y))))
      return x + y.permute(0, 3, 1, 2)

  class ConvNeXt(nn.Module):
    def __init__(s, dims=(64, 128, 256, 512), depths=(2, 2, 6, 2), classes=1000):
      super().__init__()
      s.down = nn.ModuleList([nn.Sequential(nn.Conv2d(3, dims[0], 4, 4), LayerNorm2d(dims[0]))])
      for i in range(3):
        s.down.append(nn.Sequential(LayerNorm2d(dims[i]), nn.Conv2d(dims[i], dims[i + 1], 2, 2)))
      s.stages = nn.ModuleList([nn.Sequential(*[ConvNeXtBlock(d) for _ in range(n)]) for d, n in zip(dims, depths)])
      s.norm, s.head = nn.LayerNorm(dims[-1], eps=1e-6), nn.Linear(dims[-1], classes)

    def forward(s, x):
      for down, stage in zip(s.down, s.stages): x = stage(down(x))
      return s.head(s.norm(x.mean((-2, -1))))

  def double_conv(cin, cout):
    return nn.Sequential(conv_bn(cin, cout), conv_bn(cout, cout))

  class UNet(nn.Module):
    def __init__(s, cin=3, classes=2, base=16, levels=4):
      super().__init__()
      chans = [base * 2 ** i for i in range(levels + 1)]
      s.inc = double_conv(cin, chans[0])
      s.downs = nn.ModuleList([double_conv(chans[i], chans[i + 1]) for i in range(levels)])
      s.ups = nn.ModuleList([nn.ConvTranspose2d(chans[i + 1], chans[i], 2, 2) for i in reversed(range(levels))])
      s.dec = nn.ModuleList([double_conv(chans[i] * 2, chans[i]) for i in reversed(range(levels))])
      s.out = nn.Conv2d(chans[0], classes, 1)

    def forward(s, x):
      skips = [s.inc(x)]
      for d in s.downs: skips.append(d(F.max_pool2d(skips[-1], 2)))
      x = skips.pop()
      for up, dec in zip(s.ups, s.dec): x = dec(torch.cat([skips.pop(), up(x)], 1))
      return s.out(x)

  class CSP(nn.Module):
    def __init__(s, cin, cout, n):
      super().__init__()
      h = cout // 2
      s.a, s.b = conv_bn(cin, h, 1, act=nn.SiLU), conv_bn(cin, h, 1, act=nn.SiLU)
      s.m = nn.ModuleList([nn.Sequential(conv_bn(h, h, 1, act=nn.SiLU), conv_bn(h, h, 3, act=nn.SiLU))
                           for _ in range(n)])
      s.out = conv_bn(2 * h, cout, 1, act=nn.SiLU)

    def forward(s, x):
      a = s.a(x)
      for m in s.m: a = a + m(a)
      return s.out(torch.cat([a, s.b(x)], 1))

  class PadDown(nn.Module):
    """A TF-style 'same' stride-2 conv: explicit Pad (right/bottom), then an unpadded conv."""
    def __init__(s, cin, cout):
      super().__init__()
      s.conv = conv_bn(cin, cout, 3, 2, act=nn.SiLU, padding=0)

    def forward(s, x):
      return s.conv(F.pad(x, (0, 1, 0, 1)))

  class YoloFPN(nn.Module):
    """YOLOv5n-style detector: Focus (strided Slices + Concat), CSP backbone, SPPF, FPN/PAN neck with nearest x2
    Upsample + Concat, padded stride-2 convs, three heads decoded with sigmoid, grids and anchors."""
    ANCHORS = (((10, 13), (16, 30), (33, 23)), ((30, 61), (62, 45), (59, 119)), ((116, 90), (156, 198), (373, 326)))

    def __init__(s, image=320, classes=80, w=16):
      super().__init__()
      s.no, s.na = classes + 5, 3
      s.focus = conv_bn(12, w * 2, 3, act=nn.SiLU)
      s.b1 = nn.Sequential(conv_bn(w * 2, w * 4, 3, 2, act=nn.SiLU), CSP(w * 4, w * 4, 1))
      s.b2 = nn.Sequential(conv_bn(w * 4, w * 8, 3, 2, act=nn.SiLU), CSP(w * 8, w * 8, 2))            # /8
      s.b3 = nn.Sequential(conv_bn(w * 8, w * 16, 3, 2, act=nn.SiLU), CSP(w * 16, w * 16, 3))         # /16
      s.b4 = nn.Sequential(PadDown(w * 16, w * 32), CSP(w * 32, w * 32, 1))                            # /32
      s.sppf_in, s.sppf_out = conv_bn(w * 32, w * 16, 1, act=nn.SiLU), conv_bn(w * 64, w * 32, 1, act=nn.SiLU)
      s.lat4, s.up = conv_bn(w * 32, w * 16, 1, act=nn.SiLU), nn.Upsample(scale_factor=2, mode="nearest")
      s.c3 = CSP(w * 32, w * 16, 1)
      s.lat3 = conv_bn(w * 16, w * 8, 1, act=nn.SiLU)
      s.c2 = CSP(w * 16, w * 8, 1)
      s.d2, s.n3 = PadDown(w * 8, w * 8), CSP(w * 16, w * 16, 1)
      s.d3, s.n4 = PadDown(w * 16, w * 16), CSP(w * 32, w * 32, 1)
      s.heads = nn.ModuleList([nn.Conv2d(c, s.na * s.no, 1) for c in (w * 8, w * 16, w * 32)])
      for i, stride in enumerate((8, 16, 32)):
        n = image // stride
        yy, xx = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
        s.register_buffer(f"grid{i}", torch.stack((xx, yy), -1).view(1, 1, n, n, 2).float())
        s.register_buffer(f"anchor{i}", torch.tensor(s.ANCHORS[i], dtype=torch.float32).view(1, s.na, 1, 1, 2))
      s.strides = (8, 16, 32)

    def forward(s, x):
      x = torch.cat([x[..., ::2, ::2], x[..., 1::2, ::2], x[..., ::2, 1::2], x[..., 1::2, 1::2]], 1)
      p3 = s.b2(s.b1(s.focus(x)))
      p4 = s.b3(p3)
      p5 = s.b4(p4)
      y = s.sppf_in(p5)
      y1 = F.max_pool2d(y, 5, 1, 2)
      y2 = F.max_pool2d(y1, 5, 1, 2)
      p5 = s.sppf_out(torch.cat([y, y1, y2, F.max_pool2d(y2, 5, 1, 2)], 1))
      l4 = s.lat4(p5)
      f4 = s.c3(torch.cat([s.up(l4), p4], 1))
      l3 = s.lat3(f4)
      o3 = s.c2(torch.cat([s.up(l3), p3], 1))
      o4 = s.n3(torch.cat([s.d2(o3), l3], 1))
      o5 = s.n4(torch.cat([s.d3(o4), l4], 1))
      out = []
      for i, f in enumerate((o3, o4, o5)):
        n = f.shape[-1]
        y = s.heads[i](f).view(1, s.na, s.no, n, n).permute(0, 1, 3, 4, 2).sigmoid()
        xy = (y[..., 0:2] * 2 - 0.5 + getattr(s, f"grid{i}")) * s.strides[i]
        wh = (y[..., 2:4] * 2) ** 2 * getattr(s, f"anchor{i}")
        out.append(torch.cat([xy, wh, y[..., 4:]], -1).view(1, -1, s.no))
      return torch.cat(out, 1)

  class ASPP(nn.Module):
    def __init__(s, cin, c=128, rates=(6, 12, 18)):
      super().__init__()
      s.b0 = conv_bn(cin, c, 1)
      s.bs = nn.ModuleList([conv_bn(cin, c, 3, dilation=r) for r in rates])
      s.pool = nn.Sequential(nn.Conv2d(cin, c, 1, bias=False), nn.ReLU())
      s.proj = conv_bn(c * (2 + len(rates)), c, 1)

    def forward(s, x):
      h, w = x.shape[-2:]
      pooled = F.interpolate(s.pool(F.adaptive_avg_pool2d(x, 1)), size=(h, w), mode="bilinear", align_corners=False)
      return s.proj(torch.cat([s.b0(x)] + [b(x) for b in s.bs] + [pooled], 1))

  class DeepLabV3Plus(nn.Module):
    """DeepLabV3+-style: a residual backbone to stride 16 (last stage dilated), ASPP (rates 6/12/18 and image
    pooling), a decoder that upsamples bilinearly (align_corners=True, as the original) and concatenates stride-4
    features, then a bilinear Resize (align_corners=False) to the input size."""
    def __init__(s, classes=21):
      super().__init__()
      s.stem = nn.Sequential(conv_bn(3, 32, 3, 2), conv_bn(32, 64, 3, 2))                     # /4
      s.l1 = nn.Sequential(BasicBlock(64, 64, 1), BasicBlock(64, 64, 1))
      s.l2 = nn.Sequential(BasicBlock(64, 128, 2), BasicBlock(128, 128, 1))                   # /8
      s.l3 = nn.Sequential(BasicBlock(128, 256, 2), BasicBlock(256, 256, 1))                  # /16
      s.l4 = nn.Sequential(conv_bn(256, 256, 3, dilation=2), conv_bn(256, 256, 3, dilation=2))
      s.aspp = ASPP(256)
      s.low = conv_bn(64, 48, 1)
      s.dec = nn.Sequential(conv_bn(128 + 48, 128), conv_bn(128, 128))
      s.cls = nn.Conv2d(128, classes, 1)

    def forward(s, x):
      size = x.shape[-2:]
      low = s.l1(s.stem(x))
      y = s.aspp(s.l4(s.l3(s.l2(low))))
      y = F.interpolate(y, size=low.shape[-2:], mode="bilinear", align_corners=True)
      y = s.cls(s.dec(torch.cat([y, s.low(low)], 1)))
      return F.interpolate(y, size=size, mode="bilinear", align_corners=False)

  class LSTMLM(nn.Module):
    def __init__(s, vocab=10000, emb=256, hidden=512, layers=2):
      super().__init__()
      s.emb, s.lstm = nn.Embedding(vocab, emb), nn.LSTM(emb, hidden, layers, batch_first=True)
      s.out = nn.Linear(hidden, vocab)

    def forward(s, ids):
      y, _ = s.lstm(s.emb(ids))
      return s.out(y)

  class BiGRU(nn.Module):
    def __init__(s, feats=80, hidden=256, layers=2, classes=42):
      super().__init__()
      s.gru = nn.GRU(feats, hidden, layers, batch_first=True, bidirectional=True)
      s.out = nn.Linear(2 * hidden, classes)

    def forward(s, x):
      y, _ = s.gru(x)
      return F.log_softmax(s.out(y), -1)

  class CRNN(nn.Module):
    """Shi et al.'s CRNN: VGG-style convs (BN on the deep ones, (2,1) pools), the 1-pixel-high feature map as a
    sequence, a 2-layer BiLSTM and per-step log-softmax over the CTC alphabet."""
    def __init__(s, classes=37):
      super().__init__()
      def c(i, o, bn=False, k=3, p=1):
        return [nn.Conv2d(i, o, k, 1, p), *([nn.BatchNorm2d(o)] if bn else []), nn.ReLU()]
      s.cnn = nn.Sequential(*c(1, 64), nn.MaxPool2d(2), *c(64, 128), nn.MaxPool2d(2), *c(128, 256, True),
                            *c(256, 256), nn.MaxPool2d((2, 1), (2, 1)), *c(256, 512, True), *c(512, 512),
                            nn.MaxPool2d((2, 1), (2, 1)), *c(512, 512, True, 2, 0))
      s.rnn = nn.LSTM(512, 256, 2, bidirectional=True)
      s.out = nn.Linear(512, classes)

    def forward(s, x):
      f = s.cnn(x).squeeze(2).permute(2, 0, 1)          # (T, 1, 512)
      y, _ = s.rnn(f)
      return F.log_softmax(s.out(y), -1)

  class KWSAudio(nn.Module):
    """Keyword spotting on raw audio: an STFT written as a Conv1d with a fixed Hann-windowed Fourier basis (n_fft
    400, hop 160), power, a mel filterbank as a 1x1 Conv1d, log, then Conv1d/BN/ReLU blocks, mean pool, Linear."""
    def __init__(s, n_fft=400, hop=160, mels=40, sr=16000, classes=35):
      super().__init__()
      bins = n_fft // 2 + 1
      n = torch.arange(n_fft, dtype=torch.float64)
      k = torch.arange(bins, dtype=torch.float64)[:, None]
      window = 0.5 - 0.5 * torch.cos(2 * math.pi * n / n_fft)
      basis = torch.cat([torch.cos(2 * math.pi * k * n / n_fft), -torch.sin(2 * math.pi * k * n / n_fft)]) * window
      s.stft = nn.Conv1d(1, 2 * bins, n_fft, hop, bias=False)
      s.stft.weight.data = basis.float()[:, None, :]
      s.stft.weight.requires_grad_(False)
      def mel(f): return 2595 * np.log10(1 + f / 700)
      pts = 700 * (10 ** (np.linspace(mel(0), mel(sr / 2), mels + 2) / 2595) - 1)
      freqs = np.linspace(0, sr / 2, bins)
      fb = np.zeros((mels, bins), np.float32)
      for m in range(mels):
        lo, mid, hi = pts[m], pts[m + 1], pts[m + 2]
        fb[m] = np.maximum(0, np.minimum((freqs - lo) / (mid - lo), (hi - freqs) / (hi - mid)))
      s.mel = nn.Conv1d(bins, mels, 1, bias=False)
      s.mel.weight.data = torch.from_numpy(fb)[:, :, None]
      s.mel.weight.requires_grad_(False)
      s.bins = bins
      layers, cin = [], mels
      for cout, st in ((64, 1), (64, 2), (128, 1), (128, 2), (256, 1)):
        layers += [nn.Conv1d(cin, cout, 3, st, 1, bias=False), nn.BatchNorm1d(cout), nn.ReLU()]
        cin = cout
      s.body = nn.Sequential(*layers)
      s.out = nn.Linear(cin, classes)

    def forward(s, wav):
      spec = s.stft(wav.unsqueeze(1))
      re, im = spec[:, :s.bins], spec[:, s.bins:]
      feats = torch.log(s.mel(re * re + im * im) + 1e-6)
      return s.out(s.body(feats).mean(-1))

  class TextTransformer(nn.Module):
    """nn.TransformerEncoder (pre-norm, GELU, batch_first) text classifier with a padding mask input."""
    def __init__(s, vocab=8000, d=256, heads=4, ffn=1024, layers=4, seq=128, classes=4):
      super().__init__()
      s.emb, s.pos = nn.Embedding(vocab, d), nn.Parameter(torch.randn(1, seq, d) * 0.02)
      layer = nn.TransformerEncoderLayer(d, heads, ffn, 0.0, "gelu", batch_first=True, norm_first=True)
      s.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
      s.out = nn.Linear(d, classes)

    def forward(s, ids, mask):
      y = s.enc(s.emb(ids) + s.pos, src_key_padding_mask=mask == 0)
      m = mask.unsqueeze(-1).to(y.dtype)
      return s.out((y * m).sum(1) / m.sum(1))

  _TORCH = dict(locals())
  _TORCH.pop("torch"); _TORCH.pop("nn"); _TORCH.pop("F")
  import types
  _TORCH = types.SimpleNamespace(**_TORCH)
  return _TORCH


def init_torch(module, seed: int):
  """Seeded He-normal conv/linear weights, small biases, and BatchNorm with non-trivial statistics, so that BN
  folding and the activations are realistic (random deep nets with default init vanish or explode)."""
  import torch
  import torch.nn as nn
  g = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    for m in module.modules():
      if isinstance(m, (nn.Conv1d, nn.Conv2d, nn.ConvTranspose2d, nn.Linear)) and m.weight.requires_grad:
        fan_in = m.weight[0].numel() if not isinstance(m, nn.ConvTranspose2d) else m.weight.shape[0] * \
          m.weight[0, 0].numel()
        m.weight.copy_(torch.randn(m.weight.shape, generator=g) * math.sqrt(2.0 / fan_in))
        if m.bias is not None: m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.05)
      elif isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
        c = m.num_features
        m.weight.copy_(1 + 0.1 * torch.randn(c, generator=g))
        m.bias.copy_(0.1 * torch.randn(c, generator=g))
        m.running_mean.copy_(0.1 * torch.randn(c, generator=g))
        m.running_var.copy_(0.5 + torch.rand(c, generator=g))
  return module.eval()


def _strip_stack_traces(graph: onnx.GraphProto) -> None:
  for n in graph.node:
    keep = [p for p in n.metadata_props if p.key != "pkg.torch.onnx.stack_trace"]
    if len(keep) != len(n.metadata_props):
      del n.metadata_props[:]
      n.metadata_props.extend(keep)
    for sub in _subgraphs(n): _strip_stack_traces(sub)


def export_torch(module, args: tuple, input_names: list[str], output_names: list[str], dynamo: bool = False,
                 opset: int = OPSET, **kw) -> onnx.ModelProto:
  import logging
  import torch
  logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)
  module.eval()
  if isinstance(kw.get("training"), str): kw["training"] = getattr(torch.onnx.TrainingMode, kw["training"])
  with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()):
    path = os.path.join(tmp, "model.onnx")
    if dynamo:
      torch.onnx.export(module, args, path, dynamo=True, opset_version=max(opset, 18), input_names=input_names,
                        output_names=output_names, external_data=False, optimize=True, **kw)
      model = onnx.load(path)
      _strip_stack_traces(model.graph)     # source paths and line numbers of this checkout: not reproducible
      return model
    else:
      torch.onnx.export(module, args, path, dynamo=False, opset_version=opset, input_names=input_names,
                        output_names=output_names, **kw)
    return onnx.load(path)


def _torch_model(cls_name: str, seed_name: str, *a, **kw):
  import torch
  torch.manual_seed(seed_of(seed_name))
  return init_torch(getattr(tm(), cls_name)(*a, **kw), seed_of(seed_name))


def _image(name="image", size=224, c=3):
  return normal(name, (1, c, size, size))


def _torch_inputs_to_tensors(specs: list[dict]):
  import torch
  f = feeds({"name": "export", "inputs": specs}, seed=1)
  return tuple(torch.from_numpy(f[s["name"]]) for s in specs)


def _torch_builder(cls_name: str, specs: list[dict], outputs: list[str], dynamo: bool = False, extra=None,
                   seed_name: str | None = None, ctor=(), **export_kw):
  def fn(ctx: Context) -> Built:
    m = _torch_model(cls_name, seed_name or cls_name, *ctor)
    model = export_torch(m, _torch_inputs_to_tensors(specs), [s["name"] for s in specs], outputs, dynamo=dynamo,
                         **export_kw)
    return Built(model, specs, dict(extra or {}))
  return fn


# ---------------------------------------------------------------------------------------------------------------------
# torch-script

def _reg_torch(name, source, description, cls, specs, outputs, extra=None, seed_name=None, ctor=(), **kw):
  register(name, source, description)(
    _torch_builder(cls, specs, outputs, dynamo=source == "torch-dynamo", extra=extra, seed_name=seed_name,
                   ctor=ctor, **kw))


_reg_torch("resnet18", "torch-script", "ResNet-18 (torchvision layout, written in torch), torch.onnx dynamo=False in "
           "eval mode: BatchNormalization folded into the convs by the exporter; 1000-class logits",
           "ResNet18", [_image()], ["logits"])
_reg_torch("resnet18_bn", "torch-script", "ResNet-18, same weights as resnet18, exported with "
           "training=PRESERVE and do_constant_folding=False: BatchNormalization nodes kept (and Identity nodes)",
           "ResNet18", [_image()], ["logits"], seed_name="ResNet18",
           training="PRESERVE", do_constant_folding=False)
_reg_torch("mobilenet_v2", "torch-script", "MobileNetV2 1.0 (written in torch), torch.onnx dynamo=False: depthwise "
           "3x3 convs, Relu6 as Clip, residual Adds, BN folded", "MobileNetV2", [_image()], ["logits"])
_reg_torch("mobilenet_v3_small", "torch-script", "MobileNetV3-small (torchvision's table, written in torch), "
           "dynamo=False: HardSwish, squeeze-excite with HardSigmoid gates, 5x5 depthwise convs",
           "MobileNetV3Small", [_image()], ["logits"])
_reg_torch("efficientnet_b0", "torch-script", "EfficientNet-B0 (MBConv table of Tan & Le, written in torch), "
           "dynamo=False: SiLU as Sigmoid*Mul, squeeze-excite with Sigmoid gates, 3x3/5x5 depthwise convs",
           "EfficientNetB0", [_image()], ["logits"])
_reg_torch("convnext_nano", "torch-script", "ConvNeXt-like (dims 64-512, depths 2/2/6/2), dynamo=False: depthwise 7x7 "
           "convs, NHWC Transposes, LayerNormalization over channels, Erf GELU MLP, channels-first LayerNorm "
           "written out (ReduceMean/Pow/Sqrt), layer scale", "ConvNeXt", [_image()], ["logits"])
_reg_torch("unet", "torch-script", "U-Net (4 levels, base 16 channels, 256x256), dynamo=False: double conv+BN+Relu, "
           "MaxPool, ConvTranspose 2x2 stride 2 upsampling, Concat skip connections, 2-class per-pixel logits",
           "UNet", [_image(size=256)], ["mask_logits"])
_reg_torch("yolo_fpn", "torch-script", "YOLOv5n-style detector (320x320, 80 classes), dynamo=False: Focus as strided "
           "Slices + Concat, CSP blocks with SiLU, SPPF MaxPools, FPN/PAN with nearest x2 Resize + Concat, explicit "
           "Pad before stride-2 convs, sigmoid heads decoded with grids/anchors (Reshape/Transpose/Slice)",
           "YoloFPN", [_image(size=320)], ["detections"])
_reg_torch("deeplabv3plus", "torch-script", "DeepLabV3+-like segmenter (320x320, 21 classes), dynamo=False: residual "
           "backbone with dilated convs, ASPP (rates 6/12/18, image pooling broadcast by bilinear Resize), decoder "
           "with align_corners=True bilinear Resize + Concat, final bilinear Resize to the input size",
           "DeepLabV3Plus", [_image(size=320)], ["seg_logits"])
_reg_torch("lstm_lm", "torch-script", "LSTM language model, dynamo=False: Embedding (Gather, vocab 10000), 2-layer "
           "nn.LSTM 256->512 (ONNX LSTM ops), Linear to the vocabulary; 64 token ids",
           "LSTMLM", [tokens("input_ids", (1, 64), 10000)], ["logits"], extra={"vocab": 10000})
_reg_torch("bigru", "torch-script", "Bidirectional 2-layer nn.GRU acoustic model, dynamo=False: ONNX GRU "
           "(bidirectional) on 100 frames of 80 log-mel features, per-frame LogSoftmax over 42 phones",
           "BiGRU", [normal("features", (1, 100, 80))], ["log_probs"])
_reg_torch("crnn", "torch-script", "CRNN text recognizer (Shi et al.), dynamo=False: VGG convs with (2,1) MaxPools "
           "and BN, Squeeze/Transpose to a sequence, 2-layer bidirectional LSTM, per-step LogSoftmax (37 CTC classes)"
           "; 1x1x32x128 grayscale", "CRNN", [normal("image", (1, 1, 32, 128))], ["log_probs"])
_reg_torch("kws_audio", "torch-script", "Keyword spotter on 1 s of 16 kHz audio, dynamo=False: STFT as a strided "
           "Conv1d with a fixed Fourier basis (n_fft 400, hop 160, 402 filters), power via Slice/Mul/Add, mel "
           "filterbank as a 1x1 Conv1d, Log, Conv1d/BN/Relu blocks, ReduceMean, Gemm",
           "KWSAudio", [normal("waveform", (1, 16000), std=0.1)], ["logits"])
_reg_torch("torch_transformer", "torch-script", "nn.TransformerEncoder text classifier (4 pre-norm layers, d 256, 4 "
           "heads, GELU, key padding mask from an int mask input), dynamo=False: the exporter's decomposed "
           "multi-head attention (MatMul/Softmax/Where), masked mean pooling; vocab 8000, 128 tokens",
           "TextTransformer", [tokens("input_ids", (1, 128), 8000), fill("attention_mask", (1, 128), 1, "int64")],
           ["logits"], extra={"vocab": 8000})

# torch-dynamo
_reg_torch("resnet18_dynamo", "torch-dynamo", "ResNet-18 (same weights as resnet18) exported with torch.onnx "
           "dynamo=True (torch.export + onnxscript, opset 18): BatchNormalization folded into the convs by the "
           "onnxscript optimizer, global pooling as ReduceMean, flatten as Reshape", "ResNet18", [_image()], ["logits"],
           seed_name="ResNet18")
_reg_torch("mobilenet_v3_small_dynamo", "torch-dynamo", "MobileNetV3-small exported with dynamo=True (opset 18): "
           "HardSwish/HardSigmoid, squeeze-excite; graph shaped by torch.export decompositions",
           "MobileNetV3Small", [_image()], ["logits"], seed_name="MobileNetV3Small")
_reg_torch("convnext_nano_dynamo", "torch-dynamo", "ConvNeXt-like (as convnext_nano) exported with dynamo=True "
           "(opset 18): LayerNormalization, Gelu decomposition and layout ops as torch.export emits them",
           "ConvNeXt", [_image()], ["logits"], seed_name="ConvNeXt")
_reg_torch("yolo_fpn_dynamo", "torch-dynamo", "The YOLOv5n-style detector (as yolo_fpn) exported with dynamo=True "
           "(opset 18): Resize, Pad, strided Slice and Concat as torch.export lowers them",
           "YoloFPN", [_image(size=320)], ["detections"], seed_name="YoloFPN")
_reg_torch("bigru_dynamo", "torch-dynamo", "The bidirectional GRU model (as bigru) exported with dynamo=True "
           "(opset 18): ONNX GRU ops fed by Slice/Concat of the per-direction states as torch.export emits them",
           "BiGRU", [normal("features", (1, 100, 80))], ["log_probs"], seed_name="BiGRU")


# ---------------------------------------------------------------------------------------------------------------------
# transformers

def _hf(cls_name: str, config_name: str, config: dict, specs: list[dict], call: Callable, outputs: list[str],
        seed_name: str, extra=None, model_module: str = "transformers", init: Callable | None = None):
  def fn(ctx: Context) -> Built:
    import torch
    import transformers
    torch.manual_seed(seed_of(seed_name))
    cfg = getattr(transformers, config_name)(**config)
    cfg._attn_implementation = "eager"
    with contextlib.redirect_stderr(io.StringIO()):
      model = getattr(transformers, cls_name)(cfg).eval()
    if init is not None: init(model)

    class Wrap(torch.nn.Module):
      def __init__(s, m):
        super().__init__()
        s.m = m

      def forward(s, *args):
        return call(s.m, *args)

    axes = dynamic_axes(specs)
    onnx_model = export_torch(Wrap(model), _torch_inputs_to_tensors(specs), [s["name"] for s in specs], outputs,
                              **({"dynamic_axes": axes} if axes else {}))
    return Built(onnx_model, specs, dict(extra or {}))
  return fn


def _reg_hf(name, description, cls_name, config_name, config, specs, call, outputs, extra=None, init=None):
  register(name, "transformers", description)(
    _hf(cls_name, config_name, config, specs, call, outputs, name, extra, init=init))


def _conv_net_init(model) -> None:
  """Weights of trained magnitude for a convolutional transformers model: transformers' init draws BatchNorm scales
  from N(0, 0.02) like other weights, which shrinks the activations through each block (MobileViT's logits came out
  at 5e-41, every value past the stem subnormal, which no trained model has and which slows every engine's
  arithmetic); BatchNorm reset to torch's defaults (scale 1) and convolutions drawn with He's init keep them in
  range."""
  import torch
  for m in model.modules():
    if isinstance(m, torch.nn.BatchNorm2d): m.reset_parameters()
    elif isinstance(m, torch.nn.Conv2d): torch.nn.init.kaiming_normal_(m.weight, nonlinearity="relu")


_SEQ = 128
_reg_hf("gpt2", "GPT-2 LM (transformers GPT2LMHeadModel, random init: 4 layers, d 192, 3 heads of 64, the real "
        "vocab 50257; the tied LM head is stored again transposed by the exporter, hence the narrow width), "
        "torch.onnx dynamo=False, eager attention: Conv1D as MatMul/Add, causal mask, tanh GELU, logits for 128 "
        "tokens", "GPT2LMHeadModel", "GPT2Config",
        dict(n_layer=4, n_embd=192, n_head=3, vocab_size=50257, n_positions=1024),
        [tokens("input_ids", (1, _SEQ), 50257), fill("attention_mask", (1, _SEQ), 1, "int64")],
        lambda m, ids, mask: m(input_ids=ids, attention_mask=mask, use_cache=False).logits, ["logits"],
        extra={"vocab": 50257})
_reg_hf("gpt2_dyn", "gpt2's architecture and export with the sequence length left open (dynamic_axes: a dim_param "
        "seq, 1..256); timed at 128 tokens", "GPT2LMHeadModel", "GPT2Config",
        dict(n_layer=4, n_embd=192, n_head=3, vocab_size=50257, n_positions=1024),
        [open_dims(tokens("input_ids", (1, _SEQ), 50257), seq=1),
         open_dims(fill("attention_mask", (1, _SEQ), 1, "int64"), seq=1)],
        lambda m, ids, mask: m(input_ids=ids, attention_mask=mask, use_cache=False).logits, ["logits"],
        extra={"vocab": 50257, "dims": {"seq": [1, 256]}})
_reg_hf("bert_minilm", "BERT encoder with all-MiniLM-L6-v2's shape (transformers BertModel, random init: 6 layers, "
        "d 384, 12 heads, FFN 1536, vocab 30522), dynamo=False: word/position/token-type embedding Gathers, "
        "LayerNorm, Erf GELU, additive padding mask; last hidden state for 128 tokens", "BertModel", "BertConfig",
        dict(num_hidden_layers=6, hidden_size=384, num_attention_heads=12, intermediate_size=1536, vocab_size=30522),
        [tokens("input_ids", (1, _SEQ), 30522), fill("attention_mask", (1, _SEQ), 1, "int64"),
         fill("token_type_ids", (1, _SEQ), 0, "int64")],
        lambda m, ids, mask, tt: m(input_ids=ids, attention_mask=mask, token_type_ids=tt).last_hidden_state,
        ["last_hidden_state"], extra={"vocab": 30522})
_reg_hf("bert_minilm_dyn", "bert_minilm's architecture and export with the sequence length left open (dynamic_axes: "
        "a dim_param seq, 1..256; shape arithmetic through Shape/Gather/Concat in the graph); timed at 128 tokens",
        "BertModel", "BertConfig",
        dict(num_hidden_layers=6, hidden_size=384, num_attention_heads=12, intermediate_size=1536, vocab_size=30522),
        [open_dims(tokens("input_ids", (1, _SEQ), 30522), seq=1),
         open_dims(fill("attention_mask", (1, _SEQ), 1, "int64"), seq=1),
         open_dims(fill("token_type_ids", (1, _SEQ), 0, "int64"), seq=1)],
        lambda m, ids, mask, tt: m(input_ids=ids, attention_mask=mask, token_type_ids=tt).last_hidden_state,
        ["last_hidden_state"], extra={"vocab": 30522, "dims": {"seq": [1, 256]}})
_reg_hf("distilbert", "DistilBERT sequence classifier (transformers DistilBertForSequenceClassification, random "
        "init: 3 layers, d 512, 8 heads, FFN 2048, vocab 30522), dynamo=False: no token types, masked_fill "
        "attention mask (Where), pre-classifier Relu; 2-class logits for 128 tokens",
        "DistilBertForSequenceClassification", "DistilBertConfig",
        dict(n_layers=3, dim=512, n_heads=8, hidden_dim=2048, vocab_size=30522),
        [tokens("input_ids", (1, _SEQ), 30522), fill("attention_mask", (1, _SEQ), 1, "int64")],
        lambda m, ids, mask: m(input_ids=ids, attention_mask=mask).logits, ["logits"], extra={"vocab": 30522})
_reg_hf("vit_small", "ViT-S/16 (transformers ViTForImageClassification, random init: 6 layers, d 384, 6 heads, FFN "
        "1536, 224x224, patch 16), dynamo=False: patch embedding Conv 16x16 stride 16, CLS token Concat, learned "
        "positions, pre-norm blocks, Erf GELU; 1000-class logits", "ViTForImageClassification", "ViTConfig",
        dict(num_hidden_layers=6, hidden_size=384, num_attention_heads=6, intermediate_size=1536, image_size=224,
             patch_size=16, num_labels=1000),
        [_image("pixel_values")], lambda m, x: m(pixel_values=x).logits, ["logits"])
_reg_hf("whisper_encoder", "Whisper-tiny-shaped encoder (transformers WhisperModel's encoder, random init: 2 layers, d "
        "384, 6 heads, 80 mel bins, a 15 s window: 1500 input frames, max_source_positions 750), dynamo=False: two "
        "Conv1d (stride 2) with Erf GELU, sinusoidal positions, 750x750 attention",
        "WhisperModel", "WhisperConfig",
        dict(encoder_layers=2, decoder_layers=1, d_model=384, encoder_attention_heads=6, decoder_attention_heads=6,
             encoder_ffn_dim=1536, decoder_ffn_dim=1536, num_mel_bins=80, max_source_positions=750,
             vocab_size=51865),
        [normal("input_features", (1, 80, 1500), std=0.5, mean=-0.2)],
        lambda m, x: m.get_encoder()(input_features=x).last_hidden_state, ["last_hidden_state"])
_reg_hf("llama", "Llama decoder with llama2.c stories15M's shape (transformers LlamaForCausalLM, random init: 6 "
        "layers, d 288, 6 heads, SwiGLU FFN 768, RMSNorm, rotary embeddings, vocab 32000, tied embeddings), "
        "dynamo=False, eager attention with causal mask; logits for 128 tokens", "LlamaForCausalLM", "LlamaConfig",
        dict(num_hidden_layers=6, hidden_size=288, num_attention_heads=6, num_key_value_heads=6,
             intermediate_size=768, vocab_size=32000, max_position_embeddings=256, tie_word_embeddings=True),
        [tokens("input_ids", (1, _SEQ), 32000), fill("attention_mask", (1, _SEQ), 1, "int64")],
        lambda m, ids, mask: m(input_ids=ids, attention_mask=mask, use_cache=False).logits, ["logits"],
        extra={"vocab": 32000})
_reg_hf("llama_dyn", "llama's architecture and export with the sequence length left open (dynamic_axes: a dim_param "
        "seq, 1..256: the causal mask and rotary positions built from the graph's shapes); timed at 128 tokens",
        "LlamaForCausalLM", "LlamaConfig",
        dict(num_hidden_layers=6, hidden_size=288, num_attention_heads=6, num_key_value_heads=6,
             intermediate_size=768, vocab_size=32000, max_position_embeddings=256, tie_word_embeddings=True),
        [open_dims(tokens("input_ids", (1, _SEQ), 32000), seq=1),
         open_dims(fill("attention_mask", (1, _SEQ), 1, "int64"), seq=1)],
        lambda m, ids, mask: m(input_ids=ids, attention_mask=mask, use_cache=False).logits, ["logits"],
        extra={"vocab": 32000, "dims": {"seq": [1, 256]}})
_reg_hf("t5_encoder", "T5 encoder with flan-t5-small's width (transformers T5EncoderModel, random init: 2 layers, d "
        "512, 8 heads of 64, gated-GELU FFN 1024, vocab 32128), dynamo=False: T5's RMS LayerNorm, bucketed "
        "relative position bias (Log/Min/Where/Gather), unscaled attention", "T5EncoderModel", "T5Config",
        dict(num_layers=2, d_model=512, d_kv=64, num_heads=8, d_ff=1024, vocab_size=32128,
             feed_forward_proj="gated-gelu"),
        [tokens("input_ids", (1, _SEQ), 32128), fill("attention_mask", (1, _SEQ), 1, "int64")],
        lambda m, ids, mask: m(input_ids=ids, attention_mask=mask).last_hidden_state, ["last_hidden_state"],
        extra={"vocab": 32128})
_reg_hf("mobilevit_small", "MobileViT-small (transformers MobileViTForImageClassification, default config, random "
        "init with BatchNorm scales of 1 and He-initialized convs, 256x256), dynamo=False: MobileNetV2 blocks with "
        "SiLU, unfold/fold of 2x2 patches by Reshape/Transpose around transformer blocks, LayerNorm; 1000-class "
        "logits", "MobileViTForImageClassification",
        "MobileViTConfig", dict(image_size=256), [_image("pixel_values", 256)],
        lambda m, x: m(pixel_values=x).logits, ["logits"], init=_conv_net_init)
_reg_hf("swin_tiny", "Swin-like (transformers SwinForImageClassification, random init: embed 64, depths 2/2/2/2, "
        "heads 2/4/8/16, window 7, 224x224), dynamo=False: window partition Reshape/Transpose, shifted windows "
        "(Roll as Slice+Concat) with attention masks, relative position bias Gather, patch merging",
        "SwinForImageClassification", "SwinConfig",
        dict(image_size=224, patch_size=4, embed_dim=64, depths=[2, 2, 2, 2], num_heads=[2, 4, 8, 16], window_size=7,
             num_labels=1000),
        [_image("pixel_values")], lambda m, x: m(pixel_values=x).logits, ["logits"])


# ---------------------------------------------------------------------------------------------------------------------
# paddle2onnx (PaddleOCR models in the rapidocr-onnxruntime wheel) and silero (silero-vad wheel)

def _wheel_model(requirement: str, member: str, specs: list[dict], extra: dict | None = None):
  def fn(ctx: Context) -> Built:
    with zipfile.ZipFile(ctx.pip_wheel(requirement)) as z:
      model = onnx.load_from_string(z.read(member))
    return Built(model, specs, {"origin": f"pip download --no-deps {requirement}: {member}", **(extra or {})})
  return fn


register("ppocr_det", "paddle2onnx", "PP-OCRv4 mobile text detector (trained, paddle2onnx export shipped in the "
         "rapidocr-onnxruntime 1.4.4 wheel), 640x640: PP-LCNet-style backbone with HardSwish, RSE-FPN, DB head "
         "with ConvTranspose upsampling and Sigmoid; dims pinned")(
  _wheel_model(RAPIDOCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
               [uniform("x", (1, 3, 640, 640), -2.0, 2.0)]))
register("ppocr_det_dyn", "paddle2onnx", "The PP-OCRv4 detector (as ppocr_det) for pages of any size: height and "
         "width multiples of 32 (its FPN adds upsampled maps to earlier ones), 32..960 each; timed at 640x640")(
  _wheel_model(RAPIDOCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
               [open_dims(uniform("x", (1, 3, 640, 640), -2.0, 2.0), H=2, W=3)],
               {"dims": {"h": [1, 30], "w": [1, 30]}, "input_shapes": {"x": [1, 3, "32*h", "32*w"]}}))
register("ppocr_rec", "paddle2onnx", "PP-OCRv4 mobile text recognizer (trained, paddle2onnx, rapidocr-onnxruntime "
         "wheel), 1x3x48x320: PP-LCNetV3 backbone, SVTR mixer (attention, LayerNorm), per-step Softmax over 6625 "
         "characters; dims pinned")(
  _wheel_model(RAPIDOCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
               [uniform("x", (1, 3, 48, 320), -1.0, 1.0)]))
register("ppocr_rec_dyn", "paddle2onnx", "The PP-OCRv4 recognizer (as ppocr_rec) with the text line's width left "
         "open: a dim_param W, 32..640 (the height stays 48, as PaddleOCR resizes lines); timed at 320")(
  _wheel_model(RAPIDOCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
               [open_dims(uniform("x", (1, 3, 48, 320), -1.0, 1.0), W=3)], {"dims": {"W": [32, 640]}}))
register("ppocr_cls", "paddle2onnx", "PaddleOCR mobile v2.0 text direction classifier (trained, paddle2onnx, "
         "rapidocr-onnxruntime wheel), 1x3x48x192: small MobileNetV3 with HardSwish/HardSigmoid SE; dims pinned")(
  _wheel_model(RAPIDOCR, "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
               [uniform("x", (1, 3, 48, 192), -1.0, 1.0)]))

_SILERO_IN = [normal("input", (1, 576), std=0.1), fill("state", (2, 1, 128), 0.0, "float32"),
              fill("sr", (), 16000, "int64")]
# silero_vad.onnx (opset 16) is not used: its If branches hold If nodes whose untaken branch fails onnxruntime's
# shape inference ("LSTM: first input tensor must have rank 3") once the batch dim is pinned to 1.
register("silero_vad", "silero", "Silero VAD v5, the op18 'ifless' export (trained, silero-vad 6.2.3 wheel): a "
         "top-level If on the sr input selecting the 8k/16k model (Gather/Reshape outside), STFT as Conv1d, conv "
         "encoder, LSTM cell, Sigmoid; one 512-sample chunk at 16 kHz with the wrapper's 64-sample context, zero "
         "state; dims pinned")(
  _wheel_model(SILERO, "silero_vad/data/silero_vad_op18_ifless.onnx", _SILERO_IN))
register("silero_vad_op15", "silero", "Silero VAD 16 kHz-only export at opset 15 (trained, silero-vad 6.2.3 wheel): "
         "the graph inlined (Pad, Conv STFT, Sqrt magnitude, ReduceMean), If on sr; one chunk with context")(
  _wheel_model(SILERO, "silero_vad/data/silero_vad_16k_op15.onnx", _SILERO_IN))


# ---------------------------------------------------------------------------------------------------------------------
# ort-quant

@contextlib.contextmanager
def _quiet_logging():
  import logging
  logging.disable(logging.WARNING)
  try:
    yield
  finally:
    logging.disable(logging.NOTSET)


class _Reader:
  """A seeded calibration data reader over the corpus feeds of a base entry."""
  def __init__(self, e: dict, n: int = 8):
    self.items = iter([feeds(e, seed=100 + i) for i in range(n)])

  def get_next(self):
    return next(self.items, None)


def _quant_static(base: str, fmt: str, per_channel: bool, acts: str = "QUInt8"):
  def fn(ctx: Context) -> Built:
    from onnxruntime import quantization as q
    e = ctx.base_entry(base)
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()):
      out = os.path.join(tmp, "q.onnx")
      pre = os.path.join(tmp, "pre.onnx")
      q.shape_inference.quant_pre_process(ctx.base(base), pre, skip_symbolic_shape=True)
      q.quantize_static(pre, out, _Reader(e), quant_format=getattr(q.QuantFormat, fmt), per_channel=per_channel,
                        activation_type=getattr(q.QuantType, acts), weight_type=q.QuantType.QInt8,
                        calibrate_method=q.CalibrationMethod.MinMax)
      model = onnx.load(out)
    return Built(model, e["inputs"], {k: e[k] for k in ("vocab",) if k in e} | {"base": base})
  return fn


def _quant_dynamic(base: str, op_types=None):
  def fn(ctx: Context) -> Built:
    from onnxruntime import quantization as q
    e = ctx.base_entry(base)
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()), _quiet_logging():
      out = os.path.join(tmp, "q.onnx")
      q.quantize_dynamic(ctx.base(base), out, op_types_to_quantize=op_types, weight_type=q.QuantType.QInt8)
      model = onnx.load(out)
    return Built(model, e["inputs"], {k: e[k] for k in ("vocab",) if k in e} | {"base": base})
  return fn


register("resnet18_qdq_pc", "ort-quant", "resnet18 quantized by onnxruntime.quantization.quantize_static: QDQ format, "
         "per-channel int8 weights, uint8 activations (MinMax, 8 seeded calibration images); after quant_pre_process "
         "(onnxruntime's basic graph optimizations, which also declare its extra opset domains)", bases=("resnet18",))(
  _quant_static("resnet18", "QDQ", True))
register("resnet18_qdq_pt", "ort-quant", "resnet18 quantized by quantize_static: QDQ format, per-tensor int8 weights, "
         "uint8 activations", bases=("resnet18",))(_quant_static("resnet18", "QDQ", False))
register("mobilenet_v2_qdq_pc", "ort-quant", "mobilenet_v2 quantized by quantize_static: QDQ format, per-channel int8 "
         "weights (depthwise convs too), uint8 activations", bases=("mobilenet_v2",))(
  _quant_static("mobilenet_v2", "QDQ", True))
register("mobilenet_v2_qop", "ort-quant", "mobilenet_v2 quantized by quantize_static in QOperator format: QLinearConv, "
         "QLinearAdd, QLinearGlobalAveragePool (com.microsoft), QuantizeLinear/DequantizeLinear at the edges",
         bases=("mobilenet_v2",))(_quant_static("mobilenet_v2", "QOperator", False))
register("bert_minilm_dynq", "ort-quant", "bert_minilm quantized by onnxruntime.quantization.quantize_dynamic: MatMul "
         "to DynamicQuantizeLinear + MatMulInteger (int8 weights) + Cast/Mul rescale", bases=("bert_minilm",))(
  _quant_dynamic("bert_minilm"))
register("lstm_lm_dynq", "ort-quant", "lstm_lm quantized by quantize_dynamic: LSTM to com.microsoft "
         "DynamicQuantizeLSTM, the vocabulary projection to MatMulInteger; int8 weights", bases=("lstm_lm",))(
  _quant_dynamic("lstm_lm"))


# ---------------------------------------------------------------------------------------------------------------------
# tf2onnx

def _tf_builder(make: Callable, specs: list[dict], seed_name: str):
  def fn(ctx: Context) -> Built:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf
    import tf2onnx
    tf.keras.utils.set_random_seed(seed_of(seed_name))
    keras_model = make(tf)
    sig = [tf.TensorSpec(s["shape"], getattr(tf, s["dtype"]), name=s["name"]) for s in specs]
    fun = tf.function(lambda *xs: keras_model(xs[0] if len(xs) == 1 else list(xs), training=False))
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
      model, _ = tf2onnx.convert.from_function(fun, input_signature=sig, opset=OPSET)
    return Built(canonical_names(model), specs)
  return fn


def _keras_mobilenet(tf):
  return tf.keras.applications.MobileNet(weights=None, input_shape=(224, 224, 3), classes=1000)


def _keras_cnn_lstm(tf):
  L = tf.keras.layers
  inp = tf.keras.Input((64, 128, 1))
  x = inp
  for c in (32, 64, 128):
    x = L.Conv2D(c, 3, padding="same", use_bias=False)(x)
    x = L.BatchNormalization()(x)
    x = L.ReLU()(x)
    x = L.MaxPooling2D((2, 2))(x)
  x = L.Permute((2, 1, 3))(x)                       # (W, H, C): a sequence over the width
  x = L.Reshape((16, 8 * 128))(x)
  x = L.Bidirectional(L.LSTM(128, return_sequences=True))(x)
  x = L.LSTM(128)(x)
  return tf.keras.Model(inp, L.Dense(10, activation="softmax")(x))


register("keras_mobilenet", "tf2onnx", "Keras MobileNet v1 1.0 (keras.applications, weights=None, seeded), tf.function "
         "converted by tf2onnx (opset 17): NHWC input with one Transpose to NCHW, explicit Pads before stride-2 "
         "depthwise convs, Relu6 as Clip, Softmax")(
  _tf_builder(_keras_mobilenet, [normal("input", (1, 224, 224, 3))], "keras_mobilenet"))
register("keras_cnn_lstm", "tf2onnx", "Small Keras 3 CNN + BiLSTM + LSTM classifier (seeded), tf2onnx (opset 17): NHWC "
         "convs with BN/Relu/MaxPool, Permute/Reshape to a sequence; the Keras 3 LSTMs arrive as ONNX Loop nodes "
         "(tf.while bodies with MatMul/Split/Sigmoid/Tanh) plus ReverseSequence for the backward direction, not as "
         "LSTM ops")(
  _tf_builder(_keras_cnn_lstm, [normal("input", (1, 64, 128, 1))], "keras_cnn_lstm"))


# ---------------------------------------------------------------------------------------------------------------------
# onnx-zoo-light

def _light(name: str, specs: list[dict]):
  def fn(ctx: Context) -> Built:
    sys.path.insert(0, ROOT)
    try:
      from tests.onnx import light_models as lm
    finally:
      sys.path.remove(ROOT)
    if not lm.available(name): raise RuntimeError(f"light_{name}.onnx is not in this onnx wheel")
    model = lm.randomized(lm.load(name), seed=seed_of(name))
    (vi,) = graph_inputs(model)
    return Built(model, [dict(specs[0], name=vi.name)])
  return fn


for _n, _d in (("squeezenet", "SqueezeNet 1.0 (caffe2 export): Fire modules (1x1 squeeze, 1x1/3x3 expand Concat), "
                "MaxPool, Dropout, final conv + GlobalAveragePool + Softmax"),
               ("shufflenet", "ShuffleNet v1 (caffe2 export): group convs, channel shuffle as Reshape/Transpose/"
                "Reshape, AveragePool shortcut Concat, Gemm + Softmax"),
               ("inception_v1", "GoogLeNet / Inception v1 (caffe2 export): inception blocks of 1x1/3x3/5x5 convs and "
                "MaxPool Concat, LRN, AveragePool, Gemm + Softmax")):
  register(f"light_{_n}", "onnx-zoo-light", f"{_d}; the onnx wheel's light_{_n}.onnx with seeded random weights "
           "(tests/onnx/light_models.py), 1x3x224x224")(_light(_n, [normal("data_0", (1, 3, 224, 224))]))


# ---------------------------------------------------------------------------------------------------------------------
# onnx-helper

def _helper_model(nodes, name, inputs, outputs, inits, opset=OPSET) -> onnx.ModelProto:
  g = helper.make_graph(nodes, name, inputs, outputs, inits)
  m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="tgc-corpus")
  m.ir_version = 8
  return m


@register("scan_rnn", "onnx-helper", "Elman RNN as an ONNX Scan (opset 17) built with onnx.helper: per step "
          "h = Tanh(x_t W + h U + b) in the body graph, 128 steps of 64 features, hidden 256, scan output of every "
          "h, then a MatMul head on the stacked states")
def _scan_rnn(ctx: Context) -> Built:
  rng = np.random.default_rng(seed_of("scan_rnn"))
  T, D, H, C = 128, 64, 256, 16
  f32 = TensorProto.FLOAT
  W = numpy_helper.from_array((rng.standard_normal((D, H)) / np.sqrt(D)).astype(np.float32), "W")
  U = numpy_helper.from_array((rng.standard_normal((H, H)) * 0.9 / np.sqrt(H)).astype(np.float32), "U")
  b = numpy_helper.from_array((rng.standard_normal(H) * 0.05).astype(np.float32), "b")
  V = numpy_helper.from_array((rng.standard_normal((H, C)) / np.sqrt(H)).astype(np.float32), "V")
  body = helper.make_graph(
    [helper.make_node("MatMul", ["x_t", "W"], ["xw"]), helper.make_node("MatMul", ["h_in", "U"], ["hu"]),
     helper.make_node("Add", ["xw", "hu"], ["s0"]), helper.make_node("Add", ["s0", "b"], ["s1"]),
     helper.make_node("Tanh", ["s1"], ["h_out"]), helper.make_node("Identity", ["h_out"], ["y_t"])],
    "rnn_step", [helper.make_tensor_value_info("h_in", f32, [1, H]), helper.make_tensor_value_info("x_t", f32, [1, D])],
    [helper.make_tensor_value_info("h_out", f32, [1, H]), helper.make_tensor_value_info("y_t", f32, [1, H])])
  nodes = [helper.make_node("Scan", ["h0", "x"], ["h_last", "ys"], num_scan_inputs=1, body=body,
                            scan_input_axes=[1], scan_output_axes=[1]),
           helper.make_node("MatMul", ["ys", "V"], ["logits"])]
  model = _helper_model(nodes, "scan_rnn",
                        [helper.make_tensor_value_info("h0", f32, [1, H]),
                         helper.make_tensor_value_info("x", f32, [1, T, D])],
                        [helper.make_tensor_value_info("logits", f32, [1, T, C]),
                         helper.make_tensor_value_info("h_last", f32, [1, H])], [W, U, b, V])
  return Built(model, [fill("h0", (1, H), 0.0, "float32"), normal("x", (1, T, D))])


@register("loop_power_iter", "onnx-helper", "ONNX Loop (opset 17) built with onnx.helper: 32 iterations (trip count "
          "input, pinned as a constant as with --const) of power iteration v = normalize(A v) on a 256x256 matrix "
          "input, with a loop-carried vector, a condition computed in the body (Less on the change) and a scan "
          "output of the Rayleigh quotients, its rows counted by the run")
def _loop_power(ctx: Context) -> Built:
  N = 256
  f32, i64, bl = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
  eps = numpy_helper.from_array(np.array(1e-12, np.float32), "eps")
  tol = numpy_helper.from_array(np.array(-1.0, np.float32), "tol")   # never stops early: 32 iterations
  body = helper.make_graph(
    [helper.make_node("MatMul", ["A", "v_in"], ["av"]),
     helper.make_node("ReduceL2", ["av"], ["norm"], keepdims=1),
     helper.make_node("Add", ["norm", "eps"], ["norm_e"]),
     helper.make_node("Div", ["av", "norm_e"], ["v_out"]),
     helper.make_node("Mul", ["v_in", "av"], ["va"]),
     helper.make_node("ReduceSum", ["va"], ["rq"], keepdims=0),
     helper.make_node("Sub", ["v_out", "v_in"], ["dv"]),
     helper.make_node("ReduceL2", ["dv"], ["change"], keepdims=0),
     helper.make_node("Less", ["tol", "change"], ["cond_out"])],
    "power_step",
    [helper.make_tensor_value_info("iter", i64, []), helper.make_tensor_value_info("cond_in", bl, []),
     helper.make_tensor_value_info("v_in", f32, [N, 1])],
    [helper.make_tensor_value_info("cond_out", bl, []), helper.make_tensor_value_info("v_out", f32, [N, 1]),
     helper.make_tensor_value_info("rq", f32, [])])
  nodes = [helper.make_node("Loop", ["trip_count", "cond", "v0"], ["v_final", "rqs"], body=body)]
  model = _helper_model(nodes, "loop_power_iter",
                        [helper.make_tensor_value_info("A", f32, [N, N]),
                         helper.make_tensor_value_info("v0", f32, [N, 1]),
                         helper.make_tensor_value_info("trip_count", i64, []),
                         helper.make_tensor_value_info("cond", bl, [])],
                        [helper.make_tensor_value_info("v_final", f32, [N, 1]),
                         helper.make_tensor_value_info("rqs", f32, [None])], [eps, tol])
  return Built(model, [normal("A", (N, N), std=1 / 16), fill("v0", (N, 1), 1 / 16, "float32"),
                       fill("trip_count", (), 32, "int64"), fill("cond", (), True, "bool")],
               {"consts": ["trip_count"]})


if __name__ == "__main__":
  sys.exit(main())
