"""Sizes known only at run time (ir.sint): variables, canonical expressions, evaluation and their text."""
import pytest
from tgc.ir import Ops
from tgc.ir.sint import Variable, dims_text, evaluate, highest, highest_prod, is_static, prod, render, same, \
  simplified, variables


def test_variable_checks_its_name_and_range():
  t = Variable("T", 2, 64)
  assert t.op is Ops.DEFINE_VAR and (t.vmin, t.vmax) == (2, 64)
  assert Variable("T", 2, 64) is t        # hash-consed: the same size is the same node
  for bad in (("1T", 1, 4), ("T x", 1, 4), ("T", -1, 4), ("T", 5, 4), ("T", 1.0, 4)):
    with pytest.raises(ValueError): Variable(*bad)


def test_expressions_are_canonical():
  t = Variable("T", 1, 100)
  assert same(t * 4, 4 * t) and same(prod((2, t, 2)), t * 4)
  assert not same(t * 4, t * 2) and not same(t, 4)
  assert simplified(t - t) == 0 and isinstance(simplified(t * 0 + 3), int)
  assert is_static((1, 2)) and not is_static((1, t))


def test_values_bounds_and_text():
  t, b = Variable("T", 3, 50), Variable("B", 1, 8)
  size = simplified((t + (-1)) // 2 + 1)
  assert [evaluate(size, {"T": v}) for v in (3, 4, 50)] == [2, 2, 25]
  assert highest(size) == 25 and highest_prod((b, t, 2)) == 800
  assert dims_text((1, t, prod((b, 4)))) == [1, "T", "(B*4)"]
  assert render(b * t, lambda n: f"dim_{n}") in ("(dim_B*dim_T)", "(dim_T*dim_B)")
  assert list(variables((b, size))) == ["B", "T"]
  with pytest.raises(ValueError, match="defined twice"): variables((t, Variable("T", 1, 9)))
