"""Known failures of the neural-network ONNX operators in the official node test cases: case name ->
(category, reason). Categories: "nondeterministic" (random operators), "unsupported" (a feature the compiler
does not offer), "dtype" (a storage-only element type the handler does not take yet)."""
from __future__ import annotations

NN_EXPECTED_FAILURES: dict[str, tuple[str, str]] = {
}
