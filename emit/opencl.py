"""The `opencl` bundle: `model.cl` (every kernel of the model in OpenCL C 1.2, helper lines once), `model.h` /
`model.c` (a C99 host library on the OpenCL 1.2 API: the kernel source embedded as strings and built at init, the
weights uploaded once, intermediates as sub-buffers of one arena buffer or, when the device's sub-buffer alignment
exceeds the plan's, as whole buffers shared by slots of disjoint lifetimes, and a run function that copies the
inputs in, launches the kernels in order and copies the outputs out), `main.c` (the .npy example program),
`Makefile` (links -lOpenCL), `weights.safetensors` and `manifest.json`.

The host code in templates/opencl is generic; what is model-specific reaches it as tables generated here (each
launch's kernel, sizes and argument buffers; weight tensors with their CRC-32; arena slots). Kernel arguments are
read from the rendered signatures (`__global` `data<i>` parameters, in order; a parameter the renderer dropped is
not bound). The tensor tables and header documentation are the C bundle's, so both APIs describe tensors alike."""
from __future__ import annotations
import re

from tgc.codegen.compiled import CompiledModel
from tgc.codegen.lower import KernelProgram
from tgc.codegen.memory import plan_slots
from tgc.emit.c import (WEIGHTS_FILE, Param, bundle_start, device_manifest, host_values, kernel_file, weight_rows,
                        write_bundle)
from tgc.emit.c_literals import c_string
from tgc.emit.common import call_comment, fill, read_template
from tgc.emit.weights import WeightsFile

SOURCE_FILES = ("model.cl", "model.h", "model.c", "main.c", "Makefile")
ARG_KINDS = {"input": "TG_INPUT", "output": "TG_OUTPUT", "weight": "TG_WEIGHT", "arena": "TG_SLOT"}
PARAM = re.compile(r"^__global\s+((?:const\s+)?[A-Za-z_][A-Za-z0-9_ ]*?)\s*\*\s*(?:restrict\s+)?data(\d+)$")
MAX_LITERAL = 1000     # bytes of kernel source per C string (C99 compilers need only support 4095)


def _code(function: str) -> str:
  """The kernel function without its heading comment lines."""
  return "\n".join(line for line in function.split("\n") if not line.startswith("//"))


def kernel_params(k: KernelProgram) -> list[Param]:
  """The parameters of a rendered OpenCL kernel, in signature order; each must be a `__global` buffer `data<i>`."""
  head = _code(k.function).split("{", 1)[0]
  match = re.search(rf"\bvoid {re.escape(k.name)}\((.*)\)\s*$", head, re.S)
  if not head.lstrip().startswith("__kernel") or match is None:
    raise ValueError(f"kernel {k.name}: unexpected OpenCL signature {head.strip()!r}")
  params = []
  for text in (p.strip() for p in match.group(1).split(",") if p.strip()):
    m = PARAM.match(text)
    if m is None: raise ValueError(f"kernel {k.name}: parameter {text!r} is not a __global buffer data<i>")
    params.append(Param(int(m.group(2)), m.group(1).strip()))
  return params


def kernel_source(cm: CompiledModel) -> str:
  """The text of model.cl: each prefix line once (first use order), then the kernels."""
  return kernel_file(cm, "opencl")


def source_strings(text: str) -> str:
  """`text` as the initializer lines of a `const char *[]`: a literal per line, long lines cut in pieces."""
  pieces = []
  for line in text.splitlines(keepends=True):
    pieces.extend(line[i:i + MAX_LITERAL] for i in range(0, len(line), MAX_LITERAL))
  return ",\n".join(f"  {c_string(p)}" for p in pieces) if pieces else '  ""'


def slot_buffers(cm: CompiledModel) -> tuple[dict[int, int], list[int]]:
  """For devices that cannot use sub-buffers at the plan's offsets: arena slot -> whole buffer, and the buffers'
  sizes; slots whose lifetimes do not overlap share a buffer."""
  calls = [[cm.buffers[i].index for i in c.buffers if cm.buffers[i].kind == "arena"] for c in cm.calls]
  return plan_slots(calls, {b.index: max(b.nbytes, 1) for b in cm.of_kind("arena")})


def _launch(k: KernelProgram) -> tuple[list[int], list[int]]:
  glob, loc = [int(g) for g in k.global_size], [int(s) for s in k.local_size]
  if len(glob) != 3 or len(loc) != 3 or any(s < 1 or g % s for g, s in zip(glob, loc)):
    raise ValueError(f"kernel {k.name}: global size {glob} is not a multiple of local size {loc}")
  return glob, loc


def _host_tables(cm: CompiledModel, params: dict[str, list[Param]], weights: WeightsFile,
                 slot_buffer: dict[int, int]) -> dict[str, str]:
  """The initializers of model.c's tables: weight tensors, arena slots, launches and their arguments."""
  rows = weight_rows(cm, weights)
  slots = [f"  {{{b.offset}, {b.nbytes}, {slot_buffer[b.index]}}},  /* {b.symbol} */" for b in cm.of_kind("arena")]
  calls, args = [], []
  for n, c in enumerate(cm.calls):
    glob, loc = _launch(cm.kernels[c.kernel])
    calls.append(f"{call_comment(cm, n)}  {{{c_string(c.kernel)}, {len(params[c.kernel])}, {len(args)}, "
                 f"{{{', '.join(map(str, glob))}}}, {{{', '.join(map(str, loc))}}}}},")
    for p in params[c.kernel]:
      if p.index >= len(c.buffers): raise ValueError(f"kernel {c.kernel}: parameter data{p.index} has no buffer")
      b = cm.buffers[c.buffers[p.index]]
      args.append(f"  {{{ARG_KINDS[b.kind]}, {b.index}}},")
  return {"weight_table": "\n".join(rows) or "  {0, 0, 0UL}", "slot_table": "\n".join(slots) or "  {0, 0, 0}",
          "call_table": "\n".join(calls) or '  {"", 0, 0, {1, 1, 1}, {1, 1, 1}}',
          "arg_table": "\n".join(args) or "  {TG_INPUT, 0}",
          "max_weight_bytes": str(max([b.nbytes for b in cm.of_kind("weight")] + [0]))}


def opencl_sources(cm: CompiledModel) -> tuple[dict[str, bytes], dict]:
  """Every file of the bundle but the manifest, and the manifest."""
  sym, weights = bundle_start(cm, "opencl", "OpenCL")
  params = {name: kernel_params(k) for name, k in cm.kernels.items()}
  slot_buffer, buffer_bytes = slot_buffers(cm)
  cl_text = kernel_source(cm)
  counts = {"inputs": len(cm.inputs), "outputs": len(cm.outputs), "weights": len(cm.of_kind("weight")),
            "slots": len(cm.of_kind("arena")), "slot_buffers": len(buffer_bytes), "calls": len(cm.calls)}
  values = host_values(cm, sym, weights, counts)
  values.update({"slot_buffer_bytes": str(sum(buffer_bytes)), "source_strings": source_strings(cl_text),
                 "slot_buffer_table": ", ".join(map(str, buffer_bytes or [0]))})
  values.update(_host_tables(cm, params, weights, slot_buffer))
  files = {"model.cl": cl_text.encode("utf-8")}
  for name in SOURCE_FILES[1:]:
    files[name] = fill(read_template("opencl", f"{name}.tmpl"), values, f"templates/opencl/{name}.tmpl").encode()
  files[WEIGHTS_FILE] = weights.data
  fp64 = any("cl_khr_fp64" in line for k in cm.kernels.values() for line in k.prefix)
  info = {"source": "model.c", "c_standard": "c99", "kernel_source": "model.cl", "kernel_source_embedded": True,
          "opencl_version": "1.2", "link_libraries": ["OpenCL"], "extensions": ["cl_khr_fp64"] if fp64 else [],
          "weights_check": "crc32 per tensor", "slot_buffers": buffer_bytes,
          "arena_placement": "sub-buffers of one arena buffer when CL_DEVICE_MEM_BASE_ADDR_ALIGN divides every slot "
                             "offset, else the slot_buffers (whole buffers shared by slots of disjoint lifetimes)"}
  return files, device_manifest(cm, sym, weights, params, files, info)


def write_opencl_bundle(cm: CompiledModel, out_dir: str) -> list[str]:
  """Write the bundle into the existing empty folder `out_dir`; manifest.json last. Returns the paths written."""
  return write_bundle(out_dir, lambda: opencl_sources(cm))
