"""emit layer: artifact writers, one per target. `write_artifact(cm, out_dir)` writes the bundle of a
`CompiledModel` into an existing empty folder and returns the paths written (manifest.json last)."""
from __future__ import annotations
from tgc.codegen.compiled import CompiledModel


def write_artifact(cm: CompiledModel, out_dir: str, embed_weights: bool = False) -> list[str]:
  """Write the artifact for `cm.target`. `embed_weights` (C only): the weights also become read-only data of the
  library (weights.S, `<name>_init_embedded`). Raises ValueError for an unsupported target or bad folder."""
  if cm.target.name == "c":
    from tgc.emit.c import write_c_bundle
    return write_c_bundle(cm, out_dir, embed_weights)
  if cm.target.name == "opencl":
    if embed_weights: raise ValueError("embedding the weights is supported for target c only, not opencl")
    from tgc.emit.opencl import write_opencl_bundle
    return write_opencl_bundle(cm, out_dir)
  if cm.target.name == "webgpu":
    if embed_weights: raise ValueError("embedding the weights is supported for target c only, not webgpu")
    from tgc.emit.webgpu import write_webgpu_bundle
    return write_webgpu_bundle(cm, out_dir)
  if cm.target.name == "cuda":
    if embed_weights: raise ValueError("embedding the weights is supported for target c only, not cuda")
    from tgc.emit.cuda import write_cuda_bundle
    return write_cuda_bundle(cm, out_dir)
  if cm.target.name == "metal":
    if embed_weights: raise ValueError("embedding the weights is supported for target c only, not metal")
    from tgc.emit.metal import write_metal_bundle
    return write_metal_bundle(cm, out_dir)
  raise ValueError(f"no artifact writer for target {cm.target.name!r} (available: c, opencl, webgpu, cuda, metal)")
