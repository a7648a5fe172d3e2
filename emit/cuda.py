"""The `cuda` bundle: `model.cu` (every kernel of the model as the CUDA renderer wrote it, `extern "C" __global__`,
helper lines once, followed by a C-callable host library on the CUDA runtime API: the weights file read, checked
and uploaded once, the intermediates in one device arena at the memory plan's offsets, and a run function that
copies the inputs in, launches the kernels in order with `<<<grid, block, 0, stream>>>` and copies the outputs
out), `model.h` (plain C: no CUDA header needed to use it), `main.c` (the .npy example program), `Makefile`
(nvcc, `ARCH ?= sm_80`), `CMakeLists.txt` (the static library `tgc::<name>` on CUDA::cudart and the example, CUDA
architecture 80 unless CMAKE_CUDA_ARCHITECTURES says), `weights.safetensors` and `manifest.json`.

The host part of model.cu sits inside `#if !defined(__CUDACC_RTC__) && !defined(TGC_KERNELS_ONLY)`, so NVRTC
(the Python runtime, runtimes/artifact_cuda.py) compiles the same file as kernels only. The launches are generated
here, one statement per call with each argument cast to the exact parameter type the renderer reports
(`KernelProgram.params`; a parameter the renderer dropped is not passed), so the compiler checks them. Tensor tables
and header documentation are the C bundle's; model names reach the sources only through
`comment_safe` and `c_string`."""
from __future__ import annotations

from tgc.codegen.compiled import BufferKind, CompiledModel
from tgc.codegen.lower import KernelProgram
from tgc.codegen.target import Target
from tgc.emit.device_dims import device_main_values
from tgc.emit.bundle import (WEIGHTS_FILE, Param, bundle_start, device_manifest, host_values, kernel_params,
                             kernel_parts, launch_sizes, wrap_call, write_bundle)
from tgc.emit.c_io import io_declarations, run_io_body
from tgc.emit.c_literals import c_bytes, c_string
from tgc.emit.common import call_comment, fill, read_template, sha256
from tgc.emit.weights import WeightsFile

SOURCE_FILES = ("model.cu", "model.h", "main.c", "Makefile", "CMakeLists.txt")
DEFAULT_ARCH = "sm_80"
KERNELS_ONLY_MACRO = "TGC_KERNELS_ONLY"
_CUDA = Target.make("cuda")
BLOCK_LIMITS, MAX_THREADS, GRID_LIMITS = _CUDA.max_local_size, _CUDA.max_local_items, _CUDA.max_groups_per_dim


def launch_dims(k: KernelProgram) -> tuple[list[int], list[int]]:
  """Grid (blocks) and block (threads) of a kernel, checked against CUDA's limits."""
  glob, block = launch_sizes(k)
  grid = [g // s for g, s in zip(glob, block)]
  if any(b > m for b, m in zip(block, BLOCK_LIMITS)) or block[0] * block[1] * block[2] > MAX_THREADS:
    raise ValueError(f"kernel {k.name}: block {block} exceeds CUDA's limits {list(BLOCK_LIMITS)}, "
                     f"{MAX_THREADS} threads")
  if any(g > m for g, m in zip(grid, GRID_LIMITS)):
    raise ValueError(f"kernel {k.name}: grid {grid} exceeds CUDA's limits {list(GRID_LIMITS)}")
  return grid, block


def _pointer(b, p: Param, offset: dict[str, int]) -> str:
  cast = f"({p.ctype} *)"
  if b.kind is BufferKind.WEIGHT: return f"{cast}(w + {offset[b.name]})"
  if b.kind is BufferKind.ARENA: return f"{cast}(a + {b.offset})"
  return f"{cast}{'inputs' if b.kind == 'input' else 'outputs'}[{b.index}]"


def _launches(cm: CompiledModel, params: dict[str, list[Param]], weights: WeightsFile) -> dict[str, str]:
  """The body of tg_launch (one `<<<>>>` statement per call, each followed by an error check) and of
  tg_check_kernels (cudaFuncGetAttributes per kernel: a missing kernel image is reported by init)."""
  offset = {t.name: t.offset for t in weights.tensors}
  uses = {cm.buffers[i].kind for c in cm.calls for i in c.buffers}
  lines = ["  cudaStream_t s = (cudaStream_t)ctx->stream;", "  cudaError_t e;"]
  if BufferKind.WEIGHT in uses: lines.append("  const unsigned char *w = ctx->weights;")
  if BufferKind.ARENA in uses: lines.append("  unsigned char *a = ctx->arena;")
  if BufferKind.INPUT not in uses: lines.append("  (void)inputs;")
  if BufferKind.OUTPUT not in uses: lines.append("  (void)outputs;")
  for n, c in enumerate(cm.calls):
    lines.append(call_comment(cm, n).rstrip("\n"))
    grid, block = launch_dims(cm.kernels[c.kernel])
    args = []
    for p in params[c.kernel]:
      if p.index >= len(c.buffers): raise ValueError(f"kernel {c.kernel}: parameter data{p.index} has no buffer")
      args.append(_pointer(cm.buffers[c.buffers[p.index]], p, offset))
    launch = f"{c.kernel}<<<dim3({grid[0]}u, {grid[1]}u, {grid[2]}u), dim3({block[0]}, {block[1]}, {block[2]}), 0, s>>>"
    lines.append(wrap_call(launch, args))
    lines.append(f"  if ((e = cudaGetLastError()) != cudaSuccess) return tg_fail(ctx, {{{{SYM}}}}_ERR_CUDA, "
                 f"{c_string('launching kernel ' + c.kernel)}, e);")
  checks = ["  cudaFuncAttributes attr;", "  cudaError_t e;"] if cm.kernels else ["  (void)ctx;"]
  for name in cm.kernels:
    checks.append(f"  if ((e = cudaFuncGetAttributes(&attr, {name})) != cudaSuccess) "
                  f"return tg_fail(ctx, {{{{SYM}}}}_ERR_CUDA, {c_string('cudaFuncGetAttributes ' + name)}, e);")
  return {"launches": "\n".join(lines), "kernel_checks": "\n".join(checks)}


def cuda_sources(cm: CompiledModel) -> tuple[dict[str, bytes], dict]:
  """Every file of the bundle but the manifest, and the manifest."""
  sym, weights = bundle_start(cm, "cuda")
  params = {name: kernel_params(k) for name, k in cm.kernels.items()}
  kernel_prefix, kernels = kernel_parts(cm)
  values = host_values(cm, sym, weights, {"inputs": len(cm.inputs), "outputs": len(cm.outputs),
                                          "kernels": len(cm.kernels), "calls": len(cm.calls)})
  values.update({"weights_sha256": c_bytes(bytes.fromhex(sha256(weights.data))), "kernel_prefix": kernel_prefix,
                 "kernels": kernels, "kernels_only": KERNELS_ONLY_MACRO, "arch": DEFAULT_ARCH,
                 "cuda_arch": DEFAULT_ARCH.removeprefix("sm_"), "io_types": io_declarations(cm, sym),
                 "run_io_body": run_io_body(cm, sym)})
  values.update({k: fill(v, values, k) for k, v in _launches(cm, params, weights).items()})
  values.update(device_main_values(cm, sym))
  files = {name: fill(read_template("cuda", f"{name}.tmpl"), values, f"templates/cuda/{name}.tmpl").encode("utf-8")
           for name in SOURCE_FILES}
  files[WEIGHTS_FILE] = weights.data
  half = any("cuda_fp16" in k.features for k in cm.kernels.values())
  info = {"source": "model.cu", "kernel_source": "model.cu", "cuda_api": "runtime", "default_arch": DEFAULT_ARCH,
          "link_libraries": ["cudart"], "kernels_only_macro": KERNELS_ONLY_MACRO,
          "headers": ["cuda_fp16.h"] if half else [], "weights_check": "sha256 of the weights file (its device copy)",
          "launch": "grid = global_size / local_size, block = local_size", "precision": cm.target.precision}
  return files, device_manifest(cm, sym, weights, params, files, info)


def write_cuda_bundle(cm: CompiledModel, out_dir: str) -> list[str]:
  """Write the bundle into the existing empty folder `out_dir`; manifest.json last. Returns the paths written."""
  return write_bundle(out_dir, lambda: cuda_sources(cm))
