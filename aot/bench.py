"""`tgc bench`: time whole runs of an artifact through its own loader (not tgc's kernels), and with `--profile`
(C) each kernel launch inside those runs, gathered per kernel with rates from the manifest's op and byte counts."""
from __future__ import annotations
import statistics
from dataclasses import dataclass
import numpy as np
from tgc.runtimes import roofline
from tgc.runtimes.artifact import ArtifactError
from tgc.runtimes.roofline import Roofline
from tgc.aot.artifact import artifact_runtime, node_text, open_artifact, opt_text, random_inputs, user_error
from tgc.aot.errors import UserError


SLOW_FRACTION = 0.10     # a kernel below this fraction of the roofline is slow
SLOW_SHARE = 0.05        # and worth a look when it takes at least this share of a run


@dataclass
class KernelProfile:
  """One kernel of a profiled artifact: its launches per run and their time per run, share of the profiled total,
  and rates from the manifest's op and byte counts."""
  kernel: str
  launches: int
  seconds: float
  share: float
  gflops: float
  gbytes: float
  opts: list[str]
  nodes: list[str]
  roofline: float | None = None   # fraction of the machine's roofline reached (None: not measured)

  @property
  def slow(self) -> bool:
    """Below 10% of the roofline: what was fused or chosen for this kernel deserves a look."""
    return self.roofline is not None and self.roofline < SLOW_FRACTION


@dataclass
class BenchReport:
  folder: str
  runs: int
  warmup: int
  median_s: float
  p90_s: float
  min_s: float
  arena_bytes: int
  weights_bytes: int
  code_bytes: int
  threads: int = 1
  profile: list[KernelProfile] | None = None     # with --profile: per kernel, slowest first
  each_run: str = ""                             # what one timed run is, when not the obvious (an artifact's states)


def bench_artifact(folder: str, runs: int = 50, warmup: int = 5, seed: int = 0, threads: int = 1,
                   profile: bool = False) -> BenchReport:
  """Time whole runs of the artifact itself (its own loader, not tgc's kernels); `profile` (C) also times each
  kernel launch inside those runs."""
  if runs < 1: raise UserError(f"--runs must be at least 1, got {runs}")
  if warmup < 0: raise UserError(f"--warmup must be at least 0, got {warmup}")
  art = open_artifact(folder)
  held, dims, each_run = decode_step(art.manifest)
  feeds = random_inputs(art, seed, dims)
  with artifact_runtime(art, threads, profile) as runtime:
    before = (lambda: runtime.reset_state(held)) if held is not None else None

    def timed(n: int) -> list[float]:
      if before: before()       # the inputs' shapes are checked against the states' length once, first
      return runtime.time(feeds, n, 0, values=True, before=before)
    try:
      timed(warmup)
      if profile: runtime.profile_reset()
      times = [float(t) for t in timed(runs)]
    except ArtifactError as error: raise user_error(error) from None
    per_call = runtime.profile() if profile else None
  if not times: raise RuntimeError("the artifact runtime returned no timings")
  kernels = None
  if per_call is not None:
    kernels = kernel_profile(art.manifest, per_call, len(times), machine_roofline(art.manifest))
  return BenchReport(folder, len(times), warmup, statistics.median(times), float(np.percentile(times, 90)),
                     min(times), int(art.manifest.get("arena_bytes", 0)), art.weights_bytes, art.code_bytes(),
                     threads, kernels, each_run)


def decode_step(manifest: dict) -> tuple[int | None, dict | None, str]:
  """What `tgc bench` times for an artifact keeping states: one call at the smallest run-time sizes (a decoder's
  one new token) with its states holding half their capacity, reset to that before each run. Returns that length
  (None without states), the sizes (None: the default, each at its largest) and a description."""
  states = manifest.get("states")
  if not states: return None, None, ""
  dims = {d["name"]: d["min"] for d in manifest.get("dims", ())}
  held = min(st["shape"][st["axis"]] for st in states) // 2
  dims.update({st["length"]: held for st in states})
  sizes = ", ".join(f"{k}={v}" for k, v in dims.items() if k not in {st["length"] for st in states})
  return held, dims, f"one call ({sizes}) with {held} entries in each state"


def _call_bytes(manifest: dict, call: dict) -> int:
  """The bytes a launch must move at least: every buffer it binds, read or written once."""
  tables = {"arena": manifest.get("arena_buffers", []), "input": manifest["inputs"], "output": manifest["outputs"],
            "weight": manifest["weights"]["tensors"]}
  return sum(int(tables[a["kind"]][a["index"]].get("nbytes", 0)) for a in call["args"] if a["kind"] in tables)


def machine_roofline(manifest: dict) -> Roofline | None:
  """This machine's roofline at the vector width a C artifact's kernels were generated for (None: not C)."""
  cpu = manifest.get("target_info", {}).get("cpu")
  return roofline.measure(int(cpu["vector_bytes"]), tuple(cpu.get("cflags", ()))) if cpu else None


def kernel_profile(manifest: dict, per_call: list[float], runs: int, machine: Roofline | None = None
                   ) -> list[KernelProfile]:
  """Launch times (seconds summed over `runs` runs, manifest call order) gathered per kernel, slowest first; with
  `machine`, each kernel's fraction of that roofline."""
  info = {k["name"]: k for k in manifest["kernels"]}
  seconds: dict[str, float] = {}
  launches: dict[str, int] = {}
  traffic: dict[str, int] = {}
  for call, s in zip(manifest["calls"], per_call):
    seconds[call["kernel"]] = seconds.get(call["kernel"], 0.0) + s / runs
    launches[call["kernel"]] = launches.get(call["kernel"], 0) + 1
    traffic[call["kernel"]] = traffic.get(call["kernel"], 0) + _call_bytes(manifest, call)
  total = sum(seconds.values()) or 1.0
  out = []
  for name, s in sorted(seconds.items(), key=lambda kv: -kv[1]):
    k, n = info[name], launches[name]
    rate = (lambda x: x * n / s / 1e9) if s > 0 else (lambda x: 0.0)
    fraction = machine.fraction(k.get("ops", 0) * n, traffic[name], s) if machine else None
    out.append(KernelProfile(name, n, s, s / total, rate(k.get("ops", 0)), rate(k.get("bytes", 0)),
                             [opt_text(o) for o in k.get("opts", [])], [node_text(o) for o in k.get("nodes", [])],
                             fraction))
  return out
