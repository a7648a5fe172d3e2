"""The numbers that trade speed in the code tgc generates, in one place: what the heuristics, the scheduler, the
lowering and the C host code decide by. Changing one changes generated code; `bench/bench_corpus.py` says whether
it is a gain. BEAM's search space and its timing rules are the search's own (codegen/search.py)."""
from __future__ import annotations

# ---------------------------------------------------------------- graph and schedule (every target)
MATMUL_PANEL = 16           # matmul repacks large right-hand operands into panels this many columns wide ...
MATMUL_PACK_MIN = 128       # ... when both the reduced and the panel dimension are at least this big
RESIZE_TAP_RATIO = 4        # a Resize without a period reads its taps by index when taps times this < input length
TRANSPOSE_MULTIPLE = 16     # a reduction's operand is stored transposed only along an axis a multiple of this long
GROUP_LANES = 8             # a grouped conv's input is stored channels last only when its groups are multiples of this
RECOMPUTE_MAX_OPS = 16      # a value with an exp/log/sin that several kernels compute is realized at this many ops
BATCH_MAX_SPAN = 2          # reductions over slices batched: a group computes at most this many steps per step it uses
MAX_GATHER_SHARE = 0.2      # a VECTOR axis along which more of the memory accesses are lane by lane is not worth it
GATHER_WORTH_OPS = 8        # ... unless the kernel computes this many float ops per access (an erf of a transpose)
TRANSCENDENTAL_OPS = 10     # ... an exp2, log2 or sin counted as this many (tg_exp2: polynomial, reduction, scaling)
KERNEL_MAX_BUFFERS = 16     # buffers a kernel binds where the target sets no limit (C): more fusion recomputes more
                            # (a recurrence's elementwise state, fused into every later step's kernel)

# ---------------------------------------------------------------- CPUs (heuristics.py, lower.py, relayout.py, dot.py,
#                                                                   unswitch.py)
PADDED_VECTORS = 8          # an output axis of at least this many full vectors may be padded to a multiple of the lanes
MASKED_MIN_FILL = 0.85      # ... a shorter one, where masked accesses are single instructions, when its values fill
                            # this share of the padded lanes (14 pixels of a row in 16 lanes, 7 in 8)
BLOCK_MAX_PADDING = 0.025   # a register block may pad its axis by this fraction of it ...
BLOCK_ODD_PADDING = 0.1     # ... or this much when no block of 2 to 8 divides the axis (13 pixels in blocks of 7)
L2_LINE_COST = 1.0          # a cache line a register block reads from L2 costs this many loads from L1
DOT_MAX_PADDING = 0.34      # a reduce axis may be padded by this fraction for a dot instruction (RGB: 3 -> 4)
SHORT_TAPS = 7              # a reduction whose every axis is at most this long (a depthwise conv's, a pooling's) ...
UNROLLED_TAPS = 9           # ... is unrolled from its innermost axis up to this many copies (overlapping windows)
RELAYOUT_MAX_GROWTH = 1.25  # weights stored in read order may take this many times the bytes they come from
NEST_INNER_MAX = 8          # a gated reduce nest is versioned whole when its innermost loop is this short (unswitch.py)
MIN_TASKS = 16              # outer loops are folded into the task loop until it has this many iterations
PARALLEL_MIN_OPS = 1 << 20  # a C kernel goes to the thread pool at this much work per launch (ops, transcendentals
                            # at TRANSCENDENTAL_OPS) ...
PARALLEL_MIN_BYTES = 1 << 20  # ... or this much memory traffic (about ten microseconds of work)
POOL_RUNS_PER_THREAD = 4    # the thread pool hands out a job's task indices in about this many runs per thread

# ---------------------------------------------------------------- GPUs (gpu_heuristics.py, gpu_tiles.py)
GPU_LANES = 4               # vector lanes (float4, vec4<f32>)
GPU_UNROLL = (8, 4)         # copies of a reduction step to unroll
MIN_ITEMS = 64              # the smallest work-group to aim for
WORKGROUP = 256             # work-items per work-group to aim for (WebGPU's default limit)
MIN_GROUPS = 32             # work-groups to keep when choosing the work-group size (keep the device busy)
MAX_ACCUMULATORS = 64       # register-block size (outputs per work-item, vector lanes included) of a reduction
BLOCK_SLACK = 1.15          # a smaller register block is taken when it loads at most this factor more per accumulation
MAX_WASTE = 1.15            # padded work-items / useful work-items a LOCAL split may cost
GROUP_MIN_LOOP = 128        # a reduction this long is split across a work-group ...
GROUP_FEW_OUTPUTS = 2048    # ... when it has at most this many outputs, or reads along its own contiguous axis
TILE_MIN_REUSE = 4          # a load is staged in workgroup memory when this many work-items read each value ...
TILE_MIN_UNROLL = 4         # ... in a reduction unrolled at least this many copies
QUICK_OPS_PER_BYTE = 20000  # a software adapter's compile time per byte of WGSL in ops it runs meanwhile (SwiftShader:
                            # ~12 ms per KB, ~2 G ops/s on MobileNetV2 and ResNet-50); compiled._quickest
