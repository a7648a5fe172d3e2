"""Artifact folders for `tgc run`, `validate`, `bench`, `inspect` and `viz`: opening one (read once by
`runtimes.artifact.ArtifactFolder`, its manifest checked against the JSON Schema and its files against their
sha256), loading it with the Python runtime of its target, running it on inputs by original name, and seeded
random inputs. Every problem with the folder or the inputs is a `UserError` naming it: `ArtifactError`s are mapped
by type (`user_error`)."""
from __future__ import annotations
import numpy as np
from tgc.ir import lowp
from tgc.ir.config import config
from tgc.codegen.opts import Opt, OptError
from tgc.codegen.registry import load, target_names, target_spec
from tgc.runtimes.dims import shape_at
from tgc.runtimes.artifact import Artifact, ArtifactError, ArtifactFolder, MissingInput
from tgc.runtimes.base import ToolchainMissing
from tgc.runtimes.io_arrays import storage_type, value_dtype
from tgc.emit.manifest import validate_manifest
from tgc.aot import models, viz_session
from tgc.aot.errors import UserError



def user_error(error: ArtifactError) -> UserError:
  """The UserError `tgc` reports for a problem with an artifact folder or with the inputs given to it."""
  if isinstance(error, MissingInput):
    return UserError(f"missing input {error.name!r} (give it with --input {error.name}=file.npy)")
  return UserError(str(error))


def open_artifact(folder: str, check_files: bool = True) -> ArtifactFolder:
  """Read and check an artifact folder (with `check_files`, every file against its sha256); every problem is a
  UserError naming the folder or file."""
  try:
    art = ArtifactFolder.read(folder)
    try: validate_manifest(art.manifest)
    except ValueError as error: raise ArtifactError(f"{folder}: {error}") from error
    if check_files: art.verify()
  except ArtifactError as error: raise user_error(error) from error
  if config.viz: viz_session.note_artifact(folder)
  return art


def runner_class(target: str) -> type[Artifact] | None:
  """The runtime class that loads artifacts of `target` (its registry entry's `artifact`, imported when first used, so
  a runtime's optional dependencies matter only to its own target); None when the target has none."""
  if target not in target_names() or target_spec(target).artifact is None: return None
  return load(target_spec(target).artifact)


def artifact_runtime(art: ArtifactFolder, threads: int = 1, profile: bool = False,
                     variant: str | None = None) -> Artifact:
  """The Python runtime that loads this artifact (the caller closes it); the options its target's runner takes
  (c: running on `threads` threads of its thread pool, built to time each launch with `profile`; webgpu: the kernel
  `variant` to run instead of the one the device gets)."""
  runner = runner_class(art.target)
  if runner is None:
    raise UserError(f"running {art.target or 'unknown'} artifacts is not supported yet; supported: "
                    f"{', '.join(n for n in target_names() if target_spec(n).artifact is not None)}")
  if threads < 1: raise UserError(f"--threads must be at least 1, got {threads}")
  options = {k: v for k, v in (("threads", threads), ("profile", profile), ("variant", variant))
             if k in target_spec(art.target).run_options and (k != "variant" or v is not None)}
  if (threads > 1 and "threads" not in options) or (profile and "profile" not in options):
    raise UserError(f"--threads and --profile do not apply to {art.target} artifacts")
  # the folder was checked already: only a tool this machine lacks is the user's to fix, other errors are bugs
  try: return runner(art, **options)
  except ToolchainMissing as error: raise UserError(f"cannot load {art.folder}: {error}") from error


def run_values(runtime: Artifact, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """One run on inputs by original name as users hold them (storage-only types as values or bit patterns; checked
  once, by the runtime); outputs by original name, in manifest order, as values."""
  try: return runtime.run(values, values=True)
  except ArtifactError as error: raise user_error(error) from None


def run_artifact(folder: str, arrays: dict[str, np.ndarray], threads: int = 1) -> dict[str, np.ndarray]:
  """Run the artifact once; outputs by original name, in manifest order (storage-only types as values)."""
  art = open_artifact(folder)
  with artifact_runtime(art, threads) as runtime: return run_values(runtime, arrays)


def random_inputs(art: ArtifactFolder, seed: int, dims: dict[str, int] | None = None,
                  below: dict[str, int] | None = None) -> dict[str, np.ndarray]:
  """Fresh seeded input values: normal floats (never all zeros), small non-negative integers (for int4/int2 anywhere
  in their range; under `below[name]` for an input that indexes a table of that many rows), random booleans;
  storage-only types as their values (`io_arrays.value_dtype`). `dims`: the values of the sizes known only at run
  time (default: each at its largest)."""
  rng = np.random.default_rng(seed)
  if dims is None: dims = {d["name"]: d["max"] for d in art.manifest.get("dims", ())}
  out = {}
  for i in art.inputs:
    shape, dt = shape_at(i["shape"], dims), storage_type(i)
    if dt is not None and dt in lowp.INT_RANGES:
      lo, hi = lowp.INT_RANGES[dt]
      out[i["name"]] = rng.integers(lo, hi + 1, shape).astype(value_dtype(i))
    else: out[i["name"]] = models.example_array(shape, value_dtype(i), rng)
    limit = (below or {}).get(i["name"])
    if limit is not None and np.dtype(value_dtype(i)).kind in "iu": out[i["name"]] %= max(limit, 1)
  return out


def opt_text(stored) -> str:
  """A manifest opt ([op, axis, amount]) as one word of text: Opt(VECTOR,0,8)."""
  try: return repr(Opt.from_json(stored))
  except OptError: return str(stored)


def node_text(node) -> str:
  """A manifest node entry ({"name", "op"}) as one line of text."""
  return f"{node.get('name', '?')} ({node.get('op', '?')})" if isinstance(node, dict) else str(node)
