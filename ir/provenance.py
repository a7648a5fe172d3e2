"""Provenance: which model node each UOp was built for. A front end sets the node being built (`with origin(name,
op)`: an ONNX node's name and op type, a Tensor API call site `file:line` and its method); every UOp created inside
records it in a side table (weak: a node's origin goes away with the node). Rewrites keep it: a rebuilt or replaced
node takes the origin of the node it stands for. The scheduler reads it to say which nodes each kernel computes."""
from __future__ import annotations
import os
import sys
import weakref
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True)
class Origin:
  """A model node: `name` (ONNX node name, or `file:line` of a Tensor API call) and `op` (op type or method)."""
  name: str
  op: str

  def __str__(self) -> str: return f"{self.name} ({self.op})"


_current: ContextVar[Origin | None] = ContextVar("tgc_origin", default=None)
_call_sites: ContextVar[bool] = ContextVar("tgc_call_sites", default=False)
_origins: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LAYERS = ("aot", "codegen", "emit", "frontend", "ir", "runtimes", "tgc")
_OWN_DIRS = tuple(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), d) + os.sep
                  for d in _LAYERS)


@contextmanager
def origin(name: str, op: str):
  """UOps created inside are built for model node `name` of type `op` (an inner origin wins over an outer one)."""
  token = _current.set(Origin(name, op))
  try: yield
  finally: _current.reset(token)


@contextmanager
def call_sites(enabled: bool = True):
  """UOps created inside, outside any `origin`, are attributed to the first caller outside tgc (the Tensor API
  call in the user's code: `file:line` and the method it called). `enabled=False` turns that off inside (a front end
  that names its own nodes)."""
  token = _call_sites.set(enabled)
  try: yield
  finally: _call_sites.reset(token)


def _call_site() -> Origin | None:
  frame, method = sys._getframe(3), None
  while frame is not None:
    path = frame.f_code.co_filename
    if not path.startswith(_OWN_DIRS):
      if method is None: return None
      return Origin(f"{os.path.basename(path)}:{frame.f_lineno}", method)
    if not frame.f_code.co_name.startswith("_"): method = frame.f_code.co_name
    frame = frame.f_back
  return None


def record(u) -> None:
  """Called for each new UOp: remember the node it is built for, if any."""
  o = _current.get()
  if o is None and _call_sites.get(): o = _call_site()
  if o is not None: _origins[u] = o


def origin_of(u) -> Origin | None:
  return _origins.get(u)


def inherit(new, old) -> None:
  """`new` stands for `old` (a rebuild or a rewrite of it): it takes `old`'s origin unless it has one."""
  if new is not old and new not in _origins and (o := _origins.get(old)) is not None: _origins[new] = o
