"""The errors the `tgc` pipeline and CLI tell apart.

`UserError` is bad input (a model file, an option, an artifact folder, an input array): the CLI prints its message
as one line and exits with 2. Anything else that escapes is a bug in tgc: exit 3 with `internal_error_message`."""
from __future__ import annotations

EXIT_OK = 0
EXIT_TOLERANCE = 1
EXIT_USER = 2
EXIT_INTERNAL = 3

REPORT_WHERE = "the tgc issue tracker"


class UserError(Exception):
  """Bad input; the message is one line that names the culprit (file, model element, option or input)."""

  def __init__(self, message: str):
    super().__init__(one_line(message))


def one_line(text: str, limit: int = 600) -> str:
  """`text` on a single line (line breaks folded into ' | '), cut to `limit` characters."""
  parts = [p.strip() for p in str(text).splitlines() if p.strip()]
  line = " | ".join(parts) if parts else str(text).strip()
  return line if len(line) <= limit else line[:limit - 3] + "..."


def describe(error: BaseException) -> str:
  """`Type: message` for an exception raised by code tgc does not own (a model's own code)."""
  message = one_line(str(error))
  return f"{type(error).__name__}: {message}" if message else type(error).__name__


def internal_error_message(error: BaseException, command: str = "") -> str:
  where = f" during '{command}'" if command else ""
  return (f"tgc: internal error{where}: {describe(error)} -- this is a bug in tgc, please report it on {REPORT_WHERE} "
          f"with the command line and the output of the same command run with DEBUG=1 (which prints the traceback)")
