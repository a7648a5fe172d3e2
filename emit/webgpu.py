"""The `webgpu` bundle: `model.js` (a dependency-free ES module: the WGSL of every kernel inline, a loader that
parses `weights.safetensors`, creates every buffer and pipeline once and runs the calls in order), `model.d.ts`
(its TypeScript types, with the model's input and output names), `index.html` (a demo page that runs the model on
seeded random inputs or a picked image and shows outputs and timing), `weights.safetensors` and `manifest.json`.

The host code in templates/webgpu is generic; what is model-specific reaches it as one JSON object, the *plan*,
written into model.js between the lines `// tgc:plan begin` and `// tgc:plan end` (`const PLAN = {...};`). The
plan holds the kernels (WGSL as a list of lines, work-group size, storage bindings; `variants`: the WGSL of the
variants where it differs), the buffers, each call's work-group counts and bound buffers, the I/O and weight tables,
the expected safetensors header, the kernel variants with the adapters and features each needs (`plan_variants`:
model.js runs the first the adapter can, and reports which) and the device limits the model needs (`limits`; the
ones above WebGPU's defaults are requested: `requestLimits`).
tgc's Python runtime for these artifacts (`runtimes/artifact_webgpu.py`, `read_plan`) reads the plan back out of
model.js, so it runs exactly the WGSL and buffer plan a browser runs.

Buffers (one GPUBuffer each; WebGPU validates usage per whole buffer, so intermediates are not sub-ranges of one
arena): inputs, outputs, weights, states (`--max-context`: a KV cache the model keeps from one run to the next, a
buffer of its capacity each, zeroed when created and shared with nothing), then the slots of
`codegen.memory.plan_slots` (intermediates whose lifetimes do not overlap share a slot). The plan's `states` say
which buffer holds each state, its capacity and the size that is its length: model.js
(templates/webgpu/states.js.tmpl) holds that size itself instead of reading it off the inputs, and refuses a run
that would pass the capacity. Sizes are rounded up to 16 bytes (at least 16: a kernel may read any of them as
array<vec4<...>>). Element layout on the device is the
host's little-endian layout (sub-32-bit types are packed 4 or 2 per u32 word, which is their byte layout) except
int64/uint64 and float64, which the webgpu lowering narrows to 32-bit words (`codegen.compiled.artifact_renderer`):
the loader narrows them on upload (integer values must fit in 32 bits; float64 is rounded to float32) and widens
them on download. A kernel binding an output as
`array<atomic<u32>>` (packed sub-32-bit stores by atomicOr) needs it zeroed first: the call lists it in `clear`."""
from __future__ import annotations
import dataclasses
import html
import json
import math
import struct

import numpy as np

from tgc.ir.sint import dims_text, evaluate, highest, is_static, simplified, sint
from tgc.codegen.compiled import BufferInfo, BufferKind, CompiledModel, Variant
from tgc.codegen.lower import KernelProgram
from tgc.codegen.names import comment_safe
from tgc.codegen.memory import plan_slots
from tgc.codegen.target import TargetLimitError
from tgc.emit.bundle import bundle_start, launch_sizes, write_bundle
from tgc.emit.common import fill, numpy_name, read_template, sha256, tgc_version
from tgc.emit import npm
from tgc.emit.manifest import build_manifest, rows_entry
from tgc.emit.weights import WeightsFile

WEIGHTS_FILE = "weights.safetensors"
SOURCE_FILES = ("model.js", "model.d.ts", "index.html")
PACKAGE_FILE = "package.json"
PLAN_BEGIN, PLAN_END = "// tgc:plan begin", "// tgc:plan end"
PLAN_FORMAT = 2
NARROWED = {"int64": "int32", "uint64": "uint32", "float64": "float32"}   # host dtype -> device type (WGSL: no 64-bit)
JS_ARRAYS = {"float32": "Float32Array", "float16": "Uint16Array", "int32": "Int32Array", "uint32": "Uint32Array",
             "int64": "BigInt64Array", "uint64": "BigUint64Array", "int16": "Int16Array", "uint16": "Uint16Array",
             "int8": "Int8Array", "uint8": "Uint8Array", "bool": "Uint8Array", "float64": "Float64Array"}
# WebGPU's default limits (what a device has when nothing more is requested), by the JS name of the limit
DEFAULT_LIMITS = {"maxStorageBuffersPerShaderStage": 8, "maxStorageBufferBindingSize": 134217728,
                  "maxBufferSize": 268435456, "maxComputeWorkgroupsPerDimension": 65535,
                  "maxComputeInvocationsPerWorkgroup": 256, "maxComputeWorkgroupSizeX": 256,
                  "maxComputeWorkgroupSizeY": 256, "maxComputeWorkgroupSizeZ": 64,
                  "maxComputeWorkgroupStorageSize": 16384}
PRETTY_WIDTH = 116
BLOCK_BYTES = 4 << 20    # model.js checks the weights' sha256 per block of this many bytes (as they stream in)


def _limit(detail: str) -> TargetLimitError: return TargetLimitError("webgpu", detail)


def buffer_size(n: int) -> int:
  """GPUBuffer bytes for n bytes of data: a multiple of 16 (kernels may read a buffer as array<vec4<...>>)."""
  return max(16, (n + 15) // 16 * 16)


def device_nbytes(b: BufferInfo) -> int:
  """Bytes of `b` on the device: 64-bit integers and floats are narrowed to 32-bit words."""
  return b.nbytes // 2 if numpy_name(b.dtype) in NARROWED else b.nbytes


def js_array(dtype: str) -> str:
  """The TypedArray class that holds a tensor of numpy dtype `dtype` in JS."""
  if dtype not in JS_ARRAYS: raise _limit(f"tensors of dtype {dtype} have no JS representation")
  return JS_ARRAYS[dtype]


def workgroup_counts(k: KernelProgram) -> list[sint]:
  """Work-groups per dimension (global / local; an `ir.sint` expression where a size is known only at run time)."""
  glob, loc = launch_sizes(k)
  if is_static(k.global_size): return [g // s for g, s in zip(glob, loc)]
  return [simplified(g // s) if not is_static(g) else g // s for g, s in zip(k.global_size, loc)]


def _workgroups(k: KernelProgram) -> list:
  """The plan's work-groups per dimension: ints, or size text that the loaders evaluate for a run's sizes."""
  return dims_text(workgroup_counts(k))


def bindings(k: KernelProgram) -> list[list]:
  """A kernel's storage bindings as the plan lists them: [binding index, read-only, atomic (zero it first)]."""
  return [[p.index, not p.mutable, p.atomic] for p in k.params]


def slot_plan(cm: CompiledModel) -> tuple[dict[int, int], list[int]]:
  """Arena buffer index -> slot, and the slots' sizes in device bytes (whole buffers shared by intermediates of
  disjoint lifetimes)."""
  calls = [[cm.buffers[i].index for i in c.buffers if cm.buffers[i].kind is BufferKind.ARENA] for c in cm.calls]
  return plan_slots(calls, {b.index: buffer_size(device_nbytes(b)) for b in cm.of_kind(BufferKind.ARENA)})


def weight_parts(data: bytes, chunk_bytes: int | None) -> list[dict]:
  """The files the weights are served as: the weights file whole, or (`chunk_bytes`) parts of at most that many
  bytes (`weights.safetensors.000`, ...), which model.js fetches in order as one stream."""
  if not chunk_bytes or chunk_bytes >= len(data): return [{"file": WEIGHTS_FILE, "bytes": len(data)}]
  return [{"file": f"{WEIGHTS_FILE}.{i // chunk_bytes:03d}", "bytes": len(data[i:i + chunk_bytes])}
          for i in range(0, len(data), chunk_bytes)]


def build_plan(cm: CompiledModel, weights: WeightsFile, chunk_bytes: int | None = None) -> dict:
  """The plan model.js runs (see the module docstring); `chunk_bytes`: see `weight_parts`."""
  slot_of, slot_sizes = slot_plan(cm)
  buffers: list[dict] = []
  where: dict[int, int] = {}       # CompiledModel buffer index -> plan buffer index
  for kind in (BufferKind.INPUT, BufferKind.OUTPUT, BufferKind.WEIGHT, BufferKind.STATE):
    for i, b in enumerate(cm.buffers):
      if b.kind != kind: continue
      where[i] = len(buffers)
      buffers.append({"label": f"{kind} {b.symbol}", "size": buffer_size(device_nbytes(b))})
  first_slot = len(buffers)
  buffers += [{"label": f"slot {s}", "size": size} for s, size in enumerate(slot_sizes)]
  for i, b in enumerate(cm.buffers):
    if b.kind is BufferKind.ARENA: where[i] = first_slot + slot_of[b.index]
  position = {id(b): i for i, b in enumerate(cm.buffers)}
  stored = {t.name: t for t in weights.tensors}

  def tensor(b: BufferInfo) -> dict:
    dtype = numpy_name(b.dtype)
    js_array(dtype)
    return {"name": b.name, "shape": dims_text(b.shape), "dtype": dtype, "nbytes": b.nbytes,
            "buffer": where[position[id(b)]]}

  kernels: list[dict] = []
  kernel_index: dict[str, int] = {}
  for name, k in cm.kernels.items():
    kernel_index[name] = len(kernels)
    kernels.append({"name": name, "workgroupSize": [int(s) for s in k.local_size], "bindings": bindings(k),
                    **({"sizes": [list(cm.dims).index(v) for v in k.variables]} if k.variables else {}),
                    "wgsl": k.src.rstrip("\n").split("\n")})
    other = {v: progs[name].src.rstrip("\n").split("\n") for v, progs in cm.variants.items() if name in progs}
    if other: kernels[-1]["variants"] = other
  calls = []
  for c in cm.calls:
    k = kernels[kernel_index[c.kernel]]
    args = []
    for index, _, _ in k["bindings"]:
      if index >= len(c.buffers): raise ValueError(f"kernel {c.kernel}: binding {index} has no buffer in the call")
      args.append(where[c.buffers[index]])
    clear = [where[c.buffers[index]] for index, _, atomic in k["bindings"] if atomic]
    calls.append({"kernel": kernel_index[c.kernel], "workgroups": _workgroups(cm.kernels[c.kernel]), "args": args,
                  "clear": clear, "nodes": [str(o) for o in c.nodes]})
  return {"format": PLAN_FORMAT, "name": cm.name, "tgcVersion": tgc_version(), "weightsFile": WEIGHTS_FILE,
          **({"dims": [{"name": n, "min": lo, "max": hi} for n, (lo, hi) in cm.dims.items()]} if cm.dims else {}),
          "weightsBytes": len(weights.data), "weightsSha256": sha256(weights.data), **weight_blocks(weights.data),
          "weightsParts": weight_parts(weights.data, chunk_bytes),
          "header": weights.header[8:].decode("ascii"),
          "inputs": [tensor(b) for b in cm.inputs], "outputs": [{**tensor(b), **rows_entry(cm, b)} for b in cm.outputs],
          **({"states": [state_entry(tensor(b), st) for b, st in zip(cm.of_kind(BufferKind.STATE), cm.states)]}
             if cm.states else {}),
          "weights": [{**tensor(b), "offset": stored[b.name].offset} for b in cm.of_kind(BufferKind.WEIGHT)],
          "buffers": buffers, "kernels": kernels, "calls": calls, "variants": plan_variants(cm),
          "limits": (limits := required_limits(cm, buffers, kernels, calls)),
          "requestLimits": {k: v for k, v in limits.items() if v > DEFAULT_LIMITS[k]}}


def state_entry(tensor: dict, st) -> dict:
  """The plan's entry of a state (`frontend.jit.StateSpec`): its buffer's tensor entry (`shape`: its capacity) with
  the output it stands for, the axis it grows along, its capacity there, the size that is its length and the size
  text of its length after a run."""
  return {**tensor, "output": st.output, "axis": st.axis, "capacity": st.shape[st.axis], "length": st.length.arg[0],
          "grown": dims_text([st.grown])[0]}


def weight_blocks(data: bytes) -> dict:
  """The sha256 of each block of the weights file (`weightsBlocks`, blocks of `weightsBlockBytes`, a multiple of
  16 that holds the whole header): model.js checks each block as it arrives instead of hashing the whole file at
  the end, so the check needs neither the whole file in memory nor time after the last byte."""
  size = BLOCK_BYTES * max(1, -(-struct.unpack_from("<Q", data)[0] // BLOCK_BYTES))
  return {"weightsBlockBytes": size, "weightsBlocks": [sha256(data[i:i + size]) for i in range(0, len(data), size)]}


def plan_variants(cm: CompiledModel) -> list[dict]:
  """The kernel sets model.js chooses from when it loads, in order of preference (codegen.compiled
  `variant_targets`): it runs the first whose features the adapter has and whose `adapters` it is ("hardware": not
  a fallback adapter such as SwiftShader; "any"). A variant with workgroup tiles ("gpu", "gpu-f16") is for hardware
  adapters when the same kernels without tiles ("cpu", "cpu-f16") follow; f16 variants need "shader-f16" and fall
  back to float32 ones; a kernel a variant leaves unchanged is the main one. A variant with a quick companion names
  it (`quick`: its kernels run first while the variant's own compile; a kernel it leaves unchanged is the
  variant's)."""
  targets = cm.variant_targets or {Variant.of(cm.target): cm.target}
  out = []
  for name, t in targets.items():
    if name.quick: continue
    progs = {**cm.kernels, **cm.variants.get(name, {})}
    untiled = Variant.of(dataclasses.replace(t, workgroup_tiles=False))
    hardware = t.workgroup_tiles and untiled is not name and untiled in targets
    quick = Variant.of(dataclasses.replace(t, register_blocks=False))
    out.append({"name": name, "features": sorted({f for k in progs.values() for f in k.features}),
                "adapters": "hardware" if hardware else "any",
                **({"quick": quick} if quick is not name and quick in targets else {})})
  return out


def required_limits(cm: CompiledModel, buffers: list[dict], kernels: list[dict], calls: list[dict]) -> dict:
  """The device limits the plan needs, by their JS names. Only those above WebGPU's defaults are requested."""
  need = {"maxStorageBuffersPerShaderStage": max([len(k["bindings"]) for k in kernels] + [0]),
          "maxStorageBufferBindingSize": max([buffers[a]["size"] for c in calls for a in c["args"]] + [0]),
          "maxBufferSize": max([b["size"] for b in buffers] + [0]),
          "maxComputeWorkgroupsPerDimension": max([highest(n) for c in cm.calls
                                                   for n in workgroup_counts(cm.kernels[c.kernel])] + [0]),
          "maxComputeInvocationsPerWorkgroup": max([math.prod(k["workgroupSize"]) for k in kernels] + [0]),
          "maxComputeWorkgroupStorageSize": max([k.shared_bytes for progs in [cm.kernels, *cm.variants.values()]
                                                 for k in progs.values()] + [0])}
  for axis, dim in zip("XYZ", range(3)):
    need[f"maxComputeWorkgroupSize{axis}"] = max([k["workgroupSize"][dim] for k in kernels] + [0])
  return {name: need[name] for name in DEFAULT_LIMITS}


def pretty(value, indent: int = 0) -> str:
  """JSON (valid JS) that keeps a container on one line when it fits in PRETTY_WIDTH columns, else puts one item
  per line; deterministic and ASCII only."""
  flat = json.dumps(value, ensure_ascii=True, separators=(", ", ": "))
  if len(flat) + indent <= PRETTY_WIDTH or not isinstance(value, (dict, list)) or not value: return flat
  pad = " " * (indent + 2)
  if isinstance(value, dict):
    items = [f"{pad}{json.dumps(k, ensure_ascii=True)}: {pretty(v, indent + 2)}" for k, v in value.items()]
    return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
  return "[\n" + ",\n".join(pad + pretty(v, indent + 2) for v in value) + "\n" + " " * indent + "]"


def plan_block(plan: dict) -> str:
  """The plan as model.js holds it; `</` is written `<\\/` (the same JSON string) so that the module can be inlined
  into a <script> element."""
  text = pretty(plan).replace("</", "<\\/")
  return f"{PLAN_BEGIN}\nconst PLAN = {text};\n{PLAN_END}\n"


def _ts_types(plan: dict) -> dict[str, str]:
  """model.d.ts's input and output fields and names (inputs of a model with sizes known only at run time: {data,
  shape}, as outputs are)."""
  sized = bool(plan.get("dims"))

  def fields(tensors: list[dict], output: bool) -> str:
    lines = []
    for t in tensors:
      arr = js_array(t["dtype"])
      kind = f"{{ data: {arr}; shape: number[] }}" if output or sized else arr
      lines.append(f"  /** {t['dtype']}{t['shape']} */\n  {json.dumps(t['name'], ensure_ascii=True)}: {kind};")
    return "\n".join(lines)
  names = " | ".join(json.dumps(t["name"], ensure_ascii=True) for t in plan["inputs"]) or "never"
  out_names = " | ".join(json.dumps(t["name"], ensure_ascii=True) for t in plan["outputs"]) or "never"
  return {"input_fields": fields(plan["inputs"], False), "output_fields": fields(plan["outputs"], True),
          "input_names": names, "output_names": out_names}


# model.js's placeholders for sizes known only at run time: empty (or the text of fixed shapes) for a model without
# them, so that its model.js stays as it was; templates/webgpu/dims.js.tmpl is the code a model with them adds
FIXED_SIZES = {"sizes_layouts": "", "sizes_buffer": "", "call_fields": "", "sizes_part": "", "execute_sizes": "",
               "set_sizes_group": "", "call_workgroups": "call.workgroups", "sized_output": "t",
               "prepare_inputs": "prepareInputs", "copy_inputs": "inputs.map((data) => data.slice())",
               "dims_block": "", "sizes_doc": "", "spec_dim": "number", "dims_api": "", "dims_types": "",
               "demo_specs": "SPECS", "demo_sizes": "", "demo_feeds": "feeds", "demo_output_shape": "o.shape"}
# model.js's and model.d.ts's placeholders for states kept from one run to the next, empty for a model without them;
# templates/webgpu/states.js.tmpl is the code a model with them adds
NO_STATES = {"instance_states": "", "state_api": "", "state_types": ""}
STATE_VALUES = {
  "instance_states": "\n  const held = new HeldSizes();       // the entries the states hold",
  "state_api": ",\n    states: STATES, get stateLength() { return held.length; }, resetState: (length = 0) => "
               "held.reset(length),\n    readState: (i) => (released ? Promise.reject(fail(\"readState() after "
               "dispose()\"))\n                                : readState(device, buffers, held, i, tail))",
  "prepare_inputs": "held.accept"}
# dims.js's placeholders for the sizes a model holds itself (its states' lengths: run() does not read them off the
# inputs' shapes)
NOT_HELD = {"held_param": "", "held_seed": "{}", "held_doc": ""}
HELD = {"held_param": ", held", "held_seed": "{ ...held }",
        "held_doc": "\n// `held`: the sizes the model tracks itself (its states' lengths), by name."}
RUN_TIME_SIZES = {
  "sizes_layouts": ", ...sizesLayouts(device, k)",
  "sizes_buffer": "\n  const sizes = { buffer: createBuffer(\"sizes\", SIZE_STRIDE * PLAN.dims.length, "
                  "BUFFER_UNIFORM | BUFFER_COPY_DST),\n                  key: null, sized: null };",
  "call_fields": "\n      index: PLAN.calls.indexOf(c),\n"
                 "      sizesGroup: sizesGroup(device, kernels[c.kernel], c, sizes.buffer),",
  "sizes_part": ", sizes", "execute_sizes": "\n    const sized = applySizes(device, sizes, inputs.sizes);",
  "set_sizes_group": "\n          if (call.sizesGroup) pass.setBindGroup(1, call.sizesGroup);",
  "call_workgroups": "sized.workgroups[call.index]", "sized_output": "sized.outputs[i]",
  "prepare_inputs": "prepareSized",
  "copy_inputs": "Object.assign(inputs.map((data) => data.slice()), { sizes: inputs.sizes })",
  "dims_api": ", dims: DIMS",
  "dims_types": "  /** The sizes known only at run time and their ranges (a state's length among them). */\n"
                "  readonly dims: readonly { readonly name: string; readonly min: number; readonly max: number }[];\n"}


def _sizes_values(cm: CompiledModel) -> dict[str, str]:
  """The values of model.js's (and model.d.ts's) run-time size and state placeholders."""
  if not cm.dims: return {**FIXED_SIZES, **NO_STATES}
  held = cm.state_lengths
  ranges = ", ".join(f"{name} {lo}..{hi}" for name, (lo, hi) in cm.dims.items() if name not in held)
  doc = (f"\n\n/** Sizes known only at run time ({ranges}): each input of run() is {{data, shape}} with its shape, off "
         "which run()\n * reads the sizes (an Error names the input and dimension when a size is out of its range "
         "or the shapes\n * disagree); the TensorSpec shapes name the sizes in size text (\"T\", \"(T*8)\"); "
         "outputs carry the shapes of the run." + _held_doc(cm) + " */")
  dims_block = fill(read_template("webgpu", "dims.js.tmpl"), HELD if cm.states else NOT_HELD,
                    "templates/webgpu/dims.js.tmpl")
  if cm.states: dims_block += read_template("webgpu", "states.js.tmpl")
  return {**RUN_TIME_SIZES, "dims_block": dims_block, "sizes_doc": doc, "spec_dim": "(number | string)",
          **_demo_sizes(cm), **(_state_values(cm) if cm.states else NO_STATES)}


def _held_doc(cm: CompiledModel) -> str:
  """model.d.ts's words on the sizes a model with states holds itself (empty without states)."""
  if not cm.states: return ""
  return (f"\n * {', '.join(sorted(cm.state_lengths))}: the entries the model's states hold (Model.stateLength), "
          "a size the model\n * tracks itself, not one the inputs give.")


def _state_values(cm: CompiledModel) -> dict[str, str]:
  """model.js's and model.d.ts's state placeholders for a model with states."""
  arrays = " | ".join(dict.fromkeys(js_array(numpy_name(st.dtype)) for st in cm.states))
  types = ("  /** The states the model keeps from one run to the next (a KV cache), each in place of a model input "
           "(`name`)\n   * and output (`output`): a buffer of `shape`, `capacity` entries along `axis`. */\n"
           "  readonly states: readonly { readonly name: string; readonly output: string; readonly capacity: number;\n"
           "                              readonly shape: readonly number[]; readonly dtype: string; "
           "readonly axis: number }[];\n"
           "  /** Entries the states hold: 0 after load, grown by each run (a run that would pass the capacity is "
           "refused). */\n"
           "  readonly stateLength: number;\n"
           "  /** Keep the first `length` entries of every state (default 0: start a new sequence); throws when they "
           "hold fewer. */\n"
           "  resetState(length?: number): void;\n"
           "  /** State i's held entries (C order) once the runs started before the call are done (tests, debugging). "
           "*/\n"
           f"  readState(i: number): Promise<{{ data: {arrays}; shape: number[] }}>;\n")
  return {**STATE_VALUES, "state_types": types}


def _demo_sizes(cm: CompiledModel) -> dict[str, str]:
  """index.html's placeholders for a model with sizes known only at run time: the page runs it at the largest sizes
  (its inputs' shapes worked out here), each input given to run() as {data, shape}; a model with states from empty
  states (reset before each run)."""
  largest = {name: 0 if name in cm.state_lengths else hi for name, (_, hi) in cm.dims.items()}
  shapes = [[evaluate(s, largest) for s in b.shape] for b in cm.inputs]
  block = (f"// sizes known only at run time: the page runs the model at the largest ones "
           f"({', '.join(f'{k}={v}' for k, v in largest.items())}{', from empty states' if cm.states else ''})\n"
           f"const SPECS = SIZED_SPECS.map((s, i) => ({{ ...s, shape: {json.dumps(shapes)}[i] }}));\n"
           "const sized = (feeds) => Object.fromEntries(SPECS.map((s) => [s.name, { data: feeds[s.name], "
           "shape: s.shape }]));\n")
  if cm.states: block += "const fresh = (feeds) => { model.resetState(); return sized(feeds); };\n"
  return {"demo_specs": "SIZED_SPECS", "demo_sizes": block,
          "demo_feeds": "fresh(feeds)" if cm.states else "sized(feeds)", "demo_output_shape": "outputs[o.name].shape"}


def _check_narrow_weights(cm: CompiledModel) -> None:
  """64-bit integer weights become 32-bit words on the device: every value must fit."""
  for b in cm.of_kind(BufferKind.WEIGHT):
    words = {"int64": np.int32, "uint64": np.uint32}.get(numpy_name(b.dtype))
    data = np.asarray(cm.weights[b.name])
    if words is None or not data.size: continue
    info = np.iinfo(words)
    if data.min() < info.min or data.max() > info.max:
      raise _limit(f"weight {b.name!r} ({numpy_name(b.dtype)}) holds values outside the 32-bit range "
                       f"[{info.min}, {info.max}]; WGSL computes {numpy_name(b.dtype)} as 32-bit words")


def webgpu_sources(cm: CompiledModel, npm_name: str | None = None, npm_version: str | None = None,
                   weight_chunk_mb: float | None = None) -> tuple[dict[str, bytes], dict]:
  """Every file of the bundle but the manifest, and the manifest."""
  sym, weights = bundle_start(cm, "webgpu", _check_narrow_weights)
  chunk = chunk_bytes(weight_chunk_mb)
  plan = build_plan(cm, weights, chunk)
  parts = plan["weightsParts"]
  values = {"model_comment": comment_safe(cm.name), "version": tgc_version(), "plan": plan_block(plan),
            "model_html": html.escape(cm.name), "weights_file": WEIGHTS_FILE, **_ts_types(plan), **_sizes_values(cm)}
  files = {name: fill(read_template("webgpu", f"{name}.tmpl"), values, f"templates/webgpu/{name}.tmpl").encode()
           for name in SOURCE_FILES}
  start = 0
  for part in parts:
    files[part["file"]] = weights.data[start:start + part["bytes"]]
    start += part["bytes"]
  package = npm.check_package_name(npm_name) if npm_name else npm.default_package_name(cm.name)
  files[PACKAGE_FILE] = npm.package_json(package, npm.check_version(npm_version or npm.DEFAULT_VERSION), cm.name,
                                         tgc_version(), [*files, "manifest.json"], [p["file"] for p in parts])
  kernel_args = {}
  for name, k in cm.kernels.items():
    call = next(c for c in cm.calls if c.kernel == name)
    kernel_args[name] = [{"index": p.index, "dtype": numpy_name(cm.buffers[call.buffers[p.index]].dtype),
                          "mutable": p.mutable} for p in k.params]
  info = {"module": "model.js", "types": "model.d.ts", "demo": "index.html", "api": "load(weights, {device})",
          "renderer": cm.meta.get("renderer", "webgpu"), "kernel_source": "inline in model.js (the plan block)",
          "plan_markers": [PLAN_BEGIN, PLAN_END], "variants": plan["variants"],
          "limits_requested": plan["requestLimits"], "limits_needed": plan["limits"],
          "int64": "narrowed to 32-bit words on the device",
          "float64": "stored and computed as float32 on the device",
          "float16": "stored packed, computed in f16 by the -f16 variants (shader-f16), else in f32",
          "precision": cm.target.precision,
          "buffers": f"one GPUBuffer per input, output, weight{', state' if cm.states else ''} and slot",
          "slot_buffers": slot_plan(cm)[1],
          "npm_package": {"name": package, "version": npm.check_version(npm_version or npm.DEFAULT_VERSION)},
          "download_bytes": download_bytes(plan, files)}
  manifest = build_manifest(cm, sym, weights, WEIGHTS_FILE, False, kernel_args, files, info)
  if len(parts) > 1: manifest["weights"]["parts"] = [{"file": p["file"], "nbytes": p["bytes"]} for p in parts]
  return files, manifest


def chunk_bytes(weight_chunk_mb: float | None) -> int | None:
  """Bytes per weights part for --weight-chunk-mb (MiB; None: one file); a multiple of 16, at least 16."""
  if weight_chunk_mb is None: return None
  if not weight_chunk_mb > 0: raise ValueError(f"the weight chunk size must be positive, not {weight_chunk_mb}")
  return max(16, int(weight_chunk_mb * (1 << 20)) // 16 * 16)


def download_bytes(plan: dict, files: dict[str, bytes]) -> dict:
  """What a page that runs the model downloads: model.js (the WGSL of every kernel variant inline: `wgsl`, and of
  the variant a software adapter runs: `wgsl_cpu`) and the weights; `total` is model.js plus the weights."""
  def wgsl(variant: Variant | None) -> int:
    return sum(len("\n".join((k.get("variants", {}).get(variant) if variant else None) or k["wgsl"]).encode())
               for k in plan["kernels"])
  every = sum(len("\n".join(lines).encode()) for k in plan["kernels"]
              for lines in [k["wgsl"], *k.get("variants", {}).values()])
  js, weights = len(files["model.js"]), sum(len(files[p["file"]]) for p in plan["weightsParts"])
  return {"js": js, "wgsl": every, "wgsl_cpu": wgsl(Variant.CPU), "weights": weights, "total": js + weights}


def write_webgpu_bundle(cm: CompiledModel, out_dir: str, npm_name: str | None = None, npm_version: str | None = None,
                        weight_chunk_mb: float | None = None) -> list[str]:
  """Write the bundle into the existing empty folder `out_dir`; manifest.json last. Returns the paths written.
  `npm_name`/`npm_version`: the name and version of its package.json (default: from the model's name, 1.0.0);
  `weight_chunk_mb`: the weights as parts of at most that many MiB instead of one file (hosts with a size limit)."""
  return write_bundle(out_dir, lambda: webgpu_sources(cm, npm_name, npm_version, weight_chunk_mb))
