"""The targets `tgc` compiles for, from the command line's words: `--target` names one (c, opencl, webgpu, metal,
cuda) and `--cpu` a CPU level (target c only); `make_target` gives the typed `codegen.target.Target` the pipeline
passes down. Bad words are a `UserError`."""
from __future__ import annotations
from tgc.codegen.target import Target
from tgc.aot.errors import UserError

SUPPORTED_TARGETS = ("c", "opencl", "webgpu", "metal", "cuda")


def check_target(target: str) -> str:
  """The target's name, lower case; a UserError listing the supported ones when it is not one of them."""
  t = str(target).strip().lower()
  if t not in SUPPORTED_TARGETS:
    raise UserError(f"target {target} is not supported yet; supported: {', '.join(SUPPORTED_TARGETS)}")
  return t


def make_target(target: str, cpu: str | None = None, precision: str | None = None) -> Target:
  """The Target of a --target name, --cpu level (C only; default: the machine that compiles) and --precision
  (GPU targets)."""
  name = check_target(target)
  if cpu is not None and name != "c": raise UserError(f"--cpu applies to target c only, not {name}")
  try: return Target.make(name, cpu=cpu or "native", **({"precision": precision} if precision else {}))
  except ValueError as error: raise UserError(str(error)) from None
