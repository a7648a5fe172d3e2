"""The official ONNX node conformance cases (onnx.backend.test.case.node) run through tgc.

`cases()` lists them; `run_case(case, device)` runs one and compares with the expected outputs: on "numpy" the
case's model is imported with `load_model` and evaluated on the interpreter (the reference); on a target ("c",
"opencl", "webgpu", ...) it is compiled to an artifact through the ONNX backend and run by that target's artifact
runtime, as a user's `tgc compile` + loader would. Graph inputs that set shapes
(a Reshape's target shape, Slice's starts, reduce axes, ...; see SHAPE_INPUTS) are passed as compile-time
constants (`consts`), as a user would with `--const`; such cases are flagged "needed const"."""
from __future__ import annotations
import functools
import os
import re
import warnings
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

# (op_type, input index) of inputs whose values set output shapes or must otherwise be known at compile time
SHAPE_INPUTS: set[tuple[str, int]] = {
  ("Reshape", 1), ("Expand", 1), ("Tile", 1), ("ConstantOfShape", 0), ("OneHot", 1),
  ("Slice", 1), ("Slice", 2), ("Slice", 3), ("Slice", 4), ("Pad", 1), ("Pad", 3),
  ("Squeeze", 1), ("Unsqueeze", 1), ("Split", 1), ("Range", 0), ("Range", 1), ("Range", 2),
  ("ReduceSum", 1), ("ReduceMean", 1), ("ReduceMax", 1), ("ReduceMin", 1), ("ReduceProd", 1), ("ReduceL1", 1),
  ("ReduceL2", 1), ("ReduceLogSum", 1), ("ReduceLogSumExp", 1), ("ReduceSumSquare", 1),
  ("Resize", 1), ("Resize", 2), ("Resize", 3), ("Upsample", 1), ("TopK", 1), ("CumSum", 1), ("CumProd", 1),
  ("CenterCropPad", 1), ("NonZero", 0), ("Compress", 1), ("Unique", 0), ("Loop", 0), ("Loop", 1),
  ("DFT", 1), ("DFT", 2), ("STFT", 1), ("STFT", 3), ("HannWindow", 0), ("HammingWindow", 0),
  ("BlackmanWindow", 0), ("MelWeightMatrix", 0), ("MelWeightMatrix", 1), ("MelWeightMatrix", 2),
  ("MelWeightMatrix", 3), ("MelWeightMatrix", 4), ("Col2Im", 1), ("Col2Im", 2), ("MaxUnpool", 2),
  ("AffineGrid", 1), ("NonMaxSuppression", 2), ("NonMaxSuppression", 3), ("NonMaxSuppression", 4),
  ("NonMaxSuppression", 0), ("NonMaxSuppression", 1), ("TfIdfVectorizer", 0), ("Dropout", 1), ("Dropout", 2),
}

# dtype name -> (rtol, atol) for computed floats; others (1e-3, 1e-5). bfloat16 allows a few units in the last place
# (results rounded to bfloat16 after every op); the other storage-only types must match exactly.
FLOAT_TOL = {"float16": (1e-2, 1e-3), "bfloat16": (2e-2, 1e-3)}


@functools.lru_cache(maxsize=1)
def cases() -> list:
  """All node test cases of the installed onnx (collecting them takes some seconds)."""
  from onnx.backend.test.case.node import collect_testcases
  with warnings.catch_warnings(), np.errstate(all="ignore"):
    warnings.simplefilter("ignore")
    return list(collect_testcases())


def stratified_sample(all_cases, per_op: int = 2) -> list[str]:
  """The first `per_op` cases (by name) of every operator: what CI runs on the non-reference targets."""
  by_op: dict[str, list[str]] = {}
  for c in sorted(all_cases, key=lambda c: c.name): by_op.setdefault(case_op(c), []).append(c.name)
  return sorted(n for names in by_op.values() for n in names[:per_op])


def case_op(case) -> str:
  """The operator a case tests: its only node's op type; for an "_expanded" case (the operator's function body)
  the op of the case it expands; otherwise the longest ONNX op whose snake_case name starts the case name."""
  g = case.model.graph
  if len(g.node) == 1: return g.node[0].op_type
  base = re.sub(r"_expanded(_ver\d+)?$", "", case.name)
  single = _single_node_ops()
  if base in single: return single[base]
  name = case.name[len("test_"):]
  best = ""
  for op in _all_op_names() | {n.op_type for n in g.node}:
    if name.startswith(_snake(op)) and len(op) > len(best): best = op
  return best or name.split("_")[0]


@functools.lru_cache(maxsize=1)
def _single_node_ops() -> dict[str, str]:
  return {c.name: c.model.graph.node[0].op_type for c in cases() if len(c.model.graph.node) == 1}


@functools.lru_cache(maxsize=1)
def _all_op_names() -> frozenset:
  return frozenset(s.name for s in onnx.defs.get_all_schemas_with_history())


def _snake(op: str) -> str:
  return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", op).lower()


def const_inputs(model: onnx.ModelProto) -> list[str]:
  """Graph inputs that reach a shape-setting node input (directly or through nodes other than Shape/Size; through
  If/Loop/Scan into their subgraphs too)."""
  from tgc.frontend.onnx.loading import node_reads
  g = model.graph
  inits = {t.name for t in g.initializer}
  graph_inputs = [i.name for i in g.input if i.name not in inits]
  nodes = []

  def walk(graph):
    for n in graph.node:
      nodes.append(n)
      for a in n.attribute:
        for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)): walk(sub)
  walk(g)
  producer = {o: n for n in nodes for o in n.output if o}
  todo = [n.input[i] for n in nodes for i in range(len(n.input)) if (n.op_type, i) in SHAPE_INPUTS and n.input[i]]
  seen: set[str] = set()
  while todo:
    name = todo.pop()
    if name in seen: continue
    seen.add(name)
    node = producer.get(name)
    if node is None or node.op_type in ("Shape", "Size"): continue
    todo.extend(node_reads(node))
  return [n for n in graph_inputs if n in seen]


def _to_array(v: Any) -> np.ndarray:
  if isinstance(v, onnx.TensorProto): return numpy_helper.to_array(v)
  if v is None or isinstance(v, (list, dict)) or isinstance(v, onnx.SequenceProto):
    raise TypeError(f"{type(v).__name__} values (sequences, maps, optionals) are not supported")
  return np.asarray(v)


# Elements of expected outputs that the ONNX specification leaves undefined are compared nowhere: each rule names the
# operators it applies to and quotes the sentence of the spec that allows it; `defined_elements` finds them from a
# case's inputs. The expected values onnx ships for such elements come from whatever ml_dtypes/numpy computed on the
# day (they changed with ml_dtypes 0.7.0), so comparing them would test nothing tgc promises.
UNDEFINED_RULES: list[tuple[tuple[str, ...], str, str]] = [
  (("Cast", "CastLike"), "float to fixed point out of range",
   "Cast: \"Casting from floating point to: [...] fixed point: undefined if OOR (out of range).\""),
]
INT_RANGES = {"int4": (-8, 7), "uint4": (0, 15), "int2": (-2, 1), "uint2": (0, 3)}
FLOAT_TYPES = {getattr(onnx.TensorProto, t) for t in ("FLOAT", "DOUBLE", "FLOAT16", "BFLOAT16", "FLOAT8E4M3FN",
                                                      "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "FLOAT4E2M1")}


def defined_elements(case, by_name: dict[str, np.ndarray]) -> list[np.ndarray | None]:
  """Per graph output, a boolean mask of the elements ONNX defines (None: all of them). A graph output that a
  Cast/CastLike computes from a floating-point graph input into a fixed-point type is defined only where the
  input truncated toward zero fits that type (UNDEFINED_RULES)."""
  g = case.model.graph
  producer = {o: n for n in g.node for o in n.output if o}
  inputs = {i.name: i.type.tensor_type.elem_type for i in g.input}
  out: list[np.ndarray | None] = []
  for o in g.output:
    node = producer.get(o.name)
    mask = None
    if node is not None and node.op_type in ("Cast", "CastLike") and node.input[0] in by_name:
      lo_hi = _fixed_range(o.type.tensor_type.elem_type)
      if lo_hi is not None and inputs.get(node.input[0]) in FLOAT_TYPES:
        with np.errstate(invalid="ignore", over="ignore"):
          v = np.trunc(np.asarray(by_name[node.input[0]]).astype(np.float64))
          mask = np.isfinite(v) & (v >= lo_hi[0]) & (v <= lo_hi[1])
    out.append(mask)
  return out


def _fixed_range(elem_type: int) -> tuple[int, int] | None:
  """(lo, hi) of an ONNX fixed-point element type, None for other types (bool is not fixed point)."""
  if not elem_type or elem_type == onnx.TensorProto.BOOL: return None
  try: dt = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
  except (KeyError, TypeError, ValueError): return None
  if dt.name in INT_RANGES: return INT_RANGES[dt.name]
  if dt.kind in "iu" and dt.type.__module__ == "numpy": return int(np.iinfo(dt).min), int(np.iinfo(dt).max)
  return None


ARTIFACT_OPTIONS = {"c": {"cflags": ("-O1",)}, "opencl": {"cflags": ("-O1",)}}   # host code built at -O1 here


CLI_SUFFIX = "-cli"     # "c-cli": the target "c" through the command line (run_case_cli)


def run_case(case, device: str) -> tuple[str, str]:
  """("pass" | "fail" | "error", detail) of one case on `device`: "numpy" evaluates the imported graph on the
  interpreter (the reference); any other device is a tgc target, and the case is compiled to that target's artifact
  and run by its artifact runtime (`run_case_compiled`), or with the "-cli" suffix ("c-cli") through `tgc compile`
  and `tgc run` on files (`run_case_cli`). "fail": outputs differ; "error": import, compile or run refused the case
  (the detail is the one-line message). Passing cases that needed constant inputs say "needed const: ..."."""
  if device == "numpy": return run_case_eager(case, device)
  if device.endswith(CLI_SUFFIX): return run_case_cli(case, device[:-len(CLI_SUFFIX)])
  return run_case_compiled(case, device)


def _case_data(case) -> tuple[dict, list, list[str]] | str:
  """(inputs by graph-input name, expected outputs, names of the inputs passed as constants), or the error."""
  model = case.model
  inputs, expected = case.data_sets[0]
  inits = {t.name for t in model.graph.initializer}
  names = [i.name for i in model.graph.input if i.name not in inits]
  try:
    arrays = [_to_array(v) for v in inputs]
    want = [_to_array(v) for v in expected]
  except TypeError as e:
    return f"test data: {e}"
  if len(arrays) != len(names): return f"test data has {len(arrays)} inputs for {len(names)} graph inputs"
  return dict(zip(names, arrays)), want, const_inputs(model)


def run_case_eager(case, device: str = "numpy") -> tuple[str, str]:
  """The case imported with `load_model` and evaluated with Tensors on `device` (kernels realized one by one)."""
  from tgc.frontend.tensor import Tensor
  from tgc.frontend.onnx import OnnxError, load_model
  from tgc.frontend.onnx.dtypes import array_to_tensor
  data = _case_data(case)
  if isinstance(data, str): return "error", data
  by_name, want, needed = data
  try:
    graph = load_model(case.model, input_shapes={n: a.shape for n, a in by_name.items() if n not in needed},
                       consts={n: by_name[n] for n in needed})
    tensors = [array_to_tensor(by_name[n], device, dt, uniform_as_const=False) for n, _, dt in graph.inputs]
    outs = graph(*tensors)
    Tensor.realize_all(*outs)
    got, got_dtypes = [o.numpy() for o in outs], [o.dtype for o in outs]
  except OnnxError as e:
    return "error", str(e)
  except Exception as e:  # a crash below the importer: report it as a failure of this case
    return "error", f"{type(e).__name__}: {_first_line(e)}"
  return _verdict(compare_outputs(got, want, got_dtypes, defined_elements(case, by_name)), needed)


def run_case_compiled(case, target: str = "c") -> tuple[str, str]:
  """The case compiled by `aot.onnx_backend.TgcBackend` for `target` -- the real `tgc compile` pipeline into a
  temporary artifact folder -- and run by the target's artifact runtime. The compiler sees only the values of the
  inputs that set shapes (`const_inputs`, as `tgc compile --const`). "error" details: the pipeline refused the model
  (the one-line message `tgc compile` prints), the artifact failed to build or run ("artifact: ..."), the machine
  cannot run the target ("unavailable: ..."), or tgc crashed ("internal error: ...", a bug)."""
  from tgc.aot.errors import UserError
  from tgc.aot.onnx_backend import TgcBackend
  from tgc.runtimes import RuntimeUnavailable
  data = _case_data(case)
  if isinstance(data, str): return "error", data
  by_name, want, needed = data
  rep = None
  try:
    rep = TgcBackend.prepare(case.model, target, consts={n: by_name[n] for n in needed},
                             input_shapes={n: a.shape for n, a in by_name.items() if n not in needed},
                             runtime_options=ARTIFACT_OPTIONS.get(target, {}))
    got = [np.asarray(o) for o in rep.run({n: a for n, a in by_name.items() if n not in needed})]
  except UserError as e:     # the one-line message, without the backend's temporary model path
    return "error", re.sub(r"^\S*tgc-backend-[^/\s]+/model\.onnx: ", "", str(e))
  except RuntimeUnavailable as e:     # this machine cannot run the target (the message names the missing piece)
    return "error", f"unavailable: {_first_line(e)}"
  except ValueError as e:      # runtimes.artifact_c.ArtifactError and friends: building or running the artifact
    return "error", f"artifact: {type(e).__name__}: {_first_line(e)}"
  except Exception as e:
    return "error", f"internal error: {type(e).__name__}: {_first_line(e)}"
  finally:
    if rep is not None: rep.close()
  return _verdict(compare_outputs(got, want, defined=defined_elements(case, by_name)), needed)


def run_case_cli(case, target: str = "c") -> tuple[str, str]:
  """The case as a user runs it: the model saved as model.onnx; `tgc compile model.onnx --target TARGET` with
  `--const NAME=FILE.npy` for the inputs that set shapes (`const_inputs`) and `--input-shape NAME=D0,D1,...` for
  the inputs the model declares with dynamic dims; `tgc run` with one .npy file per input (storage-only types as
  their float32/int8/uint8 values, as .npy holds them) and `-o outputs.npz`; the .npz then compared with the
  expected outputs (in the types the manifest names). Both commands go through the CLI's entry point in this
  process (`cli_command`). "error" details: "compile: ..." or "run: ..." and the command's one-line message, or
  "internal error (exit 3): ..." (a bug)."""
  import json
  import tempfile
  data = _case_data(case)
  if isinstance(data, str): return "error", data
  by_name, want, needed = data
  with tempfile.TemporaryDirectory(prefix="tgc-cli-case-") as tmp:
    model_path = os.path.join(tmp, "model.onnx")
    onnx.save(case.model, model_path)
    args = ["compile", model_path, "--target", target, "-o", os.path.join(tmp, "art")]
    declared = {i.name: i for i in case.model.graph.input}
    for k, name in enumerate(by_name):
      path = os.path.join(tmp, f"in{k}.npy")
      try: np.save(path, npy_values(by_name[name]), allow_pickle=False)
      except ValueError as e: return "error", f"input {name!r}: cannot be written as .npy ({_first_line(e)})"
      if name in needed: args += ["--const", f"{name}={path}"]
      elif not _declares_static(declared.get(name)):
        args += ["--input-shape", f"{name}=" + ",".join(str(d) for d in by_name[name].shape)]
    code, message = cli_command(args)
    if code != 0: return "error", _cli_detail("compile", code, message)
    run_args = ["run", os.path.join(tmp, "art"), "-o", os.path.join(tmp, "out.npz")]
    for k, name in enumerate(by_name):
      if name not in needed: run_args += ["--input", f"{name}={os.path.join(tmp, f'in{k}.npy')}"]
    code, message = cli_command(run_args)
    if code != 0: return "error", _cli_detail("run", code, message)
    with open(os.path.join(tmp, "art", "manifest.json"), encoding="utf-8") as f: outputs = json.load(f)["outputs"]
    from tgc.ir import dtypes
    with np.load(os.path.join(tmp, "out.npz"), allow_pickle=False) as out:
      got = [out[o["name"]] for o in outputs]
    got_dtypes = [getattr(dtypes, o["tgc_dtype"]) for o in outputs]
  return _verdict(compare_outputs(got, want, got_dtypes, defined_elements(case, by_name)), needed)


def npy_values(arr: np.ndarray) -> np.ndarray:
  """An array as a .npy file holds it: storage-only types (ml_dtypes arrays) as float32, int8 or uint8 values."""
  from tgc.ir import lowp
  from tgc.frontend.onnx.dtypes import array_dtype
  arr = np.asarray(arr)
  dt = array_dtype(arr)
  return arr.astype(lowp.value_numpy(dt)) if dt.storage_only else arr


def _declares_static(vi) -> bool:
  """Whether a graph input declares every dim as a positive number (else `--input-shape` pins it)."""
  if vi is None or not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"): return False
  return all(d.HasField("dim_value") and d.dim_value > 0 for d in vi.type.tensor_type.shape.dim)


def cli_command(args: list[str]) -> tuple[int, str]:
  """(exit code, last line on stderr) of `tgc ARGS`, run through the CLI's entry point in this process."""
  import contextlib
  import io
  from tgc.aot.cli import main
  err = io.StringIO()
  with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
    try:
      main(args)
      code = 0
    except SystemExit as e: code = e.code if isinstance(e.code, int) else 1
  lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
  return code, lines[-1] if lines else ""


def _cli_detail(command: str, code: int, message: str) -> str:
  message = re.sub(r"\S*tgc-cli-case-[^/\s]+/", "", message).removeprefix("tgc: error: ")
  message = message.removeprefix("model.onnx: ")
  if code == 3: return f"internal error (exit 3) in {command}: {message}"
  return f"{command}: {message}"


def _verdict(result: tuple[str, str], needed: list[str]) -> tuple[str, str]:
  if result[0] == "pass" and needed: return "pass", "needed const: " + ", ".join(needed)
  return result


def _first_line(e: BaseException) -> str:
  text = str(e).strip()
  return text.splitlines()[0] if text else ""


def compare_outputs(got: list, want: list, got_dtypes: list | None = None,
                    defined: list | None = None) -> tuple[str, str]:
  """("pass", "") or ("fail" | "error", detail) for computed outputs against a case's expected outputs: same count,
  dtypes and shapes; floats within FLOAT_TOL, others exact; with `defined` (per output a boolean mask or None) only
  the elements ONNX defines are compared. Outputs are host arrays (storage-only types as ml_dtypes arrays), or, with
  `got_dtypes`, the Tensor API's values of those dtypes (storage-only types decoded)."""
  from tgc.frontend.onnx import OnnxError
  from tgc.frontend.onnx.dtypes import array_dtype, host_values
  if len(got) != len(want): return "fail", f"{len(got)} outputs, expected {len(want)}"
  for i, (arr, exp) in enumerate(zip(got, want)):
    try: exp_dt, dt = array_dtype(exp), (got_dtypes[i] if got_dtypes else array_dtype(arr))
    except OnnxError as e: return "error", f"output {i}: {e}"
    if dt != exp_dt: return "fail", f"output {i}: dtype {dt.name}, expected {exp_dt.name}"
    if tuple(arr.shape) != tuple(exp.shape): return "fail", f"output {i}: shape {arr.shape}, expected {exp.shape}"
    a, ref = host_values(arr, dt), host_values(exp, exp_dt)
    mask = defined[i] if defined and i < len(defined) else None
    if mask is not None: a, ref = a[mask], ref[mask]
    try:
      if dt.is_float and (not dt.storage_only or dt.name in FLOAT_TOL):
        rtol, atol = FLOAT_TOL.get(dt.name, (1e-3, 1e-5))
        np.testing.assert_allclose(a.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)
      else: np.testing.assert_array_equal(a, ref)
    except AssertionError as e:
      lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
      summary = next((ln for ln in lines if ln.startswith("Mismatched")), lines[0] if lines else "mismatch")
      return "fail", f"output {i}: {summary}"
  return "pass", ""
