"""The `c` bundle: `model.h` / `model.c` (the model as a C99 library: static kernels, a run function that calls
them in order on the caller's buffers, the weights and the arena; each launch goes through the caller's parallel-for
when one is set), `main.c` (an example program on .npy files), `tgc_threads.h` / `tgc_threads.c` (an optional
pthreads pool), `Makefile` (built for the CPU level the kernels were generated for), `weights.safetensors`,
`weights.S` when the weights are embedded, and `manifest.json`.

Generated text comes from the templates in templates/c; model names reach it only through `comment_safe`
(comments) and `c_string` (string literals). Kernel arguments are cast to the exact parameter types the renderer
reports (`KernelProgram.params`; a parameter the renderer dropped is not passed)."""
from __future__ import annotations
import zlib
from dataclasses import dataclass
from typing import Callable

from tgc.ir import lowp
from tgc.codegen.compiled import BufferInfo, CompiledModel
from tgc.codegen.lower import KernelProgram
from tgc.codegen.memory import ALIGN as ARENA_ALIGN
from tgc.codegen.names import comment_safe, symbol
from tgc.emit.c_literals import c_bytes, c_string
from tgc.emit.common import (call_comment, check_empty_dir, fill, numpy_name, read_template, sha256, tgc_version,
                             write_files)
from tgc.emit.manifest import MANIFEST, build_manifest, manifest_bytes
from tgc.emit.weights import WeightSpec, WeightsFile, build_weights_file

WEIGHTS_FILE = "weights.safetensors"
TEMPLATE_INCLUDES = ("#include <stdint.h>", "#include <stdio.h>", "#include <stdlib.h>", "#include <string.h>")
WEIGHTS_RULE = "weights.o: weights.S weights.safetensors\n\t$(CC) $(CPPFLAGS) $(CFLAGS) -c weights.S -o $@\n\n"


@dataclass(frozen=True)
class Param:
  index: int          # position in a call's buffer list
  ctype: str          # element type as spelled in the signature, "const float" for read-only
  @property
  def mutable(self) -> bool: return not self.ctype.startswith("const ")


def kernel_params(k: KernelProgram) -> list[Param]:
  """The buffer parameters of a rendered kernel, in signature order."""
  return [Param(p.index, p.spelled) for p in k.params]


def _check_names(cm: CompiledModel) -> None:
  for kind in ("input", "output", "weight"):
    seen: set[str] = set()
    for b in cm.of_kind(kind):
      if b.name in seen: raise ValueError(f"model {cm.name!r}: duplicate {kind} name {b.name!r}")
      seen.add(b.name)


def _dims(b: BufferInfo) -> str: return "".join(f"[{s}]" for s in b.shape) or "(scalar)"


def _io_doc(cm: CompiledModel) -> str:
  lines = []
  for title, bufs in (("Inputs (inputs[i])", cm.inputs), ("Outputs (outputs[i])", cm.outputs)):
    lines.append(f"   {title}:" if bufs else f"   {title}: none")
    for i, b in enumerate(bufs):
      lines.append(f"     {i}: {b.symbol}  {numpy_name(b.dtype)}{_dims(b)}  {b.nbytes} bytes  "
                   f"original name \"{comment_safe(b.name)}\"")
  return "\n".join(lines)


NAN_KINDS = {"ieee": 0, "all_ones": 1, "neg_zero": 2, "none": 3}    # lowp_type.nan_kind in common/npy.c.tmpl


def lowp_table() -> str:
  """The rows of the example programs' table of storage-only types (templates/common/npy.c.tmpl `lowp_type`), from
  ir.lowp's formats."""
  rows = []
  for dt, f in lowp.FORMATS.items():
    rows.append(f"  {{{c_string(dt.name)}, {f.bits}, {f.exp_bits}, {f.man_bits}, {f.bias}, 0x{f.max_mag:x}UL, "
                f"0x{f.nan[0]:x}UL, 0x{f.nan[1]:x}UL, {NAN_KINDS[f.nan_kind]}, {int(f.neg_zero)}, 0}}")
  for dt in lowp.INT_RANGES:
    rows.append(f"  {{{c_string(dt.name)}, {dt.elem_bits}, 0, 0, 0, 0UL, 0UL, 0UL, 3, 1, {int(not dt.is_unsigned)}}}")
  return ",\n".join(rows)


def _tables(cm: CompiledModel) -> dict[str, str]:
  dims: list[int] = []
  out = {"lowp_table": lowp_table()}
  for key, bufs in (("input_types", cm.inputs), ("output_types", cm.outputs)):
    out[key] = ", ".join(c_string(b.dtype.name) for b in bufs) or "NULL"
  for key, bufs in (("input_table", cm.inputs), ("output_table", cm.outputs)):
    rows = []
    for b in bufs:
      rows.append(f"  {{{c_string(b.name)}, {c_string(b.symbol)}, {c_string(numpy_name(b.dtype))}, {len(b.shape)}, "
                  f"{len(dims)}, {b.nbytes}, {b.dtype.itemsize}}}")
      dims.extend(b.shape)
    out[key] = ",\n".join(rows) if rows else "  {NULL, NULL, NULL, 0, 0, 0, 1}"
  out["dims"] = ", ".join(str(d) for d in dims + [0])
  return out


def _argument(b: BufferInfo, p: Param) -> str:
  cast = f"({p.ctype} *)"
  if b.kind == "input": return f"{cast}inputs[{b.index}]"
  if b.kind == "output": return f"{cast}outputs[{b.index}]"
  raise AssertionError(b.kind)


def _wrap_call(kernel: str, args: list[str], width: int = 118) -> str:
  """`  kernel(arg, arg, ...);` broken after commas so that lines stay within `width` characters."""
  lines, line = [], f"  {kernel}("
  indent = " " * len(line)
  for i, arg in enumerate(args):
    piece = arg + (");" if i == len(args) - 1 else ",")
    if len(line) + len(piece) + 1 > width and line.strip() and not line.endswith("("):
      lines.append(line.rstrip())
      line = indent
    line += piece + ("" if i == len(args) - 1 else " ")
  if not args: line += ");"
  return "\n".join(lines + [line])




def _glue(cm: CompiledModel, params: dict[str, list[Param]]) -> str:
  """Per kernel, the argument block a launch fills, the function running a range of its task loop, and the task
  function a parallel-for calls (one task loop iteration)."""
  out = []
  for name in cm.kernels:
    fields = "".join(f" {p.ctype} *d{p.index};" for p in params[name])
    call = ", ".join([f"g->d{p.index}" for p in params[name]] + ["(int)lo", "(int)hi"])
    out.append(f"typedef struct {{{fields} }} tg_args_{name};\n"
               f"static void tg_range_{name}(void *p, size_t lo, size_t hi) {{\n"
               f"  tg_args_{name} *g = (tg_args_{name} *)p;\n  {name}({call});\n}}\n"
               f"static void tg_task_{name}(void *p, size_t i) {{ tg_range_{name}(p, i, i + 1); }}\n")
  return "\n".join(out)


def _parallel(k: KernelProgram) -> str:
  """Whether a launch may go to the parallel-for: a C expression on the kernel's op and byte counts (model.c's
  TG_PARALLEL thresholds); a kernel with one task iteration never does."""
  return f"TG_PARALLEL({k.ops}.0, {k.bytes}.0)" if k.global_size[0] > 1 else "0"


def _run_body(cm: CompiledModel, params: dict[str, list[Param]], weights: WeightsFile) -> dict[str, str]:
  offset = {t.name: t.offset for t in weights.tensors}
  uses = {cm.buffers[i].kind for c in cm.calls for i in c.buffers}
  locals_, setup, calls = [], [], []
  if "weight" in uses: locals_.append("  const unsigned char *w;\n"); setup.append("  w = ctx->weights;\n")
  if "arena" in uses: locals_.append("  unsigned char *a;\n"); setup.append("  a = ctx->arena;\n")
  locals_.append("  size_t i;\n")
  checks = []
  for what, table in (("inputs", "tg_inputs"), ("outputs", "tg_outputs")):
    if what == "inputs" and not cm.inputs: continue
    checks.append(f"  for (i = 0; i < tg_num_{what}; i++) {{\n"
                  f"    if ({what}[i] == NULL) return {{{{SYM}}}}_ERR_NULL;\n"
                  f"    if (tg_misaligned({what}[i], {table}[i].align)) return {{{{SYM}}}}_ERR_ALIGN;\n  }}\n")
  for n, c in enumerate(cm.calls):
    sets = []
    for p in params[c.kernel]:
      if p.index >= len(c.buffers): raise ValueError(f"kernel {c.kernel}: parameter data{p.index} has no buffer")
      b = cm.buffers[c.buffers[p.index]]
      if b.kind == "weight": arg = f"({p.ctype} *)(w + {offset[b.name]})"
      elif b.kind == "arena": arg = f"({p.ctype} *)(a + {b.offset})"
      else: arg = _argument(b, p)
      sets.append(f"    g.d{p.index} = {arg};\n")
    k = cm.kernels[c.kernel]
    calls.append(f"{call_comment(cm, n)}  {{\n    tg_args_{c.kernel} g;\n{''.join(sets)}"
                 f"    tg_launch(ctx, {n}, tg_task_{c.kernel}, "
                 f"tg_range_{c.kernel}, &g, {k.global_size[0]}, {_parallel(k)});\n  }}")
  return {"run_locals": "".join(locals_), "run_checks": "".join(checks), "run_setup": "".join(setup),
          "run_calls": "\n".join(calls)}


def _kernels(cm: CompiledModel) -> tuple[str, str]:
  """The kernels' includes and helpers (each once, minus what the template includes) and the static kernels."""
  prefix: list[str] = list(TEMPLATE_INCLUDES)
  functions = []
  for name, k in cm.kernels.items():
    for line in k.prefix:
      if line not in prefix: prefix.append(line)
    functions.append(f"{k.function.rstrip()}\n")
  return "\n".join(prefix[len(TEMPLATE_INCLUDES):]), "\n".join(functions)


def _embedded(sym: str, embed: bool) -> tuple[str, str]:
  if not embed: return "", ""
  decl = (f"/* Use the weights linked into the program by weights.S: no file I/O, no copy (see init_from_memory). */\n"
          f"{sym}_status {sym}_init_embedded({sym}_ctx *ctx, void *arena);")
  body = (f"\nextern const unsigned char {sym}_weights_data[];\nextern const size_t {sym}_weights_size;\n\n"
          f"{sym}_status {sym}_init_embedded({sym}_ctx *ctx, void *arena) {{\n"
          f"  return {sym}_init_from_memory(ctx, {sym}_weights_data, {sym}_weights_size, arena);\n}}\n")
  return decl, body


def c_sources(cm: CompiledModel, embed_weights: bool = False) -> tuple[dict[str, bytes], dict]:
  """Every file of the bundle but the manifest, and the manifest."""
  if cm.target.name != "c":
    raise ValueError(f"the C bundle needs a model compiled for target 'c', not {cm.target.name!r}")
  _check_names(cm)
  sym = symbol(cm.name, None, "m")
  weights = build_weights_file([WeightSpec(b.name, b.symbol, b.dtype, b.shape, cm.weights[b.name])
                                for b in cm.of_kind("weight")])
  params = {name: kernel_params(k) for name, k in cm.kernels.items()}
  kernel_prefix, kernels = _kernels(cm)
  embedded_decl, embedded_init = _embedded(sym, embed_weights)
  values = {"sym": sym, "SYM": sym.upper(), "version": tgc_version(), "model_comment": f"\"{comment_safe(cm.name)}\"",
            "io_doc": _io_doc(cm), "num_inputs": str(len(cm.inputs)), "num_outputs": str(len(cm.outputs)),
            "arena_bytes": str(cm.arena_bytes), "weights_bytes": str(len(weights.data)),
            "embedded_decl": embedded_decl, "embedded_init": embedded_init, "kernel_prefix": kernel_prefix,
            "kernels": kernels, "header_len": str(len(weights.header)), "header_bytes": c_bytes(weights.header),
            "weights_sha256": c_bytes(bytes.fromhex(sha256(weights.data))), "embedded": "1" if embed_weights else "0",
            "objects": "model.o weights.o" if embed_weights else "model.o",
            "weights_rule": WEIGHTS_RULE if embed_weights else "", "launch_glue": _glue(cm, params),
            "num_calls": str(len(cm.calls)), "num_calls_len": str(max(len(cm.calls), 1)),
            "cpu_level": cm.target.cpu.level, "cpu_flags": " ".join(cm.target.cpu.cc_flags)}
  values.update(_tables(cm))
  run = _run_body(cm, params, weights)
  values.update({k: fill(v, values, k) for k, v in run.items()})
  files = {name: fill(read_template("c", f"{name}.tmpl"), values, f"templates/c/{name}.tmpl").encode("utf-8")
           for name in ("model.h", "model.c", "main.c", "Makefile", "tgc_threads.h", "tgc_threads.c") +
           (("weights.S",) if embed_weights else ())}
  files[WEIGHTS_FILE] = weights.data
  kernel_args = {name: [{"index": p.index, "dtype": _arg_dtype(cm, name, p.index), "mutable": p.mutable}
                        for p in ps] for name, ps in params.items()}
  info = {"api_prefix": sym, "header": "model.h", "source": "model.c", "c_standard": "c99",
          "embed_weights": embed_weights, "cpu": cm.target.cpu.describe(), "threads": "tgc_threads.c"}
  if embed_weights: info["weights_symbol"] = f"{sym}_weights_data"
  manifest = build_manifest(cm, sym, weights, WEIGHTS_FILE, embed_weights, kernel_args, files, info)
  return files, manifest


def _arg_dtype(cm: CompiledModel, kernel: str, index: int) -> str:
  call = next(c for c in cm.calls if c.kernel == kernel)
  return numpy_name(cm.buffers[call.buffers[index]].dtype)


def write_c_bundle(cm: CompiledModel, out_dir: str, embed_weights: bool = False) -> list[str]:
  """Write the bundle into the existing empty folder `out_dir`; manifest.json last. Returns the paths written."""
  check_empty_dir(out_dir)
  files, manifest = c_sources(cm, embed_weights)
  return write_files(out_dir, files) + write_files(out_dir, {MANIFEST: manifest_bytes(manifest)})


# ---- shared by the device bundles (opencl, cuda, metal; webgpu uses bundle_start and write_bundle) ----

def bundle_start(cm: CompiledModel, target: str, title: str,
                 check: Callable[[CompiledModel], None] | None = None) -> tuple[str, WeightsFile]:
  """What every bundle writer begins with: the model checked (compiled for `target`; `title` names the bundle in the
  error; names unique; then `check`), its API symbol and its weights file."""
  if cm.target.name != target:
    raise ValueError(f"the {title} bundle needs a model compiled for target {target!r}, not {cm.target.name!r}")
  _check_names(cm)
  if check is not None: check(cm)
  return symbol(cm.name, None, "m"), build_weights_file([WeightSpec(b.name, b.symbol, b.dtype, b.shape,
                                                                    cm.weights[b.name]) for b in cm.of_kind("weight")])


def kernel_parts(cm: CompiledModel) -> tuple[str, str]:
  """Each prefix line of the kernels once (first use order), and the kernels, as the device kernel files hold them."""
  prefix: list[str] = []
  for k in cm.kernels.values():
    prefix.extend(line for line in k.prefix if line not in prefix)
  return "".join(line + "\n" for line in prefix), "\n".join(k.function.rstrip() + "\n" for k in cm.kernels.values())


def kernel_file(cm: CompiledModel, target: str) -> str:
  """The text of a device bundle's kernel file from templates/<target>/model.<ext>.tmpl: each prefix line of the
  kernels once (first use order), then the kernels."""
  kernel_prefix, kernels = kernel_parts(cm)
  values = {"model_comment": f"\"{comment_safe(cm.name)}\"", "version": tgc_version(), "kernel_prefix": kernel_prefix,
            "kernels": kernels}
  name = {"opencl": "model.cl.tmpl", "metal": "model.metal.tmpl"}[target]
  return fill(read_template(target, name), values, f"templates/{target}/{name}")


def host_values(cm: CompiledModel, sym: str, weights: WeightsFile, counts: dict[str, int]) -> dict[str, str]:
  """The placeholder values every device host library fills: names, documentation, sizes, the weights header, the
  tensor tables, and for each count `num_<key>` and `<key>_len` (at least 1: C arrays are never empty)."""
  values = {"sym": sym, "SYM": sym.upper(), "version": tgc_version(), "model_comment": f"\"{comment_safe(cm.name)}\"",
            "io_doc": _io_doc(cm), "arena_bytes": str(cm.arena_bytes), "weights_bytes": str(len(weights.data)),
            "header_len": str(len(weights.header)), "header_bytes": c_bytes(weights.header)}
  values.update({f"num_{key}": str(n) for key, n in counts.items()})
  values.update({f"{key}_len": str(max(n, 1)) for key, n in counts.items()})
  values.update(_tables(cm))
  return values


def device_manifest(cm: CompiledModel, sym: str, weights: WeightsFile, params: dict[str, list[Param]],
                    files: dict[str, bytes], info: dict) -> dict:
  """The manifest of a device bundle (weights in WEIGHTS_FILE, never embedded): kernel arguments from the parsed
  signatures, and `info` over the target_info fields every device host library shares."""
  kernel_args = {name: [{"index": p.index, "dtype": _arg_dtype(cm, name, p.index), "mutable": p.mutable}
                        for p in ps] for name, ps in params.items()}
  shared = {"api_prefix": sym, "header": "model.h", "embed_weights": False, "arena_alignment": ARENA_ALIGN}
  return build_manifest(cm, sym, weights, WEIGHTS_FILE, False, kernel_args, files, {**shared, **info})


def weight_rows(cm: CompiledModel, weights: WeightsFile) -> list[str]:
  """The weight table rows of the device loaders: offset and size in weights.safetensors and the CRC-32 of the bytes
  (`{offset, nbytes, crc}`, one per weight tensor, in the plan's order)."""
  stored = {t.name: t for t in weights.tensors}
  rows = []
  for b in cm.of_kind("weight"):
    t = stored[b.name]
    crc = zlib.crc32(weights.data[t.offset:t.offset + t.nbytes]) & 0xffffffff
    rows.append(f"  {{{t.offset}, {t.nbytes}, 0x{crc:08x}UL}},  /* {b.symbol} */")
  return rows


def write_bundle(out_dir: str, sources: Callable[[], tuple[dict[str, bytes], dict]]) -> list[str]:
  """Write the files and manifest `sources()` gives into the existing empty folder `out_dir` (checked first);
  manifest.json last. Returns the paths written."""
  check_empty_dir(out_dir)
  files, manifest = sources()
  return write_files(out_dir, files) + write_files(out_dir, {MANIFEST: manifest_bytes(manifest)})
