"""tgc as an ONNX backend (`onnx.backend.base.Backend`): `TgcBackend.prepare(model, device)` compiles the model
through the real pipeline (`aot.compile.compile_model`, the same steps as `tgc compile`) into an artifact folder
in a private temporary folder, and the returned `TgcRep` runs that artifact with the target's artifact runtime
(its registry entry's `artifact`: `runtimes.artifact_c.CArtifact`, `runtimes.artifact_opencl.OpenCLArtifact`, ...),
so what is tested is the code a user ships.

Devices: "c" (also "CPU"), "opencl", "webgpu", "cuda", "metal": targets tgc compiles and has an artifact runtime
for (`supports_device` says which this build has). The compiler never sees input values, except
those of inputs that set shapes (a Reshape's shape, Slice's starts, reduce axes, ...): the caller names them, as
`tgc compile --const`:

    rep = TgcBackend.prepare(model, "c", consts={"shape": np.array([2, 6])})   # baked in now
    rep = TgcBackend.prepare(model, "c", const_inputs=["shape"])   # baked in from the first run's inputs
    outputs = rep.run([x, shape])    # all graph inputs in order (baked ones may be left out), or a dict

With `const_inputs`, and for inputs whose shapes are dynamic and not given with `input_shapes=`, compilation waits
for `run` (one artifact per distinct set of constant values and shapes). Bad models raise `aot.UserError` (the
one-line message `tgc compile` prints); anything else is a bug in tgc.

Storage-only types (bfloat16, float8, int4, ...) go in and come out as ml_dtypes arrays, like onnx.reference."""
from __future__ import annotations
import hashlib
import importlib.util
import os
import shutil
import tempfile
import time
import weakref
from typing import Any, Iterable, Sequence

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep, namedtupledict

from tgc.ir import lowp
from tgc.codegen.registry import target_names, target_spec
from tgc.runtimes.io_arrays import bits_from_storage, storage_from_bits, storage_type
from tgc.frontend.onnx.dtypes import host_values, to_onnx_type
from tgc.frontend.onnx.loading import opset_versions, unsupported_nodes
from tgc.aot.artifact import runner_class
from tgc.aot.compile import compile_model
from tgc.aot.errors import UserError

MODEL_STEM = "model"      # file stem of the model written for the pipeline: the artifact's symbol prefix
MAX_ARTIFACTS = 8         # artifacts a representation keeps loaded when compiling per run


def device_target(device: str) -> str:
  """The tgc target for an ONNX backend device string ("CPU", "c", "opencl", "OpenCL:0", ...)."""
  kind = str(device).split(":")[0].strip().lower()
  names = {alias: name for name in target_names() for alias in (name,) + target_spec(name).aliases}
  if kind not in names:
    raise UserError(f"device {device!r} is not supported by the tgc backend; devices: "
                    + ", ".join(f"{n} (or {', '.join(target_spec(n).aliases)})" if target_spec(n).aliases else n
                                for n in target_names()))
  return names[kind]


def _runtime_class(target: str):
  try: found = runner_class(target)
  except (ImportError, AttributeError) as error:
    raise UserError(f"running {target} artifacts is not supported by this build of tgc "
                    f"({target_spec(target).artifact} is missing)") from error
  if found is None: raise UserError(f"running {target} artifacts is not supported by this build of tgc")
  return found


def _as_model(model) -> onnx.ModelProto:
  if isinstance(model, onnx.ModelProto): return model
  if isinstance(model, (bytes, bytearray, memoryview)):
    out = onnx.ModelProto()
    try: out.ParseFromString(bytes(model))
    except Exception as error: raise UserError(f"cannot parse ONNX model <bytes>: {error}") from error
    return out
  path = os.fspath(model)
  try: return onnx.load(path)
  except Exception as error: raise UserError(f"cannot read ONNX model {path}: {error}") from error


def _graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
  """The graph inputs a caller feeds (inputs that are also initializers are weights)."""
  inits = {t.name for t in model.graph.initializer} | {t.values.name for t in model.graph.sparse_initializer}
  return [i for i in model.graph.input if i.name not in inits]


def _static_dims(vi: onnx.ValueInfoProto) -> bool:
  """Whether an input declares a shape whose every dimension is a number (a -1 or 0 dim_value is the old way to
  say "dynamic", as the importer reads it)."""
  tt = vi.type.tensor_type
  if not vi.type.HasField("tensor_type") or not tt.HasField("shape"): return False
  return all(d.HasField("dim_value") and d.dim_value > 0 for d in tt.shape.dim)


# ---------------------------------------------------------------- storage-only dtypes at the artifact boundary
def _ml_dtype(dt) -> np.dtype:
  """The numpy (ml_dtypes) type onnx uses for a storage-only tgc dtype."""
  return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(to_onnx_type(dt)))


def to_storage(arr: np.ndarray, spec: dict) -> np.ndarray:
  """A caller's array as the artifact takes it: storage-only values (an ml_dtypes array, or any numeric array of
  the values, converted as ONNX Cast does) become their bit patterns (`runtimes.io_arrays`)."""
  dt = storage_type(spec)
  arr = np.asarray(arr)
  if dt is None or arr.dtype == np.dtype(spec["dtype"]): return arr
  if arr.dtype == _ml_dtype(dt): bits = arr.view(np.dtype(f"u{arr.dtype.itemsize}")).astype(np.uint32)
  else: bits = lowp.encode_array(host_values(arr, dt), dt)
  return storage_from_bits(bits, spec)


def from_storage(arr: np.ndarray, spec: dict) -> np.ndarray:
  """An artifact output as onnx gives it: storage-only bit patterns become ml_dtypes arrays."""
  dt = storage_type(spec)
  if dt is None: return arr
  target = _ml_dtype(dt)
  return bits_from_storage(arr, spec).astype(np.dtype(f"u{target.itemsize}")).view(target)


# ---------------------------------------------------------------- compiled artifacts
class _Compiled:
  """One artifact folder and its loaded runtime."""

  def __init__(self, folder: str, report, runtime, seconds: float):
    self.folder, self.report, self.runtime, self.seconds = folder, report, runtime, seconds
    self.manifest = runtime.manifest

  def close(self) -> None:
    runtime, self.runtime = self.runtime, None
    if runtime is not None: runtime.close()


def _cleanup(compiled: dict, root: str) -> None:
  for c in list(compiled.values()):
    try: c.close()
    except Exception: pass
  compiled.clear()
  shutil.rmtree(root, ignore_errors=True)


class TgcRep(BackendRep):
  """A model prepared for one target: compiled now, or at the first `run` when constant values or dynamic shapes
  come from the inputs. `run` takes the graph inputs in order (or a dict by name) and returns the outputs in graph
  order (indexable by name too). `close` removes the temporary artifact folders."""

  def __init__(self, model: onnx.ModelProto, target: str, consts: dict | None = None,
               const_inputs: Iterable[str] | None = None, input_shapes: dict | None = None, out_dir: str | None = None,
               name: str = MODEL_STEM, runtime_options: dict | None = None):
    self.model, self.target = model, target
    self.runtime_class = _runtime_class(target)
    self.runtime_options = dict(runtime_options or {})
    self.name = name
    self.inputs = [i.name for i in _graph_inputs(model)]
    self.outputs = [o.name for o in model.graph.output]
    self.consts = {k: np.asarray(v) for k, v in (consts or {}).items()}
    self.const_inputs = [n for n in dict.fromkeys(const_inputs or ()) if n not in self.consts]
    self.input_shapes = {k: tuple(int(d) for d in v) for k, v in (input_shapes or {}).items()}
    for what, names in (("consts", self.consts), ("const_inputs", self.const_inputs),
                        ("input_shapes", self.input_shapes)):
      for n in names:
        if n not in self.inputs:
          raise UserError(f"{what}: unknown input {n!r}; the model's inputs are: {', '.join(self.inputs) or '(none)'}")
    baked = set(self.consts) | set(self.const_inputs)
    self.dynamic = [i.name for i in _graph_inputs(model) if i.name not in baked and i.name not in self.input_shapes
                    and not _static_dims(i)]
    self._root = tempfile.mkdtemp(prefix="tgc-backend-")
    self._compiled: dict[tuple, _Compiled] = {}
    self._count = 0
    self._finalizer = weakref.finalize(self, _cleanup, self._compiled, self._root)
    self._out_dir = out_dir
    self._model_path = os.path.join(self._root, f"{name}.onnx")
    onnx.save(model, self._model_path)
    self.last: _Compiled | None = None
    if not self.const_inputs and not self.dynamic: self.last = self._compile({}, {})

  # ---- compiling
  @property
  def artifact_dir(self) -> str | None:
    """The folder of the artifact compiled last (None before the first compile)."""
    return self.last.folder if self.last else None

  @property
  def compile_seconds(self) -> float:
    return self.last.seconds if self.last else 0.0

  def _key(self, values: dict, shapes: dict) -> tuple:
    parts = []
    for n in sorted(values):
      a = np.ascontiguousarray(values[n])
      parts.append((n, a.dtype.str, a.shape, hashlib.sha256(a.tobytes()).hexdigest()))
    return tuple(parts), tuple(sorted(shapes.items()))

  def _compile(self, values: dict, shapes: dict) -> _Compiled:
    key = self._key(values, shapes)
    if key in self._compiled: return self._compiled[key]
    index = self._count
    self._count += 1
    consts, files = dict(self.consts), {}
    consts.update(values)
    if consts:   # as `--const NAME=FILE.npy` does: the artifact's manifest records these files
      const_dir = os.path.join(self._root, f"consts{index}")
      os.makedirs(const_dir)
      for k, (n, arr) in enumerate(sorted(consts.items())):
        path = os.path.join(const_dir, f"{k}.npy")
        try: np.save(path, arr, allow_pickle=False)
        except Exception: continue   # a type .npy cannot hold: the value is still baked in, just not recorded
        files[n] = path
    folder = self._out_dir if self._out_dir and not self._compiled else os.path.join(self._root, f"artifact{index}")
    start = time.perf_counter()
    report = compile_model(self._model_path, self.target, folder, name=self.name,
                           input_shapes={**self.input_shapes, **shapes}, consts=consts, const_files=files)
    runtime = self.runtime_class(report.out_dir, **self.runtime_options)
    compiled = _Compiled(report.out_dir, report, runtime, time.perf_counter() - start)
    if len(self._compiled) >= MAX_ARTIFACTS:
      oldest = next(iter(self._compiled))
      self._compiled.pop(oldest).close()
    self._compiled[key] = compiled
    return compiled

  # ---- running
  def _by_name(self, inputs) -> dict[str, np.ndarray]:
    if isinstance(inputs, dict): given = dict(inputs)
    else:
      if isinstance(inputs, np.ndarray) or not isinstance(inputs, (list, tuple)): inputs = [inputs]
      names = self.inputs
      if len(inputs) != len(names):
        fed = [n for n in self.inputs if n not in self.consts]
        if len(inputs) != len(fed):
          raise ValueError(f"the model takes {len(names)} inputs ({', '.join(names)}); got {len(inputs)}")
        names = fed
      given = dict(zip(names, inputs))
    for n in given:
      if n not in self.inputs:
        raise ValueError(f"unknown input {n!r}; the model's inputs are: {', '.join(self.inputs)}")
    return {n: np.asarray(v) for n, v in given.items()}

  def _select(self, given: dict) -> _Compiled:
    for n, arr in self.consts.items():
      if n in given and not (given[n].shape == arr.shape and np.array_equal(given[n], arr)):
        raise ValueError(f"input {n!r} was compiled in as a constant ({arr.tolist()}); run got {given[n].tolist()}")
    for n in self.const_inputs + self.dynamic:
      if n not in given: raise ValueError(f"missing input {n!r}")
    values = {n: given[n] for n in self.const_inputs}
    shapes = {n: tuple(given[n].shape) for n in self.dynamic}
    if not values and not shapes and self.last is not None: return self.last
    self.last = self._compile(values, shapes)
    return self.last

  def run(self, inputs: Any, **kwargs: Any) -> tuple:
    """Run the artifact; the outputs in graph order as a tuple that can also be indexed by output name."""
    given = self._by_name(inputs)
    compiled = self._select(given)
    feeds = {}
    for spec in compiled.manifest["inputs"]:
      if spec["name"] not in given: raise ValueError(f"missing input {spec['name']!r}")
      feeds[spec["name"]] = to_storage(given[spec["name"]], spec)
    got = compiled.runtime.run(feeds)
    values = [from_storage(np.asarray(got[spec["name"]]), spec) for spec in compiled.manifest["outputs"]
              if spec["name"] in self.outputs]     # not the row counts of outputs a run fills in part
    return namedtupledict("Outputs", self.outputs)(*values)

  def close(self) -> None:
    """Release the loaded artifacts and delete the temporary folder (an `out_dir` artifact is kept)."""
    self.last = None
    self._finalizer()

  def __enter__(self) -> TgcRep: return self
  def __exit__(self, *exc) -> None: self.close()


# ---------------------------------------------------------------- the backend
class TgcBackend(Backend):
  """The ONNX backend API over tgc's compile pipeline and artifact runtimes."""

  @classmethod
  def supports_device(cls, device: str) -> bool:
    """Whether this build can compile for and run artifacts of the device's target."""
    try: target = device_target(device)
    except UserError: return False
    runner = target_spec(target).artifact
    if runner is None: return False
    if not isinstance(runner, str): return True
    try: return importlib.util.find_spec(runner.partition(":")[0]) is not None
    except (ImportError, ValueError): return False

  @classmethod
  def is_compatible(cls, model, device: str = "CPU", **kwargs: Any) -> bool:
    """False when the model uses an operator tgc's importer has no handler for."""
    model = _as_model(model)
    return cls.supports_device(device) and not unsupported_nodes(model.graph, opset_versions(model))

  @classmethod
  def prepare(cls, model, device: str = "c", **kwargs: Any) -> TgcRep:
    """Compile `model` (ModelProto, bytes or path) for the device's target. Keywords: `consts` (name -> array,
    baked in as `--const`), `const_inputs` (names baked in from the inputs of each run), `input_shapes`
    (name -> shape for dynamic inputs), `out_dir` (keep the first artifact there), `name` (model symbol),
    `runtime_options` (keywords for the artifact runtime, e.g. {"cflags": ("-O1",)} for c)."""
    known = {"consts", "const_inputs", "input_shapes", "out_dir", "name", "runtime_options"}
    unknown = sorted(set(kwargs) - known)
    if unknown: raise TypeError(f"prepare: unknown keyword arguments {', '.join(unknown)}")
    return TgcRep(_as_model(model), device_target(device), **kwargs)

  @classmethod
  def run_model(cls, model, inputs: Any, device: str = "c", **kwargs: Any) -> tuple:
    with cls.prepare(model, device, **kwargs) as rep: return rep.run(inputs)

  @classmethod
  def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "c",
               outputs_info: Sequence[tuple[np.dtype, tuple[int, ...]]] | None = None, **kwargs: Any) -> tuple:
    """Run one node on `inputs` (one array per non-empty node input, in order, or a dict). `consts` may also be
    a list of input names whose given values are baked in. `opset_version` sets the default-domain opset."""
    opset = kwargs.pop("opset_version", None)
    consts = kwargs.pop("consts", None)
    model, arrays = node_model(node, inputs, outputs_info, opset)
    if consts is not None and not isinstance(consts, dict): consts = {n: arrays[n] for n in consts}
    with cls.prepare(model, device, consts=consts, **kwargs) as rep: return rep.run(arrays)


def node_model(node: onnx.NodeProto, inputs: Any, outputs_info=None, opset: int | None = None
               ) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
  """A one-node model whose inputs are the node's (types and shapes from the given arrays) and its arrays by
  name. Output types come from `outputs_info` ((dtype, shape) per output) or ONNX shape inference."""
  names = [n for n in node.input if n]
  if isinstance(inputs, dict): arrays = {n: np.asarray(inputs[n]) for n in names}
  else:
    seq = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
    if len(seq) != len(dict.fromkeys(names)):
      raise ValueError(f"node {node.op_type} has {len(dict.fromkeys(names))} inputs; got {len(seq)} arrays")
    arrays = {n: np.asarray(a) for n, a in zip(dict.fromkeys(names), seq)}
  vi = onnx.helper.make_tensor_value_info
  graph_inputs = [vi(n, onnx.helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape)) for n, a in arrays.items()]
  outs = [n for n in node.output if n]
  if outputs_info is not None:
    graph_outputs = [vi(n, onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dt)), list(shape))
                     for n, (dt, shape) in zip(outs, outputs_info)]
  else: graph_outputs = [onnx.ValueInfoProto(name=n) for n in outs]
  opsets = [onnx.helper.make_opsetid("", opset or onnx.defs.onnx_opset_version())]
  if node.domain not in ("", "ai.onnx"): opsets.append(onnx.helper.make_opsetid(node.domain, 1))
  model = onnx.helper.make_model(onnx.helper.make_graph([node], f"{node.op_type.lower()}_node", graph_inputs,
                                                        graph_outputs), opset_imports=opsets)
  if outputs_info is None:
    try: inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    except Exception as error:
      raise UserError(f"node {node.op_type}: cannot infer its output types ({error}); give outputs_info") from error
    types = {v.name: v.type for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    for o in model.graph.output:
      if o.name not in types or not types[o.name].HasField("tensor_type"):
        raise UserError(f"node {node.op_type}: output {o.name!r} has no inferred type; give outputs_info")
      o.type.CopyFrom(types[o.name])
  return model, arrays
