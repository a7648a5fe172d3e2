"""Known failures of the neural-network ONNX operators (test_ops_nn.py's NN_MODULES) in the official node test
cases: case name -> (category, reason). Categories: "nondeterministic" (random results; the compiler refuses them)."""
from __future__ import annotations

_RANDOM_DROPOUT = "training-mode Dropout with a non-zero ratio is random; tgc refuses it at import"

NN_EXPECTED_FAILURES: dict[str, tuple[str, str]] = {
  "test_training_dropout": ("nondeterministic", _RANDOM_DROPOUT),
  "test_training_dropout_default": ("nondeterministic", _RANDOM_DROPOUT),
  "test_training_dropout_default_mask": ("nondeterministic", _RANDOM_DROPOUT),
  "test_training_dropout_mask": ("nondeterministic", _RANDOM_DROPOUT),
}
