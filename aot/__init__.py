"""The ahead-of-time layer: the pipeline (model -> trace -> compiled model -> artifact folder), the Python side of
artifacts (run, validate, bench, inspect) and the `tgc` command line (`tgc.aot.cli`)."""
from tgc.aot.errors import UserError
from tgc.aot.pipeline import (CompileReport, ValidateReport, BenchReport, SUPPORTED_TARGETS, compile_model,
                              run_artifact, validate_artifact, bench_artifact, open_artifact)

__all__ = ["UserError", "CompileReport", "ValidateReport", "BenchReport", "SUPPORTED_TARGETS", "compile_model",
           "run_artifact", "validate_artifact", "bench_artifact", "open_artifact"]
