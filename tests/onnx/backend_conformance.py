"""The official ONNX node conformance cases compiled to artifacts: `run_case_compiled(case, target)` prepares the
case's model with `aot.onnx_backend.TgcBackend` for `target` ("c", "opencl"), which runs the real `tgc compile`
pipeline into a temporary artifact folder, runs that artifact with the target's artifact runtime and compares with
the expected outputs under the same tolerances as `conformance.run_case`. Inputs that set shapes
(`conformance.const_inputs`) are passed as `consts`, as `tgc compile --const` would; every other input's values
are only seen when the artifact runs.

    python tests/onnx/backend_conformance.py --target c --sample 200     # a quick seeded sample
"""
from __future__ import annotations
import argparse
import collections
import os
import random
import sys
import time
import warnings

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path: sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conformance  # noqa: E402


def compare_outputs(got: list, want: list) -> tuple[str, str]:
  """("pass", "") or ("fail" | "error", detail) for artifact outputs against a case's expected outputs."""
  from frontend.onnx import OnnxError
  from frontend.onnx.importer import array_dtype, host_values
  if len(got) != len(want): return "fail", f"{len(got)} outputs, expected {len(want)}"
  for i, (arr, exp) in enumerate(zip(got, want)):
    try: exp_dt, dt = array_dtype(exp), array_dtype(arr)
    except OnnxError as e: return "error", f"output {i}: {e}"
    if dt != exp_dt: return "fail", f"output {i}: dtype {dt.name}, expected {exp_dt.name}"
    if tuple(arr.shape) != tuple(exp.shape): return "fail", f"output {i}: shape {arr.shape}, expected {exp.shape}"
    a, ref = host_values(arr, dt), host_values(exp, exp_dt)
    try:
      if dt.is_float and (not dt.storage_only or dt.name in conformance.FLOAT_TOL):
        rtol, atol = conformance.FLOAT_TOL.get(dt.name, (1e-3, 1e-5))
        np.testing.assert_allclose(a.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)
      else: np.testing.assert_array_equal(a, ref)
    except AssertionError as e:
      lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
      summary = next((ln for ln in lines if ln.startswith("Mismatched")), lines[0] if lines else "mismatch")
      return "fail", f"output {i}: {summary}"
  return "pass", ""


def _first_line(e: BaseException) -> str:
  text = str(e).strip()
  return text.splitlines()[0] if text else ""


def run_case_compiled(case, target: str = "c") -> tuple[str, str]:
  """("pass" | "fail" | "error", detail) of one node case compiled for `target` and run as an artifact. "error":
  the pipeline refused the model (detail: the one-line message `tgc compile` prints), the artifact failed to build
  or run ("artifact: ..."), the machine cannot run the target ("unavailable: ..."), or tgc crashed ("internal
  error: ...", a bug). Passing cases that needed constant inputs say "needed const: ..."."""
  from aot.errors import UserError
  from aot.onnx_backend import TgcBackend
  from runtimes import RuntimeUnavailable
  model = case.model
  inputs, expected = case.data_sets[0]
  g = model.graph
  inits = {t.name for t in g.initializer}
  names = [i.name for i in g.input if i.name not in inits]
  try:
    arrays = [conformance._to_array(v) for v in inputs]
    want = [conformance._to_array(v) for v in expected]
  except TypeError as e:
    return "error", f"test data: {e}"
  if len(arrays) != len(names): return "error", f"test data has {len(arrays)} inputs for {len(names)} graph inputs"
  by_name = dict(zip(names, arrays))
  needed = conformance.const_inputs(model)
  rep = None
  try:
    rep = TgcBackend.prepare(model, target, consts={n: by_name[n] for n in needed},
                             input_shapes={n: a.shape for n, a in by_name.items() if n not in needed})
    got = [np.asarray(o) for o in rep.run({n: a for n, a in by_name.items() if n not in needed})]
  except UserError as e:
    return "error", str(e)
  except RuntimeUnavailable as e:     # this machine cannot run the target (the message names the missing piece)
    return "error", f"unavailable: {_first_line(e)}"
  except ValueError as e:      # runtimes.artifact_c.ArtifactError and friends: building or running the artifact
    return "error", f"artifact: {type(e).__name__}: {_first_line(e)}"
  except Exception as e:
    return "error", f"internal error: {type(e).__name__}: {_first_line(e)}"
  finally:
    if rep is not None: rep.close()
  status, detail = compare_outputs(got, want)
  if status == "pass" and needed: detail = "needed const: " + ", ".join(needed)
  return status, detail


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description="node conformance cases through the tgc ONNX backend (artifacts)")
  ap.add_argument("--target", default="c")
  ap.add_argument("--sample", type=int, default=0, help="run this many seeded random cases (0: all)")
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("-k", dest="name_filter", default=None, help="only cases whose name contains this")
  ap.add_argument("--compare", default="", help="also run conformance.run_case on this device (e.g. numpy)")
  ap.add_argument("-v", action="store_true", help="print every case")
  args = ap.parse_args(argv)
  warnings.simplefilter("ignore")
  np.seterr(all="ignore")
  cases = [c for c in conformance.cases() if not args.name_filter or args.name_filter in c.name]
  if args.sample: cases = random.Random(args.seed).sample(cases, min(args.sample, len(cases)))
  counts: collections.Counter = collections.Counter()
  other: collections.Counter = collections.Counter()
  disagree = []
  start = time.perf_counter()
  for c in cases:
    t = time.perf_counter()
    status, detail = run_case_compiled(c, args.target)
    counts[status] += 1
    if args.compare:
      ref_status, ref_detail = conformance.run_case(c, args.compare)
      other[ref_status] += 1
      if (ref_status == "pass") != (status == "pass"): disagree.append((c.name, status, detail, ref_status, ref_detail))
    if args.v or status != "pass":
      print(f"{status:5} {time.perf_counter() - t:6.2f}s {c.name}: {detail[:200]}", flush=True)
  secs = time.perf_counter() - start
  print(f"{args.target} (artifacts): " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        + f" of {len(cases)} cases in {secs:.0f} s")
  if args.compare:
    print(f"{args.compare} (run_case): " + ", ".join(f"{k} {v}" for k, v in sorted(other.items())))
    for name, s, d, rs, rd in disagree:
      print(f"  differs: {name}: artifact {s} ({d[:120]}); {args.compare} {rs} ({rd[:80]})")
  return 0


if __name__ == "__main__":
  sys.exit(main())
