"""BEAM over a whole model: which kernels to search, in what order, within what time, on which machines.

`tune(items, weights, target, ...)` first times every distinct kernel as the heuristics build it (the same kernel
AST is searched once, however often the model calls it), then searches kernels in order of their share of that
total until the budget (`--beam-budget` seconds) is spent; a kernel left unsearched keeps the heuristics' opts.
Results come from, and go to, the disk cache keyed by (kernel AST key, target, device), so a second compile finds
them without searching. A progress line on stderr tells kernels done, time left and the best speedup so far;
DEBUG=2 prints each search stage. `Tuning` files (`tgc tune -o`) hold the same results to ship with a model:
`tgc compile --tuning` applies them without searching (kernels it has no entry for get the heuristics' opts).

The candidates of a kernel are built and timed on this machine's runtime for the target (`--jobs` compiler calls
at once), or on a Ray cluster (`--beam-cluster auto` or an address): its workers must be the target hardware, so a
worker that reports a device other than the first one's is refused.

`searched_opts` is what `tgc compile` asks for (--beam, --tuning); `tune_model` is `tgc tune`."""
from __future__ import annotations
import math
import socket
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Callable
from tgc.ir.sint import variables
from tgc.ir.config import config
from tgc.codegen.compiled import buffer_nbytes, own_weights
from tgc.codegen.lower import KernelProgram, lower
from tgc.codegen.opts import Opt
from tgc.codegen.search import SearchResult, Tuning, beam_search
from tgc.codegen.target import Target
from tgc.runtimes import RuntimeUnavailable, get_runtime
from tgc.runtimes.timing import batch_measure
from tgc.aot import models
from tgc.aot.errors import UserError
from tgc.aot.targets import make_target


@dataclass
class KernelTuning:
  key: str
  calls: int
  share: float                   # of the heuristic build's kernel time
  result: SearchResult | None    # None: not searched (budget spent)


@dataclass
class TuneReport:
  device: str
  seconds: float
  kernels: list[KernelTuning] = field(default_factory=list)

  @property
  def estimated_speedup(self) -> float:
    """Over the kernels searched: their time with the heuristics' opts over their time with the opts found."""
    searched = [k for k in self.kernels if k.result is not None]
    after = sum(k.result.seconds * k.calls for k in searched)
    return sum(k.result.baseline * k.calls for k in searched) / after if after > 0 else 1.0


class LocalMeasure:
  """Builds and times candidates on this machine's runtime for the target."""

  def __init__(self, target: Target, jobs: int):
    try: self.rt = get_runtime(target.name)
    except (RuntimeUnavailable, ValueError) as error:
      raise UserError(f"--beam needs a {target.name} runtime on this machine: {error}") from None
    self.device = getattr(self.rt, "device_name", target.name)
    self.jobs = jobs

  def for_kernel(self, item_bytes: list[int]) -> Callable[[list[KernelProgram], float], list[float]]:
    return batch_measure(self.rt, item_bytes, self.jobs)


class RayMeasure:
  """Builds and times candidates on the workers of a Ray cluster (`address`: "auto" for the cluster this machine
  belongs to, or host:port). Each batch is split over the cluster's CPUs; every worker must report the same device."""

  def __init__(self, address: str, target: Target):
    try:
      import ray
    except ImportError:
      raise UserError("--beam-cluster needs Ray: pip install 'tgc[ray]'") from None
    self.ray, self.target = ray, target
    _check_reachable(address)
    try:
      if not ray.is_initialized(): ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    # ConnectionError and Ray's own errors: the cluster is not there (Ray 2.60 exits the process when its GCS
    # client times out: a SystemExit here)
    except (Exception, SystemExit) as error:
      raise UserError(f"--beam-cluster {address}: cannot reach a Ray cluster "
                      f"({str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__})") \
        from None
    self.workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
    self.remote = ray.remote(_measure_on_worker)
    self.device = ray.get(self.remote.remote(target.name, [], [], 0.0))[0]

  def for_kernel(self, item_bytes: list[int]) -> Callable[[list[KernelProgram], float], list[float]]:
    def measure(programs: list[KernelProgram], stop_after: float = math.inf) -> list[float]:
      chunks = [programs[i::self.workers] for i in range(self.workers)]
      done = self.ray.get([self.remote.remote(self.target.name, c, item_bytes, stop_after) for c in chunks if c])
      times: dict[int, float] = {}
      for i, (device, ts) in enumerate(done):
        if device != self.device:
          raise UserError(f"--beam-cluster: a worker reports device {device!r}, not {self.device!r}; every worker "
                          f"must be the target hardware")
        for j, t in enumerate(ts): times[i + j * self.workers] = t
      return [times[i] for i in range(len(programs))]
    return measure


def _check_reachable(address: str, timeout: float = 5.0) -> None:
  """A UserError at once when a host:port cluster address accepts no connection (Ray itself retries for minutes)."""
  host, _, port = address.rpartition(":")
  if address == "auto" or not host or not port.isdigit(): return
  try: socket.create_connection((host, int(port)), timeout=timeout).close()
  except OSError as error:
    raise UserError(f"--beam-cluster {address}: cannot reach a Ray cluster ({error.strerror or error})") from None


def _measure_on_worker(target_name: str, programs: list, item_bytes: list[int], stop_after: float):
  """On a cluster worker: (its device, the programs' times)."""
  rt = get_runtime(target_name)
  times = batch_measure(rt, item_bytes)(programs, stop_after) if programs else []
  return getattr(rt, "device_name", target_name), times


def cluster_measure(address: str, target: Target) -> RayMeasure:
  return RayMeasure(address, target)


def local_device(target: Target) -> str:
  """This machine's device for `target` ('' when it has no runtime for it)."""
  try: return getattr(get_runtime(target.name), "device_name", target.name)
  except (RuntimeUnavailable, ValueError): return ""


def tune(items: list, weights: list, target: Target, width: int = 2, budget: float | None = None, jobs: int = 1,
         measurer=None, progress: Callable[[str], None] | None = None) -> tuple[dict[str, list[Opt]], TuneReport]:
  """Search the opts of the model's kernels (`items`: ScheduleItems; `weights`: (name, BUFFER, data)); returns
  kernel AST key -> opts and the report."""
  start = time.monotonic()
  measurer = measurer or LocalMeasure(target, jobs)
  say = progress or _stderr_progress()
  own = own_weights(items, {b for _, b, _ in weights})
  distinct: dict[str, tuple] = {}
  for it in items:
    key = it.ast.key
    calls = distinct[key][1] + 1 if key in distinct else 1
    distinct[key] = (it, calls)
  # the heuristics' time of each distinct kernel, to spend the budget where the time is
  base: dict[str, float] = {}
  for key, (it, calls) in distinct.items():
    prg = lower(it.ast, target, None, name="tg_base", weights=own.get(key))
    base[key] = measurer.for_kernel([buffer_nbytes(b) for b in it.bufs])([prg], math.inf)[0] * calls
  total = sum(t for t in base.values() if math.isfinite(t)) or 1.0
  order = sorted(distinct, key=lambda k: -base[k] if math.isfinite(base[k]) else 0.0)
  deadline = None if budget is None else start + budget
  report = TuneReport(measurer.device, 0.0)
  found: dict[str, list[Opt]] = {}
  for n, key in enumerate(order):
    it, calls = distinct[key]
    share = base[key] / total if math.isfinite(base[key]) else 0.0
    if deadline is not None and time.monotonic() >= deadline:
      report.kernels.append(KernelTuning(key, calls, share, None))
      continue
    result = beam_search(it.ast, target, measurer.for_kernel([buffer_nbytes(b) for b in it.bufs]), width,
                         measurer.device, weights=own.get(key), deadline=deadline)
    found[key] = result.opts
    report.kernels.append(KernelTuning(key, calls, share, result))
    left = "" if deadline is None else f", {max(0.0, deadline - time.monotonic()):.0f} s left"
    say(f"tgc: tuned {n + 1}/{len(order)} kernels ({share:.0%} of the time: {result.baseline / result.seconds:.2f}x"
        f"{' cached' if result.cached else ''}); model {report.estimated_speedup:.2f}x so far{left}")
  report.seconds = time.monotonic() - start
  return found, report


def _stderr_progress() -> Callable[[str], None]:
  """One line per kernel on stderr (rewritten in place on a terminal)."""
  tty = sys.stderr.isatty()

  def say(message: str) -> None:
    if tty and config.debug < 2: print(f"\r{message}\033[K", end="", file=sys.stderr, flush=True)
    else: print(message, file=sys.stderr, flush=True)
  return say


def opts_from_tuning(tuning: Tuning, target: Target, device: str) -> Callable:
  """opts_for(item) of a tuning file: the entry for the kernel on this target (the local device's entry when the
  file has several devices), else None (the heuristics)."""
  def opts_for(item):
    exact = tuning.get(item.ast, target, device)
    if exact is not None: return exact
    matches = sorted((d, opts) for (k, t, d), opts in tuning.entries.items() if k == item.ast.key and t == str(target))
    return matches[0][1] if matches else None
  return opts_for


def tuning_of(found: dict[str, list[Opt]], target: Target, device: str) -> Tuning:
  out = Tuning()
  for key, opts in found.items(): out.entries[(key, str(target), device)] = opts
  return out



# ---------------------------------------------------------------- the options of tgc compile and tgc tune
@dataclass
class SearchOptions:
  """How `--beam` searches: a time budget for the whole model (seconds; None: no limit), parallel compiler calls,
  a Ray cluster address ("auto" or host:port; None: this machine); or a tuning file to apply instead."""
  budget: float | None = None
  jobs: int = 1
  cluster: str | None = None
  tuning: str | None = None

  def check(self, beam: int) -> None:
    """UserError for a beam width, job count or budget out of range."""
    if beam < 1 or self.jobs < 1: raise UserError("--beam and --jobs must be at least 1")
    if self.budget is not None and self.budget <= 0: raise UserError("--beam-budget must be positive")

  def measurer(self, target: Target):
    """Where candidates are built and timed: a Ray cluster or this machine."""
    return cluster_measure(self.cluster, target) if self.cluster else LocalMeasure(target, self.jobs)


def searched_opts(items: list, weights: list, target: Target, beam: int, search: SearchOptions):
  """opts_for(item) from a BEAM search (`beam` > 0) or a tuning file; None: the heuristics decide."""
  if search.tuning is not None:
    if beam: raise UserError("--tuning and --beam exclude each other: a tuning file is a finished search")
    try:
      with open(search.tuning, encoding="utf-8") as f: tuning = Tuning.from_json(f.read(), search.tuning)
    except OSError as error: raise UserError(f"--tuning {search.tuning}: cannot read ({error.strerror})") from None
    except ValueError as error: raise UserError(str(error)) from None
    return opts_from_tuning(tuning, target, local_device(target))
  if not beam: return None
  search.check(beam)
  if variables(*(it.ast for it in items)):
    raise UserError("--beam: the model has sizes known only at run time, which the search does not time yet "
                    "(compile without --beam: the heuristics choose)")
  found, _ = tune(items, weights, target, beam, search.budget, search.jobs, search.measurer(target))
  return lambda item: found.get(item.ast.key)


def tune_model(model: str, target: str, out: str, cpu: str | None = None, beam: int = 2,
               search: SearchOptions | None = None, input_shapes: dict | None = None,
               consts: dict | None = None, const_files: dict | None = None) -> TuneReport:
  """`tgc tune`: search the kernels of MODEL for the target and write a tuning file (nothing else is written)."""
  search = search or SearchOptions()
  tgt = make_target(target, cpu)
  search.check(beam)
  spec = models.parse_model_spec(model)
  loaded = models.load_model(spec, input_shapes, consts, const_files)
  capture = models.trace_model(loaded, tgt)
  found, report = tune(capture.items, models.named_weights(capture), tgt, beam, search.budget, search.jobs,
                       search.measurer(tgt))
  text = tuning_of(found, tgt, report.device).to_json()
  tmp = f"{out}.tmp-{os.getpid()}"
  try:
    with open(tmp, "w", encoding="utf-8") as f: f.write(text)
    os.replace(tmp, out)
  except OSError as error:
    raise UserError(f"-o {out}: cannot write ({error.strerror})") from None
  return report
