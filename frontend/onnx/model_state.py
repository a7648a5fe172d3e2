"""States of an ONNX model: inputs that a call reads back from the outputs of the call before, such as a decoder's
KV cache (`past_key_values.0.key` read, `present.0.key` returned one entry longer). Given a capacity
(`--max-context N`), the artifact keeps them: pairs are declared (`--state IN=OUT`) or found by name
(`past_key_values.*` -> `present.*`, `past_*` -> `present_*`). A state input declares one open dim, its length: a
size known at run time from 0 to N - 1 that the artifact tracks itself (`SizeNames.hold`)."""
from __future__ import annotations
from tgc.frontend.onnx.registry import OnnxError

_RENAMES = (("past_key_values", "present"), ("past_", "present_"), ("past.", "present."))


def state_pairs(inputs: list[str], outputs: list[str], given: dict[str, str] | None) -> list[tuple[str, str]]:
  """(input, output) of each state: `given` checked against the model's names, else the pairs found by name."""
  if given:
    for i, o in given.items():
      if i not in inputs: raise OnnxError(f"--state {i}={o}: the model has no input {i!r}")
      if o not in outputs: raise OnnxError(f"--state {i}={o}: the model has no output {o!r}")
    return list(given.items())
  pairs = []
  for name in inputs:
    for old, new in _RENAMES:
      if name.startswith(old) and name.replace(old, new, 1) in outputs:
        pairs.append((name, name.replace(old, new, 1)))
        break
  if not pairs:
    raise OnnxError("--max-context: the model has no state (inputs named past_key_values.* or past_* returned as "
                    "present.* or present_*); name them with --state INPUT=OUTPUT")
  return pairs


def length_dim(name: str, dims: list | None) -> tuple[int, str]:
  """The axis and dim name of a state input's length: its one dim that is a name."""
  open_dims = [(axis, d) for axis, d in enumerate(dims or ()) if isinstance(d, str) and d]
  if len(open_dims) != 1:
    raise OnnxError(f"state input {name!r}: declares {len(open_dims)} named dims ({dims}); a state needs exactly one, "
                    f"its length")
  return open_dims[0]
