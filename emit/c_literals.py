"""C literal spelling for generated sources: string literals that carry any text (UTF-8 bytes; everything but
plain printable ASCII as three-digit octal escapes, so no escape can swallow the next character and no `??`
trigraph can form) and byte-array initializers."""
from __future__ import annotations

_PLAIN = {c for c in range(32, 127)} - {ord('"'), ord("\\"), ord("?")}


def c_string(text: str) -> str:
  """A C string literal whose bytes are the UTF-8 encoding of `text`."""
  out = []
  for b in text.encode("utf-8", errors="surrogatepass"):
    out.append(chr(b) if b in _PLAIN else f"\\{b:03o}")
  return '"' + "".join(out) + '"'


def c_bytes(data: bytes, per_line: int = 16, indent: str = "  ") -> str:
  """The body of an `unsigned char x[] = { ... }` initializer, `per_line` bytes a line."""
  lines = []
  for i in range(0, len(data), per_line):
    lines.append(indent + ", ".join(f"0x{b:02x}" for b in data[i:i + per_line]) + ",")
  return "\n".join(lines)
