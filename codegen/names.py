"""Names that come from a model never reach generated source as they are: `symbol` makes a safe, unique
identifier for C-family languages and JavaScript, and `comment_safe` makes text safe inside a /* */ comment."""
from __future__ import annotations
import re

RESERVED = set("""auto break case char const continue default do double else enum extern float for goto if inline int
long register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while
_Bool _Complex _Imaginary bool true false NULL main kernel __kernel global __global local __local constant
__constant private __private half fn let var loop struct return uniform workgroup storage function
class new delete this typeof instanceof in of await async yield export import default super""".split())


def symbol(name: str, used: set[str] | None = None, prefix: str = "t") -> str:
  """A C/JS identifier for `name`: [A-Za-z0-9_] only, never a keyword or leading digit, unique within `used`."""
  s = re.sub(r"[^A-Za-z0-9_]", "_", name)[:48]
  s = re.sub(r"__+", "_", s).strip("_") or prefix
  if s[0].isdigit() or s in RESERVED or s.startswith("tg_"): s = f"{prefix}_{s}"
  if used is not None:
    base, n = s, 1
    while s in used:
      n += 1
      s = f"{base}_{n}"
    used.add(s)
  return s


def comment_safe(text: str) -> str:
  """Printable ASCII without comment terminators, line breaks, backslashes (a line splice), trigraphs or double
  quotes (tools that skim C for string literals): safe in a /* */ or // comment of every target language."""
  out = "".join(c if 32 <= ord(c) < 127 else "?" for c in text)
  out = out.replace("*/", "*_/").replace("/*", "/_*").replace("\\", "/").replace('"', "'")
  return re.sub(r"\?(?=\?)", "?_", out)


def comment_lines(text: str, indent: str = "", width: int = 118) -> str:
  """`text` made `comment_safe` as `//` lines of at most `width` characters (wrapped at spaces), each ending in a
  newline."""
  lines, line = [], f"{indent}//"
  for word in comment_safe(text).split(" "):
    if len(line) + 1 + len(word) > width and line.strip() != "//": lines.append(line); line = f"{indent}//  "
    line += " " + word
  return "".join(x + "\n" for x in lines + [line])
