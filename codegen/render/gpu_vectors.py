"""4-lane vectors in the GPU kernel languages: OpenCL C and CUDA `float4`/`int4`/`uint4`, Metal `float4`, WGSL
`vec4<f32>`. The renderers of those languages mix this in; `codegen/vectorize.py` makes the vector values.

Memory: a vector load or store is one 16-byte access, so it is emitted only where its first element is provably a
multiple of 4 elements from the buffer's start (`is_multiple`; artifacts place every buffer at a 16-byte aligned
offset: the memory plan aligns to 64 bytes, weights to 16); elsewhere the lanes are loaded one by one.
Arithmetic: the ops in NATIVE are vector operators (CUDA has none: its vectors are structs, so every op is written
lane by lane); anything else that meets a vector (an accumulator's MAX, ...) is computed lane by lane and the
lanes put back together."""
from __future__ import annotations
from tgc.ir import Ops, UOp, DType
from tgc.ir.symbolic import split_terms
from tgc.codegen.render.cstyle import BASE_OPS

LANES = 4
NATIVE = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MULACC, Ops.NEG})
_COMPONENTS = "xyzw"


def is_multiple(idx: UOp, n: int) -> bool:
  """Whether the integer expression `idx` is a multiple of n for every value of its ranges: every term's
  coefficient and the constant are (sum-of-products form)."""
  terms, const = split_terms(idx)
  return const % n == 0 and all(c % n == 0 for c in terms.values())


class GPUVectors:
  """Vector spelling shared by the GPU renderers: each sets `vector_prefix` (the vector type of a scalar type name,
  e.g. "float" -> "float4") and `render_vector`, `render_vector_load`, `render_vector_store`."""
  vector_ops = NATIVE
  operators = True            # the language has arithmetic operators on vectors

  def vector_access(self, buf: UOp, base: UOp) -> bool:
    """A vector load or store of `buf` may start at element `base`: 16-byte aligned."""
    return is_multiple(base, LANES)

  def render_gep(self, x: str, i: int, d: DType) -> str: return f"({x}).{_COMPONENTS[i]}"

  def render_vector_alu(self, u: UOp, s: list[str]) -> str:
    if self.operators and u.op in NATIVE and u.dtype.count > 1:
      return BASE_OPS[u.op].format(*(self._splat(x, src) for x, src in zip(s, u.src)))
    lanes = []
    for i in range(u.dtype.count):
      scalar = UOp(u.op, u.dtype.scalar, tuple(UOp(Ops.GEP, src.dtype.scalar, (src,), i) for src in u.src), u.arg)
      lanes.append(self.render_alu(scalar, [self.render_gep(x, i, src.dtype) if src.dtype.count > 1 else x
                                            for x, src in zip(s, u.src)]))
    return self.render_vector(lanes, u.dtype)

  def _splat(self, x: str, src: UOp) -> str:
    """A scalar operand of a vector operator (languages that broadcast it do so themselves)."""
    return x

  def render_gated_load(self, gate: str, load: str, d: DType) -> str:
    if d.count == 1: return super().render_gated_load(gate, load, d)  # type: ignore[misc]
    zero = self.render_vector([self.render_const(0, d.scalar)] * d.count, d)  # type: ignore[attr-defined]
    return f"(({gate})?{load}:{zero})"
