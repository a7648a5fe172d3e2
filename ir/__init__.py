"""The IR every layer speaks: UOp, Ops, dtypes, patterns and rewriting, symbolic integer rules."""
from tgc.ir.dtype import DType, dtypes, promote, least_upper_float
from tgc.ir.ops import Ops, GroupOp
from tgc.ir.axis import AxisType, RangeArg
from tgc.ir.uop import UOp
from tgc.ir import shape  # noqa: F401  (gives UOp.shape its rule)
from tgc.ir.pattern import UPat, PatternMatcher, graph_rewrite, substitute, RewriteLoopError

__all__ = ["DType", "dtypes", "promote", "least_upper_float", "Ops", "GroupOp", "AxisType", "RangeArg", "UOp", "UPat",
           "PatternMatcher", "graph_rewrite", "substitute", "RewriteLoopError"]
