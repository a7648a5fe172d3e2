"""The `opencl` bundle: `model.cl` (every kernel of the model in OpenCL C 1.2, helper lines once), `model.h` /
`model.c` (a C99 host library on the OpenCL 1.2 API: the kernel source embedded as strings and built at init, on
CPU devices such as PoCL the "cpu" kernel variant (without workgroup-memory tiles, where it differs; see
codegen.compiled); the weights uploaded once, intermediates as sub-buffers of one arena buffer or, when the
device's sub-buffer alignment exceeds the plan's, as whole buffers shared by slots of disjoint lifetimes, states (a
KV cache kept between runs) in device buffers of their own (emit.device_states), and a run function that copies the
inputs in, launches the kernels in order and copies the outputs out), `main.c` (the .npy
example program), `Makefile` (links -lOpenCL), `CMakeLists.txt` (the static library `tgc::<name>` on
OpenCL::OpenCL and the example; add_subdirectory or find_package), `weights.safetensors` and `manifest.json`.

The host code in templates/opencl is generic; what is model-specific reaches it as tables generated here (each
launch's kernel, sizes and argument buffers; weight tensors with their CRC-32; arena slots). Kernel arguments are
the renderer's parameters (`KernelProgram.params`, in signature order; a parameter the renderer dropped is not
bound), extensions its `features`. The tensor tables and header documentation are the C bundle's, so both APIs
describe tensors alike."""
from __future__ import annotations
import dataclasses

from tgc.codegen.compiled import BufferKind, CompiledModel, Variant
from tgc.codegen.memory import plan_slots
from tgc.emit.bundle import (WEIGHTS_FILE, Param, bundle_start, device_manifest, host_values, kernel_file,
                             kernel_params, launch_sizes, weight_rows, write_bundle)
from tgc.emit.c_io import io_declarations, run_io_body
from tgc.emit.c_literals import c_string
from tgc.emit.common import call_comment, fill, read_template
from tgc.emit.device_dims import device_main_values, dims_values
from tgc.emit.device_states import state_values
from tgc.emit.weights import WeightsFile

KERNEL_TEMPLATE = "model.cl.tmpl"
SOURCE_FILES = ("model.cl", "model.h", "model.c", "main.c", "Makefile", "CMakeLists.txt")
ARG_KINDS = {BufferKind.INPUT: "TG_INPUT", BufferKind.OUTPUT: "TG_OUTPUT", BufferKind.WEIGHT: "TG_WEIGHT",
             BufferKind.ARENA: "TG_SLOT", BufferKind.STATE: "TG_STATE"}
MAX_LITERAL = 1000     # bytes of kernel source per C string (C99 compilers need only support 4095)


def kernel_source(cm: CompiledModel, variant: Variant | None = None) -> str:
  """The text of model.cl: each prefix line once (first use order), then the kernels (`variant`: those of that
  kernel variant where they differ)."""
  if variant is None: return kernel_file(cm, KERNEL_TEMPLATE)
  return kernel_file(dataclasses.replace(cm, kernels={**cm.kernels, **cm.variants.get(variant, {})}), KERNEL_TEMPLATE)


def kernel_variants(cm: CompiledModel) -> list[dict]:
  """The kernel variants model.c picks from (codegen.compiled `variant_targets`), in order of preference: name, the
  extensions they need, whether CPU devices skip them (they stage operands in __local tiles and a variant without
  tiles follows), where their source is."""
  targets = cm.variant_targets or {Variant.of(cm.target): cm.target}
  out = []
  for i, (name, t) in enumerate(targets.items()):
    progs = {**cm.kernels, **cm.variants.get(name, {})}
    untiled = Variant.of(dataclasses.replace(t, workgroup_tiles=False))
    out.append({"name": name, "extensions": sorted({f for k in progs.values() for f in k.features}),
                "not_on_cpu": t.workgroup_tiles and untiled is not name and untiled in targets,
                "source": "model.cl" if i == 0 else "embedded in model.c (model.cl with the kernels that differ)"})
  return out


def _variant_tables(cm: CompiledModel, variants: list[dict]) -> dict[str, str]:
  """model.c's source arrays of the variants after the first (that one is tg_source, model.cl) and tg_variants."""
  arrays, rows = [], []
  for i, v in enumerate(variants):
    array = "tg_source" if i == 0 else f"tg_source_{i}"
    if i: arrays.append(f"static const char *const {array}[] = {{\n{source_strings(kernel_source(cm, v['name']))}"
                        f"\n}};")
    rows.append(f"  {{{c_string(v['name'])}, {array}, (cl_uint)(sizeof({array}) / sizeof({array}[0])), "
                f"{int('cl_khr_fp16' in v['extensions'])}, {int(v['not_on_cpu'])}}},")
  return {"variant_sources": "\n".join(arrays), "variant_table": "\n".join(rows)}


def source_strings(text: str) -> str:
  """`text` as the initializer lines of a `const char *[]`: a literal per line, long lines cut in pieces."""
  pieces = []
  for line in text.splitlines(keepends=True):
    pieces.extend(line[i:i + MAX_LITERAL] for i in range(0, len(line), MAX_LITERAL))
  return ",\n".join(f"  {c_string(p)}" for p in pieces) if pieces else '  ""'


def slot_buffers(cm: CompiledModel) -> tuple[dict[int, int], list[int]]:
  """For devices that cannot use sub-buffers at the plan's offsets: arena slot -> whole buffer, and the buffers'
  sizes; slots whose lifetimes do not overlap share a buffer."""
  calls = [[cm.buffers[i].index for i in c.buffers if cm.buffers[i].kind is BufferKind.ARENA] for c in cm.calls]
  return plan_slots(calls, {b.index: max(b.nbytes, 1) for b in cm.of_kind(BufferKind.ARENA)})


def _host_tables(cm: CompiledModel, params: dict[str, list[Param]], weights: WeightsFile,
                 slot_buffer: dict[int, int]) -> dict[str, str]:
  """The initializers of model.c's tables: weight tensors, arena slots (the states are buffers of their own: the
  arena starts after them), launches and their arguments."""
  rows = weight_rows(cm, weights)
  slots = [f"  {{{b.offset - cm.state_bytes}, {b.nbytes}, {slot_buffer[b.index]}}},  /* {b.symbol} */"
           for b in cm.of_kind(BufferKind.ARENA)]
  calls, args = [], []
  for n, c in enumerate(cm.calls):
    glob, loc = launch_sizes(cm.kernels[c.kernel])
    calls.append(f"{call_comment(cm, n)}  {{{c_string(c.kernel)}, {len(params[c.kernel])}, {len(args)}, "
                 f"{{{', '.join(map(str, glob))}}}, {{{', '.join(map(str, loc))}}}}},")
    for p in params[c.kernel]:
      if p.index >= len(c.buffers): raise ValueError(f"kernel {c.kernel}: parameter data{p.index} has no buffer")
      b = cm.buffers[c.buffers[p.index]]
      args.append(f"  {{{ARG_KINDS[b.kind]}, {b.index}}},")
  return {"weight_table": "\n".join(rows) or "  {0, 0, 0UL}", "slot_table": "\n".join(slots) or "  {0, 0, 0}",
          "call_table": "\n".join(calls) or '  {"", 0, 0, {1, 1, 1}, {1, 1, 1}}',
          "arg_table": "\n".join(args) or "  {TG_INPUT, 0}",
          "max_weight_bytes": str(max([b.nbytes for b in cm.of_kind(BufferKind.WEIGHT)] + [0]))}


def opencl_sources(cm: CompiledModel) -> tuple[dict[str, bytes], dict]:
  """Every file of the bundle but the manifest, and the manifest."""
  sym, weights = bundle_start(cm, "opencl")
  params = {name: kernel_params(k) for name, k in cm.kernels.items()}
  slot_buffer, buffer_bytes = slot_buffers(cm)
  cl_text = kernel_source(cm)
  counts = {"inputs": len(cm.inputs), "outputs": len(cm.outputs), "weights": len(cm.of_kind(BufferKind.WEIGHT)),
            "slots": len(cm.of_kind(BufferKind.ARENA)), "slot_buffers": len(buffer_bytes), "calls": len(cm.calls)}
  values = host_values(cm, sym, weights, counts)
  values["arena_bytes"] = str(cm.arena_bytes - cm.state_bytes)
  variants = kernel_variants(cm)
  values.update({"io_types": io_declarations(cm, sym), "run_io_body": run_io_body(cm, sym)})
  values.update({"slot_buffer_bytes": str(sum(buffer_bytes)), "source_strings": source_strings(cl_text),
                 "slot_buffer_table": ", ".join(map(str, buffer_bytes or [0]))})
  values.update(_variant_tables(cm, variants))
  values.update(_host_tables(cm, params, weights, slot_buffer))
  values.update(dims_values(cm, sym, params))
  values.update(state_values(cm, sym))
  values.update(device_main_values(cm, sym))
  files = {"model.cl": cl_text.encode("utf-8")}
  for name in SOURCE_FILES[1:]:
    files[name] = fill(read_template("opencl", f"{name}.tmpl"), values, f"templates/opencl/{name}.tmpl").encode()
  files[WEIGHTS_FILE] = weights.data
  extensions = sorted({f for v in variants for f in v["extensions"]})
  info = {"source": "model.c", "c_standard": "c99", "kernel_source": "model.cl", "kernel_source_embedded": True,
          "opencl_version": "1.2", "link_libraries": ["OpenCL"], "extensions": extensions,
          "weights_check": "crc32 per tensor", "slot_buffers": buffer_bytes,
          "kernel_variants": variants, "precision": cm.target.precision,
          "arena_placement": "sub-buffers of one arena buffer when CL_DEVICE_MEM_BASE_ADDR_ALIGN divides every slot "
                             "offset, else the slot_buffers (whole buffers shared by slots of disjoint lifetimes)"}
  if cm.states:
    info["state_placement"] = (f"a device buffer per state (its capacity, zeroed at init); the arena buffer holds the "
                               f"intermediates only, at the plan's offsets less the states' {cm.state_bytes} bytes")
  return files, device_manifest(cm, sym, weights, params, files, info)


def write_opencl_bundle(cm: CompiledModel, out_dir: str) -> list[str]:
  """Write the bundle into the existing empty folder `out_dir`; manifest.json last. Returns the paths written."""
  return write_bundle(out_dir, lambda: opencl_sources(cm))
