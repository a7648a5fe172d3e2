"""Loading user models for the pipeline: a Tensor-API model given as `path/to/file.py:function`, or an ONNX file.

A Tensor-API model function takes no arguments and returns `(fn, inputs)`: `fn` is called with the input Tensors
(positionally) and returns a Tensor, a list/tuple of Tensors or a dict of Tensors; `inputs` is a list of example
Tensors (named `input_0`, `input_1`, ...) or a dict name -> Tensor (named by its keys, passed in dict order).
Outputs are named `output_0`, `output_1`, ... or by the keys when `fn` returns a dict. Tensors that `fn` uses but
does not take as inputs are the weights; they are named by their state-dict path in `fn` (an object such as an
`nn` model, or the closure variables and globals of a plain function), others `weight_N`. Tensor's random seed
is reset to 0 before the model function runs, so every build of a model makes the same weights.

Everything the user's code raises is reported as a `UserError` naming the model."""
from __future__ import annotations
import hashlib
import importlib.util
import inspect
import os
import sys
import types
from dataclasses import dataclass, field
from typing import Any, Callable
import numpy as np
from tgc.ir import Ops, UOp
from tgc.frontend.tensor import Tensor
from tgc.frontend.jit import (PORTABLE_MAX_BUFFERS, Capture, JitError, NothingTracedError, TensorSpec,
                             TensorTooLargeError, placeholder, trace, _flatten_tensors)
from tgc.frontend.limits import SizeLimits
from tgc.frontend import winograd
from tgc.frontend.onnx.quantized_compute import rows_enabled
from tgc.codegen.dot import bytes_group
from tgc.codegen.knobs import KERNEL_MAX_BUFFERS
from tgc.codegen.target import Target
from tgc.frontend.nn import get_state_dict
from tgc.aot.errors import UserError, describe

MODEL_FORMS = "path/to/file.py:function (Tensor API) or path/to/model.onnx"


@dataclass(frozen=True)
class ModelSpec:
  """Where a model comes from: `text` as the user wrote it, the absolute `path`, the `function` (Tensor API)."""
  text: str
  path: str
  kind: str                   # "tensor" | "onnx"
  function: str | None = None

  @property
  def stem(self) -> str: return os.path.splitext(os.path.basename(self.path))[0]


def parse_model_spec(text: str) -> ModelSpec:
  """`file.py:function` or `model.onnx`; the file must exist."""
  text = str(text).strip()
  if text.lower().endswith(".onnx"):
    path, kind, function = text, "onnx", None
  else:
    path, sep, function = text.rpartition(":")
    if not sep or not path.endswith(".py"):
      if os.path.isfile(os.path.join(text, "manifest.json")):
        raise UserError(f"{text!r} is an artifact folder, not a model; expected {MODEL_FORMS}")
      if text.endswith(".py"):
        raise UserError(f"model {text!r} names no function; write {text}:function (a function that returns "
                        f"(fn, inputs))")
      raise UserError(f"model {text!r}: expected {MODEL_FORMS}")
    kind = "tensor"
    if not function.isidentifier():
      raise UserError(f"model {text!r}: {function!r} is not a Python function name")
  if not os.path.exists(path): raise UserError(f"model file not found: {path}")
  if not os.path.isfile(path): raise UserError(f"model file {path} is not a file")
  return ModelSpec(text, os.path.abspath(path), kind, function)


def file_sha256(path: str) -> str:
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""): digest.update(chunk)
  return digest.hexdigest()


@dataclass
class LoadedModel:
  """A model ready to trace: `fn(*input tensors)`, the named example inputs, names for weight BUFFER nodes."""
  spec: ModelSpec
  fn: Callable
  inputs: list[tuple[str, Tensor]]
  weight_names: dict[UOp, str] = field(default_factory=dict)
  output_names: list[str] | None = None       # fixed by the model (ONNX); None: derived from what fn returns
  options: dict = field(default_factory=dict)  # input_shapes / consts (ONNX), recorded in the artifact
  user_code: bool = True    # fn is the user's code: whatever it raises is a user error
  limits: SizeLimits | None = None   # tensor size limits trace_model checks (compile), None: unchecked
  # the states the artifact keeps: (input position, output position, axis, length Variable), as `trace` takes them
  states: list[tuple[int, int, int, UOp]] = field(default_factory=list)
  # outputs whose rows are counted at run time -> the output holding the count (ONNX: filled as the model is built)
  output_rows: dict[str, str] = field(default_factory=dict)

  def call(self, tensors: list[Tensor]) -> list[tuple[str, Tensor]]:
    """Run the model function on `tensors` (lazily) and name its outputs."""
    try: ret = self.fn(*tensors)
    except UserError: raise
    except Exception as error:
      if not self.user_code: raise
      raise UserError(f"{self.spec.text}: the model raised {describe(error)}") from error
    outs = _flatten_tensors(ret)
    return list(zip(self._names_for(ret, len(outs)), outs))

  def _names_for(self, ret, count: int) -> list[str]:
    if self.output_names is not None and len(self.output_names) == count: return list(self.output_names)
    if isinstance(ret, dict) and ret and all(isinstance(v, Tensor) for v in ret.values()):
      return [str(k) for k in ret]
    return [f"output_{i}" for i in range(count)]

  def source_info(self) -> dict:
    """What `tgc validate` needs to rebuild the model: recorded in the artifact's manifest."""
    info: dict[str, Any] = {"kind": self.spec.kind, "path": self.spec.path, "sha256": file_sha256(self.spec.path)}
    if self.spec.function: info["function"] = self.spec.function
    if self.options.get("input_shapes"):
      info["input_shapes"] = {k: list(v) for k, v in sorted(self.options["input_shapes"].items())}
    if self.options.get("const_files"): info["consts"] = dict(sorted(self.options["const_files"].items()))
    if self.options.get("dims"): info["dims"] = {k: list(v) for k, v in sorted(self.options["dims"].items())}
    if self.options.get("max_context"):
      info["max_context"] = self.options["max_context"]
      if self.options.get("states"): info["states"] = dict(self.options["states"])
    return info


def load_model(spec: ModelSpec | str, input_shapes: dict | None = None, consts: dict | None = None,
               const_files: dict | None = None, name_weights: bool = True,
               limits: SizeLimits | None = None, dims: dict | None = None, states: dict | None = None,
               max_context: int | None = None, onnx_model=None) -> LoadedModel:
  """Build the model. `consts` maps ONNX input names to arrays baked in as constants (`const_files` their
  paths, recorded for validate). With `name_weights` the weights are realized so the capture binds them. With
  `limits`, every tensor is checked on its shape before anything of its size is allocated (ONNX inputs are
  placeholders without data; the importer checks each node, trace_model every buffer). `max_context` keeps the
  model's states (`states`: input -> output names, else found by name) in the artifact, each holding that many
  entries. `onnx_model` (a ModelProto: a rewrite of the file, such as its quantized form) is built in place of the
  file's contents; the file stays the model's source."""
  if isinstance(spec, str): spec = parse_model_spec(spec)
  if spec.kind == "onnx":
    return _load_onnx(spec, input_shapes or {}, consts or {}, const_files or {}, limits, dims, states, max_context,
                      onnx_model)
  if states or max_context: raise UserError(f"--state and --max-context apply to .onnx models only, not to {spec.text}")
  if input_shapes: raise UserError(f"--input-shape applies to .onnx models only, not to {spec.text}")
  if dims:
    raise UserError(f"--dim applies to .onnx models only, not to {spec.text} (its inputs name their sizes: "
                    f"Tensor.empty(1, Variable(\"T\", 1, 256)))")
  if consts: raise UserError(f"--const applies to .onnx models only, not to {spec.text}")
  build = load_function(spec)
  Tensor.manual_seed(0)   # as in a fresh process: unseeded Tensor.rand weights are the same on every build
  try: result = build()
  except UserError: raise
  except Exception as error:
    raise UserError(f"{spec.text}: the model function raised {describe(error)}") from error
  fn, inputs = _check_build_result(spec, result)
  loaded = LoadedModel(spec, fn, inputs, limits=limits)
  if name_weights: loaded.weight_names = _weight_names(fn)
  return loaded


def load_function(spec: ModelSpec) -> Callable:
  """Import the model file as a fresh module (its folder first on sys.path while it loads) and get the function."""
  digest = hashlib.sha256(spec.path.encode()).hexdigest()[:12]
  module_name = f"tgc_model_{digest}"
  module_spec = importlib.util.spec_from_file_location(module_name, spec.path)
  if module_spec is None or module_spec.loader is None:
    raise UserError(f"{spec.path}: cannot be imported as a Python module")
  module = importlib.util.module_from_spec(module_spec)
  sys.modules[module_name] = module
  folder = os.path.dirname(spec.path)
  sys.path.insert(0, folder)
  try: module_spec.loader.exec_module(module)
  except SyntaxError as error:
    raise UserError(f"{spec.path}:{error.lineno}: syntax error: {error.msg}") from error
  except Exception as error:
    raise UserError(f"{spec.path}: loading the model file raised {describe(error)}") from error
  finally:
    if sys.path and sys.path[0] == folder: sys.path.pop(0)
  fn = getattr(module, spec.function, None)
  if fn is None or not callable(fn):
    defined = sorted(k for k, v in vars(module).items()
                     if inspect.isfunction(v) and v.__module__ == module_name and not k.startswith("_"))
    what = "no function" if fn is None else "no callable"
    raise UserError(f"{spec.text}: {what} {spec.function!r} in {spec.path}"
                    + (f" (functions there: {', '.join(defined)})" if defined else ""))
  return fn


def _check_build_result(spec: ModelSpec, result) -> tuple[Callable, list[tuple[str, Tensor]]]:
  shape = "must return (fn, inputs) with inputs a list of example Tensors or a dict name -> Tensor"
  if not isinstance(result, (tuple, list)) or len(result) != 2:
    raise UserError(f"{spec.text}: the model function {shape}; it returned {type(result).__name__}")
  fn, inputs = result
  if not callable(fn): raise UserError(f"{spec.text}: the model function {shape}; fn is a {type(fn).__name__}")
  if isinstance(inputs, Tensor): inputs = [inputs]
  if isinstance(inputs, dict):
    named = list(inputs.items())
    for key, _ in named:
      if not isinstance(key, str) or not key:
        raise UserError(f"{spec.text}: input names must be non-empty strings, got {key!r}")
  elif isinstance(inputs, (list, tuple)): named = [(f"input_{i}", t) for i, t in enumerate(inputs)]
  else: raise UserError(f"{spec.text}: the model function {shape}; inputs is a {type(inputs).__name__}")
  for key, t in named:
    if not isinstance(t, Tensor):
      raise UserError(f"{spec.text}: input {key!r} is a {type(t).__name__}, not a Tensor")
  return fn, named


def _weight_sources(fn) -> dict[str, Any]:
  """The objects whose Tensors are `fn`'s named weights: fn itself when it is an object (an nn model), the
  instance of a bound method, or the closure variables and referenced globals of a plain function."""
  if isinstance(fn, types.MethodType): return {"": fn.__self__}
  if not isinstance(fn, types.FunctionType): return {"": fn}
  out: dict[str, Any] = {}
  for var, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
    try: out[var] = cell.cell_contents
    except ValueError: pass   # an empty cell
  for var in fn.__code__.co_names:
    if var in fn.__globals__ and var not in out: out[var] = fn.__globals__[var]
  return {k: v for k, v in out.items() if _may_hold_weights(v)}


def _may_hold_weights(value) -> bool:
  if isinstance(value, (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, types.MethodType)):
    return False
  return isinstance(value, (Tensor, list, tuple, dict)) or hasattr(value, "__dict__")


def _weight_names(fn) -> dict[UOp, str]:
  """BUFFER node -> state-dict name, after realizing those tensors (so the capture binds these very buffers)."""
  state: dict[str, Tensor] = {}
  for prefix, obj in _weight_sources(fn).items():
    try: found = get_state_dict(obj, f"{prefix}." if prefix else "")
    except RecursionError: continue
    for key, t in found.items(): state.setdefault(key, t)
  Tensor.realize_all(*state.values())
  names: dict[UOp, str] = {}
  for key, t in state.items():
    if t.uop.op is Ops.BUFFER and key: names.setdefault(t.uop, key)
  return names


def trace_model(loaded: LoadedModel, target: Target | None = None) -> Capture:
  """The capture of the model on its example inputs, inputs and outputs named, its kernels binding at most the
  target's limit of buffers (KERNEL_MAX_BUFFERS where it has none; no target: the smallest limit of all targets)."""
  max_buffers = PORTABLE_MAX_BUFFERS if target is None else target.max_buffers or KERNEL_MAX_BUFFERS
  returned: list = []

  def run(*tensors):
    named = loaded.call(list(tensors))
    returned.append([n for n, _ in named])
    return [t for _, t in named]
  input_names = [n for n, _ in loaded.inputs]
  try:
    rows = bytes_group(target.dot) if target is not None else 0
    with winograd.enabled(target is not None and target.winograd, target is not None and target.integer_winograd), \
        rows_enabled(rows):
      capture = trace(run, *[t for _, t in loaded.inputs], input_names=input_names, limits=loaded.limits,
                      max_buffers=max_buffers,
                      states=loaded.states, output_names=loaded.output_names, weight_names=loaded.weight_names)
  except TensorTooLargeError as error: raise UserError(f"{loaded.spec.text}: {error}") from None
  except NothingTracedError as error: raise UserError(f"{loaded.spec.text}: the model returned no Tensor") from error
  except JitError as error: raise UserError(f"{loaded.spec.text}: {error}") from error
  held = {o for _, o, _, _ in loaded.states}
  names = [n for o, n in enumerate(returned[-1]) if o not in held]
  capture.outputs = [(TensorSpec(n, s.shape, s.dtype), b) for n, (s, b) in zip(names, capture.outputs)]
  return capture


def named_weights(capture: Capture) -> list[tuple[str, UOp, np.ndarray]]:
  """The capture's weights in order with unique names: the name the model gave them (a state-dict key of the
  Tensor API, an ONNX initializer's name; `Capture.weight_names`), else `weight_N`."""
  names: dict[UOp, str] = {}
  for b in capture.weights:
    name = capture.weight_names.get(b)
    if name is not None and name not in names.values(): names[b] = name
  taken = set(names.values())
  out, counter = [], 0
  for b, data in capture.weights.items():
    name = names.get(b)
    if name is None:
      while f"weight_{counter}" in taken: counter += 1
      name = f"weight_{counter}"
      taken.add(name)
    out.append((name, b, data))
  return out


# ---------------------------------------------------------------- ONNX
def _load_onnx(spec: ModelSpec, input_shapes: dict, consts: dict, const_files: dict, limits: SizeLimits | None,
               dims: dict | None = None, states: dict | None = None, max_context: int | None = None,
               onnx_model=None) -> LoadedModel:
  from tgc.frontend.onnx import OnnxError, load_model   # onnx is imported only for ONNX models
  try:
    graph = load_model(spec.path if onnx_model is None else onnx_model, input_shapes=input_shapes or None,
                       consts=consts or None, limits=limits, dims=dims, states=states, max_context=max_context,
                       build=False)   # built once: when it is traced
  except OnnxError as error: raise UserError(_onnx_message(spec, error)) from error
  # the importer pinned every input's shape (or refused the model naming the input to give --input-shape for)
  out_names = graph.output_names
  held = {name: (out_names.index(out), axis) for name, out, axis in graph.states}
  inputs, traced_states = [], []
  for i, (name, shape, dtype) in enumerate(graph.inputs):
    if name in held:      # the state's whole buffer: max_context entries along its length's axis
      out, axis = held[name]
      traced_states.append((i, out, axis, shape[axis]))
      shape = tuple(max_context if k == axis else d for k, d in enumerate(shape))
    inputs.append((name, placeholder(shape, dtype)))
  output_names = out_names or None
  options = {"input_shapes": dict(input_shapes), "const_files": dict(const_files), "dims": dict(dims or {}),
             "states": dict(states or {}), "max_context": max_context}

  def run(*tensors):
    try: return graph(*tensors)
    except OnnxError as error: raise UserError(_onnx_message(spec, error)) from error
  return LoadedModel(spec, run, inputs, graph.weight_names, output_names, options, user_code=False, limits=limits,
                     states=traced_states, output_rows=graph.output_rows)


def _onnx_message(spec: ModelSpec, error) -> str:
  """An OnnxError's message, led by the model as the user named it unless the message names the model already."""
  return str(error) if error.model is not None else f"{spec.text}: {error}"


def example_array(shape: tuple[int, ...], dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
  """Seeded random data of `dtype`: normal floats, small non-negative integers, random booleans."""
  dtype = np.dtype(dtype)
  if dtype.kind == "f": return rng.standard_normal(shape).astype(dtype)
  if dtype.kind in "iu": return rng.integers(0, 4, shape).astype(dtype)
  if dtype.kind == "b": return rng.random(shape) < 0.5
  raise UserError(f"no random data for dtype {dtype.name}")
