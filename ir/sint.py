"""Sizes known only at run time. A dim of a shape is an `int` or a `UOp` index expression of `Variable`s
(DEFINE_VAR nodes, each a name with the lowest and highest value it may take): a `sint`. Expressions are kept
simplified, so two ways of writing the same size are the same node. Questions a compiler asks of a size (is it 1,
how big can it get, what is it for these variable values) are answered here."""
from __future__ import annotations
import math
import re
import numpy as np
from typing import Iterable, Union
from tgc.ir.dtype import dtypes
from tgc.ir.ops import Ops
from tgc.ir.uop import UOp
from tgc.ir.pattern import substitute

sint = Union[int, UOp]
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def Variable(name: str, lowest: int, highest: int) -> UOp:
  """A size named `name` that takes any value in [lowest, highest] at run time (lowest >= 0: a state's length is 0
  before its first call)."""
  if not isinstance(name, str) or not NAME.fullmatch(name):
    raise ValueError(f"a size variable's name must be an identifier, not {name!r}")
  if not (isinstance(lowest, int) and isinstance(highest, int)) or not 0 <= lowest <= highest:
    raise ValueError(f"size variable {name}: need 0 <= lowest <= highest, got {lowest}..{highest}")
  return UOp(Ops.DEFINE_VAR, dtypes.index, (), (name, lowest, highest))


def is_static(x) -> bool:
  """Whether `x` (a size or a shape) is known at compile time."""
  if isinstance(x, (tuple, list)): return all(is_static(s) for s in x)
  return not isinstance(x, UOp)


def simplified(x: sint) -> sint:
  """`x` in its canonical form (a sum's terms in one order: past+seq and seq+past are one node); an expression that
  is constant becomes an int."""
  if not isinstance(x, UOp): return int(x)
  from tgc.ir.symbolic import simplify, split_terms, build_sum
  x = simplify(x)
  if x.op is Ops.ADD: x = build_sum(x.dtype, *split_terms(x))
  return x.arg if x.op is Ops.CONST else x


def highest(x: sint) -> int:
  """The largest value `x` can take (itself when static)."""
  return x if not isinstance(x, UOp) else int(x.vmax)


def variables(*xs) -> dict[str, UOp]:
  """The variables that sizes or shapes `xs` use, by name, sorted by name."""
  found: dict[str, UOp] = {}
  stack = list(xs)
  while stack:
    x = stack.pop()
    if isinstance(x, (tuple, list)): stack.extend(x)
    elif isinstance(x, UOp):
      for n in x.toposort():
        if n.op is Ops.DEFINE_VAR:
          if found.setdefault(n.arg[0], n) is not n:
            raise ValueError(f"size variable {n.arg[0]} is defined twice, with ranges "
                             f"{found[n.arg[0]].arg[1]}..{found[n.arg[0]].arg[2]} and {n.arg[1]}..{n.arg[2]}")
  return dict(sorted(found.items()))


def evaluate(x: sint, values: dict[str, int]) -> int:
  """The value of `x` for these variable values (by name)."""
  if not isinstance(x, UOp): return int(x)
  from tgc.ir.symbolic import simplify
  sub = {v: UOp.const(dtypes.index, values[name]) for name, v in variables(x).items()}
  out = simplify(substitute(x, sub))
  if out.op is not Ops.CONST: raise ValueError(f"size {render(x)} does not evaluate to a number")
  return int(out.arg)


def _factors(xs: Iterable[sint]) -> tuple[int, list[UOp]]:
  """The constant and the factors that are no products of a product of sizes."""
  const, factors, stack = 1, [], [simplified(x) for x in xs]
  while stack:
    x = stack.pop()
    if not isinstance(x, UOp): const *= x
    elif x.op is Ops.CONST: const *= x.arg
    elif x.op is Ops.MUL: stack.extend(x.src)
    else: factors.append(x)
  return const, factors


def prod(xs: Iterable[sint]) -> sint:
  """The product of sizes (an int when all are), in one canonical form: its factors that are no products, sorted,
  times the constant (so that (B*T)*8 and B*(T*8) are one node)."""
  const, factors = _factors(xs)
  if not factors or const == 0: return const
  out = None
  for f in sorted(factors, key=lambda f: f.key): out = f if out is None else out * f
  return simplified(out * const if const != 1 else out)


def quotient(a: sint, b: sint) -> sint | None:
  """a / b when b divides a as a product of sizes (seq*384 / (seq*32) = 12); None when it does not."""
  (ca, fa), (cb, fb) = _factors((a,)), _factors((b,))
  if cb == 0 or ca % cb: return None
  for f in fb:
    if f not in fa: return None
    fa.remove(f)
  return prod([ca // cb, *fa])


def highest_prod(xs: Iterable[sint]) -> int:
  """The largest product the sizes `xs` can have (each at its highest)."""
  return math.prod(highest(x) for x in xs)


def same(a: sint, b: sint) -> bool:
  """Whether two sizes are always equal."""
  if not isinstance(a, UOp) and not isinstance(b, UOp): return a == b
  return prod((a,)) is prod((b,))


def lowest(x: sint) -> int:
  """The smallest value `x` can take (itself when static)."""
  return x if not isinstance(x, UOp) else int(x.vmin)


def provably_le(a: sint, b: sint) -> bool:
  """Whether a <= b for every value of the variables (the ranges prove it, or the sizes are the same)."""
  if same(a, b) or highest(a) <= lowest(b): return True
  if lowest(a) > highest(b) or not isinstance(a, UOp) and not isinstance(b, UOp): return False
  diff = simplified(b - a)
  if lowest(diff) >= 0: return True
  # interval bounds are loose for floor divisions: a single variable's range is checked value by value
  names = variables(diff)
  if len(names) != 1: return False
  (name, v), = names.items()
  if v.arg[2] - v.arg[1] > EXHAUSTIVE_RANGE: return False
  return bool((_values(diff, {name: np.arange(v.arg[1], v.arg[2] + 1)}) >= 0).all())


EXHAUSTIVE_RANGE = 1 << 16    # the widest variable range provably_le checks value by value


def _values(x: sint, env: dict):
  """`x` for arrays of variable values (`env`), computed as C computes it (division truncates)."""
  if not isinstance(x, UOp): return x
  if x.op is Ops.DEFINE_VAR: return env[x.arg[0]]
  if x.op is Ops.CONST: return x.arg
  a, b = (_values(s, env) for s in x.src)
  if x.op is Ops.ADD: return a + b
  if x.op is Ops.MUL: return a * b
  if x.op in (Ops.IDIV, Ops.MOD):
    q = np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))
    return q if x.op is Ops.IDIV else a - q * b
  if x.op is Ops.MAX: return np.maximum(a, b)
  raise ValueError(f"size expression with {x.op.name} cannot be computed")


_INFIX = {Ops.ADD: "+", Ops.MUL: "*", Ops.IDIV: "/", Ops.MOD: "%"}


def scaled_variable(x: sint) -> tuple[UOp, int] | None:
  """`x` as (variable, factor) when it is a variable or a variable times a positive integer (a size that only takes
  multiples of the factor: `32*h`), else None. A run reads such a variable's value off a dim that is `x`."""
  if not isinstance(x, UOp): return None
  if x.op is Ops.DEFINE_VAR: return x, 1
  if x.op is Ops.MUL and x.src[0].op is Ops.DEFINE_VAR and x.src[1].op is Ops.CONST and x.src[1].arg > 0:
    return x.src[0], int(x.src[1].arg)
  return None


def render(x: sint, name=lambda v: v) -> str:
  """A size as C-like text over its variables (`T`, `((T+-1)/2)`; `name(variable name)` spells a variable): what
  manifests store, what loaders evaluate (integer division of non-negative values) and C code computes."""
  if not isinstance(x, UOp): return str(int(x))
  if x.op is Ops.DEFINE_VAR: return name(x.arg[0])
  if x.op is Ops.CONST: return f"({x.arg})" if x.arg < 0 else str(x.arg)
  if x.op not in _INFIX: raise ValueError(f"size expression with {x.op.name} cannot be written as text")
  return f"({render(x.src[0], name)}{_INFIX[x.op]}{render(x.src[1], name)})"


def dims_text(shape) -> list:
  """A shape for a manifest: static dims as ints, the others as `render` text."""
  return [s if is_static(s) else render(s) for s in shape]
