"""The `metal` bundle: `model.metal` (every kernel of the model in Metal Shading Language, helper lines once),
`model.h` / `model.m` (a C API implemented in Objective-C with ARC on the Metal framework: the kernel source embedded
as strings and compiled at init, or a prebuilt `model.metallib`; a compute pipeline state per kernel; the weights file
copied once into one buffer, the intermediates in one arena buffer at the memory plan's offsets, both bound with
setBuffer:offset:atIndex:; a run function that encodes every launch into one command buffer), `main.c` (the .npy
example program, plain C), `Makefile` (xcrun metal/metallib, clang -fobjc-arc, -framework Metal -framework
Foundation), `weights.safetensors` and `manifest.json`.

The host code in templates/metal is generic; what is model-specific reaches it as tables generated here (the
kernels, each launch's threadgroups and its buffers with binding index and byte offset, weight tensors with their
CRC-32). Kernel parameters are the renderer's (`KernelProgram.params`: `device` pointers `data<i> [[buffer(i)]]`, in
order; a parameter the renderer dropped is not bound). `launches` is the same plan as data: the Python runner
(runtimes/artifact_metal.py) reads it from the manifest. The tensor tables, header documentation, kernel source
strings and launch checks are the C and OpenCL bundles'."""
from __future__ import annotations

from tgc.codegen.compiled import BufferKind, CompiledModel
from tgc.emit.device_dims import device_main_values
from tgc.emit.bundle import (WEIGHTS_FILE, Param, bundle_start, device_manifest, host_values, kernel_file,
                             kernel_params, launch_sizes, weight_rows, write_bundle)
from tgc.emit.c_literals import c_string
from tgc.emit.common import call_comment, fill, read_template
from tgc.emit.opencl import source_strings
from tgc.emit.weights import WeightsFile

SOURCE_FILES = ("model.metal", "model.h", "model.m", "main.c", "Makefile")
ARG_KINDS = {BufferKind.INPUT: "TG_INPUT", BufferKind.OUTPUT: "TG_OUTPUT", BufferKind.WEIGHT: "TG_WEIGHT",
             BufferKind.ARENA: "TG_ARENA"}
def kernel_source(cm: CompiledModel) -> str:
  """The text of model.metal: each prefix line once (first use order), then the kernels."""
  return kernel_file(cm, "model.metal.tmpl")


def launches(cm: CompiledModel, params: dict[str, list[Param]], weights: WeightsFile) -> list[dict]:
  """Every launch in order: kernel, threadgroups per grid dimension, threads per threadgroup, and its buffers as
  (binding index, buffer kind, index within the kind, byte offset into that buffer). Weights live in one buffer
  holding the whole file (a tensor's offset is its file offset), intermediates in one arena buffer."""
  offsets = {t.name: t.offset for t in weights.tensors}
  out = []
  for c in cm.calls:
    glob, loc = launch_sizes(cm.kernels[c.kernel])
    binds = []
    for p in params[c.kernel]:
      if p.index >= len(c.buffers): raise ValueError(f"kernel {c.kernel}: parameter data{p.index} has no buffer")
      b = cm.buffers[c.buffers[p.index]]
      offset = offsets[b.name] if b.kind is BufferKind.WEIGHT else b.offset if b.kind is BufferKind.ARENA else 0
      binds.append({"binding": p.index, "kind": b.kind, "index": b.index, "offset": offset})
    out.append({"kernel": c.kernel, "threadgroups": [g // s for g, s in zip(glob, loc)], "threads": loc,
                "buffers": binds})
  return out


def _host_tables(cm: CompiledModel, plan: list[dict], weights: WeightsFile) -> dict[str, str]:
  """The initializers of model.m's tables: weight tensors, kernels, launches and their buffers."""
  rows = weight_rows(cm, weights)
  kernels = {name: i for i, name in enumerate(cm.kernels)}
  calls, args = [], []
  for n, launch in enumerate(plan):
    calls.append(call_comment(cm, n).rstrip("\n"))
    groups, threads = (", ".join(map(str, launch[key])) for key in ("threadgroups", "threads"))
    calls.append(f"  {{{kernels[launch['kernel']]}, {len(launch['buffers'])}, {len(args)}, {{{groups}}}, "
                 f"{{{threads}}}}},")
    args.extend(f"  {{{a['binding']}, {ARG_KINDS[a['kind']]}, {a['index']}, {a['offset']}}},"
                for a in launch["buffers"])
  return {"weight_table": "\n".join(rows) or "  {0, 0, 0UL}",
          "kernel_table": ",\n".join(f"  {c_string(name)}" for name in kernels) or '  ""',
          "call_table": "\n".join(calls) or "  {0, 0, 0, {1, 1, 1}, {1, 1, 1}}",
          "arg_table": "\n".join(args) or "  {0, TG_INPUT, 0, 0}"}


def metal_sources(cm: CompiledModel) -> tuple[dict[str, bytes], dict]:
  """Every file of the bundle but the manifest, and the manifest."""
  sym, weights = bundle_start(cm, "metal")
  params = {name: kernel_params(k) for name, k in cm.kernels.items()}
  plan = launches(cm, params, weights)
  metal_text = kernel_source(cm)
  counts = {"inputs": len(cm.inputs), "outputs": len(cm.outputs), "weights": len(cm.of_kind(BufferKind.WEIGHT)),
            "kernels": len(cm.kernels), "calls": len(cm.calls)}
  values = host_values(cm, sym, weights, counts)
  values["source_strings"] = source_strings(metal_text)
  values.update(_host_tables(cm, plan, weights))
  values.update(device_main_values(cm, sym))
  files = {"model.metal": metal_text.encode("utf-8")}
  for name in SOURCE_FILES[1:]:
    files[name] = fill(read_template("metal", f"{name}.tmpl"), values, f"templates/metal/{name}.tmpl").encode()
  files[WEIGHTS_FILE] = weights.data
  info = {"source": "model.m", "language": "objective-c", "objc_arc": True, "kernel_source": "model.metal",
          "kernel_source_embedded": True, "metallib": "model.metallib (built by the Makefile; optional)",
          "fast_math": False, "frameworks": ["Metal", "Foundation"], "weights_check": "crc32 per tensor",
          "storage_mode": "shared", "launches": plan, "precision": cm.target.precision}
  return files, device_manifest(cm, sym, weights, params, files, info)


def write_metal_bundle(cm: CompiledModel, out_dir: str) -> list[str]:
  """Write the bundle into the existing empty folder `out_dir`; manifest.json last. Returns the paths written."""
  return write_bundle(out_dir, lambda: metal_sources(cm))
