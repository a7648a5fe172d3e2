"""States in the C-family host libraries (tensors an artifact keeps from one run to the next: a KV cache): what the c
and opencl bundles' APIs share. Each state's length is a size known at run time that the context holds itself
(`held_table`: 0 after init, set_dims leaves it); a run checks that it fits (`state_growth`: the length after the run
and the capacity) and sets it. `state_declarations` and `state_definitions` give model.h's and model.c's
`<name>_state_count/_name/_output/_capacity/_length` and `_set_state_length` with the table behind them; how a caller
reaches a state's entries is the bundle's own (c: `state_data`, a pointer into the arena; opencl: `state_read`, a
copy from device memory), as is the rest of each state's row in the table."""
from __future__ import annotations
from typing import Callable

from tgc.ir.sint import render
from tgc.codegen.compiled import BufferKind, CompiledModel
from tgc.codegen.names import comment_safe
from tgc.emit.c_literals import c_string
from tgc.emit.common import numpy_name


def held_table(cm: CompiledModel) -> str:
  """model.c's `tg_dim_held` table (with its comment): 1 for each size known at run time that is a state's length."""
  flags = ", ".join("1" if n in cm.state_lengths else "0" for n in cm.dims) or "0"
  return ("/* 1 for a size the context tracks itself (a state's length: 0 after init, grown by each run), else 0. */\n"
          f"static const unsigned char tg_dim_held[{max(len(cm.dims), 1)}] = {{ {flags} }};")


def held_dims(cm: CompiledModel) -> list[int]:
  """The indexes (in ctx->dims) of the sizes that are states' lengths, in order."""
  dims = list(cm.dims)
  return sorted({dims.index(st.length.arg[0]) for st in cm.states})


def state_growth(cm: CompiledModel, spell: Callable) -> dict[str, tuple[str, int]]:
  """Per state length (by name): the C expression of its value after a run (a size spelled by `spell(name)`) and the
  capacity it must fit in."""
  growth: dict[str, tuple[str, int]] = {}
  for st in cm.states:
    rule = (render(st.grown, spell), st.shape[st.axis])
    if growth.setdefault(st.length.arg[0], rule) != rule:
      raise ValueError(f"states sharing the length {st.length.arg[0]} grow differently")
  return growth


def _state_list(cm: CompiledModel) -> str:
  """model.h's list of the states: index, names, type and capacity shape, growing dim."""
  rows = [f"     {i}: \"{comment_safe(st.input)}\" -> \"{comment_safe(st.output)}\"  {numpy_name(b.dtype)}"
          f"{''.join(f'[{d}]' for d in b.shape)}  {b.nbytes} bytes, growing along dim {st.axis}"
          for i, (st, b) in enumerate(zip(cm.states, cm.of_kind(BufferKind.STATE)))]
  return "\n".join(rows)


def state_declarations(cm: CompiledModel, sym: str, where: str, access: str) -> str:
  """model.h's state API: what it is (the states kept `where`), the shared functions, then `access` (the bundle's
  declarations, with their comments, of how a caller reaches a state's entries)."""
  S = sym.upper()
  return f"""/* States: tensors the model carries from one run to the next (a KV cache), kept {where}. A run reads
   the entries the runs before it appended (since init or the last set_state_length) and appends its own in
   place: no copy, no allocation. Each replaces a model input (its name) and output (state_output); its
   length is a size of the list above that the context sets itself (set_dims leaves it alone). A run that
   would grow a state past its capacity returns {S}_ERR_STATE_FULL and changes nothing.
   States (i of the functions below; shapes at their capacity):
{_state_list(cm)} */
#define {S}_NUM_STATES {len(cm.states)}
size_t {sym}_state_count(void);
const char *{sym}_state_name(size_t i);
const char *{sym}_state_output(size_t i);
/* Entries state i can hold along its growing dim, and the entries it holds now. */
int32_t {sym}_state_capacity(size_t i);
int32_t {sym}_state_length(const {sym}_ctx *ctx, size_t i);
/* Set every state's length: shorter forgets the entries past it (0: start a new sequence), longer takes
   what its buffer holds there (zeros after init); {S}_ERR_DIMS past a state's capacity. */
{sym}_status {sym}_set_state_length({sym}_ctx *ctx, int32_t length);
{access}"""


def state_table(cm: CompiledModel, fields: tuple[str, ...], values: Callable[..., tuple[int, ...]]) -> str:
  """model.c's `tg_states` (name, output, capacity, the index of its length in ctx->dims, then the bundle's own
  `fields`: `values(state, buffer)` of each StateSpec and its buffer) and `tg_held_dims`."""
  dims, held = list(cm.dims), held_dims(cm)
  rows = ",\n".join(f"  {{{c_string(st.input)}, {c_string(st.output)}, {st.shape[st.axis]}, "
                    f"{', '.join(map(str, (dims.index(st.length.arg[0]), *values(st, b))))}}}"
                    for st, b in zip(cm.states, cm.of_kind(BufferKind.STATE)))
  return (f"typedef struct {{ const char *name, *output; int32_t capacity; size_t {', '.join(('dim',) + fields)}; }} "
          "tg_state;\n"
          f"static const tg_state tg_states[{len(cm.states)}] = {{\n{rows}\n}};\n"
          f"static const size_t tg_held_dims[{len(held)}] = {{ {', '.join(map(str, held))} }};\n")


def state_definitions(cm: CompiledModel, sym: str, applied: str) -> str:
  """model.c's shared state functions (on `tg_states` and `tg_held_dims`); `applied`: what set_state_length returns
  once it set the lengths (a status expression)."""
  S, n, held = sym.upper(), len(cm.states), len(held_dims(cm))
  return (f"size_t {sym}_state_count(void) {{ return {n}; }}\n"
          f"const char *{sym}_state_name(size_t i) {{ return i < {n} ? tg_states[i].name : NULL; }}\n"
          f"const char *{sym}_state_output(size_t i) {{ return i < {n} ? tg_states[i].output : NULL; }}\n"
          f"int32_t {sym}_state_capacity(size_t i) {{ return i < {n} ? tg_states[i].capacity : 0; }}\n"
          f"int32_t {sym}_state_length(const {sym}_ctx *ctx, size_t i) {{\n"
          f"  return ctx != NULL && i < {n} ? ctx->dims[tg_states[i].dim] : 0;\n}}\n"
          f"{sym}_status {sym}_set_state_length({sym}_ctx *ctx, int32_t length) {{\n"
          "  size_t i;\n"
          f"  if (ctx == NULL) return {S}_ERR_NULL;\n"
          f"  if (ctx->ready != TG_READY) return {S}_ERR_NOT_READY;\n"
          f"  for (i = 0; i < {n}; i++)\n"
          f"    if (length < 0 || length > tg_states[i].capacity) return {S}_ERR_DIMS;\n"
          f"  for (i = 0; i < {held}; i++) ctx->dims[tg_held_dims[i]] = length;\n"
          f"  return {applied};\n}}\n")
