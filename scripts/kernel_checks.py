"""Compile every kernel of the ONNX node suite and of the light models for CUDA and Metal on a machine without
either: each model is imported and traced once, lowered for target "cuda" and for target "metal"
(`codegen.compiled.compile_schedule`, as `aot.compile.build_compiled` does), and every kernel is compiled with
NVRTC for sm_80 and sm_90 and checked with clang++ against the `metal_stdlib` shim of tests/metal_shim (syntax,
types, address spaces). On the stratified sample of the node cases the compiled models also run on the CPU, kernel
by kernel in call order, through the Metal shim (and optionally the CUDA shim, tests/cuda_cpu.py) and their outputs
are compared with the cases' expected outputs.

    nice -n 10 python scripts/kernel_checks.py --workers 2 --json /tmp/kernel_checks.json   # writes the doc
    python scripts/kernel_checks.py --sample --no-light --doc ''                            # a quick look

Kernels are compiled one translation unit per model and prefix (kernels whose includes and helpers are the same
text share a unit, so no kernel sees a declaration it did not ask for); a unit that fails is compiled again kernel
by kernel, so every failure names its kernel. A case that does not import, or does not lower for a target (Metal
has no float64), is counted apart: that is not a kernel that failed to compile."""
from __future__ import annotations
import argparse
import collections
import hashlib
import json
import math
import multiprocessing
import os
import re
import shutil
import signal
import sys
import tempfile
import time
import warnings

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _path in (ROOT, os.path.join(ROOT, "tests"), os.path.join(ROOT, "tests", "onnx")):
  if _path in sys.path: sys.path.remove(_path)    # first: scripts/ has a conformance.py too
  sys.path.insert(0, _path)

import conformance  # noqa: E402  (tests/onnx: the node cases)

TARGETS = ("cuda", "metal")
ARCHS = ("sm_80", "sm_90")
CHECKS = {"cuda": tuple(f"nvrtc_{a}" for a in ARCHS), "metal": ("metal_shim",)}
CPU_RUN_TARGETS = ("metal", "cuda")
NODE_MODEL_NAME = "model"     # what `tgc compile model.onnx` and the ONNX backend name a model
CASE_LIMIT_S = 300            # one node case: import, lower, compile (a SIGALRM ends it)
LIGHT_LIMIT_S = 1800          # one light model
CPU_RUN_LIMIT_S = 300         # one case's CPU runs
MAX_CPU_WORK_ITEMS = 1 << 22  # CPU runs are skipped above this many work-items per run (summed over calls)
MAX_BARRIER_THREADS = 1 << 16 # ... or, for kernels with barriers (one OS thread per work-item), above this many
DOC = os.path.join(ROOT, "docs", "kernel_checks.md")


class _Timeout(Exception):
  pass


def _on_alarm(signum, frame):
  raise _Timeout()


def first_error_line(log: str) -> str:
  """The first line of a compiler log that says "error" (else its first line), without temporary paths."""
  lines = [ln.strip() for ln in str(log).splitlines() if ln.strip()]
  line = next((ln for ln in lines if "error" in ln.lower()), lines[0] if lines else "failed (no message)")
  line = re.sub(r"\S*/(kernel\.metal|[\w.-]+\.cu)\b", r"\1", line)
  return line[:300]


def _sha(text: str) -> str: return hashlib.sha256(text.encode()).hexdigest()[:16]


# ---------------------------------------------------------------- building the compiled models
def case_arrays(case) -> tuple[dict, list[str], list]:
  """(graph input name -> array, names baked in as constants, expected outputs) of a node case, as
  tests/onnx/conformance.py `run_case_compiled` prepares them. Raises TypeError/ValueError on test data tgc
  cannot take (sequences, optionals)."""
  model = case.model
  inputs, expected = case.data_sets[0]
  g = model.graph
  inits = {t.name for t in g.initializer}
  names = [i.name for i in g.input if i.name not in inits]
  arrays = [conformance._to_array(v) for v in inputs]
  want = [conformance._to_array(v) for v in expected]
  if len(arrays) != len(names): raise ValueError(f"test data has {len(arrays)} inputs for {len(names)} graph inputs")
  by_name = dict(zip(names, arrays))
  return by_name, conformance.const_inputs(model), want


def capture_model(model, input_shapes: dict | None = None, consts: dict | None = None):
  """(LoadedModel, Capture) of an ONNX ModelProto through the pipeline's own loader (the model is written to a
  temporary file, as the ONNX backend does). Raises aot.UserError when tgc refuses the model."""
  import onnx
  from tgc.aot import models
  folder = tempfile.mkdtemp(prefix="tgc-kernel-checks-")
  try:
    path = os.path.join(folder, "model.onnx")
    onnx.save(model, path)
    loaded = models.load_model(models.parse_model_spec(path), input_shapes, consts)
    return loaded, models.trace_model(loaded)
  finally:
    shutil.rmtree(folder, ignore_errors=True)


def compile_for(name: str, target: str, loaded, capture):
  """The CompiledModel of a capture for `target`: `aot.compile.build_compiled` after its load and trace."""
  from tgc.aot import models
  from tgc.codegen.compiled import compile_schedule
  return compile_schedule(name, target, capture.items, [(s.name, b) for s, b in capture.inputs],
                          [(s.name, b) for s, b in capture.outputs], models.named_weights(capture))


# ---------------------------------------------------------------- compiling kernels
_checked: dict[tuple[str, str], str] = {}    # (check, sha of the kernel's unit) -> "" or first error line


def _nvrtc(arch: str):
  from tgc.runtimes import CompileError
  from tgc.runtimes import cuda as cuda_rt

  def compile_unit(src: str, name: str) -> str:
    try: cuda_rt.compile_only(src, name, arch)
    except CompileError as error: return first_error_line(getattr(error, "log", "") or str(error))
    return ""
  return compile_unit


def _metal_shim(src: str, name: str) -> str:
  import metal_check
  errors = metal_check.syntax_errors(src)
  return first_error_line(errors) if errors else ""


def check_kernels(programs: list, check: str, unit_name: str) -> dict[str, str]:
  """Kernel name -> "" (passed) or its first error line, for one check ("nvrtc_sm_80", "nvrtc_sm_90",
  "metal_shim") of KernelPrograms of one model. One translation unit per distinct prefix; a failing unit is
  compiled again kernel by kernel."""
  compile_unit = _metal_shim if check == "metal_shim" else _nvrtc(check[len("nvrtc_"):])
  out: dict[str, str] = {}
  groups: dict[tuple, list] = {}
  for prg in programs:
    key = (check, _sha(prg.src))
    if key in _checked: out[prg.name] = _checked[key]
    else: groups.setdefault(tuple(prg.prefix), []).append(prg)
  for g, (prefix, members) in enumerate(groups.items()):
    unit = "\n".join([*prefix, *(p.function for p in members)]) + "\n"
    error = compile_unit(unit, f"{unit_name}_u{g}") if len(members) > 1 else None
    results = {p.name: "" if error == "" else compile_unit(p.src, p.name) for p in members}
    if error and not any(results.values()):   # each compiles alone, together they do not: blame them all
      results = {p.name: f"fails only in a unit with the others: {error}" for p in members}
    for p in members: out[p.name] = _checked[(check, _sha(p.src))] = results[p.name]
  return out


# ---------------------------------------------------------------- running a compiled model on the CPU
def _executor(cm, target: str):
  """run(program, buffers) for the compiled model's kernels on the CPU: Metal builds the whole model once
  (metal_check.build_model_for_cpu), CUDA each kernel (cuda_cpu.run_on_cpu)."""
  if target == "cuda":
    import cuda_cpu
    return lambda prg, bufs: cuda_cpu.run_on_cpu(prg.src, prg.name, bufs, prg.global_size, prg.local_size)
  import cpu_kernels
  import metal_check
  lib = metal_check.build_model_for_cpu("\n".join(p.src for p in cm.kernels.values()),
                                        {n: p.nbufs for n, p in cm.kernels.items()})

  def execute(prg, bufs):
    assert len(bufs) == prg.nbufs, (prg.name, len(bufs))
    cpu_kernels.launch(lib, prg.name, bufs, cpu_kernels.groups(prg.global_size, prg.local_size), prg.local_size,
                       "threadgroup_barrier" in prg.src)
  return execute


def cpu_run_problem(cm, target: str) -> str:
  """Why the compiled model cannot run on the CPU here ("" when it can)."""
  import cpu_kernels
  if cpu_kernels.cpu_compiler() is None: return "no host clang++ with _Float16 (clang 15 or newer)"
  items = 0
  for call in cm.calls:
    prg = cm.kernels[call.kernel]
    n = math.prod(prg.global_size)
    barrier = "threadgroup_barrier" in prg.src or "__syncthreads" in prg.src
    if barrier and n > MAX_BARRIER_THREADS: return f"{prg.name}: {n} work-items with barriers (one thread each)"
    items += n
  if items > MAX_CPU_WORK_ITEMS: return f"{items} work-items per run"
  return ""


def _output_buffers(cm, capture) -> list[int]:
  """Index into cm.buffers of each capture output, in order (an output that is an input is that input's buffer),
  following compile_schedule's numbering of inputs and outputs."""
  index, k = {}, 0
  for group in (capture.inputs, capture.outputs):
    for _, b in group:
      if b in index: continue
      index[b], k = k, k + 1
  return [index[b] for _, b in capture.outputs]


def run_compiled_on_cpu(cm, capture, feeds: dict, target: str) -> list[np.ndarray]:
  """Run every call of the compiled model in order on host buffers, each kernel through the target's CPU shim;
  the outputs as onnx gives them (storage-only types as ml_dtypes arrays)."""
  from tgc.aot.onnx_backend import from_storage, to_storage
  execute = _executor(cm, target)
  size = max([cm.arena_bytes] + [b.offset + b.nbytes for b in cm.of_kind("arena")]) + 1
  arena = np.full(size, 0xFF, np.uint8)       # intermediates start as NaN / -1, never zeros
  host = []
  for b in cm.buffers:
    spec = {"name": b.name, "shape": list(b.shape), "dtype": b.dtype.np, "tgc_dtype": b.dtype.name,
            "nbytes": b.nbytes}
    if b.kind == "arena":
      host.append(arena[b.offset:b.offset + max(b.nbytes, 1)])
      continue
    buf = np.full(max(b.nbytes, 1), 0xFF, np.uint8)
    if b.kind in ("input", "weight"):
      data = to_storage(feeds[b.name], spec) if b.kind == "input" else cm.weights[b.name]
      raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)[:b.nbytes]
      buf[:raw.size] = raw
    host.append(buf)
  for call in cm.calls:
    prg = cm.kernels[call.kernel]
    execute(prg, [host[i] for i in call.buffers])
  outs = []
  for i in _output_buffers(cm, capture):
    b = cm.buffers[i]
    dtype = np.dtype(b.dtype.np)
    count = math.prod(b.shape)
    arr = np.frombuffer(host[i][:count * dtype.itemsize].tobytes(), dtype).reshape(b.shape)
    outs.append(from_storage(arr, {"shape": list(b.shape), "tgc_dtype": b.dtype.name, "nbytes": b.nbytes}))
  return outs


# ---------------------------------------------------------------- one job: a node case or a light model
def check_model(name: str, kind: str, op: str, loaded, capture, cpu_targets: tuple = (), feeds=None, want=None,
                defined=None) -> dict:
  """Lower for every target, compile every kernel, and (for `cpu_targets`) run on the CPU against `want` (only the
  elements `defined` marks, where ONNX leaves some undefined: conformance.defined_elements)."""
  from conformance import compare_outputs
  result: dict = {"name": name, "kind": kind, "op": op, "import_error": "", "targets": {}, "cpu_runs": {}}
  symbol = NODE_MODEL_NAME if kind == "node" else name
  compiled = {}
  for target in TARGETS:
    entry: dict = {"build_error": "", "kernels": []}
    result["targets"][target] = entry
    try: cm = compiled[target] = compile_for(symbol, target, loaded, capture)
    except ValueError as error:
      entry["build_error"] = first_error_line(str(error))
      continue
    except Exception as error:   # a crash while lowering or rendering: a bug, counted with the build errors
      entry["build_error"] = f"internal error: {type(error).__name__}: {first_error_line(str(error))}"
      continue
    programs = list(cm.kernels.values())
    checks = {c: check_kernels(programs, c, symbol) for c in CHECKS[target]}
    entry["kernels"] = [{"name": p.name, "sha": _sha(p.src), "checks": {c: checks[c][p.name] for c in checks}}
                        for p in programs]
  for target in cpu_targets:
    if target not in compiled: continue
    problem = cpu_run_problem(compiled[target], target)
    if problem:
      result["cpu_runs"][target] = {"status": "skipped", "detail": problem}
      continue
    signal.alarm(CPU_RUN_LIMIT_S)
    try:
      got = run_compiled_on_cpu(compiled[target], capture, feeds, target)
      status, detail = compare_outputs(got, want, defined=defined)
    except _Timeout: status, detail = "error", f"timed out after {CPU_RUN_LIMIT_S} s"
    except Exception as error: status, detail = "error", f"{type(error).__name__}: {first_error_line(str(error))}"
    finally: signal.alarm(0)
    result["cpu_runs"][target] = {"status": status, "detail": detail}
  return result


def check_case(case, cpu_targets: tuple = ()) -> dict:
  """check_model for one node case (imported as run_case_compiled does: shape-setting inputs as constants)."""
  op = conformance.case_op(case)
  try:
    by_name, needed, want = case_arrays(case)
    loaded, capture = capture_model(case.model, {n: a.shape for n, a in by_name.items() if n not in needed},
                                    {n: by_name[n] for n in needed})
  except Exception as error:
    what = "" if type(error).__name__ == "UserError" else f"{type(error).__name__}: "
    return {"name": case.name, "kind": "node", "op": op, "targets": {}, "cpu_runs": {},
            "import_error": what + first_error_line(str(error))}
  feeds = {n: a for n, a in by_name.items() if n not in needed}
  return check_model(case.name, "node", op, loaded, capture, cpu_targets, feeds, want,
                     conformance.defined_elements(case, by_name))


def check_light(name: str) -> dict:
  """check_model for one light model with seeded random weights (tests/onnx/light_models.py `randomized`)."""
  import light_models as lm
  try: loaded, capture = capture_model(lm.randomized(lm.load(name), 0, calibrate=False))
  except Exception as error:
    return {"name": name, "kind": "light", "op": "", "targets": {}, "cpu_runs": {},
            "import_error": f"{type(error).__name__}: {first_error_line(str(error))}"}
  return check_model(name, "light", "", loaded, capture)


# ---------------------------------------------------------------- running many jobs
_CASES: list = []


def _worker_init():
  warnings.simplefilter("ignore")
  np.seterr(all="ignore")
  signal.signal(signal.SIGALRM, _on_alarm)


def _run_job(job) -> dict:
  kind, key, cpu_targets = job
  start = time.perf_counter()
  limit = LIGHT_LIMIT_S if kind == "light" else CASE_LIMIT_S
  name = key if kind == "light" else _CASES[key].name
  signal.alarm(limit)
  try: result = check_light(key) if kind == "light" else check_case(_CASES[key], tuple(cpu_targets))
  except _Timeout:
    result = {"name": name, "kind": kind, "op": "", "targets": {}, "cpu_runs": {},
              "import_error": f"timed out after {limit} s"}
  finally: signal.alarm(0)
  result["seconds"] = round(time.perf_counter() - start, 2)
  return result


def run(case_names: list[str] | None, light: list[str], cpu_names: set[str], cpu_targets: tuple, workers: int,
        progress: bool = True, stream=None) -> list[dict]:
  """Results of every chosen node case (None: all) and light model; cases in `cpu_names` also run on the CPU.
  Each result is also written to `stream` (a text file) as one JSON line as soon as it is known."""
  global _CASES
  _CASES = conformance.cases()
  import tgc.frontend.onnx  # noqa: F401  (imported once here, shared by the forked workers)
  chosen = None if case_names is None else set(case_names)
  jobs = [("light", n, ()) for n in light]
  jobs += [("node", i, cpu_targets if c.name in cpu_names else ()) for i, c in enumerate(_CASES)
           if chosen is None or c.name in chosen]
  results: list[dict] = []
  if workers <= 1:
    _worker_init()
    for job in jobs:
      results.append(_run_job(job))
      if stream: stream.write(json.dumps(results[-1], sort_keys=True) + "\n")
    return results
  ctx = multiprocessing.get_context("fork")
  with ctx.Pool(workers, initializer=_worker_init, maxtasksperchild=200) as pool:
    for k, result in enumerate(pool.imap_unordered(_run_job, jobs, chunksize=1), 1):
      results.append(result)
      if stream:
        stream.write(json.dumps(result, sort_keys=True) + "\n")
        stream.flush()
      if progress and (k % 100 == 0 or result["kind"] == "light"):
        print(f"  {k}/{len(jobs)} ({result['name']}: {result['seconds']} s)", file=sys.stderr, flush=True)
  return results


# ---------------------------------------------------------------- counting and reporting
_TEMP_MODEL = re.compile(r"^\S*tgc-kernel-checks-[^/\s]+/model\.onnx: ")   # the temporary file a case was saved to


def summarize(results: list[dict]) -> dict:
  """Counts per kind of model, per target and per check, with every failure listed."""
  out: dict = {"models": {}, "targets": {}, "checks": {}, "cpu_runs": {}}
  for kind in ("node", "light"):
    rs = [r for r in results if r["kind"] == kind]
    out["models"][kind] = {"total": len(rs), "imported": sum(1 for r in rs if not r["import_error"]),
                           "import_errors": sorted((r["name"], _TEMP_MODEL.sub("", r["import_error"]))
                                                   for r in rs if r["import_error"])}
  for target in TARGETS:
    built = [r for r in results if target in r["targets"] and not r["targets"][target]["build_error"]]
    errors = sorted((r["name"], r["targets"][target]["build_error"]) for r in results
                    if target in r["targets"] and r["targets"][target]["build_error"])
    out["targets"][target] = {"built": len(built), "build_errors": errors,
                              "kernels": sum(len(r["targets"][target]["kernels"]) for r in built),
                              "unique_sources": len({k["sha"] for r in built for k in r["targets"][target]["kernels"]})}
    for check in CHECKS[target]:
      kernels = [(r["name"], k) for r in built for k in r["targets"][target]["kernels"]]
      failed = [(name, k["name"], k["checks"][check]) for name, k in kernels if k["checks"][check]]
      out["checks"][check] = {"target": target, "kernels": len(kernels), "passed": len(kernels) - len(failed),
                              "unique_sources": len({k["sha"] for _, k in kernels}),
                              "unique_failed": len({k["sha"] for _, k in kernels if k["checks"][check]}),
                              "failures": sorted(failed)}
  for target in CPU_RUN_TARGETS:
    runs = [(r["name"], r["cpu_runs"][target]) for r in results if target in r["cpu_runs"]]
    if not runs: continue
    counts = collections.Counter(run_["status"] for _, run_ in runs)
    out["cpu_runs"][target] = {"cases": len(runs), **{s: counts.get(s, 0) for s in ("pass", "fail", "error",
                                                                                    "skipped")},
                               "problems": sorted((n, r["status"], r["detail"]) for n, r in runs
                                                  if r["status"] != "pass")}
  return out


def _cell(text: str, width: int = 160) -> str:
  text = " ".join(str(text).split()).replace("|", "\\|")
  return text if len(text) <= width else text[:width - 3] + "..."


def _grouped(errors: list[tuple[str, str]]) -> list[tuple[str, int, str]]:
  """(message with the case's own names blanked, count, example case) for a list of (case, message)."""
  groups: dict[str, list[str]] = {}
  for name, msg in errors:
    key = re.sub(r"'[^']*'", "'…'", msg)
    key = re.sub(r"\d+", "N", key)[:110]
    groups.setdefault(key, []).append(name)
  return sorted(((k, len(v), v[0]) for k, v in groups.items()), key=lambda t: (-t[1], t[0]))


GROUPED_COLUMNS = ["message (grouped)", "cases", "example"]


def _grouped_rows(errors: list[tuple[str, str]]) -> list[str]:
  return [f"| `{_cell(k, 110)}` | {n} | {ex} |" for k, n, ex in _grouped(errors)]


def _listing(heading: str, columns: list[str], rows: list[str], intro: str = "") -> list[str]:
  """A report section: `heading`, an optional intro paragraph, then "None." or a table of the rendered `rows`."""
  lines = ["", heading, ""] + ([intro, ""] if intro else [])
  if not rows: return lines + ["None."]
  return lines + ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)] + rows


def report(summary: dict, seconds: float, workers: int, versions: dict, sample: bool, cpu_sample: int,
           planned: int = 0) -> str:
  """docs/kernel_checks.md. `planned`: jobs the run set out to do; when fewer finished the report says so."""
  m = summary["models"]
  done = m["node"]["total"] + m["light"]["total"]
  lines = ["# Kernel compile checks: CUDA (NVRTC) and Metal (clang++ with a metal_stdlib shim)", "",
           "Every kernel of the ONNX node conformance cases (`onnx.backend.test.case.node`, imported as "
           "`tests/onnx/conformance.py` `run_case_compiled` does: shape-setting inputs as constants) and of the light "
           "models (`onnx/backend/test/data/light`, seeded random weights) lowered for target `cuda` and for target "
           "`metal` (`codegen.compiled.compile_schedule`, what `aot.compile.build_compiled` runs), then:", "",
           f"- CUDA: compiled with NVRTC {versions.get('nvrtc', '?')} for {', '.join(ARCHS)} (cubins; no GPU or "
           "driver involved).",
           "- Metal: `clang++ -fsyntax-only` against the `metal_stdlib` shim in `tests/metal_shim` (syntax, types, "
           "address spaces; the shim's strictness is proven by the negative tests in "
           "`tests/codegen/test_metal.py`). This is not Apple's compiler: real validation needs macOS.",
           "- CPU runs: on the stratified sample of node cases (`conformance.stratified_sample`: the first two "
           "cases of every operator) the compiled model runs kernel by kernel on the CPU through the shim and "
           "its outputs are compared with the case's expected outputs (the conformance tolerances).", "",
           f"Generated by `python scripts/kernel_checks.py` ({'stratified sample only' if sample else 'all cases'})"
           f" in {seconds:.0f} s with {workers} worker(s) on {versions.get('machine', 'this machine')}."
           + (f" **Partial: {done} of {planned} models had finished when this report was written; the time is "
              f"the jobs' total over the workers.**"
              if planned > done else ""), "",
           "Kernels are compiled one translation unit per model and kernel prefix; a failing unit is compiled "
           "again kernel by kernel, so each failure below names its kernel. Kernel counts are per model (a kernel "
           "that several cases share is counted in each); \"unique\" counts distinct kernel sources.", "",
           "## Models", "", "| kind | models | imported | import refused |", "|---|---|---|---|"]
  for kind, label in (("node", "node cases"), ("light", "light models")):
    lines.append(f"| {label} | {m[kind]['total']} | {m[kind]['imported']} | {len(m[kind]['import_errors'])} |")
  lines += ["", "## Lowering for the target", "",
            "A model that imports but does not lower for a target is counted here, not as a kernel failure.", "",
            "| target | models lowered | refused | kernels | unique sources |", "|---|---|---|---|---|"]
  for target, t in summary["targets"].items():
    lines.append(f"| {target} | {t['built']} | {len(t['build_errors'])} | {t['kernels']} | {t['unique_sources']} |")
  lines += ["", "## Kernel checks", "",
            "| check | target | kernels | passed | failed | unique sources | unique failed |",
            "|---|---|---|---|---|---|---|"]
  for check, c in summary["checks"].items():
    lines.append(f"| {check} | {c['target']} | {c['kernels']} | {c['passed']} | {c['kernels'] - c['passed']} | "
                 f"{c['unique_sources']} | {c['unique_failed']} |")
  for check, c in summary["checks"].items():
    lines += _listing(f"### Failures: {check} ({len(c['failures'])})", ["model", "kernel", "first error line"],
                      [f"| {_cell(n, 60)} | {k} | `{_cell(e)}` |" for n, k, e in c["failures"]])
  lines += ["", "## CPU runs through the shims (stratified sample)", ""]
  if not summary["cpu_runs"]: lines.append("Not run.")
  else:
    lines += [f"{cpu_sample} cases sampled; a case runs where it imports and lowers for the target.", "",
              "| target | cases run | pass | fail | error | skipped (too large) |", "|---|---|---|---|---|---|"]
    for target, c in summary["cpu_runs"].items():
      lines.append(f"| {target} | {c['cases']} | {c['pass']} | {c['fail']} | {c['error']} | {c['skipped']} |")
    for target, c in summary["cpu_runs"].items():
      lines += _listing(f"### Not passing on the CPU: {target} ({len(c['problems'])})", ["case", "status", "detail"],
                        [f"| {n} | {s} | {_cell(d)} |" for n, s, d in c["problems"]])
  for target, t in summary["targets"].items():
    lines += _listing(f"## Not lowered for {target} ({len(t['build_errors'])})", GROUPED_COLUMNS,
                      _grouped_rows(t["build_errors"]))
  errors = m["node"]["import_errors"] + m["light"]["import_errors"]
  lines += _listing(f"## Import refused ({len(errors)})", GROUPED_COLUMNS, _grouped_rows(errors),
                    "Cases the importer refuses for every target (see docs/conformance.md for the categories).")
  return "\n".join(lines) + "\n"


def _read_results(path: str) -> tuple[list[dict], float]:
  """(results, seconds) from a --json file, or from a --results file (seconds: the jobs' total / 2 workers)."""
  with open(path, encoding="utf-8") as f: text = f.read()
  try: data = json.loads(text)
  except ValueError: data = None
  if isinstance(data, dict) and "results" in data: return data["results"], float(data["seconds"])
  results = [json.loads(line) for line in text.splitlines() if line.strip()]
  return results, sum(r.get("seconds", 0.0) for r in results) / 2


def versions() -> dict:
  import platform
  out = {"machine": f"{platform.machine()}, {os.cpu_count()} CPUs"}
  try:
    from tgc.runtimes import cuda as cuda_rt
    out["nvrtc"] = ".".join(map(str, cuda_rt.nvrtc_version()))
  except Exception as error: out["nvrtc"] = f"unavailable ({type(error).__name__})"
  import metal_check
  out["clang"] = metal_check.clang() or "missing"
  return out


def main(argv=None) -> int:
  import light_models as lm
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--workers", type=int, default=2)
  ap.add_argument("--sample", action="store_true", help="only the stratified sample of node cases")
  ap.add_argument("-k", dest="name_filter", default=None, help="only node cases whose name contains this")
  ap.add_argument("--no-light", action="store_true", help="leave out the light models")
  ap.add_argument("--cpu-run", nargs="*", default=["metal"], choices=CPU_RUN_TARGETS,
                  help="targets whose kernels run on the CPU for the stratified sample (default: metal)")
  ap.add_argument("--json", default="", help="write every result and the counts here")
  ap.add_argument("--doc", default=DOC, help="the markdown report ('' for none)")
  ap.add_argument("--results", default="", help="also write each result as a JSON line here while running")
  ap.add_argument("--report-from", default="", help="report the results of an earlier --json or --results file")
  args = ap.parse_args(argv)
  warnings.simplefilter("ignore")
  start = time.perf_counter()
  all_cases = conformance.cases()
  sample = set(conformance.stratified_sample(all_cases))
  names = [c.name for c in all_cases if (not args.sample or c.name in sample)
           and (not args.name_filter or args.name_filter in c.name)]
  light = [] if args.no_light or args.name_filter else [n for n in lm.NAMES if lm.available(n)]
  cpu_names = sample & set(names)
  if args.report_from:
    results, seconds = _read_results(args.report_from)
  else:
    stream = open(args.results, "w", encoding="utf-8") if args.results else None
    try: results = run(names, light, cpu_names, tuple(args.cpu_run), args.workers, stream=stream)
    finally:
      if stream: stream.close()
    seconds = time.perf_counter() - start
  summary = summarize(results)
  info = versions()
  for check, c in summary["checks"].items():
    print(f"{check}: {c['passed']}/{c['kernels']} kernels passed ({c['unique_sources']} unique sources)")
  for target, t in summary["targets"].items():
    print(f"{target}: {t['built']} models lowered, {len(t['build_errors'])} refused")
  for kind, mm in summary["models"].items():
    print(f"{kind}: {mm['imported']}/{mm['total']} imported")
  for target, c in summary["cpu_runs"].items():
    print(f"cpu {target}: pass {c['pass']}, fail {c['fail']}, error {c['error']}, skipped {c['skipped']} "
          f"of {c['cases']}")
  print(f"{seconds:.0f} s")
  if args.json:
    with open(args.json, "w", encoding="utf-8") as f:
      json.dump({"seconds": round(seconds, 1), "workers": args.workers, "versions": info, "summary": summary,
                 "results": sorted(results, key=lambda r: (r["kind"], r["name"]))}, f, indent=1, sort_keys=True)
  if args.doc:
    with open(args.doc, "w", encoding="utf-8") as f:
      f.write(report(summary, seconds, args.workers, info, args.sample, len(cpu_names), len(names) + len(light)))
  return 0


if __name__ == "__main__":
  sys.exit(main())
