"""The `tgc` command line: compile, run, validate, bench, inspect and viz (VIZ=1 on any command writes the viz page).

Exit codes: 0 success, 1 `validate` over tolerance, 2 user or input error (one line on stderr naming the culprit),
3 internal error (a bug in tgc; the traceback is printed with DEBUG>=1)."""
from __future__ import annotations
import contextlib
import dataclasses
import json
import os
import re
import sys
import traceback
import click
import numpy as np
from tgc.ir.config import config
from tgc.codegen.compiled import BufferKind
from tgc.codegen.registry import target_names
from tgc.runtimes import RuntimeUnavailable
from tgc.aot.errors import (EXIT_INTERNAL, EXIT_OK, EXIT_TOLERANCE, EXIT_USER, UserError, describe,
                            internal_error_message, one_line)

MODEL_HELP = """MODEL is either an ONNX file (model.onnx) or path/to/file.py:function for the Tensor API: the function
takes no arguments and returns (fn, inputs), where inputs is a list of example Tensors (named input_0, input_1,
...) or a dict name -> Tensor (passed to fn positionally, in dict order). fn returns a Tensor, a list of Tensors
(named output_0, output_1, ...) or a dict name -> Tensor. Tensors fn uses that are not inputs are the weights,
named by their state-dict path (e.g. fc1.weight) when fn is an nn-style object."""


class TgcGroup(click.Group):
  """A click group that maps every failure onto tgc's exit codes and one-line messages."""

  def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
    argv = list(sys.argv[1:] if args is None else args)
    command = next((a for a in argv if not a.startswith("-")), "")
    try:
      with _viz_page(command):
        rv = super().main(argv, prog_name or "tgc", complete_var, standalone_mode=False, **extra)
      code = rv if isinstance(rv, int) else EXIT_OK
    except click.exceptions.NoArgsIsHelpError as error:
      click.echo(error.ctx.get_help() if error.ctx else error.format_message())
      code = EXIT_OK
    except click.ClickException as error:
      where = error.ctx.command_path if getattr(error, "ctx", None) else "tgc"
      hint = f" (see '{where} --help')" if isinstance(error, click.UsageError) else ""
      _error_line(f"{where}: error: {one_line(error.format_message())}{hint}")
      code = EXIT_USER
    except UserError as error:
      _error_line(f"tgc: error: {error}")
      code = EXIT_USER
    except RuntimeUnavailable as error:   # a compiler or device this machine lacks: the user's to install
      _error_line(f"tgc: error: {error}")
      code = EXIT_USER
    except (click.exceptions.Abort, KeyboardInterrupt):
      _error_line("tgc: interrupted")
      code = 130
    except Exception as error:
      if config.debug >= 1: traceback.print_exc()
      _error_line(internal_error_message(error, command))
      code = EXIT_INTERNAL
    sys.exit(code)


@contextlib.contextmanager
def _viz_page(command: str):
  """VIZ=1: record what the command compiles and, when it succeeds, write the viz page (`tgc viz` writes its own)."""
  if not config.viz or command in ("", "viz"):
    yield
    return
  from tgc.aot import viz, viz_session
  with viz_session.command_session() as session: yield
  viz.write_session_page(session)


def _error_line(text: str) -> None:
  click.echo(one_line(text, limit=2000), err=True)


def _bytes(n: int) -> str:
  for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
    if n >= size: return f"{n} bytes ({n / size:.1f} {unit})"
  return f"{n} bytes"


def _shape(shape) -> str:
  return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


# ---------------------------------------------------------------- option parsing
def _split(value: str, option: str, example: str) -> tuple[str, str]:
  name, sep, rest = value.partition("=")
  if not sep or not name or not rest: raise UserError(f"{option} {value!r}: expected {example}")
  return name, rest


def parse_input_shapes(values) -> dict[str, tuple[int, ...]]:
  out = {}
  for value in values:
    name, _, dims = value.rpartition("=")
    if not name: raise UserError(f"--input-shape {value!r}: expected name=d0,d1,... (e.g. input=1,3,224,224)")
    parts = [d.strip() for d in (dims.split(",") if "," in dims else dims.split("x")) if d.strip() != ""]
    shape = tuple(int(d) if d.lstrip("-").isdigit() else d for d in parts)
    for d in shape:
      if isinstance(d, str) and not SIZE_NAME.fullmatch(d):
        from tgc.frontend.onnx.run_time_sizes import size_multiple
        if size_multiple(d)[1]: continue
        raise UserError(f"--input-shape {value!r}: a dimension is an integer, the name of a --dim or a multiple of "
                        f"one (32*h), not {d!r}")
    if any(isinstance(d, int) and d < 0 for d in shape):
      raise UserError(f"--input-shape {value!r}: dimensions must not be negative")
    out[name] = shape
  return out


SIZE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:/-]*")


def parse_states(values) -> dict[str, str]:
  """`--state INPUT=OUTPUT` options: each state's input and output names."""
  out: dict[str, str] = {}
  for value in values:
    name, sep, output = value.rpartition("=")
    if not sep or not name or not output: raise UserError(f"--state {value!r}: expected INPUT=OUTPUT")
    if name in out: raise UserError(f"--state {name}: given twice")
    out[name] = output
  return out


def parse_dims(values) -> dict[str, tuple[int, int]]:
  """`--dim NAME=LO..HI` options: the range of each size known only at run time, by name."""
  out = {}
  for value in values:
    name, _, rng = value.rpartition("=")
    lo, sep, hi = rng.partition("..")
    if not name or not sep or not lo.strip().isdigit() or not hi.strip().isdigit():
      raise UserError(f"--dim {value!r}: expected NAME=LOWEST..HIGHEST (e.g. --dim seq=1..512)")
    if not 1 <= int(lo) <= int(hi):
      raise UserError(f"--dim {value!r}: need 1 <= LOWEST <= HIGHEST")
    if name in out: raise UserError(f"--dim {name}: given twice")
    out[name] = (int(lo), int(hi))
  return out


SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
              "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}


def parse_size(text: str, option: str) -> int:
  """'16GiB', '512M', '1000000' -> bytes (binary units); a UserError naming the option otherwise."""
  m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", str(text))
  unit = m.group(2).lower() if m else ""
  if m is None or unit not in SIZE_UNITS:
    raise UserError(f"{option} {text!r}: expected a size such as 16GiB, 512MiB or 1000000 (bytes)")
  size = int(float(m.group(1)) * SIZE_UNITS[unit])
  if size < 1: raise UserError(f"{option} {text!r}: must be at least 1 byte")
  return size


def load_npy(path: str, what: str) -> np.ndarray:
  if not os.path.isfile(path): raise UserError(f"{what}: file not found: {path}")
  try: data = np.load(path, allow_pickle=False)
  except Exception as error: raise UserError(f"{what}: cannot read {path} as .npy ({describe(error)})") from error
  if isinstance(data, np.lib.npyio.NpzFile):
    data.close()
    raise UserError(f"{what}: {path} is an .npz archive; give a .npy file")
  return data


def parse_arrays(values, option: str) -> tuple[dict[str, np.ndarray], dict[str, str]]:
  """name=file.npy pairs (and, for --input, whole .npz archives) -> arrays and their absolute paths."""
  arrays, paths = {}, {}
  for value in values:
    if "=" not in value and value.lower().endswith(".npz") and option == "--input":
      arrays.update(_load_npz(value))
      continue
    name, path = _split(value, option, "name=file.npy")
    if name in arrays: raise UserError(f"{option}: {name!r} is given twice")
    arrays[name] = load_npy(path, f"{option} {name}")
    paths[name] = os.path.abspath(path)
  return arrays, paths


def _load_npz(path: str) -> dict[str, np.ndarray]:
  if not os.path.isfile(path): raise UserError(f"--input: file not found: {path}")
  try:
    with np.load(path, allow_pickle=False) as archive: return {k: archive[k] for k in archive.files}
  except Exception as error: raise UserError(f"--input: cannot read {path} as .npz ({describe(error)})") from error


# ---------------------------------------------------------------- commands
@click.group(cls=TgcGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tgc", prog_name="tgc")
def cli():
  """tgc: an ahead-of-time model compiler. It compiles a Tensor-API model or an ONNX file into a standalone
  artifact folder (sources, weights, manifest.json) and runs, validates, benchmarks and inspects artifacts.

  \b
    tgc compile examples/mnist_cnn.py:build --target c -o out/mnist
    tgc validate out/mnist
    tgc bench out/mnist

  Exit codes: 0 ok, 1 validate over tolerance, 2 bad input (one line naming it), 3 internal error (a bug in tgc).
  """


def search_options(fn):
  """--beam-budget, --jobs and --beam-cluster, shared by compile and tune."""
  fn = click.option("--beam-cluster", default=None, metavar="auto|HOST:PORT",
                    help="Build and time candidates on a Ray cluster of the target hardware (pip install "
                         "'tgc[ray]').")(fn)
  fn = click.option("--jobs", default=1, show_default=True, type=int,
                    help="Compiler calls at once while searching.")(fn)
  return click.option("--beam-budget", default=None, type=float, metavar="SECONDS",
                      help="Stop searching after this long (kernels by their share of the time first).")(fn)


def quantize_options(fn):
  """--quantize, --calibration, --calibration-method, --percentile and --keep-float of compile."""
  fn = click.option("--keep-float", "keep_float", multiple=True, metavar="NAMES",
                    help="With --quantize: nodes (by name: their weights) or activations (by tensor name) that stay "
                         "float, comma-separated or repeated (mixed precision; bench/quantize_budget.py "
                         "--per-node shows what each costs).")(fn)
  fn = click.option("--percentile", default=None, type=float, metavar="P",
                    help="With --calibration-method percentile: the percentile of the calibration values each "
                         "activation's range ends at (default 99.99).")(fn)
  fn = click.option("--calibration-method", "calibration_method", default="minmax", show_default=True,
                    metavar="minmax|percentile", help="How an activation's range comes from the calibration "
                                                      "values: their lowest and highest, or a percentile of them "
                                                      "(clips rare outliers).")(fn)
  fn = click.option("--calibration", default=None, metavar="DIR",
                    help="Calibration inputs for --quantize: NAME.npy per model input (one sample, or samples "
                         "stacked on a new first axis), or one subfolder per sample holding NAME.npy files.")(fn)
  return click.option("--quantize", default=None, metavar="int8",
                      help="Quantize a float ONNX model: int8 weights per output channel, uint8 activations per "
                           "tensor with ranges calibrated on --calibration (target c); prints each output's error "
                           "against the float model.")(fn)


@cli.command("compile", epilog=MODEL_HELP)
@click.argument("model")
@click.option("--target", "-t", default="c", show_default=True, metavar="TARGET",
              help=f"Target language of the artifact: {', '.join(target_names())}.")
@click.option("--out", "-o", "out_dir", required=True, metavar="OUT",
              help="Artifact folder to write (replaced if it is one).")
@click.option("--name", help="Model name used in generated symbols (default: the file name).")
@click.option("--force", is_flag=True, help="Replace OUT even when it exists and is not a tgc artifact.")
@click.option("--embed-weights", is_flag=True, help="Embed the weights in the generated source (C).")
@click.option("--npm-name", default=None, metavar="NAME",
              help="Name of the npm package the artifact folder is (webgpu; default: from the model's name).")
@click.option("--npm-version", default=None, metavar="X.Y.Z", help="Version of that package (webgpu; default 1.0.0).")
@click.option("--weight-chunk-mb", default=None, type=float, metavar="MIB",
              help="Split the weights into files of at most MIB MiB (webgpu: hosts with a file-size limit).")
@click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME=D0,D1,...",
              help="Fix the shape of an ONNX input with dynamic dimensions (repeatable); a dim may be the name of a "
                   "--dim (x=1,3,48,W) or a multiple of one (x=1,3,32*h,32*w: sizes in steps of 32).")
@click.option("--dim", "dims", multiple=True, metavar="NAME=LO..HI",
              help="Keep an ONNX input dim (a dim_param, or a name in --input-shape) as a size known only at run "
                   "time, from LO to HI (repeatable; targets c, opencl, webgpu).")
@click.option("--const", "consts", multiple=True, metavar="NAME=FILE.npy",
              help="Bake an ONNX input in as a constant from a .npy file (repeatable).")
@click.option("--max-context", "max_context", default=None, type=int, metavar="N",
              help="Keep the model's states (a KV cache: past_key_values.* returned as present.*) in the artifact, "
                   "up to N entries each: each run appends in place (targets c, opencl, webgpu).")
@click.option("--state", "states", multiple=True, metavar="INPUT=OUTPUT",
              help="An ONNX input that each run reads back from an output of the run before (repeatable; with "
                   "--max-context; default: found by name).")
@click.option("--beam", default=0, show_default=True, type=int, metavar="WIDTH",
              help="Search each kernel's opts with a beam of WIDTH, timed on this machine (0: heuristics).")
@click.option("--tuning", default=None, metavar="FILE", help="Apply a tuning file written by `tgc tune` (no search).")
@click.option("--cpu", default=None, metavar="LEVEL",
              help="CPU the C kernels are generated for: portable (default: the baseline of this machine's "
                   "architecture, x86-64-v3 or armv8-a), native (this machine), x86-64-v2, x86-64-v3, x86-64-v4, "
                   "x86-64-v4+vnni, armv8-a, armv8.2-a (e.g. a Snapdragon board), armv8.2-a+dotprod or generic "
                   "(plain C99, no vector types). "
                   "Target c only.")
@click.option("--precision", default=None, metavar="f32|f16",
              help="f16: compute float32 arithmetic in half precision with float32 accumulations (GPU targets; "
                   "WebGPU and OpenCL artifacts fall back to float32 kernels on devices without half arithmetic).")
@click.option("--max-bytes", "max_bytes", default="16GiB", show_default=True, metavar="SIZE",
              help="Refuse a model with any tensor (input, output, weight, intermediate) larger than SIZE "
                   "(bytes, or with a KiB/MiB/GiB suffix), before allocating it.")
@quantize_options
@search_options
def compile_command(model, target, out_dir, name, force, embed_weights, npm_name, npm_version, weight_chunk_mb,
                    input_shapes, dims, consts, max_context, states, beam, tuning, cpu, beam_budget, jobs, beam_cluster,
                    precision, max_bytes, quantize, calibration, calibration_method, percentile, keep_float):
  """Compile MODEL into an artifact folder OUT (with --quantize int8: its int8 form, calibrated on --calibration)."""
  from tgc.aot.compile import compile_model
  from tgc.aot.tune import SearchOptions
  shapes = parse_input_shapes(input_shapes)
  limit = parse_size(max_bytes, "--max-bytes")
  const_arrays, const_paths = parse_arrays(consts, "--const")
  search = SearchOptions(beam_budget, jobs, beam_cluster, tuning)
  options = dict(name=name, force=force, embed_weights=embed_weights, input_shapes=shapes, dims=parse_dims(dims),
                 consts=const_arrays, const_files=const_paths, states=parse_states(states), max_context=max_context,
                 beam=beam, cpu=cpu, search=search, max_bytes=limit, precision=precision,
                 emit_options={"npm_name": npm_name, "npm_version": npm_version, "weight_chunk_mb": weight_chunk_mb})
  quantized = _quantized(model, target, out_dir, options, quantize, calibration, calibration_method, percentile,
                         keep_float)
  report = quantized.compiled if quantized else compile_model(model, target, out_dir, **options)
  click.echo(f"compiled {report.name} for {report.target} in {report.seconds:.2f} s")
  click.echo(f"  kernels       {report.kernels} ({report.calls} calls per run)")
  click.echo(f"  arena         {_bytes(report.arena_bytes)}")
  click.echo(f"  weights       {_bytes(report.weights_bytes)} in {report.weights} tensors")
  for kind, specs in (("input", report.inputs), ("output", report.outputs)):
    for n, shape, dtype in specs: click.echo(f"  {kind:<13} {n} {_shape(shape)} {dtype}")
  for n, out, shape, dtype in report.states: click.echo(f"  {'state':<13} {n} -> {out} {_shape(shape)} {dtype}")
  click.echo(f"  output folder {report.out_dir}")
  if quantized: _quantize_report(quantized)


def _quantized(model, target, out_dir, options: dict, quantize, calibration, method, percentile, keep_float):
  """The quantized compile when --quantize is given (None otherwise); the options' combinations checked."""
  keep = tuple(dict.fromkeys(n.strip() for names in keep_float for n in names.split(",") if n.strip()))
  if quantize is None:
    for flag, value in (("--calibration", calibration), ("--percentile", percentile),
                        ("--keep-float", keep or None)):
      if value is not None: raise UserError(f"{flag} applies with --quantize int8 only")
    return None
  if calibration is None: raise UserError("--quantize needs --calibration DIR (a folder of .npy inputs)")
  if percentile is not None and method != "percentile":
    raise UserError(f"--percentile applies with --calibration-method percentile, not {method}")
  from tgc.aot.quantize import DEFAULT_PERCENTILE, QuantizeOptions, quantize_and_compile
  request = QuantizeOptions(calibration, method, DEFAULT_PERCENTILE if percentile is None else percentile, quantize,
                            keep)
  return quantize_and_compile(model, target, out_dir, request, **options)


def _quantize_report(q) -> None:
  method = f"{q.method} {q.percentile:g}" if q.method == "percentile" else q.method
  click.echo(f"  quantized     int8 weights in {q.nodes} nodes, {q.activations} activations uint8 ({method}, "
             f"{q.samples} calibration samples, {q.calibrate_s:.1f} s)")
  if q.kept_float: click.echo(f"  kept float    {', '.join(q.kept_float)}")
  click.echo(f"  weights       {_bytes(q.compiled.weights_bytes)}, float {_bytes(q.float_weights_bytes)}")
  click.echo(f"  {'output':<13} {'max abs err':>12} {'/ largest':>10} {'cosine':>9}   (against the float model)")
  for o in q.outputs:
    click.echo(f"  {o.name:<13} {o.max_abs:12.3e} {o.relative:10.3%} {o.cosine:9.6f}")


@cli.command("tune", epilog=MODEL_HELP)
@click.argument("model")
@click.option("--target", "-t", default="c", show_default=True, metavar="TARGET", help="Target to tune for.")
@click.option("--output", "-o", "out", default="tuning.json", show_default=True, metavar="FILE",
              help="The tuning file to write (for tgc compile --tuning).")
@click.option("--beam", default=2, show_default=True, type=int, metavar="WIDTH", help="Beam width of the search.")
@click.option("--cpu", default=None, metavar="LEVEL", help="CPU level of the C kernels (see tgc compile --help).")
@click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME=D0,D1,...",
              help="Pin a dynamic ONNX input shape (repeatable).")
@click.option("--const", "consts", multiple=True, metavar="NAME=FILE.npy",
              help="Bake an ONNX input in as a constant from a .npy file (repeatable).")
@search_options
def tune_command(model, target, out, beam, cpu, input_shapes, consts, beam_budget, jobs, beam_cluster):
  """Search the kernels of MODEL on this machine (or a Ray cluster of the target hardware) and write a tuning file
  that `tgc compile --tuning` applies without searching."""
  from tgc.aot.tune import SearchOptions, tune_model
  const_arrays, const_paths = parse_arrays(consts, "--const")
  report = tune_model(model, target, out, cpu, beam, SearchOptions(beam_budget, jobs, beam_cluster),
                      parse_input_shapes(input_shapes), const_arrays, const_paths)
  searched = [k for k in report.kernels if k.result is not None]
  click.echo(f"\ntuned {len(searched)} of {len(report.kernels)} kernels on {report.device} in {report.seconds:.1f} s "
             f"({report.estimated_speedup:.2f}x faster kernels by the search's timing); wrote {out}")


@cli.command("run")
@click.argument("artifact", metavar="OUT")
@click.option("--input", "-i", "inputs", multiple=True, metavar="NAME=FILE.npy",
              help="An input by its original name (repeatable); a .npz file gives several at once.")
@click.option("--output", "-o", "output", metavar="FILE.npz", help="Write the outputs here (keys: output names).")
@click.option("--threads", default=1, show_default=True, type=int, help="Threads a C artifact runs its kernels on.")
def run_command(artifact, inputs, output, threads):
  """Run the artifact OUT once on inputs from .npy files."""
  from tgc.aot.artifact import run_artifact
  arrays, _ = parse_arrays(inputs, "--input")
  outs = run_artifact(artifact, arrays, threads)
  for name, value in outs.items():
    finite = value[np.isfinite(value)] if value.dtype.kind == "f" else value
    stats = f"min {finite.min():.6g} max {finite.max():.6g}" if finite.size else "no finite values"
    click.echo(f"{name} {_shape(value.shape)} {value.dtype.name} {stats}")
  if output: _write_npz(output, outs)


def _write_npz(path: str, arrays: dict[str, np.ndarray]) -> None:
  """Write atomically, exactly at `path` (numpy would append .npz to a name without it)."""
  folder = os.path.dirname(os.path.abspath(path))
  if not os.path.isdir(folder): raise UserError(f"--output: folder {folder} does not exist")
  tmp = os.path.join(folder, f".{os.path.basename(path)}.tmp-{os.getpid()}")
  try:
    with open(tmp, "wb") as f: np.savez(f, **arrays)
    os.replace(tmp, path)
  except OSError as error:
    if os.path.exists(tmp): os.unlink(tmp)
    raise UserError(f"--output: cannot write {path} ({error.strerror})") from error
  click.echo(f"wrote {path}")


@cli.command("validate", epilog=MODEL_HELP)
@click.argument("artifact", metavar="OUT")
@click.option("--model", "-m", help="The model to compare with (default: the one recorded in the artifact).")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the random inputs.")
@click.option("--rtol", type=float, help="Relative tolerance (default: 1e-4 for float32, 1e-2 for float16).")
@click.option("--atol", type=float, help="Absolute tolerance (default: 1e-4 for float32, 1e-2 for float16).")
def validate_command(artifact, model, seed, rtol, atol):
  """Run OUT and an independent reference on fresh seeded random inputs and compare every output.

  The reference for a Tensor-API model is the numpy interpreter on the un-scheduled graph; for an ONNX model it is
  onnx.reference (onnxruntime for large models). Exits with 1 when an output is over tolerance."""
  from tgc.aot.validate import validate_artifact
  report = validate_artifact(artifact, model=model, seed=seed, rtol=rtol, atol=atol)
  click.echo(f"validate {report.folder} against {report.reference} ({report.model}), seed {report.seed}")
  width = max([len(c.name) for c in report.checks] + [6])
  click.echo(f"  {'output':<{width}}  {'shape':<16} {'max abs err':>12} {'max rel err':>12}  tolerance")
  for c in report.checks:
    verdict = "ok" if c.ok else f"FAIL {c.note}".rstrip()
    click.echo(f"  {c.name:<{width}}  {_shape(c.shape):<16} {c.max_abs:12.3e} {c.max_rel:12.3e}  "
               f"rtol={c.rtol:g} atol={c.atol:g}  {verdict}")
  click.echo("OK" if report.ok else "FAILED: outputs over tolerance")
  return EXIT_OK if report.ok else EXIT_TOLERANCE


@cli.command("bench")
@click.argument("artifact", metavar="OUT")
@click.option("--runs", default=50, show_default=True, type=int, help="Timed runs.")
@click.option("--warmup", default=5, show_default=True, type=int, help="Untimed runs first.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the random inputs.")
@click.option("--threads", default=1, show_default=True, type=int, help="Threads a C artifact runs its kernels on.")
@click.option("--profile", is_flag=True, help="C: also time every kernel launch (per kernel: time, share, GFLOP/s, "
                                               "GB/s, opts, model nodes).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def bench_command(artifact, runs, warmup, seed, threads, profile, as_json):
  """Time the artifact OUT itself: median and p90 latency of whole runs, and its memory and code sizes."""
  from tgc.aot.bench import SLOW_SHARE, bench_artifact
  r = bench_artifact(artifact, runs=runs, warmup=warmup, seed=seed, threads=threads, profile=profile)
  if as_json:
    click.echo(json.dumps(_bench_json(r), indent=2))
    return
  click.echo(f"bench {r.folder}: {r.runs} runs after {r.warmup} warm-up, {r.threads} thread(s)")
  if r.each_run: click.echo(f"  each run: {r.each_run}")
  click.echo(f"  latency median {r.median_s * 1e3:.4f} ms   p90 {r.p90_s * 1e3:.4f} ms   min {r.min_s * 1e3:.4f} ms")
  click.echo(f"  arena   {_bytes(r.arena_bytes)}")
  click.echo(f"  weights {_bytes(r.weights_bytes)}")
  click.echo(f"  code    {_bytes(r.code_bytes)} of generated source")
  if r.profile is not None:
    click.echo(f"  {'kernel':<24} {'launches':>8} {'ms/run':>9} {'share':>6} {'GFLOP/s':>8} {'GB/s':>7} {'roof':>5}  "
               f"opts; nodes")
    for k in r.profile:
      roof = "-" if k.roofline is None else f"{k.roofline:.0%}" + ("!" if k.slow else "")
      click.echo(f"  {k.kernel:<24} {k.launches:>8} {k.seconds * 1e3:>9.4f} {k.share:>6.1%} {k.gflops:>8.1f} "
                 f"{k.gbytes:>7.1f} {roof:>5}  {' '.join(k.opts) or '-'}; {', '.join(k.nodes) or '-'}")
    slow = [k for k in r.profile if k.slow and k.share >= SLOW_SHARE]
    if slow:
      click.echo(f"  !: below 10% of this machine's roofline; taking 5% of the run or more: "
                 f"{', '.join(k.kernel for k in slow)}")


def _bench_json(report) -> dict:
  """The bench report as JSON; with a profile, also the machine's roofline the kernels' fractions are of (`machine`:
  {gflops, gbytes}, null where none is measured), so `tgc viz --profile-json` can draw it."""
  out = dataclasses.asdict(report)
  if report.profile is not None:
    from tgc.aot.artifact import open_artifact
    from tgc.aot.bench import machine_roofline
    machine = machine_roofline(open_artifact(report.folder, check_files=False).manifest)
    out["machine"] = dataclasses.asdict(machine) if machine is not None else None
  return out


@cli.command("inspect", epilog=MODEL_HELP)
@click.argument("thing", metavar="MODEL|OUT")
@click.option("--target", "-t", default=None, metavar="TARGET",
              help="Target to lower the model for (default c; an ONNX file is lowered only when given).")
def inspect_command(thing, target):
  """Describe an artifact folder (kernels with launch sizes, buffers, arena), a Tensor-API model (traced and
  lowered, nothing written) or an ONNX file (operators, which tgc supports, shapes; with --target, lowered like a
  model). For GPU targets each kernel's global-memory traffic per work-group is shown: elements loaded per output
  element, loads per distinct element read (1: each element once per work-group) and 4-lane vector loads."""
  if os.path.isdir(thing): _inspect_artifact(thing)
  elif thing.lower().endswith(".onnx") and target is None: _inspect_onnx(thing)
  else: _inspect_model(thing, target or "c")


def _inspect_artifact(folder: str) -> None:
  from tgc.aot.artifact import node_text, open_artifact
  art = open_artifact(folder, check_files=False)
  m = art.manifest
  click.echo(f"artifact {folder}: model {art.name}, target {art.target}, format {m.get('format_version')}, "
             f"tgc {m.get('tgc_version', '?')}")
  for kind, specs in (("input", art.inputs), ("output", art.outputs)):
    for s in specs: click.echo(f"  {kind:<7} {s['name']} -> {s['symbol']} {_shape(s['shape'])} {s['dtype']}")
  weights = m.get("weights", {})
  tensors = weights.get("tensors", [])
  where = "embedded in the source" if weights.get("embedded") else weights.get("file", "?")
  click.echo(f"weights: {len(tensors)} tensors, {_bytes(art.weights_bytes)} ({where})")
  for t in tensors: click.echo(f"  {t['name']} -> {t['symbol']} {_shape(t['shape'])} {t['dtype']} @ {t['offset']}")
  arena = m.get("arena_buffers", [])
  click.echo(f"arena: {_bytes(int(m.get('arena_bytes', 0)))}, {len(arena)} buffers")
  for b in arena:
    click.echo(f"  {b['symbol']:<8} offset {b['offset']:>10} {b['nbytes']:>10} bytes {_shape(b['shape'])} {b['dtype']}")
  kernels = m.get("kernels", [])
  click.echo(f"kernels: {len(kernels)}")
  for k in kernels:
    args = ", ".join(_arg(a) for a in k.get("args", []))
    click.echo(f"  {k['name']:<20} global {_shape(k['global_size'])} local {_shape(k['local_size'])} "
               f"ops {k.get('ops', '?')}  ({args})")
    if k.get("nodes"): click.echo("    nodes: " + ", ".join(node_text(o) for o in k["nodes"]))
  calls = m.get("calls", [])
  click.echo(f"calls: {len(calls)} per run")
  named = {"input": [i["name"] for i in art.inputs], "output": [o["name"] for o in art.outputs],
           "weight": [t["name"] for t in tensors], "arena": [f"{b['symbol']}@{b['offset']}" for b in arena]}
  for c in calls:
    click.echo(f"  {c['kernel']:<20} (" + ", ".join(_call_arg(a, named) for a in c.get("args", [])) + ")"
               + (f"  <- {', '.join(map(str, c['nodes']))}" if c.get("nodes") else ""))
  click.echo("files: " + ", ".join(f"{n} ({os.path.getsize(os.path.join(folder, n))} bytes)"
                                   for n in m.get("files", {}) if os.path.exists(os.path.join(folder, n))))
  sizes = m.get("target_info", {}).get("download_bytes")
  if isinstance(sizes, dict) and sizes.get("total"):
    click.echo(f"a page downloads {_bytes(sizes['total'])}: model.js {_bytes(sizes.get('js', 0))} (WGSL of every "
               f"kernel variant {_bytes(sizes.get('wgsl', 0))}, of the one software adapters run "
               f"{_bytes(sizes.get('wgsl_cpu', 0))}), weights {_bytes(sizes.get('weights', 0))}")
  package = m.get("target_info", {}).get("npm_package")
  if isinstance(package, dict): click.echo(f"npm package: {package.get('name')} {package.get('version')}")


def _arg(a) -> str:
  if not isinstance(a, dict): return str(a)
  return ("" if a.get("mutable", True) else "const ") + f"{a.get('dtype', '?')}*"


def _call_arg(a, named: dict[str, list[str]]) -> str:
  if not isinstance(a, dict): return str(a)
  kind, index = a.get("kind", "?"), a.get("index", -1)
  names = named.get(kind, [])
  label = names[index] if isinstance(index, int) and 0 <= index < len(names) else f"#{index}"
  return label if kind == "arena" else f"{kind} {label}"


def _inspect_model(model: str, target: str) -> None:
  from tgc.aot.inspection import inspect_model, kernel_traffic
  cm = inspect_model(model, target)
  click.echo(f"model {model}: {len(cm.kernels)} kernels, {len(cm.calls)} calls, target {cm.target} (nothing written)")
  for b in cm.inputs + cm.outputs:
    click.echo(f"  {b.kind:<7} {b.name} {_shape(b.shape)} {np.dtype(b.dtype.numpy).name}")
  weights = cm.of_kind(BufferKind.WEIGHT)
  click.echo(f"weights: {len(weights)} tensors, {_bytes(sum(b.nbytes for b in weights))}")
  for b in weights: click.echo(f"  {b.name} {_shape(b.shape)} {np.dtype(b.dtype.numpy).name}")
  click.echo(f"arena: {_bytes(cm.arena_bytes)}, {len(cm.of_kind(BufferKind.ARENA))} buffers")
  traffic = kernel_traffic(cm) if cm.target.has_workgroups else {}
  for name, k in cm.kernels.items():
    t = traffic.get(name)
    memory = f" loads/output {t.loads_per_output:.3g} reads/element {t.reads_per_element:.3g} vec4 loads " \
             f"{t.vector_loads}/{t.vector_loads + t.scalar_loads} smem {k.shared_bytes}" if t else ""
    click.echo(f"  {name:<20} global {_shape(k.global_size)} local {_shape(k.local_size)} ops {k.ops}{memory} "
               f"opts {[str(o) for o in k.opts]}")
    if cm.kernel_nodes(name): click.echo("    nodes: " + ", ".join(str(o) for o in cm.kernel_nodes(name)))
  click.echo("calls:")
  for c in cm.calls:
    click.echo(f"  {c.kernel:<20} (" + ", ".join(_buffer_label(cm.buffers[i]) for i in c.buffers) + ")"
               + (f"  <- {', '.join(dict.fromkeys(o.name for o in c.nodes))}" if c.nodes else ""))


def _buffer_label(b) -> str:
  return f"{b.kind} {b.name}" if b.name else f"{b.symbol}@{b.offset}"


def _inspect_onnx(path: str) -> None:
  from tgc.aot.inspection import inspect_onnx
  if not os.path.isfile(path): raise UserError(f"model file not found: {path}")
  graph_inputs, nodes = inspect_onnx(path)
  unsupported = sorted({n.op for n in nodes if not n.supported})
  click.echo(f"onnx {path}: {len(nodes)} nodes, {len({n.op for n in nodes})} operators"
             + (f", unsupported: {', '.join(unsupported)}" if unsupported else ", all supported"))
  for name, shape, dtype in graph_inputs:
    click.echo(f"  input  {name} {shape if shape is not None else '?'} {dtype}")
  for n in nodes:
    ins = ", ".join(f"{x}{s if s is not None else ''}" for x, s in n.inputs)
    outs = ", ".join(f"{x}{s if s is not None else ''}" for x, s in n.outputs)
    click.echo(f"  {n.index:>4} {n.op:<20} {'ok ' if n.supported else 'NO '} {n.name}: ({ins}) -> ({outs})")


@cli.command("viz", epilog=MODEL_HELP)
@click.argument("thing", metavar="MODEL|OUT")
@click.option("--out", "-o", "out", default="viz.html", show_default=True, metavar="FILE.html",
              help="The page to write.")
@click.option("--target", "-t", default=None, metavar="TARGET",
              help="Target to compile MODEL for (default c); an artifact folder keeps its own.")
@click.option("--cpu", default=None, metavar="LEVEL", help="CPU level of the C kernels (see tgc compile --help).")
@click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME=D0,D1,...",
              help="Pin a dynamic ONNX input shape (repeatable).")
@click.option("--dim", "dims", multiple=True, metavar="NAME=LO..HI",
              help="Keep an ONNX input dim open, from LO to HI (repeatable; see tgc compile --help).")
@click.option("--const", "consts", multiple=True, metavar="NAME=FILE.npy",
              help="Bake an ONNX input in as a constant from a .npy file (repeatable).")
@click.option("--profile", is_flag=True, help="OUT (C): time its kernels now (as tgc bench --profile) and draw where "
                                               "the time goes: a bar chart and a roofline plot.")
@click.option("--profile-json", "profile_json", default=None, metavar="FILE.json",
              help="Draw the profile in FILE.json, what `tgc bench OUT --profile --json` printed.")
def viz_command(thing, out, target, cpu, input_shapes, dims, consts, profile, profile_json):
  """Write one static HTML page (it works offline) showing how MODEL compiles, or how the artifact folder OUT was
  compiled: the model's nodes and the kernels computing them; every rewrite pass with the rules that fired and the
  graph before and after; the schedule (calls, buffers, the arena with lifetimes as a chart); per kernel its AST,
  opts, launch size and source. MODEL is compiled in process and nothing else is written. For OUT the page shows
  its manifest and sources, and the rewrites of compiling its recorded model again when that file is unchanged.
  The model graph is drawn with each kernel's nodes outlined, every kernel's rewrites can be stepped through as
  graphs, and with a profile the page draws kernel times and a roofline plot."""
  from tgc.aot.viz import viz
  if os.path.isdir(thing) and (target or cpu or input_shapes or consts or dims):
    raise UserError(f"{thing} is an artifact folder: --target, --cpu, --input-shape, --dim and --const apply to a "
                    f"MODEL")
  const_arrays, const_paths = parse_arrays(consts, "--const")
  report = viz(thing, out, target or "c", cpu, parse_input_shapes(input_shapes), const_arrays, const_paths,
               profile=profile, profile_json=profile_json, dims=parse_dims(dims))
  click.echo(f"wrote {report.path} ({_bytes(report.nbytes)}): {report.kernels} kernels, {report.rewrites} rewrites "
             f"recorded")
  for note in report.notes: click.echo(f"  note: {note}")


def main(argv=None) -> None:
  """Console-script entry point."""
  cli.main(args=argv, prog_name="tgc")


if __name__ == "__main__":
  main()
