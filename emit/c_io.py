"""Typed I/O of the C-family host libraries: model.h's `<name>_inputs` / `<name>_outputs` structs (one typed pointer
per input or output, named after it), the macros that give each one's index, rank, dimensions, element count and
bytes, and the body of `<name>_run_io`, which fills the pointer arrays of `<name>_run` from the structs.

Field names come from the buffers' sanitized symbols (`codegen.names.symbol`), and more is kept out of them: C++
keywords (model.h is included from C++), the lower-case macros C libraries and compilers define (`errno`, `stdin`,
`linux`, ...), the `tg_` prefix, and names equal but for case (each field's macros are its name in upper case)."""
from __future__ import annotations
from tgc.ir.sint import dims_text, highest, is_static, prod, render, scaled_variable
from tgc.codegen.compiled import BufferInfo, CompiledModel
from tgc.codegen.names import comment_safe, symbol
from tgc.emit.common import numpy_name

# identifiers a field of a C header may not take beyond codegen.names.RESERVED
FIELD_RESERVED = frozenset("""alignas alignof and and_eq asm bitand bitor catch char8_t char16_t char32_t compl concept
consteval constexpr constinit const_cast co_await co_return co_yield decltype dynamic_cast explicit friend mutable
namespace noexcept not not_eq nullptr operator or or_eq protected public reinterpret_cast requires static_assert
static_cast template thread_local throw try typeid typename using virtual wchar_t xor xor_eq errno stdin stdout stderr
assert offsetof complex imaginary I linux unix i386 setjmp va_arg va_start va_end va_copy math_errhandling""".split())
# the element type a pointer field has, by the numpy name of the buffer's storage
C_TYPES = {"float32": "float", "float64": "double", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t",
           "int64": "int64_t", "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t",
           "float16": "uint16_t", "bool": "uint8_t"}


def field_names(bufs: list[BufferInfo]) -> list[str]:
  """One struct field name per buffer: its symbol, made unique ignoring case and kept off FIELD_RESERVED."""
  used: set[str] = set()
  names = []
  for b in bufs:
    base = symbol(b.symbol, None, "t")
    if base in FIELD_RESERVED: base = f"t_{base}"
    name, n = base, 1
    while name.lower() in used:
      n += 1
      name = f"{base}_{n}"
    used.add(name.lower())
    names.append(name)
  return names


def _shape_text(b: BufferInfo) -> str: return "[" + ", ".join(str(d) for d in dims_text(b.shape)) + "]"


def _macros(prefix: str, index: int, b: BufferInfo) -> list[str]:
  """A size known only at run time appears at its largest value (the _BYTES a buffer needs for any size)."""
  shape = [highest(d) for d in b.shape]
  elems = 1
  for d in shape: elems *= d
  out = [f"#define {prefix}_INDEX {index}", f"#define {prefix}_NDIM {len(shape)}"]
  out += [f"#define {prefix}_DIM{k} {d}" + ("" if is_static(s) else f"   /* {render(s)}: at most */")
          for k, (d, s) in enumerate(zip(shape, b.shape))]
  if shape: out.append(f"#define {prefix}_SHAPE {{{', '.join(str(d) for d in shape)}}}")
  return out + [f"#define {prefix}_ELEMS {elems}", f"#define {prefix}_BYTES {b.nbytes}"]


def _struct(sym: str, kind: str, bufs: list[BufferInfo]) -> str:
  const = "const " if kind == "inputs" else ""
  lines = [f"typedef struct {sym}_{kind} {{"]
  for field, b in zip(field_names(bufs), bufs):
    np_name = numpy_name(b.dtype)
    lines.append(f"  {const}{C_TYPES[np_name]} *{field};   /* \"{comment_safe(b.name)}\": {b.dtype.name} "
                 f"{_shape_text(b)} */")
  if not bufs: lines.append("  char unused;   /* the model has none; C structs cannot be empty */")
  return "\n".join(lines + [f"}} {sym}_{kind};"])


def io_declarations(cm: CompiledModel, sym: str) -> str:
  """model.h's typed I/O: per input and output its macros, then the two structs."""
  parts = []
  for kind, tag, bufs in (("inputs", "IN", cm.inputs), ("outputs", "OUT", cm.outputs)):
    for i, (field, b) in enumerate(zip(field_names(bufs), bufs)):
      parts.append(f"/* {kind[:-1]} {i} \"{comment_safe(b.name)}\": {b.dtype.name} {_shape_text(b)} */\n" +
                   "\n".join(_macros(f"{sym.upper()}_{tag}_{field.upper()}", i, b)))
  parts += [_struct(sym, "inputs", cm.inputs), _struct(sym, "outputs", cm.outputs)]
  return "\n".join(parts)


def run_io_body(cm: CompiledModel, sym: str) -> str:
  """The statements of `<name>_run_io(ctx, in, out)`: the pointer arrays of `<name>_run` from the structs."""
  n_in, n_out = len(cm.inputs), len(cm.outputs)
  lines = [f"  const void *inputs[{max(n_in, 1)}];", f"  void *outputs[{max(n_out, 1)}];",
           f"  if ({'in == NULL || ' if n_in else ''}out == NULL) return {sym.upper()}_ERR_NULL;"]
  if not n_in: lines += ["  (void)in;", "  inputs[0] = NULL;"]
  lines += [f"  inputs[{i}] = in->{f};" for i, f in enumerate(field_names(cm.inputs))]
  lines += [f"  outputs[{i}] = out->{f};" for i, f in enumerate(field_names(cm.outputs))]
  return "\n".join(lines + [f"  return {sym}_run(ctx, inputs, outputs);"])


def shape_functions(cm: CompiledModel, sym: str) -> str:
  """`<name>_input_shape_at` / `<name>_output_shape_at(ctx, i, shape)`: tensor i's shape for the context's sizes
  known at run time (fixed dims as they are), and its bytes; and `<name>_input_dim_size(i, k)`: the size that dim k of
  input i is (its number in set_dims) or a multiple of, or -1; `<name>_input_dim_factor(i, k)`: that multiple."""
  names = list(cm.dims)
  spell = lambda n: f"(size_t)ctx->dims[{names.index(n)}]"     # noqa: E731
  out = []
  for kind, bufs in (("input", cm.inputs), ("output", cm.outputs)):
    cases = []
    for i, b in enumerate(bufs):
      sets = "".join(f" shape[{k}] = {render(d, spell) if not is_static(d) else d};" for k, d in enumerate(b.shape))
      nbytes = b.nbytes if is_static(b.shape) else \
        f"{render(prod(b.shape), spell)} * {b.dtype.itemsize}" if b.shape else b.nbytes
      cases.append(f"    case {i}:{sets} return (size_t)({nbytes});")
    out.append(f"size_t {sym}_{kind}_shape_at(const {sym}_ctx *ctx, size_t i, size_t *shape) {{\n"
               f"  if (ctx == NULL || shape == NULL) return 0;\n"
               "  switch (i) {\n" + "".join(c + "\n" for c in cases) + "    default: return 0;\n  }\n}\n")
  scaled = [scaled_variable(d) or (None, 1) for b in cm.inputs for d in b.shape]
  table = [names.index(v.arg[0]) if v is not None else -1 for v, _ in scaled]
  factors = [factor for _, factor in scaled]
  offsets = [0]
  for b in cm.inputs: offsets.append(offsets[-1] + len(b.shape))
  out.append(f"static const int tg_input_dim_sizes[] = {{{', '.join(str(t) for t in table + [-1])}}};\n"
             f"static const int tg_input_dim_factors[] = {{{', '.join(str(t) for t in factors + [1])}}};\n"
             f"static const size_t tg_input_dims_at[] = {{{', '.join(str(o) for o in offsets)}}};\n"
             f"int {sym}_input_dim_size(size_t i, size_t k) {{\n"
             f"  if (i >= tg_num_inputs || k >= tg_input_dims_at[i + 1] - tg_input_dims_at[i]) return -1;\n"
             f"  return tg_input_dim_sizes[tg_input_dims_at[i] + k];\n}}\n"
             f"int {sym}_input_dim_factor(size_t i, size_t k) {{\n"
             f"  if (i >= tg_num_inputs || k >= tg_input_dims_at[i + 1] - tg_input_dims_at[i]) return 1;\n"
             f"  return tg_input_dim_factors[tg_input_dims_at[i] + k];\n}}\n")
  return "\n".join(out)
