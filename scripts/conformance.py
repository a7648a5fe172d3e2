"""Run the official ONNX node conformance cases through tgc on one or more devices and write a report.

    python scripts/conformance.py --devices numpy c            # writes docs/conformance.md
    python scripts/conformance.py --devices c -k conv --no-write
    python scripts/conformance.py --devices webgpu --json webgpu.json --no-write     # runs kept apart, then
    python scripts/conformance.py --from-json numpy_c.json opencl.json webgpu.json   # one report from them

"numpy" evaluates each imported case on the interpreter; every other device is a target: each case is compiled to
that target's artifact through the ONNX backend and run by its artifact runtime (tests/onnx/conformance.py). A
target with the suffix "-cli" ("c-cli") runs each case the way a user does: `tgc compile` (with `--const` for the
inputs that set shapes, derived from the model) and `tgc run` with .npy files, then compares the .npz it writes:

    python scripts/conformance.py --devices numpy c c-cli      # both paths on c, differences listed by cause

Cases run in worker processes (2 by default, each case under a time limit; a fresh pool per device, since the
OpenCL and WebGPU drivers here cannot share a process). The report gives the totals per device
out of all cases, a table per operator (passed / total per device, and how many cases needed constant inputs,
i.e. --const), the expected-failure categories of tests/onnx/expected_failures.py, the failures that are not
expected, and the run time. `--update-expected` rewrites tests/onnx/expected_failures.py from this run's
failures on the first device (categories from the failure messages)."""
from __future__ import annotations
import argparse
import collections
import json
import multiprocessing
import os
import signal
import sys
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "onnx"))

import conformance  # noqa: E402

_CASES: list = []


class _Timeout(Exception):
  pass


def _on_alarm(signum, frame):
  raise _Timeout()


def _worker_init():
  warnings.simplefilter("ignore")
  import numpy as np
  np.seterr(all="ignore")
  signal.signal(signal.SIGALRM, _on_alarm)


def _run_one(job):
  index, device, limit = job
  case = _CASES[index]
  start = time.perf_counter()
  signal.alarm(limit)
  try: status, detail = conformance.run_case(case, device)
  except _Timeout: status, detail = "error", f"timed out after {limit} s"
  except Exception as e: status, detail = "error", f"crash: {type(e).__name__}: {e}"
  finally: signal.alarm(0)
  return case.name, device, status, detail, time.perf_counter() - start


def run(devices: list[str], workers: int, limit: int, name_filter: str | None, progress: bool,
        sample: bool = False) -> tuple[dict, dict[str, float]]:
  """(results by (case, device), seconds per device)."""
  global _CASES
  _CASES = conformance.cases()
  import tgc.frontend.onnx  # noqa: F401  (imported once here, shared by the forked workers)
  import tgc.aot.onnx_backend  # noqa: F401
  chosen = set(conformance.stratified_sample(_CASES)) if sample else {c.name for c in _CASES}
  results: dict[tuple[str, str], tuple[str, str, float]] = {}
  seconds: dict[str, float] = {}
  ctx = multiprocessing.get_context("fork")
  for device in devices:
    start = time.perf_counter()
    jobs = [(i, device, limit) for i, c in enumerate(_CASES)
            if c.name in chosen and (not name_filter or name_filter in c.name)]
    with ctx.Pool(workers, initializer=_worker_init, maxtasksperchild=100) as pool:
      for k, (name, dev, status, detail, secs) in enumerate(pool.imap_unordered(_run_one, jobs, chunksize=4), 1):
        results[(name, dev)] = (status, detail, secs)
        if progress and k % 100 == 0: print(f"  {device}: {k}/{len(jobs)} cases", file=sys.stderr, flush=True)
    seconds[device] = time.perf_counter() - start
  return results, seconds


def categorize(detail: str) -> str:
  """A short category for a failure message."""
  d = detail.lower()
  rules = [
    ("string", "string tensors"), ("regexfullmatch", "string tensors"), ("labelencoder", "string tensors"),
    ("sequence", "sequence and optional types"),
    ("optional", "sequence and optional types"),
    ("float8e8m0", "float8e8m0 dtype"), ("random", "random operators"), ("randomuniformlike", "random operators"),
    ("bernoulli", "random operators"), ("imagedecoder", "image decoding"),
    ("ai.onnx.preview.training", "training operators"), ("ai.onnx.ml", "ai.onnx.ml operators"),
    ("unsupported onnx operator", "operator not implemented"), ("timed out", "time limit"),
    ("mismatched", "numerics"), ("tolerance", "numerics"), ("dtype", "dtype"), ("shape", "shape"),
  ]
  for key, cat in rules:
    if key in d: return cat
  return "other"


def write_expected(results: dict, devices: list[str], path: str) -> None:
  """Rewrite the expected-failures file: EXPECTED_FAILURES from the reference device ("numpy") and, per compiled
  device, TARGET_FAILURES with the failures beyond those. Devices not in this run keep their entries."""
  from expected_failures import EXPECTED_FAILURES, TARGET_FAILURES
  common = dict(EXPECTED_FAILURES)
  if "numpy" in devices:
    common = {n: (categorize(d), d) for (n, dev), (st, d, _) in results.items() if dev == "numpy" and st != "pass"}
  per_device = {k: dict(v) for k, v in TARGET_FAILURES.items()}
  for dev in devices:
    if dev == "numpy": continue
    per_device[dev] = {n: (categorize(d), d) for (n, dv), (st, d, _) in results.items()
                       if dv == dev and st != "pass" and n not in common}
  lines = ['"""Known failures of the ONNX node conformance cases: case name -> (category, reason).',
           "EXPECTED_FAILURES fail on every device (the reference device \"numpy\" included); TARGET_FAILURES lists,",
           "per compiled device, the further cases that fail there. Every entry really fails",
           "(tests/onnx/test_conformance.py marks them xfail(strict=True)); regenerate with",
           '`python scripts/conformance.py --devices numpy c --update-expected` and review the diff."""',
           "from __future__ import annotations", ""]

  def entries(table: dict, indent: str) -> list[str]:
    out = []
    for name, (cat, detail) in sorted(table.items()):
      room = 120 - len(f"{indent}  ({cat!r}, ''),") - 8
      reason = detail if len(repr(detail)) <= room else detail[:room - 3] + "..."
      out += [f"{indent}{name!r}:", f"{indent}  ({cat!r}, {reason!r}),"]
    return out
  lines += ["EXPECTED_FAILURES: dict[str, tuple[str, str]] = {"] + entries(common, "  ") + ["}", ""]
  lines += ["TARGET_FAILURES: dict[str, dict[str, tuple[str, str]]] = {"]
  for dev in sorted(per_device):
    lines += [f"  {dev!r}: {{"] + entries(per_device[dev], "    ") + ["  },"]
  lines.append("}")
  with open(path, "w") as f: f.write("\n".join(lines) + "\n")


def report(results: dict, devices: list[str], seconds: dict[str, float], workers: int) -> str:
  from expected_failures import EXPECTED_FAILURES, TARGET_FAILURES
  cases = conformance.cases()
  total = len(cases)
  ran = {name for name, _ in results}
  needs = {c.name: bool(conformance.const_inputs(c.model)) for c in cases if c.name in ran}
  sampled = [d for d in devices if sum(1 for (n, dev) in results if dev == d) < total]
  ops: dict[str, list[str]] = collections.defaultdict(list)
  for c in cases:
    if c.name in ran: ops[conformance.case_op(c)].append(c.name)
  times = ", ".join(f"{d} {seconds.get(d, 0):.0f} s" for d in devices)
  out = ["# ONNX node conformance", "",
         "The official ONNX node test cases (`onnx.backend.test.case.node.collect_testcases()`, onnx "
         f"{_onnx_version()}). On `numpy` each case is imported with `frontend.onnx.load_model` and evaluated by the "
         "interpreter (the reference). On every other device (a target) each case is compiled by the ONNX backend "
         "(`aot.onnx_backend.TgcBackend`: the `tgc compile` pipeline) into that target's artifact, which its Python "
         "artifact runtime loads and runs; the compiler sees only the values of inputs that set shapes, passed as "
         "compile-time constants (`--const`; the table counts the cases that needed that). Outputs are compared with "
         "the expected ones (floats: rtol 1e-3, atol 1e-5; float16: rtol 1e-2, atol 1e-3; bfloat16: rtol 2e-2, "
         "atol 1e-3; other types exact), except elements ONNX leaves undefined (see below). A device named "
         "`<target>-cli` runs each case the way a user does instead: `tgc compile model.onnx` with `--const` for the "
         "inputs that set shapes and `--input-shape` for inputs declared with dynamic dims, then `tgc run` with one "
         ".npy file per input (storage-only types as their float32/int8/uint8 values) and the outputs read back from "
         "the .npz it writes. On webgpu, int64 and float64 tensors are held as 32-bit words (WGSL has no "
         "64-bit types).", "",
         f"Generated by `python scripts/conformance.py --devices {' '.join(devices)}` ({workers} workers; run time "
         f"per device: {times})" + (f"; {', '.join(sampled)} ran `--sample`" if sampled else "") + ".", "",
         "## Totals", "",
         "A device that ran only the stratified sample (`--sample`: the first two cases of every operator) shows how",
         "many cases it ran; its rate is of the cases it ran, not of all cases.", "",
         "| device | passed | ran | of all cases | rate |", "|---|---|---|---|---|"]
  for d in devices:
    passed = sum(1 for (n, dev), r in results.items() if dev == d and r[0] == "pass")
    run_here = sum(1 for (n, dev) in results if dev == d)
    out.append(f"| {d} | {passed} | {run_here} | {total} | {100 * passed / max(run_here, 1):.1f}% |")
  out += ["", "## Expected failures (tests/onnx/expected_failures.py)", "", "| category | cases | example |",
          "|---|---|---|"]
  cats: dict[str, list[str]] = collections.defaultdict(list)
  for name, (cat, _) in EXPECTED_FAILURES.items(): cats[cat].append(name)
  for cat, names in sorted(cats.items(), key=lambda kv: (-len(kv[1]), kv[0])):
    out.append(f"| {cat} | {len(names)} | `{sorted(names)[0]}`: {EXPECTED_FAILURES[sorted(names)[0]][1][:90]} |")
  for d in devices:
    target = TARGET_FAILURES.get(d, {})
    if target:
      tcats = collections.Counter(cat for cat, _ in target.values())
      out += ["", f"Further expected failures on {d}: {len(target)} (" +
              ", ".join(f"{c}: {k}" for c, k in sorted(tcats.items())) + f"), e.g. `{sorted(target)[0]}`: " +
              _cell(target[sorted(target)[0]][1][:90])]
    unexpected = sorted((n, r) for (n, dev), r in results.items() if dev == d and r[0] != "pass"
                        and n not in EXPECTED_FAILURES and n not in target)
    fixed = sorted(n for (n, dev), r in results.items() if dev == d and r[0] == "pass" and n in EXPECTED_FAILURES)
    out += ["", f"## Failures on {d} that are not expected ({len(unexpected)})", ""]
    if unexpected:
      out += ["| case | status | detail |", "|---|---|---|"]
      out += [f"| `{n}` | {r[0]} | {_cell(r[1])} |" for n, r in unexpected]
    else: out.append("None.")
    if fixed: out += ["", f"Expected failures that pass on {d}: " + ", ".join(f"`{n}`" for n in fixed)]
  out += _cli_section(results, devices)
  out += _undefined_section()
  out += _kernel_checks_section()
  out += ["", "## Per operator", "",
          "| operator | cases | needed --const | " + " | ".join(devices) + " |",
          "|---|---|---|" + "---|" * len(devices)]
  for op in sorted(ops, key=str.lower):
    names = ops[op]
    cells = []
    for d in devices:
      p = sum(1 for n in names if results.get((n, d), ("",))[0] == "pass")
      cells.append(f"{p}/{sum(1 for n in names if (n, d) in results)}")
    out.append(f"| {op} | {len(names)} | {sum(needs[n] for n in names) or ''} | " + " | ".join(cells) + " |")
  return "\n".join(out) + "\n"


def _cli_section(results: dict, devices: list[str]) -> list[str]:
  """For each target run both in-process and through the command line ("c" and "c-cli"): the pass counts of the
  cases both ran and every case whose verdict differs, grouped by the cause its message names."""
  out: list[str] = []
  for cli in [d for d in devices if d.endswith(conformance.CLI_SUFFIX)]:
    base = cli[:-len(conformance.CLI_SUFFIX)]
    if base not in devices: continue
    both = sorted({n for (n, d) in results if d == cli} & {n for (n, d) in results if d == base})
    passed = {d: sum(results[(n, d)][0] == "pass" for n in both) for d in (base, cli)}
    differ = [n for n in both if (results[(n, base)][0] == "pass") != (results[(n, cli)][0] == "pass")]
    out += ["", f"## The command line against in-process on {base}", "",
            f"`{cli}` runs each case through `tgc compile` and `tgc run` on .npy files (with `--const` for the inputs "
            f"that set shapes and `--input-shape` for inputs declared with dynamic dims), `{base}` through the ONNX "
            f"backend in-process. Of the {len(both)} cases both ran, {passed[base]} pass in-process and "
            f"{passed[cli]} through the command line; {len(differ)} differ" + (":" if differ else ".")]
    if differ:
      out.append("")
      causes: dict[str, list[str]] = collections.defaultdict(list)
      for n in differ:
        loser = cli if results[(n, base)][0] == "pass" else base
        causes[f"fails on {loser}: {categorize(results[(n, loser)][1])}"].append(n)
      out += ["| cause | cases | example |", "|---|---|---|"]
      for cause, names in sorted(causes.items()):
        loser = cause.split(":")[0].split()[-1]
        out.append(f"| {cause} | {len(names)} | `{names[0]}`: {_cell(results[(names[0], loser)][1][:120])} |")
  return out


def _undefined_section() -> list[str]:
  """The elements of expected outputs that are not compared because ONNX leaves them undefined."""
  out = ["", "## Elements the ONNX specification leaves undefined", "",
         "These elements of the expected outputs are compared on no device (tests/onnx/conformance.py "
         "`UNDEFINED_RULES`, `defined_elements`); the rest of each output is compared as usual.", "",
         "| operators | elements | specification |", "|---|---|---|"]
  for ops, what, spec in conformance.UNDEFINED_RULES:
    out.append(f"| {', '.join(ops)} | {what} | {_cell(spec)} |")
  return out


def _kernel_checks_section() -> list[str]:
  """The CUDA (NVRTC) and Metal (shim) compile counts of every node-case kernel, copied from the table of
  docs/kernel_checks.md (written by scripts/kernel_checks.py), or nothing when that report is missing."""
  path = os.path.join(ROOT, "docs", "kernel_checks.md")
  if not os.path.isfile(path): return []
  with open(path, encoding="utf-8") as f: lines = f.read().splitlines()
  if "## Kernel checks" not in lines: return []
  start = lines.index("## Kernel checks") + 1
  table = [ln for ln in lines[start:start + 12] if ln.startswith("|")]
  run = [ln for ln in lines if ln.startswith("Generated by")]
  return ["", "## CUDA and Metal kernels", "",
          "The kernels of the node cases and the light models, lowered for `cuda` and `metal`, compiled with NVRTC "
          "and checked with clang++ against a `metal_stdlib` shim (no GPU or macOS here; details, failures and CPU "
          "runs through the shim in [kernel_checks.md](kernel_checks.md)). " + (run[0] if run else ""), ""] + table


def _cell(text: str) -> str:
  text = text.replace("|", "\\|").replace("\n", " ")
  return text if len(text) <= 160 else text[:157] + "..."


def _onnx_version() -> str:
  import onnx
  return onnx.__version__


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--devices", nargs="+", default=["numpy"], help="devices to run on (numpy, c, opencl, ...)")
  ap.add_argument("--workers", type=int, default=2)
  ap.add_argument("--timeout", type=int, default=300, help="seconds per case")
  ap.add_argument("-k", dest="name_filter", default=None, help="only cases whose name contains this")
  ap.add_argument("--output", default=os.path.join(ROOT, "docs", "conformance.md"))
  ap.add_argument("--json", default=None, help="also write every result to this JSON file")
  ap.add_argument("--from-json", nargs="+", default=None,
                  help="write the report from the JSON files of earlier runs (merged, devices in file order)")
  ap.add_argument("--no-write", action="store_true", help="print the summary only")
  ap.add_argument("--update-expected", action="store_true",
                  help="rewrite tests/onnx/expected_failures.py from the failures of this run")
  ap.add_argument("--sample", action="store_true", help="only the stratified sample CI runs (2 cases per operator)")
  args = ap.parse_args(argv)
  if args.from_json:
    args.devices, results, seconds = [], {}, {}
    for path in args.from_json:
      with open(path) as f: saved = json.load(f)
      args.devices += [d for d in saved["devices"] if d not in args.devices]
      args.workers = saved["workers"]
      seconds.update(saved["seconds"])
      results.update({(k.split(":", 1)[1], k.split(":", 1)[0]): tuple(v) for k, v in saved["results"].items()})
  else:
    results, seconds = run(args.devices, args.workers, args.timeout, args.name_filter, progress=True,
                           sample=args.sample)
  for d in args.devices:
    c = collections.Counter(r[0] for (n, dev), r in results.items() if dev == d)
    print(f"{d}: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())) + f" (of {len(conformance.cases())})")
  if args.json:
    with open(args.json, "w") as f:
      json.dump({"devices": args.devices, "workers": args.workers, "seconds": seconds,
                 "results": {f"{d}:{n}": list(r) for (n, d), r in sorted(results.items())}}, f, indent=0)
  if args.update_expected:
    if args.name_filter or args.sample:
      print("--update-expected needs a full run (no -k, no --sample)", file=sys.stderr)
      return 2
    write_expected(results, args.devices, os.path.join(ROOT, "tests", "onnx", "expected_failures.py"))
    sys.modules.pop("expected_failures", None)
  if not args.no_write and not args.name_filter and not args.sample:
    with open(args.output, "w") as f: f.write(report(results, args.devices, seconds, args.workers))
    print(f"wrote {os.path.relpath(args.output, ROOT)} ({sum(seconds.values()):.0f} s)")
  return 0


if __name__ == "__main__":
  sys.exit(main())
