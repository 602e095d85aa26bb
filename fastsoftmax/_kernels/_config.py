"""Compilation options shared by every kernel; the itemsize of a dtype as a constant."""

from numba import types
from numba.extending import intrinsic
from numba.np.numpy_support import as_dtype

# Restricted fast-math: reassociation and contraction let LLVM vectorise the
# dot products and reductions; "afn" allows faster exp/log approximations.
# "nnan" and "ninf" are deliberately absent: stable softmax relies on -inf
# entries giving exp(-inf) = 0 and on max() seeing them, and the validation
# kernels must still detect NaN.
FASTMATH = {"nsz", "arcp", "contract", "afn", "reassoc"}

# Kernels are cached on disk (Numba writes next to the module, or to the
# user-wide cache directory when the package is installed read-only), so only
# the first process on a machine pays the compile time.
#
# NumPy's error model: a float division by zero gives inf or NaN, as in
# NumPy, instead of Python's ZeroDivisionError. The kernels detect
# non-finite values themselves and report them with the row; an exception
# from inside a compiled loop could not name it (and the check it needs on
# every division keeps LLVM from vectorising the loops around it).
JIT = {"nogil": True, "cache": True, "fastmath": FASTMATH, "error_model": "numpy"}
PJIT = {**JIT, "parallel": True}

# Validation scans get no fast-math at all: under "reassoc" LLVM may rewrite
# the arithmetic a NaN/inf test relies on (x - x folded to 0 was observed).
STRICT = {"nogil": True, "cache": True, "error_model": "numpy"}
PJIT_STRICT = {**STRICT, "parallel": True}


def _wide_registers() -> bool:
    """Whether the CPU the kernels are compiled for has 32 vector registers (AVX-512).

    Read from the features Numba compiles for: ``NUMBA_CPU_FEATURES`` when
    set (a portable build), else the host's.
    """
    from numba.core import config

    features = config.CPU_FEATURES  # type: ignore[attr-defined]  # assigned at run time
    if features is None:
        from llvmlite import binding

        features = binding.get_host_cpu_features().flatten()
    return "+avx512f" in features.split(",")


WIDE_REGISTERS = _wide_registers()
# The register tiles written in LLVM IR (_ahead, _backward): their vectors
# fill a zmm register (16 float32 or 8 float64 lanes) on AVX-512 hosts, a
# ymm register elsewhere (8 or 4 lanes), and a four-row tile takes up to
# TILE_CLASSES classes: 4 x 5 accumulators (20 of 32 registers) beside the
# rows' four vectors, or 4 x 3 of AVX2's 16 registers (BENCHMARKS.md,
# "Fifty-first session": on a Zen 3 host the gradient took 0.68-0.96x the
# time of Numba's tiles, which were that host's until then).
VECTOR_BYTES = 64 if WIDE_REGISTERS else 32
TILE_CLASSES = 5 if WIDE_REGISTERS else 3


@intrinsic
def itemsize(typingctx, x):
    """``x.itemsize`` of an array x, as a constant of the compiled code.

    Numba loads an array's itemsize from its struct at run time, so a
    branch on ``X.itemsize`` is compiled both ways: a float64 kernel carried
    its float32 paths (and the other way round) through LLVM's optimisation
    and code generation, to be skipped only at run time. The dtype fixes
    the itemsize; as a constant, LLVM drops the other branch at once (the
    rows kernel compiled 7-8 s faster per dtype, BENCHMARKS.md,
    "Twenty-third session"). Numba's own passes still type both branches:
    a branch to leave out before typing goes on an argument's None-ness
    (``_fused.rows_blocks``, ``_ahead.HESSP_MICRO``).
    """
    if not isinstance(x, types.Array):
        return None
    size = as_dtype(x.dtype).itemsize

    def codegen(context, builder, sig, args):
        return context.get_constant(types.intp, size)

    return types.intp(x), codegen
