"""Compilation options shared by every kernel."""

# Restricted fast-math: reassociation and contraction let LLVM vectorise the
# dot products and reductions; "afn" allows faster exp/log approximations.
# "nnan" and "ninf" are deliberately absent: stable softmax relies on -inf
# entries giving exp(-inf) = 0 and on max() seeing them, and the validation
# kernels must still detect NaN.
FASTMATH = {"nsz", "arcp", "contract", "afn", "reassoc"}

# Kernels are cached on disk (Numba writes next to the module, or to the
# user-wide cache directory when the package is installed read-only), so only
# the first process on a machine pays the compile time.
JIT = {"nogil": True, "cache": True, "fastmath": FASTMATH}
PJIT = {**JIT, "parallel": True}

# Validation scans get no fast-math at all: under "reassoc" LLVM may rewrite
# the arithmetic a NaN/inf test relies on (x - x folded to 0 was observed).
PJIT_STRICT = {"nogil": True, "cache": True, "parallel": True}
