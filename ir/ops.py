"""The `Ops` enum: every operation the IR knows, grouped by kind."""
from enum import Enum, auto


class Ops(Enum):
  # leaves of the lazy (tensor-level) graph
  BUFFER = auto()        # realized data; arg = (buffer id, shape)
  CONTIGUOUS = auto()    # marks a value the scheduler must materialize in a buffer of its own
  CONST = auto()         # scalar constant; arg = python value
  ARANGE = auto()        # 0, 1, .., n-1 along its one dim (an index as a value, no data); arg = n
  DEFINE_VAR = auto()    # a size known only at run time (ir.sint): dtype index, arg = (name, lowest, highest)
  # movement: shape-level, never copy; they become index arithmetic
  RESHAPE = auto(); PERMUTE = auto(); EXPAND = auto(); PAD = auto(); SHRINK = auto(); FLIP = auto()  # noqa: E702
  # unary
  NEG = auto(); EXP2 = auto(); LOG2 = auto(); SIN = auto(); SQRT = auto(); RECIP = auto(); TRUNC = auto()  # noqa: E702
  RINT = auto()          # round half to even (numpy's round)
  CAST = auto(); BITCAST = auto()  # noqa: E702
  # binary
  ADD = auto(); SUB = auto(); MUL = auto(); FDIV = auto(); IDIV = auto(); MOD = auto(); MAX = auto()  # noqa: E702
  CMPLT = auto(); CMPNE = auto(); CMPEQ = auto(); AND = auto(); OR = auto(); XOR = auto()  # noqa: E702
  SHL = auto(); SHR = auto(); POW = auto()  # noqa: E702
  # ternary
  WHERE = auto(); MULACC = auto()  # noqa: E702
  # reduce: REDUCE_AXIS in the lazy graph (arg = (op, axes), keeps dims); REDUCE in kernels (src = value, ranges)
  REDUCE_AXIS = auto(); REDUCE = auto()  # noqa: E702
  # kernel level
  DEFINE_GLOBAL = auto()  # arg = (position, mutable)
  DEFINE_LOCAL = auto()   # arg = (name, size)
  RANGE = auto()          # src = (end,), arg = RangeArg (ir.axis)
  LOAD = auto()           # src = (buffer, index[, valid])
  STORE = auto()          # src = (buffer, index, value[, valid])
  OPEN_INDEX = auto()     # scheduler only: an element of a value whose layout is not chosen yet; src = (row-major
                          # index, index per dim); keyed as its row-major index
  BARRIER = auto()
  SINK = auto()           # groups the roots of a graph
  # vectors (kernel level): a value of dtype `d.vec(n)` holds n lanes
  VECTORIZE = auto()      # a vector from n scalar sources (one per lane)
  GEP = auto()            # lane `arg` of a vector source
  # integer dot product of vectors: lane i of DOT(a, b[, acc]) is acc[i] plus the sum of a[g*i+j] * b[g*i+j] over
  # j < g, where g = a's lanes / the result's lanes (pairs of int16, groups of 4 int8 into int32 lanes);
  # DOT(a0, b0, a1, b1[, acc]) adds two such products (summed together by x86's pmaddubsw without VNNI)
  DOT = auto()
  # linearized programs only
  DEFINE_ACC = auto()     # an accumulator; src = (identity,), arg = accumulator number
  ASSIGN = auto()         # acc = value; src = (DEFINE_ACC, value)
  ENDRANGE = auto()       # closes the loop of src[0]
  IF = auto()             # runs what follows (up to ELSE or ENDIF) when src[0] holds
  ELSE = auto()           # what follows runs when the condition of the open IF does not hold
  ENDIF = auto()          # closes the open IF


class GroupOp:
  """Sets of ops by kind."""
  Movement = {Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP}
  Unary = {Ops.NEG, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP, Ops.TRUNC, Ops.RINT}
  Transcendental = {Ops.EXP2, Ops.LOG2, Ops.SIN}    # computed by a series on most targets: costly
  Binary = {Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ,
            Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.POW}
  Ternary = {Ops.WHERE, Ops.MULACC}
  ALU = Unary | Binary | Ternary
  Elementwise = ALU | {Ops.CAST, Ops.BITCAST}
  Commutative = {Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR}
  Comparison = {Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ}
  Reduce = {Ops.ADD, Ops.MAX, Ops.MUL}   # ops a reduction may use
