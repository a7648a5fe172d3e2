"""The VIZ=1 session of one tgc command: the rewrites recorded while it runs, the models it compiled and the
artifact folder it wrote or read, kept for `aot.viz` to write the page once the command is done. Compiling
(`aot.compile`) and reading artifacts (`aot.artifact`) note into the session; outside one, noting does nothing."""
from __future__ import annotations
import os
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Iterator
from tgc.ir import viz as recorder_viz
from tgc.codegen.compiled import CompiledModel


@dataclass
class VizSession:
  recorder: recorder_viz.Recorder
  compiled: list[tuple[CompiledModel, object]] = field(default_factory=list)   # (model, its models.ModelSpec)
  artifact: str | None = None


_session: ContextVar[VizSession | None] = ContextVar("tgc_viz_session", default=None)


@contextmanager
def command_session() -> Iterator[VizSession]:
  """Around one tgc command under VIZ=1: rewrites recorded, compiled models and the artifact folder noted."""
  with recorder_viz.recording() as recorder:
    session = VizSession(recorder)
    token = _session.set(session)
    try: yield session
    finally: _session.reset(token)


def note_compiled(cm: CompiledModel, spec) -> None:
  """A model the command compiled from `spec` (a models.ModelSpec), kept for the page when a session is on."""
  session = _session.get()
  if session is not None: session.compiled.append((cm, spec))


def note_artifact(folder: str) -> None:
  """The artifact folder the command wrote or read (the page goes beside it)."""
  session = _session.get()
  if session is not None and session.artifact is None: session.artifact = os.path.abspath(folder)
