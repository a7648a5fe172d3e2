"""The one rewrite mechanism: `UPat` patterns, `PatternMatcher` rule tables and `graph_rewrite`."""
from __future__ import annotations
import ast
import functools
import itertools
import linecache
import os
from collections import Counter
from typing import Any, Callable, Iterator
from tgc.ir.dtype import DType
from tgc.ir.ops import Ops
from tgc.ir.uop import UOp
from tgc.ir import provenance, viz


class UPat:
  """A pattern over UOps. `src` as a tuple matches in order; as a list it matches any permutation (commutative
  ops). `name` binds the matched node for the rule function."""
  __slots__ = ("ops", "dtypes", "src", "arg", "name", "allow_any_len")

  def __init__(self, op: Ops | tuple | set | None = None, dtype: DType | tuple | None = None, src=None,
               arg: Any = None, name: str | None = None, allow_any_len: bool = False):
    self.ops = None if op is None else (frozenset([op]) if isinstance(op, Ops) else frozenset(op))
    self.dtypes = None if dtype is None else (dtype if isinstance(dtype, tuple) else (dtype,))
    self.src = src if src is None or isinstance(src, (tuple, list)) else (src,)
    self.arg, self.name, self.allow_any_len = arg, name, allow_any_len

  @staticmethod
  def var(name: str | None = None, dtype=None) -> UPat: return UPat(dtype=dtype, name=name)
  @staticmethod
  def cvar(name: str | None = None, dtype=None) -> UPat: return UPat(Ops.CONST, dtype, name=name)
  @staticmethod
  def const(value, name: str | None = None) -> UPat: return UPat(Ops.CONST, arg=value, name=name)

  # sugar so rule tables read like the algebra they encode: UPat.var("x") * 1
  def _bin(self, op, other, commutative):
    o = other if isinstance(other, UPat) else UPat.const(other)
    return UPat(op, src=[self, o] if commutative else (self, o))
  def __add__(self, o): return self._bin(Ops.ADD, o, True)
  def __mul__(self, o): return self._bin(Ops.MUL, o, True)
  def __floordiv__(self, o): return self._bin(Ops.IDIV, o, False)
  def __mod__(self, o): return self._bin(Ops.MOD, o, False)
  def lt(self, o): return self._bin(Ops.CMPLT, o, False)
  def ne(self, o): return self._bin(Ops.CMPNE, o, True)
  def maximum(self, o): return self._bin(Ops.MAX, o, True)

  def match(self, u: UOp, bound: dict) -> Iterator[dict]:
    """Yield every binding of names under which `u` matches."""
    if self.ops is not None and u.op not in self.ops: return
    if self.dtypes is not None and u.dtype not in self.dtypes: return
    if self.arg is not None and not _arg_eq(self.arg, u.arg): return
    if self.name is not None:
      if self.name in bound:
        if bound[self.name] is not u: return
      else: bound = {**bound, self.name: u}
    if self.src is None: yield bound; return
    if len(u.src) != len(self.src) and not (self.allow_any_len and len(u.src) >= len(self.src)): return
    orders = itertools.permutations(self.src) if isinstance(self.src, list) else (self.src,)
    for order in orders:
      yield from _match_all(order, u.src, bound)


def _arg_eq(want, got) -> bool:
  if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool): return want == got
  return type(want) is type(got) and want == got


def _match_all(pats, srcs, bound) -> Iterator[dict]:
  if not pats: yield bound; return
  for b in pats[0].match(srcs[0], bound): yield from _match_all(pats[1:], srcs[1:], b)


def _rule_name(fn: Callable) -> str:
  """A rule's name for errors and traces: its file:line and the comment on that line or the one above (for a
  lambda in a table entry spanning several lines: the comment above the entry's first line)."""
  code = getattr(fn, "__code__", None)
  if code is None: return repr(fn)
  fname, line = code.co_filename, code.co_firstlineno
  start = _entry_starts(fname).get(line, line) if fn.__name__ == "<lambda>" else line
  comment = ""
  for ln, trailing_ok in ((line, True), (start, True), (start - 1, False)):
    text = linecache.getline(fname, ln)
    if "#" in text and not text.strip().startswith("def ") and (trailing_ok or text.strip().startswith("#")):
      comment = text.split("#", 1)[1].strip()
      break
  if not comment and fn.__doc__: comment = fn.__doc__.strip().splitlines()[0].strip()
  short = fname.rsplit("/", 1)[-1]
  name = fn.__name__ if fn.__name__ != "<lambda>" else ""
  return f"{short}:{line}" + (f" {name}" if name else "") + (f" ({comment})" if comment else "")


@functools.lru_cache(maxsize=None)
def _entry_starts(fname: str) -> dict[int, int]:
  """Line of each `(pattern, lambda)` table entry's lambda -> the entry's first line, for the file `fname`."""
  try: tree = ast.parse("".join(linecache.getlines(fname)))
  except (SyntaxError, ValueError): return {}
  out: dict[int, int] = {}
  for node in ast.walk(tree):
    if isinstance(node, ast.Tuple) and len(node.elts) == 2 and isinstance(node.elts[1], ast.Lambda):
      out.setdefault(node.elts[1].lineno, node.lineno)
  return out


def _table_name(rules: list[tuple[UPat, Callable]]) -> str:
  """A rule table's default name: the stem of the file its first rule function is in."""
  code = getattr(rules[0][1], "__code__", None) if rules else None
  return os.path.splitext(os.path.basename(code.co_filename))[0] if code is not None else "rules"


def _wants_ctx(fn: Callable) -> bool:
  """Whether a rule function takes a `ctx` parameter (a local variable of that name doesn't count)."""
  code = getattr(fn, "__code__", None)
  if code is None: return False
  return "ctx" in code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]


class PatternMatcher:
  """A table of (UPat, fn) rules. fn gets the named matches as keyword args (and `ctx` if it asks for it) and
  returns a replacement UOp or None (no change). `name` names the table in rewrite traces (default: the file its
  first rule is in, e.g. "symbolic")."""

  def __init__(self, rules: list[tuple[UPat, Callable]], name: str | None = None):
    self.rules = [(p, f, _rule_name(f), _wants_ctx(f)) for p, f in rules]
    self.name = name or _table_name(rules)
    self.by_op: dict[Ops, list] = {}
    generic = [r for r in self.rules if r[0].ops is None]
    for op in Ops:
      self.by_op[op] = [r for r in self.rules if r[0].ops is not None and op in r[0].ops] + generic

  def __add__(self, other: PatternMatcher) -> PatternMatcher:
    pm = PatternMatcher([], f"{self.name}+{other.name}")
    pm.rules = self.rules + other.rules
    for op in Ops:
      pm.by_op[op] = self.by_op[op] + other.by_op[op]
    return pm

  def rewrite(self, u: UOp, ctx=None, trace: Counter | None = None) -> tuple[UOp, str] | None:
    for pat, fn, name, wants_ctx in self.by_op[u.op]:
      for b in pat.match(u, {}):
        r = fn(ctx=ctx, **b) if wants_ctx else fn(**b)
        if r is not None and r is not u:
          if trace is not None: trace[name] += 1
          return r, name
    return None


class RewriteLoopError(RuntimeError):
  """A rule table did not reach a fixed point."""


def graph_rewrite(root: UOp, pm: PatternMatcher, ctx=None, limit: int = 200_000, trace: Counter | None = None) -> UOp:
  """Rewrite `root` bottom-up to a fixed point: sources first, then the node itself until no rule applies.
  Raises RewriteLoopError naming the rule when the rules keep firing without converging: a rewrite that leads
  back to a node it started from, or more than `limit` successive rewrites of one node (and of what it became).
  The limit is per chain of rewrites, not per graph, so a large graph with many legitimate rewrites is fine.
  While `viz.recording` is on, the call is recorded (rules fired, graph before and after)."""
  recorder = viz.active()
  if recorder is None or not recorder.collecting: return _rewrite(root, pm, ctx, limit, trace, Counter())
  with recorder.rewrite(pm.name, root) as record:
    record.after = _rewrite(root, pm, ctx, limit, trace, record.rules)
    return record.after


def _rewrite(root: UOp, pm: PatternMatcher, ctx, limit: int, trace: Counter | None, fired: Counter) -> UOp:
  """graph_rewrite's work; `fired` counts the rules that fired."""
  done: dict[UOp, UOp] = {}
  active: set[UOp] = set()     # nodes whose rewrite is in progress (a result that leads back to one is a loop)
  # (node, stage, rule that built the node [stage 0] or (rebuilt node, its replacement) [stage 2], rewrites so far)
  stack: list[tuple] = [(root, 0, None, 0)]
  while stack:
    n, stage, extra, depth = stack.pop()
    if stage == 0:
      if n in done: continue
      if n in active: raise RewriteLoopError(f"rewrite rule loops: {extra} rebuilt a node it started from")
      active.add(n)
      stack.append((n, 1, None, depth))
      stack.extend((s, 0, extra, depth) for s in reversed(n.src) if s not in done)
    elif stage == 1:
      new_src = tuple(done[s] for s in n.src)
      nn = n if all(a is b for a, b in zip(new_src, n.src)) else n.replace(src=new_src)
      if nn is not n and nn in done:
        done[n] = done[nn]; active.discard(n); continue
      r = pm.rewrite(nn, ctx, trace)
      if r is None:
        done[n] = nn
        if nn is not n: done[nn] = nn
        active.discard(n)
        continue
      new, name = r
      fired[name] += 1
      if depth >= limit:
        worst, count = fired.most_common(1)[0]
        raise RewriteLoopError(f"rewrite did not reach a fixed point after {limit} successive rule applications; "
                               f"last rule {name}; rule {worst} fired {count} times")
      stack.append((n, 2, (nn, new), depth))
      stack.append((new, 0, name, depth + 1))
    else:
      nn, new = extra
      provenance.inherit(done[new], n)
      done[n] = done[nn] = done[new]   # nn too: another node rebuilt into nn reuses the result
      active.discard(n)
  return done[root]


def substitute(root: UOp, mapping: dict[UOp, UOp]) -> UOp:
  """Replace nodes by identity (no rules): used to bind ranges and buffers."""
  out: dict[UOp, UOp] = {}
  for n in root.toposort():
    if n in mapping: out[n] = mapping[n]; continue
    src = tuple(out[s] for s in n.src)
    out[n] = n if all(a is b for a, b in zip(src, n.src)) else n.replace(src=src)
  return out[root]
