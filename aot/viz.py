"""`tgc viz`: one static HTML page (offline: no network, no external file) that shows how a model was compiled. The
model's nodes and which kernels compute them; every recorded rewrite pass with the rules that fired and the graph
before and after (`ir.viz`); the schedule (each call's kernel, nodes and buffers, the buffers, the arena with its
buffers' lifetimes as a chart); per kernel its AST, opts, launch size and source for the target.

Sources of a page: a MODEL (`file.py:function` or `.onnx`) traced and compiled in process with recording on (nothing
written but the page), or an artifact folder: its manifest and sources, plus the rewrites of a rebuild when the
manifest's `source` still names the model file it was compiled from (same sha256; the artifact's own opts are used).

`VIZ=1` on any tgc command records what it compiles and writes the same page: `OUT.viz.html` beside the artifact
folder OUT that the command wrote or read, else `viz.html` in the current folder (the session is
`aot.viz_session.command_session`; `write_session_page` writes its page).

The page is the template `templates/viz/page.html.tmpl` with the data as JSON in a `<script type="application/json">`
block, where `<`, `>` and `&` are written as JSON escapes, so no model-supplied text can end the block; the page's
script renders model text with textContent only."""
from __future__ import annotations
import dataclasses
import json
import os
import re
import sys
import numpy as np
from tgc.ir import UOp
from tgc.ir.sint import render
import onnx
from tgc.ir import provenance, viz as recorder_viz
from tgc.ir.uop import UOp
from tgc.codegen.compiled import BufferKind, CompiledModel
from tgc.codegen.opts import Opt, OptError
from tgc.runtimes.artifact import SOURCE_SUFFIXES, ArtifactError, ArtifactFolder
from tgc.runtimes.artifact_webgpu import read_plan
from tgc.emit.common import fill, read_template
from tgc.frontend.onnx.loading import node_label
from tgc.aot import models, reference
from tgc.aot.artifact import open_artifact, opt_text
from tgc.aot.compile import build_compiled
from tgc.aot.errors import UserError
from tgc.aot.targets import make_target
from tgc.aot import viz_graph
from tgc.aot.viz_session import VizSession

TEMPLATE = ("viz", "page.html.tmpl")
PAGE_NAME = "viz.html"
PAGE_SUFFIX = ".viz.html"
PROFILE_RUNS, PROFILE_WARMUP = 20, 3     # `tgc viz OUT --profile`: timed runs (and untimed ones first)
_JSON_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


@dataclasses.dataclass
class VizReport:
  path: str
  nbytes: int
  kernels: int
  rewrites: int        # rewrites that changed a graph, recorded
  notes: list[str]


# ---------------------------------------------------------------- entry points
def viz(thing: str, out: str, target: str = "c", cpu: str | None = None, input_shapes: dict | None = None,
        consts: dict | None = None, const_files: dict | None = None, profile: bool = False,
        profile_json: str | None = None, dims: dict | None = None) -> VizReport:
  """`tgc viz MODEL|OUT -o out`: the page of a model (compiled for `target` in process) or of an artifact folder;
  with `profile` (an artifact folder) the time its kernels take, measured now, or the profile in `profile_json` (what
  `tgc bench --profile --json` prints)."""
  if profile and not os.path.isdir(thing):
    raise UserError(f"--profile times an artifact folder; {thing} is a model: `tgc compile {thing} -o OUT` first, "
                    f"then `tgc viz OUT --profile`")
  if profile and profile_json: raise UserError("give --profile or --profile-json, not both")
  measured = read_profile_json(profile_json) if profile_json else run_profile(thing) if profile else None
  if os.path.isdir(thing): data = artifact_page_data(thing)
  else: data = model_page_data(thing, target, cpu, input_shapes, consts, const_files, dims)
  if measured is not None: attach_profile(data, measured)
  return write_page(data, out)


def model_page_data(model: str, target: str = "c", cpu: str | None = None, input_shapes: dict | None = None,
                    consts: dict | None = None, const_files: dict | None = None, dims: dict | None = None) -> dict:
  """Trace and compile MODEL for `target` with rewrites recorded; nothing is written."""
  spec = models.parse_model_spec(model)
  tgt = make_target(target, cpu)
  with recorder_viz.recording() as recorder:
    cm, _ = build_compiled(spec, tgt, None, input_shapes, consts, const_files, dims=dims)
  return compiled_page_data(cm, spec, recorder)


def compiled_page_data(cm: CompiledModel, spec: models.ModelSpec | None, recorder: recorder_viz.Recorder | None,
                       notes: list[str] | None = None) -> dict:
  """The page of a compiled model (and the rewrites `recorder` holds)."""
  described = describe_compiled(cm)
  sources = {name: k.function for name, k in cm.kernels.items()}
  onnx_path = spec.path if spec is not None and spec.kind == "onnx" else None
  what = spec.text if spec is not None else cm.name
  recorded = Recorded.of(recorder, links=onnx_path is None) if recorder is not None else None
  return _page_data(described, sources, recorded, list(notes or []), what, "model", onnx_path)


def artifact_page_data(folder: str, rebuild: bool = True) -> dict:
  """The page of an artifact folder: manifest and sources; with `rebuild`, the rewrites of compiling its recorded
  model again (when it can be)."""
  art = open_artifact(folder, check_files=False)
  notes: list[str] = []
  sources = artifact_sources(art, notes)
  rewrites = None
  if rebuild: rewrites = _rebuild_rewrites(art, notes)
  else: notes.append(f"rewrites are not shown: run `tgc viz {folder}` to rebuild the model and record them")
  source = art.source or {}
  onnx_path = source.get("path") if source.get("kind") == "onnx" and os.path.isfile(source.get("path", "")) else None
  return _page_data(art.manifest, sources, rewrites, notes, folder, "artifact", onnx_path)


def write_page(data: dict, out: str) -> VizReport:
  """Write the page to `out` (atomically); a UserError when it cannot be written."""
  html = render_page(data)
  path = os.path.abspath(out)
  folder = os.path.dirname(path)
  if not os.path.isdir(folder): raise UserError(f"-o {out}: folder {folder} does not exist")
  if os.path.isdir(path): raise UserError(f"-o {out} is a folder; give the page's file name (e.g. {PAGE_NAME})")
  tmp = os.path.join(folder, f".{os.path.basename(path)}.tmp-{os.getpid()}")
  try:
    with open(tmp, "w", encoding="utf-8") as f: f.write(html)
    os.replace(tmp, path)
  except OSError as error:
    if os.path.exists(tmp): os.unlink(tmp)
    raise UserError(f"cannot write {out} ({error.strerror})") from error
  rewrites = data.get("rewrites") or {"sections": []}
  recorded = sum(len(s["records"]) for s in rewrites["sections"])
  return VizReport(path, len(html.encode("utf-8")), len(data["kernels"]), recorded, list(data["notes"]))


def render_page(data: dict) -> str:
  """The page: the template with the data embedded as escaped JSON."""
  return fill(read_template(*TEMPLATE), {"data": embed_json(data)}, "templates/viz/page.html.tmpl")


def embed_json(data) -> str:
  """JSON that can sit inside a <script> element: no `<`, `>` or `&` (written as \\u escapes), ASCII only."""
  text = json.dumps(data, ensure_ascii=True, separators=(",", ":"), allow_nan=False, default=_json_default)
  return re.sub("[<>&\u2028\u2029]", lambda m: _JSON_ESCAPES[m.group(0)], text)


def _json_default(value):
  if isinstance(value, np.integer): return int(value)
  if isinstance(value, np.floating): return float(value)
  if isinstance(value, UOp): return render(value)       # a size known only at run time, as the manifest writes it
  raise TypeError(f"cannot put {type(value).__name__} on the viz page")


# ---------------------------------------------------------------- a compiled model described like a manifest
def describe_compiled(cm: CompiledModel) -> dict:
  """The parts of a manifest the page shows, for a compiled model not written as an artifact."""
  def tensor(b):
    return {"name": b.name, "symbol": b.symbol, "shape": list(b.shape), "dtype": b.dtype.np, "nbytes": b.nbytes}
  kinds = [(b.kind, b.index) for b in cm.buffers]
  return {
    "target": cm.target.name, "model": {"name": cm.name}, "renderer": cm.meta.get("renderer", ""),
    "inputs": [tensor(b) for b in cm.inputs], "outputs": [tensor(b) for b in cm.outputs],
    "weights": {"tensors": [tensor(b) for b in cm.of_kind(BufferKind.WEIGHT)]},
    "arena_bytes": cm.arena_bytes,
    "arena_buffers": [{**tensor(b), "index": b.index, "offset": b.offset} for b in cm.of_kind(BufferKind.ARENA)],
    "kernels": [{"name": name, "global_size": list(k.global_size), "local_size": list(k.local_size), "ops": k.ops,
                 "bytes": k.bytes, "opts": [repr(o) for o in k.opts], "tuned": name in cm.meta.get("tuned", ()),
                 "nodes": [{"name": o.name, "op": o.op} for o in cm.kernel_nodes(name)]}
                for name, k in cm.kernels.items()],
    "calls": [{"kernel": c.kernel, "args": [{"kind": kinds[i][0], "index": kinds[i][1]} for i in c.buffers],
               "nodes": list(dict.fromkeys(o.name for o in c.nodes))} for c in cm.calls],
  }


# ---------------------------------------------------------------- the page's data
@dataclasses.dataclass
class Recorded:
  """What a recording gave the page: the rewrites as plain data (`Recorder.to_json`) and, for a model without an ONNX
  graph, the links between its nodes read from the graph the scheduler split ((from, to, shape) of (name, op))."""
  rewrites: dict
  links: list[tuple[tuple[str, str], tuple[str, str], str]]

  @staticmethod
  def of(recorder: recorder_viz.Recorder, links: bool) -> Recorded:
    return Recorded(recorder.to_json(), origin_links(recorder) if links else [])


def _page_data(m: dict, sources: dict[str, str], recorded: Recorded | None, notes: list[str], what: str, kind: str,
               onnx_path: str | None) -> dict:
  """Everything the page shows, from a manifest (or `describe_compiled`), kernel sources and recorded rewrites."""
  rewrites = recorded.rewrites if recorded is not None else None
  buffers, calls = _calls(m)
  kernels = _kernels(m, calls, sources, rewrites)
  if rewrites is not None:
    missing = [k["name"] for k in kernels if k["section"] < 0]
    if missing: notes.append(f"no rewrites were recorded for {len(missing)} kernel(s): {', '.join(missing[:8])}"
                             + (" ..." if len(missing) > 8 else ""))
    if rewrites["graphs_left_out"]:
      notes.append(f"{rewrites['graphs_left_out']} graphs are left out: the page holds at most "
                   f"{rewrites['limits']['nodes']} graph nodes")
  model = m.get("model")
  name = model.get("name", "") if isinstance(model, dict) else str(model or "")
  nodes, shapes = _model_nodes(kernels, onnx_path, notes)
  inputs, outputs = [_spec(t) for t in m.get("inputs", [])], [_spec(t) for t in m.get("outputs", [])]
  for t in inputs + outputs: shapes.setdefault(t["name"], viz_graph.shape_text(t["shape"], t["dtype"]))
  links = recorded.links if recorded is not None and not onnx_path else []
  graph = viz_graph.model_graph(nodes, inputs, outputs, {k["name"]: i for i, k in enumerate(kernels)}, shapes,
                                _node_edges(nodes, links))
  return {"title": f"{name} for {m.get('target', '?')}", "model": name, "target": m.get("target", "?"),
          "kind": kind, "from": what, "renderer": m.get("renderer") or _renderer_of(m), "notes": notes,
          "inputs": inputs, "outputs": outputs, "arena_bytes": int(m.get("arena_bytes", 0)), "buffers": buffers,
          "calls": calls, "kernels": kernels, "nodes": nodes, "graph": graph, "rewrites": rewrites, "profile": None}


def _calls(m: dict) -> tuple[list[dict], list[dict]]:
  """The buffers (with the first and last call that binds each) and the calls binding them, by position."""
  buffers, where = _buffers(m)
  calls = []
  for i, c in enumerate(m.get("calls", [])):
    args = [where.get((a.get("kind"), a.get("index")), -1) for a in c.get("args", [])]
    for b in args:
      if b < 0: continue
      buffers[b]["first"] = i if buffers[b]["first"] < 0 else buffers[b]["first"]
      buffers[b]["last"] = i
    calls.append({"kernel": c.get("kernel", "?"), "buffers": args, "nodes": [str(n) for n in c.get("nodes", [])]})
  return buffers, calls


def _kernels(m: dict, calls: list[dict], sources: dict[str, str], rewrites: dict | None) -> list[dict]:
  """Each kernel with its calls, source and the section of the rewrites recorded for it (-1: none)."""
  sections = {s["title"]: i for i, s in enumerate(rewrites["sections"]) if s["kind"] == "kernel"} if rewrites else {}
  kernels = []
  for k in m.get("kernels", []):
    name = k.get("name", "?")
    kernels.append({"name": name, "global_size": k.get("global_size", []), "local_size": k.get("local_size", []),
                    "ops": k.get("ops", 0), "bytes": k.get("bytes", 0),
                    "opts": [opt_text(o) for o in k.get("opts", [])],
                    "tuned": bool(k.get("tuned", False)),
                    "nodes": [[n.get("name", "?"), n.get("op", "?")] for n in k.get("nodes", [])],
                    "calls": [i for i, c in enumerate(calls) if c["kernel"] == name],
                    "source": sources.get(name), "section": sections.get(name, -1)})
  return kernels


def _node_edges(nodes: list[dict], links: list[tuple[tuple[str, str], tuple[str, str], str]]
                ) -> list[tuple[int, int, str]]:
  """Links between (name, op) pairs as edges between the page's node indexes (those naming no node dropped)."""
  index = {(n["name"], n["op"]): i for i, n in enumerate(nodes)}
  return [(index[a], index[b], label) for a, b, label in links if a in index and b in index]


def origin_links(recorder: recorder_viz.Recorder, max_origins: int = 8) -> list[tuple[tuple[str, str], ...]]:
  """Which model node feeds which, read from the graph the scheduler split (its UOps' origins): node A feeds node B
  when a UOp built for B has a source built for A, or reaches one through UOps built for no node (at most
  `max_origins` such A per UOp). Each link once, in graph order, labelled with the shape of the source UOp."""
  roots = next((snap.roots for s in recorder.sections if s.kind == "schedule" for snap in s.snapshots), ())
  nearest: dict[UOp, dict] = {}      # UOp -> {origin: the UOp of that origin nearest it}
  links: dict[tuple, str] = {}
  for u in _toposort(roots):
    here = provenance.origin_of(u)
    feeding: dict = {}
    for s in u.src: feeding.update(nearest.get(s, {}))
    if here is None:
      nearest[u] = dict(list(feeding.items())[:max_origins])
      continue
    nearest[u] = {here: u}
    for o, source in feeding.items():
      if o != here: links.setdefault(((o.name, o.op), (here.name, here.op)), _uop_shape(source))
  return [(a, b, label) for (a, b), label in links.items()]


def _toposort(roots) -> list[UOp]:
  """The UOps under `roots`, sources before users (each once)."""
  seen: set[int] = set()
  out: list[UOp] = []
  for root in roots:
    for u in root.toposort():
      if id(u) not in seen:
        seen.add(id(u))
        out.append(u)
  return out


def _uop_shape(u: UOp) -> str:
  try: return viz_graph.shape_text(u.shape, u.dtype.np if hasattr(u.dtype, "np") else "")
  except Exception: return ""     # noqa: BLE001 (a node without a shape: the edge has no label)


def _spec(t: dict) -> dict:
  return {"name": t.get("name", ""), "shape": list(t.get("shape", [])), "dtype": t.get("dtype", "?")}


def _renderer_of(m: dict) -> str:
  cpu = (m.get("target_info") or {}).get("cpu")
  return f"{m.get('target', '?')} ({cpu.get('level')})" if isinstance(cpu, dict) and cpu.get("level") else ""


def _buffers(m: dict) -> tuple[list[dict], dict[tuple[str, int], int]]:
  """Every buffer a call can bind (inputs, outputs, weights, arena) and (kind, index) -> position in that list."""
  groups = (("input", m.get("inputs", [])), ("output", m.get("outputs", [])),
            ("weight", (m.get("weights") or {}).get("tensors", [])), ("arena", m.get("arena_buffers", [])))
  out, where = [], {}
  for kind, entries in groups:
    for i, t in enumerate(entries):
      index = t.get("index", i) if kind == "arena" else i
      where[(kind, index)] = len(out)
      out.append({"kind": kind, "index": index, "name": t.get("name", ""), "symbol": t.get("symbol", ""),
                  "shape": list(t.get("shape", [])), "dtype": t.get("dtype", "?"), "nbytes": int(t.get("nbytes", 0)),
                  "offset": int(t.get("offset", 0)) if kind == "arena" else -1, "first": -1, "last": -1})
  return out, where


def _model_nodes(kernels: list[dict], onnx_path: str | None, notes: list[str]) -> tuple[list[dict], dict[str, str]]:
  """The model's nodes, each with the kernels that compute it: every node of an ONNX graph in model order (those no
  kernel computes were folded at compile time), else the nodes the kernels name, in kernel order. Also the shapes of
  the ONNX graph's tensors as edge labels (tensor name -> text), empty without one."""
  computed: dict[tuple[str, str], list[str]] = {}
  for k in kernels:
    for name, op in k["nodes"]: computed.setdefault((name, op), []).append(k["name"])
  if onnx_path:
    read = _onnx_nodes(onnx_path, notes)
    if read is not None:
      graph_nodes, shapes = read
      return [{**n, "kernels": computed.get((n["name"], n["op"]), [])} for n in graph_nodes], shapes
  nodes = [{"name": name, "op": op, "inputs": [], "outputs": [], "kernels": ks} for (name, op), ks in computed.items()]
  return nodes, {}


def _onnx_nodes(path: str, notes: list[str]) -> tuple[list[dict], dict[str, str]] | None:
  """The nodes of an ONNX graph as tgc names them and its tensors' shapes as text (None, with a note, when the file
  cannot be read)."""
  try:
    model = onnx.load(path, load_external_data=False)
  except Exception as error:   # the page still shows the nodes the kernels name
    notes.append(f"the ONNX graph of {path} could not be read ({type(error).__name__}); nodes come from the kernels")
    return None
  nodes = [{"name": node_label(n, i), "op": n.op_type, "inputs": [x for x in n.input if x],
            "outputs": [x for x in n.output if x]} for i, n in enumerate(model.graph.node)]
  return nodes, _onnx_shapes(model, notes)


def _onnx_shapes(model: onnx.ModelProto, notes: list[str]) -> dict[str, str]:
  """Tensor name -> its shape as an edge label, from ONNX shape inference (what the graph declares when that fails)."""
  try: inferred = onnx.shape_inference.infer_shapes(model).graph
  except Exception as error:     # noqa: BLE001 (any failure of the checker: the declared shapes still label edges)
    notes.append(f"ONNX shape inference failed ({type(error).__name__}): edges carry the shapes the graph declares")
    inferred = model.graph
  shapes: dict[str, str] = {}
  for info in list(inferred.input) + list(inferred.value_info) + list(inferred.output):
    tensor = info.type.tensor_type
    if not tensor.HasField("shape"): continue
    dims = [d.dim_param or (d.dim_value if d.HasField("dim_value") else "?") for d in tensor.shape.dim]
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name if tensor.elem_type else ""
    shapes[info.name] = viz_graph.shape_text(dims, dtype)
  return shapes


# ---------------------------------------------------------------- artifacts
def artifact_sources(art: ArtifactFolder, notes: list[str]) -> dict[str, str]:
  """Each kernel's source as the artifact ships it: from the line `// <kernel> computes ...` that heads it to the end
  of its function (C-family files), or the kernel's WGSL in a webgpu bundle's plan."""
  names = [k["name"] for k in art.manifest.get("kernels", [])]
  texts: list[str] = []
  for fname in sorted(art.manifest.get("files", {})):
    path = os.path.join(art.folder, fname)
    if not fname.lower().endswith(SOURCE_SUFFIXES) or not os.path.isfile(path): continue
    with open(path, encoding="utf-8", errors="replace") as f: text = f.read()
    if fname.endswith(".js"): texts.extend(_plan_wgsl(text))
    else: texts.append(text)
  found = {}
  for name in names:
    for text in texts:
      src = kernel_text(text, name)
      if src is not None:
        found[name] = src
        break
  missing = [n for n in names if n not in found]
  if missing: notes.append(f"the source of {len(missing)} kernel(s) was not found in the artifact's files: "
                           f"{', '.join(missing[:8])}" + (" ..." if len(missing) > 8 else ""))
  return found


def _plan_wgsl(model_js: str) -> list[str]:
  """The WGSL of every kernel in a webgpu bundle's model.js plan block (none when it has no plan)."""
  try: plan = read_plan(model_js)
  except ArtifactError: return []
  return ["\n".join(k.get("wgsl", [])) for k in plan.get("kernels", [])]


def kernel_text(text: str, name: str) -> str | None:
  """The kernel `name` in a source text: its heading comment lines and the function after them, through the line
  where braces and preprocessor conditionals are all closed again (both halves of `#if TG_SIMD ... #else`)."""
  lines = text.split("\n")
  head = f"// {name} computes"
  start = next((i for i, line in enumerate(lines) if line.startswith(head + ":") or line.startswith(head + " ")), None)
  if start is None: return None
  braces = conditionals = 0
  opened = False
  for i in range(start, len(lines)):
    code = lines[i].split("//", 1)[0]
    stripped = code.strip()
    if stripped.startswith("#if"): conditionals += 1
    elif stripped.startswith("#endif"): conditionals -= 1
    braces += code.count("{") - code.count("}")
    opened = opened or "{" in code
    if opened and braces <= 0 and conditionals <= 0: return "\n".join(lines[start:i + 1])
  return "\n".join(lines[start:])


def _rebuild_rewrites(art: ArtifactFolder, notes: list[str]) -> Recorded | None:
  """Compile the artifact's recorded model again with its target, CPU level and opts, rewrites recorded."""
  source = art.source
  if not source:
    notes.append("rewrites are not shown: the artifact does not record the model it was compiled from")
    return None
  try:
    spec, options = reference.spec_from_source(source, None)
    consts = {k: np.load(p, allow_pickle=False) for k, p in (options.get("consts") or {}).items()}
    shapes = {k: tuple(v) for k, v in (options.get("input_shapes") or {}).items()}
    dims = {k: tuple(v) for k, v in (options.get("dims") or {}).items()} or None
    cpu = ((art.manifest.get("target_info") or {}).get("cpu") or {}).get("level")
    target = make_target(art.target, cpu)
  except (UserError, OSError, ValueError) as error:
    notes.append(f"rewrites are not shown: the model cannot be rebuilt ({error})")
    return None
  with recorder_viz.recording() as recorder:
    try: cm, _ = build_compiled(spec, target, art.name, shapes, consts, dict(options.get("consts") or {}),
                                opts_for=_artifact_opts(art, notes), dims=dims)
    except UserError as error:
      notes.append(f"rewrites are not shown: rebuilding {spec.text} failed ({error})")
      return None
  rebuilt, shipped = list(cm.kernels), [k["name"] for k in art.manifest.get("kernels", [])]
  if rebuilt != shipped:
    notes.append(f"the rebuild of {spec.text} has kernels {len(rebuilt)} that differ from the artifact's "
                 f"{len(shipped)}: its rewrites are shown for the kernels of the same name")
  else: notes.append(f"rewrites recorded by rebuilding {spec.text} with the artifact's target and opts")
  return Recorded.of(recorder, links=spec.kind != "onnx")


def _artifact_opts(art: ArtifactFolder, notes: list[str]):
  """opts_for(item) that gives each kernel the artifact's own opts (the n-th distinct kernel AST is the manifest's
  n-th kernel); None (the heuristics) when the manifest's opts cannot be read."""
  opts: list[list[Opt]] = []
  for k in art.manifest.get("kernels", []):
    try: opts.append([Opt.from_json(o) for o in k.get("opts", [])])
    except OptError:
      notes.append("the artifact's opts could not be read: the rebuild uses the heuristics' opts")
      return None
  order: dict[str, int] = {}

  def opts_for(item):
    index = order.setdefault(item.ast.key, len(order))
    return opts[index] if index < len(opts) else None
  return opts_for


# ---------------------------------------------------------------- where the time goes
def run_profile(folder: str, runs: int = PROFILE_RUNS) -> dict:
  """Time every kernel launch of the artifact in `folder` (as `tgc bench --profile`): the profile as that command's
  JSON holds it, with the machine's roofline."""
  from tgc.aot import bench
  report = bench.bench_artifact(folder, runs=runs, warmup=PROFILE_WARMUP, profile=True)
  machine = bench.machine_roofline(open_artifact(folder, check_files=False).manifest)
  return {"source": f"tgc bench --profile ({report.runs} runs, median {report.median_s * 1e3:.4f} ms)",
          "median_s": report.median_s, "profile": [dataclasses.asdict(k) for k in report.profile or []],
          "machine": dataclasses.asdict(machine) if machine is not None else None}


def read_profile_json(path: str) -> dict:
  """The JSON `tgc bench --profile --json` printed, read from `path` (a UserError naming what is wrong)."""
  try:
    with open(path, encoding="utf-8") as f: report = json.load(f)
  except (OSError, ValueError) as error:
    raise UserError(f"--profile-json {path}: cannot be read as JSON ({error})") from None
  kernels = report.get("profile") if isinstance(report, dict) else None
  if not isinstance(kernels, list) or not all(isinstance(k, dict) and "kernel" in k for k in kernels):
    raise UserError(f"--profile-json {path}: no per-kernel profile in it (write it with `tgc bench OUT --profile "
                    f"--json > {os.path.basename(path)}`)")
  machine = report.get("machine")
  median = report.get("median_s")
  return {"source": f"{path}" + (f" (median {median * 1e3:.4f} ms)" if isinstance(median, (int, float)) else ""),
          "median_s": median, "profile": kernels, "machine": machine if isinstance(machine, dict) else None}


def attach_profile(data: dict, measured: dict) -> None:
  """Put a profile on the page: per kernel its time, rates, fraction of the roofline (slow below SLOW_FRACTION) and
  arithmetic intensity (its operations over the bytes its launches bind, the roofline's own measure of traffic), so
  that a kernel's point sits under the roofline by exactly the fraction `tgc bench --profile` reports."""
  from tgc.aot.bench import SLOW_FRACTION
  index = {k["name"]: i for i, k in enumerate(data["kernels"])}
  traffic = [0] * len(data["kernels"])
  for c in data["calls"]:
    if c["kernel"] in index:
      traffic[index[c["kernel"]]] += sum(data["buffers"][b]["nbytes"] for b in c["buffers"] if b >= 0)
  kernels, unknown = [], []
  for k in measured["profile"]:
    i = index.get(k["kernel"], -1)
    if i < 0: unknown.append(str(k["kernel"]))
    ops = data["kernels"][i]["ops"] * int(k.get("launches", 1)) if i >= 0 else 0
    fraction = k.get("roofline")
    kernels.append({"kernel": str(k["kernel"]), "index": i, "launches": int(k.get("launches", 0)),
                    "seconds": float(k.get("seconds", 0.0)), "share": float(k.get("share", 0.0)),
                    "gflops": float(k.get("gflops", 0.0)), "gbytes": float(k.get("gbytes", 0.0)),
                    "roofline": fraction, "slow": fraction is not None and fraction < SLOW_FRACTION,
                    "intensity": ops / traffic[i] if i >= 0 and traffic[i] else 0.0})
  if unknown: data["notes"].append(f"the profile names {len(unknown)} kernel(s) this page does not have: "
                                   f"{', '.join(unknown[:8])}" + (" ..." if len(unknown) > 8 else ""))
  data["profile"] = {"source": measured["source"], "median_s": measured.get("median_s"), "kernels": kernels,
                     "machine": measured.get("machine"), "slow_fraction": SLOW_FRACTION}


# ---------------------------------------------------------------- VIZ=1
def session_page_path(session: VizSession) -> str:
  """OUT.viz.html beside the artifact folder OUT, else viz.html in the current folder."""
  if session.artifact: return session.artifact.rstrip(os.sep) + PAGE_SUFFIX
  return os.path.abspath(PAGE_NAME)


def write_session_page(session: VizSession, stream=None) -> VizReport | None:
  """The page of what the command compiled (its last model) or else of the artifact it read; a line on stderr says
  where it went. None when the command compiled nothing and read no artifact."""
  stream = stream or sys.stderr
  if session.compiled:
    cm, spec = session.compiled[-1]
    data = compiled_page_data(cm, spec, session.recorder)
  elif session.artifact: data = artifact_page_data(session.artifact, rebuild=False)
  else:
    print("tgc: VIZ=1: this command compiled no model and read no artifact: no page written", file=stream)
    return None
  report = write_page(data, session_page_path(session))
  print(f"tgc: VIZ=1: wrote {report.path} ({report.nbytes} bytes)", file=stream)
  return report
