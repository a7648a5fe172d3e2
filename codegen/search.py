"""BEAM search over opt actions, timed on the real target. A runtime lives above codegen, so the caller passes the
timing in: `measure(programs, stop_after)` -> seconds per program (it may build them all at once and stop timing a
program once it is slower than `stop_after`).

The search starts from the hand-coded choice and varies what it decided, one decision per stage, keeping the `width`
fastest after each stage:
  1. the VECTOR axis and its lanes (or none), each with the heuristics' register blocking and loop order (over the
     loops as they are and, where the heuristics merged two, as merged),
  2. the register block: which output axes are upcast and by how much (up to the target's vector registers), each
     with the heuristics' loop order,
  3. the loop order (which reduce loop is innermost, which output loop outermost) and unrolling the reduce loop;
every candidate of a CPU stage also gets what the heuristics add after a block (`heuristics.after_block`: the
unrolling an integer dot-product instruction needs, a short window's taps unrolled), with the kernel's own weights
known as the heuristics know them (an int8 kernel's candidates keep their dot products).
On GPU targets the stages are the LOCAL split (work-group shape), the GROUP split of a reduction and the upcasts.
The heuristics' opts are always a candidate. At the end the finalists (the beam and the heuristics) are timed again
in CONFIRM_ROUNDS interleaved rounds; a finalist replaces the heuristics only when the median of its rounds is at
least MARGIN faster, and again in rounds of its own against the heuristics alone (the fastest of several medians is
biased fast), so a search never returns something slower than the heuristics by its own noise, and the speedup it
reports is that last one. Results are cached on disk keyed by (kernel AST key, target, device);
`Tuning` holds the same mapping as a file a team can ship with a model."""
from __future__ import annotations
import hashlib
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Callable
from tgc.ir import Ops, UOp, AxisType
from tgc.ir.config import config
from tgc.codegen.opts import Kernel, Opt, OptError, OptOps
from tgc.codegen.lower import lower, KernelProgram
from tgc.codegen.heuristics import after_block, hand_coded_opts, reuse_block_options, GR
from tgc.codegen.target import Target, as_target

Measure = Callable[[list[KernelProgram], float], list[float]]
G, R = (AxisType.GLOBAL,), (AxisType.REDUCE,)
_LOCAL = (2, 4, 8, 16, 32, 64, 128, 256)
_GROUP = (8, 16, 32, 64, 128, 256)
_UNROLL = (2, 4)
EARLY_EXIT = 2.0      # a candidate this many times slower than the best so far is not timed further
CONFIRM_ROUNDS = 3    # interleaved re-timings of the finalists
MARGIN = 0.03         # how much faster than the heuristics a finalist must be, confirmed, to replace them


@dataclass
class SearchResult:
  opts: list[Opt]
  seconds: float                       # the best time measured
  baseline: float                      # the heuristics' time
  candidates: int                      # programs measured
  cached: bool = False


def _try(k: Kernel, opts) -> Kernel | None:
  try: return k.apply_all(opts)
  except OptError: return None


def _key(opts) -> tuple: return tuple(opts)


# ---------------------------------------------------------------- candidate generation (CPU)
def _vector_options(k: Kernel, target: Target) -> list[list[Opt]]:
  """Every VECTOR split worth trying: each output or reduce axis, lanes from the register width down to 4."""
  out: list[list[Opt]] = [[]]
  lanes = target.vector_lanes(4)
  for i, r in enumerate(k.axes(GR)):
    w = lanes
    while w >= 4:
      if Kernel.size(r) % w == 0: out.append([Opt(OptOps.VECTOR, i, w)])
      w //= 2
  return out


def _order_options(k: Kernel) -> list[list[Opt]]:
  """Loop orders: each reduce loop innermost, each output loop outermost, and unrolling the innermost reduce loop."""
  glob, red = k.axes(G), k.axes(R)
  out: list[list[Opt]] = [[]]
  out += [[Opt(OptOps.SWAP, len(glob) + i, len(glob) + len(red) - 1)] for i in range(len(red) - 1)]
  out += [[Opt(OptOps.SWAP, 0, i)] for i in range(1, len(glob))]
  out += [[Opt(OptOps.UNROLL, len(red) - 1, n)] for n in _UNROLL if red and Kernel.size(red[-1]) % n == 0]
  return out


def _gpu_options(k: Kernel, stage: int) -> list[list[Opt]]:
  glob, red = k.axes(G), k.axes(R)
  if stage == 0:
    return [[]] + [[Opt(OptOps.LOCAL, i, n)] for i, r in enumerate(glob) for n in _LOCAL if Kernel.size(r) % n == 0]
  if stage == 1:
    return [[]] + [[Opt(OptOps.GROUP, i, n)] for i, r in enumerate(red) for n in _GROUP if Kernel.size(r) % n == 0]
  return [[]] + [[Opt(OptOps.UPCAST, i, n)] for i, r in enumerate(glob) for n in (2, 4) if Kernel.size(r) % n == 0]


def _stage_candidates(ast: UOp, target: Target, base: list[Opt], stage: int,
                      constant: frozenset = frozenset()) -> list[list[Opt]]:
  """Opt lists that differ from `base` in one decision of stage `stage` (see the module docstring), each completed
  by the heuristics' later decisions (`after_block`: the unrolling an integer dot product needs among them).
  `constant`: the kernel's own weights, as for `hand_coded_opts`."""
  k = Kernel(ast)
  if target.has_workgroups:
    keep = [o for o in base if o.op not in ((OptOps.LOCAL,), (OptOps.GROUP,), (OptOps.UPCAST,))[stage]]
    kk = _try(k, keep)
    return [keep + o for o in _gpu_options(kk, stage)] if kk is not None else []
  merge = [o for o in base if o.op is OptOps.MERGE]
  vec = merge + [o for o in base if o.op is OptOps.VECTOR]
  block = [o for o in base if o.op is OptOps.UPCAST]
  if stage == 0:
    out = []
    for loops in ([[], merge] if merge else [[]]):     # the vectors of the loops as they are and as merged
      km = _try(k, loops)
      for v in _vector_options(km, target) if km is not None else []:
        kv = _try(km, v)
        if kv is not None: out.append(hand_coded_opts(kv, target, constant, vector=False))
    return out
  kv = _try(k, vec)
  if kv is None: return []
  if stage == 1:
    blocks = (_try(kv, b) for b in reuse_block_options(kv, target, constant=constant))
    return [after_block(kb, target, constant).opts for kb in blocks if kb is not None]
  kb = _try(kv, block)
  orders = (_try(kb, o) for o in _order_options(kb)) if kb is not None else ()
  return [after_block(ko, target, constant, order=False).opts for ko in orders if ko is not None]


# ---------------------------------------------------------------- the search
def beam_search(ast: UOp, target: Target | str, measure: Measure, width: int = 2, device: str = "",
                progress: Callable[[str], None] | None = None, weights: dict[int, int] | None = None,
                deadline: float | None = None) -> SearchResult:
  """The fastest opts found for `ast` on `target` (see the module docstring). `measure` times programs;
  `deadline` (time.monotonic) stops the search early with the best so far."""
  target = as_target(target)
  path = cache_path(ast, target, device)
  if os.path.exists(path):
    with open(path) as f: cached = json.load(f)
    return SearchResult([Opt.from_json(o) for o in cached["opts"]], cached["seconds"], cached["baseline"], 0, True)
  say = progress or ((lambda m: print(m, file=sys.stderr)) if config.debug >= 2 else (lambda m: None))
  timed: dict[tuple, float] = {}
  built: dict[tuple, KernelProgram] = {}

  def run(cands: list[list[Opt]]) -> None:
    fresh, programs = [], []
    for c in dict.fromkeys(_key(c) for c in cands):
      if c in timed: continue
      try: programs.append(lower(ast, target, list(c), name=f"tg_cand{len(timed) + len(fresh)}", weights=weights))
      except (OptError, ValueError): timed[c] = math.inf; continue
      fresh.append(c)
      built[c] = programs[-1]
    if not fresh: return
    best = min((t for t in timed.values()), default=math.inf)
    for c, t in zip(fresh, measure(programs, best * EARLY_EXIT)): timed[c] = t

  own = frozenset(weights or ())
  base = hand_coded_opts(Kernel(ast), target, own)
  run([base])
  baseline = timed[_key(base)]
  beam = [_key(base)]
  for stage in range(3):
    if deadline is not None and time.monotonic() > deadline: break
    cands = [c for b in beam for c in _stage_candidates(ast, target, list(b), stage, own)]
    run(cands)
    beam = sorted(dict.fromkeys(beam + [_key(c) for c in cands if _key(c) in timed]), key=timed.__getitem__)[:width]
    say(f"beam stage {stage + 1}: {len(timed)} candidates, best {timed[beam[0]] * 1e6:.1f} us "
        f"({baseline / timed[beam[0]]:.2f}x the heuristics) {list(beam[0])}")
  finalists = [c for c in dict.fromkeys([_key(base)] + beam) if math.isfinite(timed[c])]
  confirmed = _confirm(finalists, built, measure)
  baseline = confirmed.get(_key(base), baseline)
  best = min(confirmed, key=lambda c: (confirmed[c], c != _key(base))) if confirmed else _key(base)
  if best != _key(base) and confirmed[best] > baseline * (1 - MARGIN): best = _key(base)
  if best != _key(base):
    # the fastest of several noisy medians is fast by luck too: the winner is timed against the heuristics once
    # more, apart from the rounds that chose it, and that time is the one it must win by and the one reported
    confirmed = _confirm([_key(base), best], built, measure)
    baseline = confirmed[_key(base)]
    if confirmed[best] > baseline * (1 - MARGIN): best = _key(base)
  result = SearchResult(list(best), confirmed.get(best, timed[best]), baseline, len(timed))
  _write_json(path, {"opts": [o.to_json() for o in result.opts], "seconds": result.seconds,
                     "baseline": result.baseline})
  return result


def _confirm(finalists: list[tuple], built: dict[tuple, KernelProgram], measure: Measure) -> dict[tuple, float]:
  """Median time of each finalist over CONFIRM_ROUNDS rounds that time them all in turn (each round in another
  order), so that no finalist wins by a quiet moment of the machine."""
  if len(finalists) < 2: return {}
  rounds: dict[tuple, list[float]] = {c: [] for c in finalists}
  for r in range(CONFIRM_ROUNDS):
    order = finalists[r % len(finalists):] + finalists[:r % len(finalists)]
    for c, t in zip(order, measure([built[c] for c in order], math.inf)): rounds[c].append(t)
  return {c: sorted(ts)[len(ts) // 2] for c, ts in rounds.items()}


def cache_path(ast: UOp, target: Target, device: str) -> str:
  h = hashlib.sha256(f"{ast.key}|{target}|{device}".encode()).hexdigest()
  return os.path.join(config.cache_dir, "beam", h[:2], h + ".json")


def _write_json(path: str, obj) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  tmp = f"{path}.{os.getpid()}.tmp"
  with open(tmp, "w") as f: json.dump(obj, f, sort_keys=True)
  os.replace(tmp, path)


def has_reduce(ast: UOp) -> bool: return any(n.op is Ops.REDUCE for n in ast.toposort())


# ---------------------------------------------------------------- tuning files
TUNING_FORMAT = 1


@dataclass
class Tuning:
  """Searched opts by kernel: (kernel AST key, target, device) -> opts, as `tgc tune` writes them and
  `tgc compile --tuning` reads them."""
  entries: dict[tuple[str, str, str], list[Opt]] = field(default_factory=dict)

  def get(self, ast: UOp, target: Target, device: str) -> list[Opt] | None:
    return self.entries.get((ast.key, str(target), device))

  def put(self, ast: UOp, target: Target, device: str, opts: list[Opt]) -> None:
    self.entries[(ast.key, str(target), device)] = list(opts)

  def to_json(self) -> str:
    rows = [{"kernel": k, "target": t, "device": d, "opts": [o.to_json() for o in opts]}
            for (k, t, d), opts in sorted(self.entries.items())]
    return json.dumps({"format": TUNING_FORMAT, "entries": rows}, indent=1, sort_keys=True) + "\n"

  @staticmethod
  def from_json(text: str, where: str = "tuning file") -> Tuning:
    try: data = json.loads(text)
    except ValueError as error: raise ValueError(f"{where}: not JSON ({error})") from None
    if not isinstance(data, dict) or data.get("format") != TUNING_FORMAT or not isinstance(data.get("entries"), list):
      raise ValueError(f"{where}: not a tgc tuning file (format {TUNING_FORMAT})")
    out = Tuning()
    for i, row in enumerate(data["entries"]):
      try:
        opts = [Opt.from_json(o) for o in row["opts"]]
        out.entries[(str(row["kernel"]), str(row["target"]), str(row["device"]))] = opts
      except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{where}: entry {i} is malformed ({error})") from None
    return out

