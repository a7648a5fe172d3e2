"""The IR every layer speaks: UOp, Ops, dtypes, patterns and rewriting, symbolic integer rules."""
from ir.dtype import DType, dtypes, promote, least_upper_float
from ir.ops import Ops, GroupOp
from ir.uop import UOp
from ir.pattern import UPat, PatternMatcher, graph_rewrite, substitute, RewriteLoopError

__all__ = ["DType", "dtypes", "promote", "least_upper_float", "Ops", "GroupOp", "UOp", "UPat", "PatternMatcher",
           "graph_rewrite", "substitute", "RewriteLoopError"]
