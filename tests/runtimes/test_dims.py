"""The runners' side of sizes known at run time: size text is evaluated without eval, sizes are read off the inputs'
shapes and checked (each error names the input and the dimension)."""
import pytest
from tgc.runtimes.dims import DimsError, bind_dims, evaluate_size, sample_sizes, shape_at

MANIFEST = {"dims": [{"name": "B", "min": 1, "max": 4}, {"name": "T", "min": 2, "max": 64}],
            "inputs": [{"name": "x", "shape": ["B", "T", 8]}, {"name": "mask", "shape": ["B", "((T+1)/2)"]}]}


def test_size_text():
  assert evaluate_size("((T+(-1))/2)", {"T": 9}) == 4 and evaluate_size(7, {}) == 7
  assert evaluate_size("(T%4)*B", {"T": 10, "B": 3}) == 6
  for bad in ("__import__('os')", "T.real", "T if T else 1", "[T]", "T**2"):
    with pytest.raises(DimsError): evaluate_size(bad, {"T": 2})
  with pytest.raises(DimsError, match="names U"): evaluate_size("U", {"T": 2})


def test_bind_dims_reads_and_checks():
  assert bind_dims(MANIFEST, {"x": (3, 10, 8), "mask": (3, 5)}) == {"B": 3, "T": 10}
  assert shape_at(MANIFEST["inputs"][1]["shape"], {"B": 2, "T": 7}) == (2, 4)
  with pytest.raises(DimsError, match=r"input 'x': dimension 1 \(T\) is 65, outside the range 2..64"):
    bind_dims(MANIFEST, {"x": (1, 65, 8), "mask": (1, 33)})
  with pytest.raises(DimsError, match=r"input 'mask': shape \(3, 6\), expected \(3, 5\)"):
    bind_dims(MANIFEST, {"x": (3, 10, 8), "mask": (3, 6)})
  with pytest.raises(DimsError, match=r"input 'x': shape \(3, 10\), expected 3 dims"):
    bind_dims(MANIFEST, {"x": (3, 10), "mask": (3, 5)})


def test_bind_dims_reads_sizes_in_steps():
  """A dim that is a multiple of a size ("(h*32)") gives the size's value; a later dim of the size is checked."""
  steps = {"dims": [{"name": "h", "min": 1, "max": 30}],
           "inputs": [{"name": "x", "shape": [1, 3, "(h*32)"]}, {"name": "y", "shape": ["h"]}]}
  assert bind_dims(steps, {"x": (1, 3, 640), "y": (20,)}) == {"h": 20}
  with pytest.raises(DimsError, match=r"dimension 2 \(\(h\*32\)\) is 650, not a multiple of 32"):
    bind_dims(steps, {"x": (1, 3, 650), "y": (20,)})
  with pytest.raises(DimsError, match=r"is 992, outside the range 32..960 in steps of 32"):
    bind_dims(steps, {"x": (1, 3, 992), "y": (31,)})
  with pytest.raises(DimsError, match=r"input 'y': shape \(21,\), expected \(20,\)"):
    bind_dims(steps, {"x": (1, 3, 640), "y": (21,)})


def test_sample_sizes_cover_the_range():
  assert sample_sizes(MANIFEST) == [{"B": 1, "T": 2}, {"B": 2, "T": 33}, {"B": 4, "T": 64}]
  assert sample_sizes({"inputs": []}) == [{}]
