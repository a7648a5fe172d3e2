"""emit layer: artifact writers, one per target. `write_artifact(cm, out_dir)` writes the bundle of a
`CompiledModel` into an existing empty folder and returns the paths written (manifest.json last); the writer of a
target is its registry entry's `emitter` (codegen.registry)."""
from __future__ import annotations
from tgc.codegen.compiled import CompiledModel
from tgc.codegen.registry import load, target_spec


def write_artifact(cm: CompiledModel, out_dir: str, **options) -> list[str]:
  """Write the artifact for `cm.target` with the emitter's `options` (c: `embed_weights`, the weights also become
  read-only data of the library). Raises ValueError for an option the target's emitter does not take or a bad
  folder."""
  spec = target_spec(cm.target.name)
  given = {k: v for k, v in options.items() if v}
  for option in given:
    if option not in spec.emit_options:
      raise ValueError(f"{option.replace('_', ' ')} is not supported for target {spec.name}")
  return load(spec.emitter)(cm, out_dir, **given)
