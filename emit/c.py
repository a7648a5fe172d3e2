"""The `c` bundle: `model.h` / `model.c` (the model as a C99 library: static kernels, a run function that calls
them in order on the caller's buffers, the weights and the arena; each launch goes through the caller's parallel-for
when one is set), `main.c` (an example program on .npy files), `tgc_threads.h` / `tgc_threads.c` (an optional
pthreads pool), `Makefile` (built for the CPU level the kernels were generated for), `CMakeLists.txt` (the static
library `tgc::<name>`, the pool and the example; usable by add_subdirectory or installed for find_package),
`weights.safetensors`, `weights.S` when the weights are embedded, and `manifest.json`.

Generated text comes from the templates in templates/c; model names reach it only through `comment_safe`
(comments) and `c_string` (string literals). Kernel arguments are cast to the exact parameter types the renderer
reports (`KernelProgram.params`; a parameter the renderer dropped is not passed)."""
from __future__ import annotations
from tgc.codegen.compiled import BufferInfo, BufferKind, CompiledModel
from tgc.codegen.knobs import PARALLEL_MIN_BYTES, PARALLEL_MIN_OPS, POOL_RUNS_PER_THREAD
from tgc.ir.sint import is_static, render
from tgc.codegen.lower import KernelProgram
from tgc.codegen.render.cstyle import variable_name
from tgc.codegen.render.c import SIMD_POSTLUDE, SIMD_PRELUDE
from tgc.emit.bundle import (WEIGHTS_FILE, Param, bundle_manifest, bundle_start, dim_table, host_values,
                             kernel_params, write_bundle)
from tgc.emit.c_io import io_declarations, run_io_body, shape_functions
from tgc.emit.c_literals import c_bytes
from tgc.emit.common import call_comment, fill, read_template, sha256
from tgc.emit.states import held_table, state_declarations, state_definitions, state_growth, state_table
from tgc.emit.weights import WeightsFile

TEMPLATE_INCLUDES = ("#include <stdint.h>", "#include <stdio.h>", "#include <stdlib.h>", "#include <string.h>")
WEIGHTS_RULE = "weights.o: weights.S weights.safetensors\n\t$(CC) $(CPPFLAGS) $(CFLAGS) -c weights.S -o $@\n\n"
# CMakeLists.txt with embedded weights: weights.S finds weights.safetensors through the assembler's include path
CMAKE_WEIGHTS = ('set_source_files_properties(weights.S PROPERTIES\n'
                 '                            COMPILE_OPTIONS "-Wa,-I${CMAKE_CURRENT_SOURCE_DIR}"\n'
                 '                            OBJECT_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/weights.safetensors")\n')


def _argument(b: BufferInfo, p: Param) -> str:
  cast = f"({p.ctype} *)"
  if b.kind is BufferKind.INPUT: return f"{cast}inputs[{b.index}]"
  if b.kind is BufferKind.OUTPUT: return f"{cast}outputs[{b.index}]"
  raise AssertionError(b.kind)


def _glue(cm: CompiledModel, params: dict[str, list[Param]]) -> str:
  """Per kernel, the argument block a launch fills, the function running a range of its task loop, and the task
  function a parallel-for calls (one task loop iteration)."""
  out = []
  for name, k in _programs(cm).items():
    dims = [variable_name(v) for v in k.variables]
    fields = "".join(f" {p.ctype} *d{p.index};" for p in params[name]) + "".join(f" int {d};" for d in dims)
    call = ", ".join([f"g->d{p.index}" for p in params[name]] + [f"g->{d}" for d in dims] + ["(int)lo", "(int)hi"])
    out.append(f"typedef struct {{{fields} }} tg_args_{name};\n"
               f"static void tg_range_{name}(void *p, size_t lo, size_t hi) {{\n"
               f"  tg_args_{name} *g = (tg_args_{name} *)p;\n  {name}({call});\n}}\n"
               f"static void tg_task_{name}(void *p, size_t i) {{ tg_range_{name}(p, i, i + 1); }}\n")
  return "\n".join(out)


def _parallel(k: KernelProgram) -> str:
  """Whether a launch may go to the parallel-for: a C expression on the kernel's work (its ops, transcendentals at
  their cost) and byte counts (model.c's TG_PARALLEL thresholds); a kernel with one task iteration never does."""
  return f"TG_PARALLEL({k.work}.0, {k.bytes}.0)" if not is_static(k.global_size[0]) or k.global_size[0] > 1 else "0"


def _state_code(cm: CompiledModel, sym: str) -> dict[str, str]:
  """model.h's and model.c's state API (empty for a model without states): emit.states' shared part, and
  `state_data`, a state's buffer in the arena."""
  if not cm.states: return {"state_decl": "", "state_functions": ""}
  access = (f"/* State i's buffer in the arena: C order, its capacity along the growing dim. */\n"
            f"void *{sym}_state_data({sym}_ctx *ctx, size_t i);\n")
  data = (f"void *{sym}_state_data({sym}_ctx *ctx, size_t i) {{\n"
          f"  return ctx != NULL && ctx->ready == TG_READY && i < {len(cm.states)} ? ctx->arena + "
          f"tg_states[i].offset : NULL;\n}}\n\n")
  return {"state_decl": "\n" + state_declarations(cm, sym, "in the arena", access).rstrip("\n"),
          "state_functions": state_table(cm, ("offset",), lambda st, b: (b.offset,)) + "\n" +
          state_definitions(cm, sym, f"{sym.upper()}_OK") + data}


def _run_body(cm: CompiledModel, params: dict[str, list[Param]], weights: WeightsFile) -> dict[str, str]:
  offset = {t.name: t.offset for t in weights.tensors}
  uses = {cm.buffers[i].kind for c in cm.calls for i in c.buffers}
  locals_, setup, calls = [], [], []
  if BufferKind.WEIGHT in uses: locals_.append("  const unsigned char *w;\n"); setup.append("  w = ctx->weights;\n")
  if uses & {BufferKind.ARENA, BufferKind.STATE}:
    locals_.append("  unsigned char *a;\n"); setup.append("  a = ctx->arena;\n")
  locals_.append("  size_t i;\n")
  locals_ += [f"  int {variable_name(name)};\n" for name in cm.dims]
  setup += [f"  {variable_name(name)} = ctx->dims[{i}];\n" for i, name in enumerate(cm.dims)]
  growth = state_growth(cm, variable_name)
  setup += [f"  if ({grown} > {capacity}) return {{{{SYM}}}}_ERR_STATE_FULL;\n" for grown, capacity in growth.values()]
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
      if b.kind is BufferKind.WEIGHT: arg = f"({p.ctype} *)(w + {offset[b.name]})"
      elif b.kind in (BufferKind.ARENA, BufferKind.STATE): arg = f"({p.ctype} *)(a + {b.offset})"
      else: arg = _argument(b, p)
      sets.append(f"    g.d{p.index} = {arg};\n")
    k = cm.kernels[c.kernel]
    sets += [f"    g.{variable_name(v)} = {variable_name(v)};\n" for v in k.variables]
    launch = _launch(n, k, sets)
    if c.kernel in cm.small_variants:       # the variant for small sizes, when the size is at most half the block
      small, extent, block = cm.small_variants[c.kernel]
      launch = (f"  if (2 * {render(extent, variable_name)} <= {block})\n{_launch(n, small, sets)}\n"
                f"  else\n{launch}")
    calls.append(f"{call_comment(cm, n)}{launch}")
  dims = list(cm.dims)
  calls += [f"  ctx->dims[{dims.index(name)}] = (int32_t)({grown});" for name, (grown, _) in growth.items()]
  return {"run_locals": "".join(locals_), "run_checks": "".join(checks), "run_setup": "".join(setup),
          "run_calls": "\n".join(calls)}


def _launch(n: int, k: KernelProgram, sets: list[str]) -> str:
  """Call n of kernel `k`: its argument block filled by `sets`, its task loop handed to tg_launch."""
  return (f"  {{\n    tg_args_{k.name} g;\n{''.join(sets)}"
          f"    tg_launch(ctx, {n}, tg_task_{k.name}, tg_range_{k.name}, &g, "
          f"(size_t){render(k.global_size[0], variable_name)}, {_parallel(k)});\n  }}")


def _programs(cm: CompiledModel) -> dict[str, KernelProgram]:
  """Every kernel function of model.c: the kernels, each followed by its variant for small sizes if it has one."""
  out: dict[str, KernelProgram] = {}
  for name, k in cm.kernels.items():
    out[name] = k
    if name in cm.small_variants: out[cm.small_variants[name][0].name] = cm.small_variants[name][0]
  return out


def _kernels(cm: CompiledModel) -> tuple[str, str]:
  """The kernels' includes and helpers (each once, minus what the template includes) and the static kernels."""
  prefix: list[str] = list(TEMPLATE_INCLUDES)
  functions = []
  for name, k in _programs(cm).items():
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
  sym, weights = bundle_start(cm, "c")
  params = {name: kernel_params(k) for name, k in _programs(cm).items()}
  kernel_prefix, kernels = _kernels(cm)
  embedded_decl, embedded_init = _embedded(sym, embed_weights)
  values = host_values(cm, sym, weights, {"inputs": len(cm.inputs), "outputs": len(cm.outputs)})
  values.update({"embedded_decl": embedded_decl, "embedded_init": embedded_init, "kernel_prefix": kernel_prefix,
                 "kernels": kernels, "kernels_end": SIMD_POSTLUDE + "\n" if SIMD_PRELUDE in kernel_prefix else "",
                 "weights_sha256": c_bytes(bytes.fromhex(sha256(weights.data))),
                 "embedded": "1" if embed_weights else "0", "parallel_min_ops": f"{float(PARALLEL_MIN_OPS)}",
                 "parallel_min_bytes": f"{float(PARALLEL_MIN_BYTES)}", "pool_runs": str(POOL_RUNS_PER_THREAD),
                 "objects": "model.o weights.o" if embed_weights else "model.o",
                 "weights_rule": WEIGHTS_RULE if embed_weights else "", "launch_glue": _glue(cm, params),
                 "num_calls": str(len(cm.calls)), "num_calls_len": str(max(len(cm.calls), 1)),
                 "num_dims": str(len(cm.dims)), "num_dims_len": str(max(len(cm.dims), 1)),
                 "dim_table": dim_table(cm),
                 "dim_held_table": held_table(cm),
                 **_state_code(cm, sym),
                 "io_types": io_declarations(cm, sym), "run_io_body": run_io_body(cm, sym),
                 "shape_functions": shape_functions(cm, sym),
                 "cmake_languages": "C ASM" if embed_weights else "C",
                 "cmake_sources": "model.c weights.S" if embed_weights else "model.c",
                 "cmake_weights": CMAKE_WEIGHTS if embed_weights else "", "cpu_arch": cm.target.cpu.arch,
                 "cpu_level": cm.target.cpu.level, "cpu_flags": " ".join(cm.target.cpu.cc_flags)})
  run = _run_body(cm, params, weights)
  values.update({k: fill(v, values, k) for k, v in run.items()})
  files = {name: fill(read_template("c", f"{name}.tmpl"), values, f"templates/c/{name}.tmpl").encode("utf-8")
           for name in ("model.h", "model.c", "main.c", "Makefile", "CMakeLists.txt", "tgc_threads.h",
                        "tgc_threads.c") +
           (("weights.S",) if embed_weights else ())}
  files[WEIGHTS_FILE] = weights.data
  info = {"api_prefix": sym, "header": "model.h", "source": "model.c", "c_standard": "c99",
          "embed_weights": embed_weights, "cpu": cm.target.cpu.describe(), "threads": "tgc_threads.c"}
  if embed_weights: info["weights_symbol"] = f"{sym}_weights_data"
  return files, bundle_manifest(cm, sym, weights, {n: params[n] for n in cm.kernels}, files, info, embed_weights)


def write_c_bundle(cm: CompiledModel, out_dir: str, embed_weights: bool = False) -> list[str]:
  """Write the bundle into the existing empty folder `out_dir`; manifest.json last. Returns the paths written."""
  return write_bundle(out_dir, lambda: c_sources(cm, embed_weights))


