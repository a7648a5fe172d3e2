"""BEAM search over opt actions, timed on the real target. The timer is passed in by the caller (a runtime lives
above codegen). Results are cached on disk keyed by (kernel AST key, target, device name)."""
from __future__ import annotations
import json
import math
import os
import sys
from typing import Callable
from tgc.ir import Ops, UOp
from tgc.ir.config import config
from tgc.codegen.opts import Kernel, Opt, OptError, OPT_KINDS
from tgc.codegen.lower import lower, KernelProgram
from tgc.codegen.target import Target, as_target

_AMOUNTS = {"UPCAST": (2, 3, 4, 8, 16), "UNROLL": (2, 4, 8), "LOCAL": (2, 4, 8, 16, 32), "GROUP": (8, 16, 32, 64)}



def candidate_opts(k: Kernel, target: Target) -> list[Opt]:
  """Every single opt that applies to `k` on `target` (C has no work-groups: no LOCAL or GROUP)."""
  target, out = as_target(target), []
  for op, amounts in _AMOUNTS.items():
    if not target.has_workgroups and op in ("LOCAL", "GROUP"): continue
    for axis in range(len(k.axes(OPT_KINDS[op][0]))):
      for amt in amounts:
        opt = Opt(op, axis, amt)
        try: k.apply(opt)
        except OptError: continue
        out.append(opt)
  return out


def _cache_path(ast: UOp, target: Target, device: str) -> str:
  import hashlib
  h = hashlib.sha256(f"{ast.key}|{target}|{device}".encode()).hexdigest()
  return os.path.join(config.cache_dir, "beam", h[:2], h + ".json")


def beam_search(ast: UOp, target: Target, timer: Callable[[KernelProgram], float], width: int,
                device: str = "", max_steps: int = 6, progress: Callable[[str], None] | None = None) -> list[Opt]:
  """Best opts found by a beam of `width`: each step extends every kept opt list by one opt, times the new
  kernels with `timer(program) -> seconds`, keeps the fastest `width`; stops when a step improves nothing."""
  target = as_target(target)
  path = _cache_path(ast, target, device)
  if os.path.exists(path):
    with open(path) as f: return [Opt(*o) for o in json.load(f)]
  say = progress or ((lambda m: print(m, file=sys.stderr)) if config.debug >= 1 else (lambda m: None))
  timed: dict[tuple, float] = {}

  def time_opts(opts: tuple) -> float:
    if opts not in timed:
      try: timed[opts] = timer(lower(ast, target, list(opts)))
      except Exception: timed[opts] = math.inf      # an opt list the target cannot compile or run
    return timed[opts]

  beam = [((), time_opts(()))]
  for step in range(max_steps):
    cands = []
    for opts, _ in beam:
      k = Kernel(ast).apply_all(opts)
      cands += [opts + (o,) for o in candidate_opts(k, target)]
    if not cands: break
    scored = sorted(((c, time_opts(c)) for c in dict.fromkeys(cands)), key=lambda x: x[1])
    best_before = beam[0][1]
    beam = sorted(beam + scored[:width], key=lambda x: x[1])[:width]
    say(f"beam step {step + 1}: {len(scored)} candidates, best {beam[0][1] * 1e6:.1f} us {list(beam[0][0])}")
    if beam[0][1] >= best_before: break
  result = list(beam[0][0])
  os.makedirs(os.path.dirname(path), exist_ok=True)
  tmp = f"{path}.{os.getpid()}.tmp"
  with open(tmp, "w") as f: json.dump([[o.op, o.axis, o.amount] for o in result], f)
  os.replace(tmp, path)
  return result


def has_reduce(ast: UOp) -> bool: return any(n.op is Ops.REDUCE for n in ast.toposort())
