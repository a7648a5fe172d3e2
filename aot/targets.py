"""The targets `tgc` compiles for, from the command line's words: `--target` names one of codegen.registry's (c,
cuda, metal, opencl, webgpu) and `--cpu` a CPU level (CPU targets only); `make_target` gives the typed
`codegen.target.Target` the pipeline passes down. Bad words are a `UserError`."""
from __future__ import annotations
from tgc.codegen.registry import target_names, target_spec
from tgc.codegen.target import Target
from tgc.aot.errors import UserError


def check_target(target: str) -> str:
  """The target's name, lower case; a UserError listing the supported ones when it is not one of them."""
  t = str(target).strip().lower()
  if t not in target_names():
    raise UserError(f"target {target} is not supported yet; supported: {', '.join(target_names())}")
  return t


def make_target(target: str, cpu: str | None = None, precision: str | None = None) -> Target:
  """The Target of a --target name, --cpu level (CPU targets only) and --precision (GPU targets). The default CPU
  is `portable`: the baseline level of this machine's architecture, so that an artifact runs on every CPU of it
  (`--cpu native` for the compiling machine's own level)."""
  name = check_target(target)
  if cpu is not None and not target_spec(name).cpu:
    cpus = ", ".join(n for n in target_names() if target_spec(n).cpu)
    raise UserError(f"--cpu applies to CPU targets ({cpus}), not {name}")
  try: return Target.make(name, cpu=cpu or "portable", **({"precision": precision} if precision else {}))
  except ValueError as error: raise UserError(str(error)) from None
