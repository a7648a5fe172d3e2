"""The ahead-of-time layer: the `tgc` command line (`tgc.aot.cli`) and one module per job: `compile` (model ->
trace -> compiled model -> artifact folder), `tune` (BEAM over a model, tuning files), `artifact` (opening, loading
and running artifact folders), `validate`, `bench`, `inspection` (`tgc inspect` of models), `viz` (the `tgc viz`
page; `viz_session` records a VIZ=1 command), `reference` (the independent references of validate), `models`
(loading user models), `targets` (--target and --cpu), `onnx_backend` (tgc as an ONNX backend) and `errors`."""
from tgc.aot.errors import UserError
from tgc.codegen.registry import target_names
from tgc.aot.compile import CompileReport, compile_model
from tgc.aot.artifact import open_artifact, run_artifact
from tgc.aot.validate import ValidateReport, validate_artifact
from tgc.aot.bench import BenchReport, bench_artifact

__all__ = ["UserError", "CompileReport", "ValidateReport", "BenchReport", "target_names", "compile_model",
           "run_artifact", "validate_artifact", "bench_artifact", "open_artifact"]
