"""Recording graph rewrites for `tgc viz` (and `VIZ=1`). Inside `with recording() as rec:` every `graph_rewrite`
call made while a `section` is open appends a `RewriteRecord` to that section: the rule table's name, the function
that asked for the rewrite, the rules that fired with their counts and the graph before and after (UOps are
immutable, so the record keeps the two roots; nothing is copied while compiling). A rewrite run from inside a rule
(a `simplify` a vectorizer rule calls) is no record of its own: the rules it fired are added to the record of the
rewrite around it (`nested`). `snapshot` keeps a named graph (the graph the scheduler splits, a kernel's AST).

Outside any section nothing is recorded (a model's load, such as realizing its randomly initialized weights, is not
part of its compile), and without `recording` every hook is one context-variable lookup.

Bounded: a section keeps the graphs of its first and last rewrites that changed something (`MAX_RECORDS` in all)
and counts the others and the rewrites that changed nothing; `to_json` writes each graph up to `max_graph_nodes`
nodes nearest its roots (a snapshot up to `max_snapshot_nodes`) and stops adding graphs once the node table holds
`max_nodes`, saying so in the output."""
from __future__ import annotations
import contextlib
import os
import sys
from collections import Counter, deque
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from enum import Enum
from typing import Iterator
from tgc.ir.uop import UOp
from tgc.ir.ops import Ops
from tgc.ir import provenance

MAX_RECORDS = 64           # rewrites kept per section with their graphs: the first half and the last half
MAX_GRAPH_NODES = 400      # nodes written per graph of a rewrite (those nearest its roots)
MAX_SNAPSHOT_NODES = 2000  # nodes written per snapshot (the whole graph a model is scheduled from, if it fits)
MAX_NODES = 60_000         # nodes in the whole node table; graphs beyond it are left out
ARG_CHARS = 80             # characters of a node's argument shown

_IR_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
# frames of the rewrite machinery itself, skipped when naming who asked for a rewrite
_MACHINERY = {os.path.abspath(__file__), os.path.join(_IR_DIR, "pattern.py"), os.path.abspath(contextlib.__file__)}
_active: ContextVar[Recorder | None] = ContextVar("tgc_viz_recorder", default=None)


@dataclass
class RewriteRecord:
  """One `graph_rewrite` call: `pass_name` (the rule table), `caller` (file:function outside ir/ that asked for it),
  the rules fired (rule name -> times), the rules fired by rewrites nested in those rules, the roots before/after."""
  pass_name: str
  caller: str
  before: UOp
  after: UOp | None = None
  rules: Counter = field(default_factory=Counter)
  nested: Counter = field(default_factory=Counter)
  index: int = 0           # position among all rewrites of the section (kept or not)

  @property
  def changed(self) -> bool: return self.after is not None and self.after is not self.before


@dataclass
class Snapshot:
  label: str
  roots: tuple[UOp, ...]


@dataclass
class Section:
  """The rewrites of one part of a compile: `kind` "schedule" (tracing and scheduling the model) or "kernel" (lowering
  one kernel; `title` is its name)."""
  title: str
  kind: str
  snapshots: list[Snapshot] = field(default_factory=list)
  first: list[RewriteRecord] = field(default_factory=list)
  last: deque = field(default_factory=lambda: deque(maxlen=MAX_RECORDS - MAX_RECORDS // 2))
  changed: int = 0                                        # rewrites that changed the graph
  unchanged: Counter = field(default_factory=Counter)    # pass name -> rewrites that changed nothing
  fired: Counter = field(default_factory=Counter)        # every rule fired in the section, nested ones included

  @property
  def records(self) -> list[RewriteRecord]: return self.first + list(self.last)
  @property
  def left_out(self) -> int: return self.changed - len(self.first) - len(self.last)

  def add(self, record: RewriteRecord) -> None:
    self.fired.update(record.rules)
    self.fired.update(record.nested)
    if not record.changed:
      self.unchanged[record.pass_name] += 1
      return
    record.index = self.changed
    self.changed += 1
    if len(self.first) < MAX_RECORDS // 2: self.first.append(record)
    else: self.last.append(record)


class Recorder:
  """What `recording` collects: the sections in the order they were opened."""

  def __init__(self):
    self.sections: list[Section] = []
    self._open: list[Section] = []
    self._running: list[RewriteRecord] = []

  @property
  def collecting(self) -> bool:
    """Whether a section is open (rewrites are recorded only then)."""
    return bool(self._open)

  @contextmanager
  def rewrite(self, pass_name: str, root: UOp) -> Iterator[RewriteRecord]:
    """Around one graph_rewrite: yields the record whose `rules` counter the rewrite fills and whose `after` it
    sets; the record is filed when the rewrite returns (a failed rewrite is filed with no result)."""
    record = RewriteRecord(pass_name, _caller(), root)
    self._running.append(record)
    try: yield record
    finally:
      self._running.pop()
      if self._running: self._running[-1].nested.update(record.rules)
      elif self._open: self._open[-1].add(record)

  def to_json(self, max_graph_nodes: int = MAX_GRAPH_NODES, max_nodes: int = MAX_NODES,
              max_snapshot_nodes: int = MAX_SNAPSHOT_NODES) -> dict:
    """The sections as plain data: a node table (`uops`: [op, dtype, arg, [source ids], origin id or -1]) shared by
    every graph, the model nodes UOps were built for (`origins`: [name, op]) and per section its snapshots and
    records, each graph as {"roots": [ids], "nodes": n written, "total": nodes in the graph} or null when the node
    table was full."""
    table = _NodeTable(max_nodes)

    def by_count(counter: Counter) -> list: return sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))

    def record(r: RewriteRecord) -> dict:
      after = table.graph((r.after,), max_graph_nodes) if r.after is not None else None
      return {"index": r.index, "pass": r.pass_name, "caller": r.caller, "rules": by_count(r.rules),
              "nested": by_count(r.nested), "before": table.graph((r.before,), max_graph_nodes), "after": after}
    sections = [{"title": s.title, "kind": s.kind,
                 "snapshots": [{"label": snap.label, "graph": table.graph(snap.roots, max_snapshot_nodes)}
                               for snap in s.snapshots],
                 "records": [record(r) for r in s.records], "changed": s.changed, "left_out": s.left_out,
                 "unchanged": dict(sorted(s.unchanged.items())), "fired": by_count(s.fired)}
                for s in self.sections]
    uops, origins = table.rows()
    limits = {"graph_nodes": max_graph_nodes, "snapshot_nodes": max_snapshot_nodes, "nodes": max_nodes,
              "records_per_section": MAX_RECORDS}
    return {"uops": uops, "origins": origins, "sections": sections, "graphs_left_out": table.graphs_left_out,
            "limits": limits}


class _NodeTable:
  """UOps numbered once each across every graph written (before and after graphs share most nodes)."""

  def __init__(self, max_nodes: int):
    self.max_nodes = max_nodes
    self.ids: dict[UOp, int] = {}
    self.graphs_left_out = 0

  def graph(self, roots: tuple[UOp, ...], cap: int) -> dict | None:
    picked, total = _nearest(roots, cap)
    new = [u for u in picked if u not in self.ids]
    if len(self.ids) + len(new) > self.max_nodes:
      self.graphs_left_out += 1
      return None
    for u in new: self.ids[u] = len(self.ids)
    return {"roots": [self.ids[r] for r in roots], "nodes": len(picked), "total": total}

  def rows(self) -> tuple[list[list], list[list[str]]]:
    """The node table (sources left out of it are -1: the page shows them as "...") and the origins table."""
    origin_ids: dict[provenance.Origin, int] = {}
    rows = []
    for u in self.ids:
      o = provenance.origin_of(u)
      if o is not None: origin_ids.setdefault(o, len(origin_ids))
      rows.append([u.op.name, u.dtype.name, arg_text(u), [self.ids.get(s, -1) for s in u.src],
                   origin_ids[o] if o is not None else -1])
    return rows, [[o.name, o.op] for o in origin_ids]


def _nearest(roots: tuple[UOp, ...], cap: int) -> tuple[list[UOp], int]:
  """Up to `cap` nodes of the graph under `roots`, breadth first from the roots, and the graph's node count."""
  seen: dict[UOp, None] = {}
  queue = deque(roots)
  for r in roots: seen[r] = None
  picked: list[UOp] = []
  while queue:
    u = queue.popleft()
    if len(picked) < cap: picked.append(u)
    for s in u.src:
      if s not in seen:
        seen[s] = None
        queue.append(s)
  return picked, len(seen)


def arg_text(u: UOp) -> str:
  """A node's argument as short text ("" for none)."""
  if u.arg is None or u.op is Ops.SINK: return ""
  if u.op is Ops.RANGE: return f"r{u.arg.id} {u.arg.kind.value}" + (f" dim{u.arg.dim}" if u.arg.dim is not None else "")
  text = _short(u.arg)
  return text if len(text) <= ARG_CHARS else text[:ARG_CHARS - 3] + "..."


def _short(value) -> str:
  """repr, with enum members (ops, axis kinds) by their names, also inside tuples and lists."""
  if isinstance(value, Enum): return value.name
  if isinstance(value, tuple):
    return "(" + ", ".join(_short(v) for v in value) + ("," if len(value) == 1 else "") + ")"
  if isinstance(value, list): return "[" + ", ".join(_short(v) for v in value) + "]"
  return repr(value)


def _caller(depth: int = 3) -> str:
  """Who asked for a rewrite: up to `depth` frames outside ir/ as file:function, outermost first ("lower.py:_program
  > expand.py:expand"); the nearest frame outside the rewrite machinery when every frame is inside ir/."""
  frame, first, chain = sys._getframe(1), None, []
  while frame is not None and len(chain) < depth:
    path = os.path.abspath(frame.f_code.co_filename)
    machinery = path in _MACHINERY
    if first is None and not machinery: first = frame
    if not machinery and not path.startswith(_IR_DIR): chain.append(frame)
    frame = frame.f_back
  if not chain and first is not None: chain = [first]
  return " > ".join(f"{os.path.basename(f.f_code.co_filename)}:{f.f_code.co_name}" for f in reversed(chain)) or "?"


# ---------------------------------------------------------------- the hooks the compiler calls
def active() -> Recorder | None:
  """The recorder collecting now (None: not recording)."""
  return _active.get()


@contextmanager
def recording() -> Iterator[Recorder]:
  """Record the rewrites of every section opened inside."""
  recorder = Recorder()
  token = _active.set(recorder)
  try: yield recorder
  finally: _active.reset(token)


@contextmanager
def section(title: str, kind: str) -> Iterator[Section | None]:
  """Rewrites run inside belong to a new section (when recording; otherwise nothing happens)."""
  recorder = _active.get()
  if recorder is None:
    yield None
    return
  s = Section(title, kind)
  recorder.sections.append(s)
  recorder._open.append(s)
  try: yield s
  finally: recorder._open.pop()


def snapshot(label: str, *roots: UOp) -> None:
  """Keep the graph under `roots` under `label` in the open section (when recording)."""
  recorder = _active.get()
  if recorder is not None and recorder._open: recorder._open[-1].snapshots.append(Snapshot(label, tuple(roots)))
