"""Independent references for `tgc validate`.

Tensor-API models are rebuilt from their source and evaluated by the numpy interpreter on the un-scheduled graph
(`frontend.interpreter.evaluate`, the "numpy" device): no scheduler, lowering or renderer is involved. ONNX models
run on `onnx.reference.ReferenceEvaluator` (com.microsoft operators on tgc's numpy implementations,
`reference_contrib`, which unlike onnxruntime's kernels do not depend on the CPU's integer instructions), or on
onnxruntime (when installed) for large models and for models onnx.reference cannot run. An artifact compiled with
`--quantize` is compared with its quantized model, rebuilt from the float model and the recorded activation
ranges."""
from __future__ import annotations
import os
import numpy as np
from tgc.ir import lowp
from tgc.frontend import buffers
from tgc.frontend.tensor import Tensor
from tgc.frontend.interpreter import evaluate
from tgc.frontend import realize as _realize
from tgc.ir.sint import is_static
from tgc.aot.errors import UserError, describe
from tgc.aot import models

ONNXRUNTIME_MIN_BYTES = 32 << 20   # ONNX files at least this big run on onnxruntime when it is installed
ONNXRUNTIME_MIN_NODES = 2000


def spec_from_source(source: dict | None, model: str | None) -> tuple[models.ModelSpec, dict]:
  """The model to rebuild: `model` (the --model option) when given, else the artifact's recorded source.
  Returns the spec and the recorded options (input shapes and const files for ONNX)."""
  source = source or {}
  if isinstance(source.get("source"), dict): source = source["source"]
  if model:
    options = source if _same_file(source.get("path"), model) else {}
    return models.parse_model_spec(model), options
  if not source.get("path"):
    raise UserError("the artifact does not record its model; give it with --model path/to/file.py:function or "
                    "--model model.onnx")
  path = source["path"]
  if not os.path.isfile(path):
    raise UserError(f"the artifact's model file {path} is gone; give the model with --model")
  text = f"{path}:{source['function']}" if source.get("kind") == "tensor" else path
  spec = models.parse_model_spec(text)
  recorded = source.get("sha256")
  if recorded and recorded != models.file_sha256(path):
    raise UserError(f"the model file {path} changed since the artifact was compiled (sha256 differs); compile "
                    f"again, or pass --model to validate against it anyway")
  return spec, source


def _same_file(recorded: str | None, model: str) -> bool:
  if not recorded: return False
  path = model if model.lower().endswith(".onnx") else model.rpartition(":")[0]
  return bool(path) and os.path.abspath(path) == recorded


def reference_outputs(spec: models.ModelSpec, feeds: dict[str, np.ndarray], options: dict | None = None
                      ) -> tuple[dict[str, np.ndarray], str]:
  """The model's outputs (by original name) on `feeds` (by original input name), and which reference computed
  them ("numpy interpreter", "onnx.reference" or "onnxruntime")."""
  options = options or {}
  if spec.kind == "onnx": return onnx_reference(spec.path, feeds, options)
  return tensor_reference(spec, feeds), "numpy interpreter"


def index_bounds(spec: models.ModelSpec) -> dict[str, int]:
  """ONNX models: input name -> rows of the smallest table it indexes (`frontend.onnx.index_inputs`); else none."""
  if spec.kind != "onnx": return {}
  import onnx
  from tgc.frontend.onnx.index_inputs import index_bounds as bounds
  return bounds(onnx.load(spec.path, load_external_data=False))


def tensor_reference(spec: models.ModelSpec, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  loaded = models.load_model(spec, name_weights=False)
  names = [n for n, _ in loaded.inputs]
  _check_names(spec.text, names, feeds)
  for n, t in loaded.inputs:
    values = lowp.value_numpy(t.dtype) if t.dtype.storage_only else np.dtype(t.dtype.numpy)
    want = (tuple(t.shape), values.name)
    got = (tuple(feeds[n].shape), feeds[n].dtype.name)
    if want[1] != got[1] or len(want[0]) != len(got[0]) or \
        any(is_static(w) and w != g for w, g in zip(want[0], got[0])):   # a size known at run time fits any value
      raise UserError(f"model {spec.text} takes input {n!r} as {list(want[0])} {want[1]} but the artifact takes "
                      f"{list(got[0])} {got[1]}; is --model the model this artifact was compiled from?")
  tensors = [Tensor(buffers.host_array(feeds[n]), device=t.device, dtype=t.dtype) for n, t in loaded.inputs]
  outs = loaded.call(tensors)
  values = evaluate([t.uop for _, t in outs], lambda b: _realize.to_numpy(b))
  return {n: np.asarray(v).reshape(t.shape) for (n, t), v in zip(outs, values)}


def _check_names(model: str, names: list[str], feeds: dict) -> None:
  if sorted(names) != sorted(feeds):
    raise UserError(f"model {model} has inputs {names} but the artifact has inputs {sorted(feeds)}; is --model the "
                    f"model this artifact was compiled from?")


def _const_feeds(options: dict) -> dict[str, np.ndarray]:
  out = {}
  for name, path in (options.get("consts") or {}).items():
    try: out[name] = np.load(path, allow_pickle=False)
    except OSError as error:
      raise UserError(f"const {name!r}: cannot read {path} ({error.strerror or error})") from error
  return out


def onnx_reference(path: str, feeds: dict[str, np.ndarray], options: dict) -> tuple[dict[str, np.ndarray], str]:
  """The outputs of ONNX model `path` and the reference that computed them: onnx.reference (with the operators of
  `_reference_fixes`, the com.microsoft ones tgc compiles among them); onnxruntime (graph optimizations off) for
  large models, and for models onnx.reference cannot run (other operators of other domains, versions it lacks)."""
  import onnx
  try: model = onnx.load(path)
  except Exception as error: raise UserError(f"{path}: cannot read the ONNX model ({describe(error)})") from error
  if options.get("quantize"): model = quantized_model(model, options["quantize"])
  types = {i.name: i.type.tensor_type.elem_type for i in model.graph.input}
  feeds = {**{k: _onnx_feed(v, types.get(k, 0)) for k, v in feeds.items()}, **_const_feeds(options)}
  output_names = [o.name for o in model.graph.output]
  if _large(path, model):
    try: return dict(zip(output_names, _onnxruntime_run(model, feeds, output_names))), "onnxruntime"
    except Exception: pass   # not installed, or an operator it lacks: the reference evaluator runs it
  from onnx.reference import ReferenceEvaluator
  try: values = ReferenceEvaluator(model, new_ops=_reference_fixes(model)).run(None, feeds)
  except Exception as error:
    try: return dict(zip(output_names, _onnxruntime_run(model, feeds, output_names))), "onnxruntime"
    except Exception:
      raise UserError(f"{path}: onnx.reference cannot run the model ({describe(error)}), nor can onnxruntime "
                      f"(not installed, or it fails too)") from error
  return {n: np.asarray(v) for n, v in zip(output_names, values)}, "onnx.reference"


def quantized_model(model, info: dict):
  """The quantized model an artifact was compiled from (`tgc compile --quantize`): the float model rewritten with
  the activation ranges its manifest records, the nodes it kept float left out (the same record gives the same
  model)."""
  from tgc.frontend.onnx.quantize import QuantizeError, quantizable, quantize_model
  ranges = info.get("ranges")
  if not isinstance(ranges, dict): raise UserError("the artifact's quantize record has no activation ranges")
  means = {k: np.asarray(v, np.float64) for k, v in (info.get("means") or {}).items()}
  keep = set(info.get("keep_float") or ())
  sites = [s for s in quantizable(model) if s.node not in keep]
  try: return quantize_model(model, {k: (float(v[0]), float(v[1])) for k, v in ranges.items()}, sites, means)
  except (QuantizeError, TypeError, IndexError, ValueError) as error:
    raise UserError(f"cannot rebuild the quantized model from the artifact's record ({describe(error)})") from error


def _reference_fixes(model) -> list:
  """Operator implementations that replace onnx.reference's where it departs from the ONNX specification, and those
  it lacks:
  BatchNormalization 9-13 with one output is inference ("Output case #2: Y (test mode)"), but onnx.reference
  computes batch statistics whenever `momentum` is set, and it always fills in momentum's default (0.9).
  DequantizeLinear 10-18: onnx.reference has only version 19 on, whose 8-bit integer cases are the same.
  Loop: onnx.reference joins each scan output's values with np.vstack, so a scalar per step gives [steps, 1] and a
  value of two or more dims its steps' rows concatenated; the specification stacks them on a new first axis.
  The com.microsoft operators tgc compiles (`reference_contrib`), when the model imports that domain: onnx.reference
  has none, and onnxruntime's results for them depend on the CPU."""
  from onnx.reference.op_run import OpRun
  opset = next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
  fixes = (_dequantize_fix() if 10 <= opset < 19 else []) + _loop_fix()
  if any(o.domain == "com.microsoft" for o in model.opset_import):
    from tgc.aot.reference_contrib import OPERATORS
    fixes += OPERATORS
  if not 9 <= opset <= 13: return fixes

  class BatchNormalization(OpRun):
    op_domain = ""

    def _run(self, x, scale, bias, mean, var, epsilon=None, momentum=None, training_mode=None):  # noqa: ARG002
      if len(self.output) > 1: raise NotImplementedError("BatchNormalization in training mode")
      shape = (-1,) + (1,) * (x.ndim - 2)
      eps = 1e-5 if epsilon is None else epsilon
      y = scale.reshape(shape) * (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) + bias.reshape(shape)
      return (y.astype(x.dtype),)
  return [BatchNormalization, *fixes]


def _loop_fix() -> list:
  from onnx.reference.ops.op_loop import Loop as ReferenceLoop

  class Loop(ReferenceLoop):
    op_domain = ""

    def __init__(self, onnx_node, run_params):
      super().__init__(onnx_node, run_params)
      run_body = self._run_body      # an attribute OpRun sets for the body

      def recorded(*args, **kwargs):
        outputs = run_body(*args, **kwargs)
        self.step_shapes = [np.shape(v) for v in outputs[len(outputs) - self.K:]] if self.K else []
        return outputs
      self._run_body = recorded

    def _run(self, *args, **kwargs):
      self.step_shapes = None
      outputs = list(super()._run(*args, **kwargs))
      if self.step_shapes:     # the scan outputs follow the N carried values
        for k, shape in enumerate(self.step_shapes):
          outputs[self.N + k] = np.asarray(outputs[self.N + k]).reshape((-1,) + shape)
      return tuple(outputs)
  return [Loop]


def _dequantize_fix() -> list:
  from onnx.reference.ops.op_dequantize_linear import DequantizeLinear_19

  class DequantizeLinear(DequantizeLinear_19):
    op_domain = ""

    def _run(self, x, x_scale, x_zero_point=None, axis=1, block_size=0, output_dtype=None):  # noqa: ARG002
      return super()._run(x, x_scale, x_zero_point, axis=1 if axis is None else axis)
  return [DequantizeLinear]


def _onnx_feed(value: np.ndarray, elem_type: int) -> np.ndarray:
  """An input's values as onnx.reference takes them: storage-only types (bfloat16, float8, int4, ...) as ml_dtypes
  arrays, converted from float32/int8/uint8 values exactly as the artifact's input is (ONNX Cast)."""
  from tgc.frontend.onnx.dtypes import ONNX_DTYPES
  import onnx
  dt = ONNX_DTYPES.get(elem_type)
  if dt is None or not dt.storage_only or value.dtype != lowp.value_numpy(dt): return value
  ml = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
  return lowp.encode_array(value, dt).astype(np.dtype(f"u{ml.itemsize}")).view(ml)


def _large(path: str, model) -> bool:
  return os.path.getsize(path) >= ONNXRUNTIME_MIN_BYTES or len(model.graph.node) >= ONNXRUNTIME_MIN_NODES


def _onnxruntime_run(model, feeds: dict, output_names: list[str]) -> list[np.ndarray]:
  import onnxruntime
  options = onnxruntime.SessionOptions()
  options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
  session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
  wanted = {i.name for i in session.get_inputs()}
  return session.run(output_names, {k: v for k, v in feeds.items() if k in wanted})
