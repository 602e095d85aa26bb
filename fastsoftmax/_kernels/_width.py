"""Vector width of a compiled kernel: 512-bit vectors for float32 on AVX-512 hosts.

LLVM tunes every Intel AVX-512 core from Skylake-X to Sapphire Rapids (and
Rocket Lake, which some virtual machines report) to *prefer* 256-bit
vectors: its loop vectoriser then fills ymm registers, half of what the FMA
units take, because early AVX-512 parts lowered their clock under heavy
512-bit work. Numba compiles with one target machine per process, so the
whole process inherits that choice. OpenBLAS's kernels use the full width,
and on such a host reach about twice the FMA rate of ours.

:func:`_wide_vectors` lifts the preference for the one compiled function it
is called from, through two LLVM function attributes:
``"prefer-vector-width"="512"`` (the loop vectoriser's width) and
``"min-legal-vector-width"="512"`` (without it the back end splits 512-bit
operations into two 256-bit halves again). Nothing else in the process
changes: not the user's own Numba code, not Numba's configuration.

Only float32 kernels ask for it. There a 512-bit loop has 16 lanes, and
LLVM vectorises its remainder with narrower vectors; the register tiles of
:mod:`._micro` ran 1.2-1.4x faster with 64-byte-aligned operands, and the
fused gradient 1.2-1.3x faster on n = 20 ... 3000, k = 2 ... 48. In float64
(8 lanes) the remainder of a short row stays scalar: the gradient ran 1.2x
faster at n = 784 but up to 1.1x slower at n = 20 (BENCHMARKS.md, "Seventh
session"), so float64 keeps LLVM's choice except where the rows are long:
the GEMM kernel of 32 classes or more (:func:`_wide_vectors_float64`), and
the rows kernels on 128 features or more, which are compiled in both widths
and told which by a marker argument (:func:`_wide_vectors_marked`).

The attributes are written through llvmlite's function-attribute set, which
only knows LLVM's keyword attributes: the set is replaced by a subclass
that also prints the two string attributes. Should a later llvmlite change
that class, the kernel compiles at LLVM's default width, which computes the
same results (the tests check that the attribute is in the compiled IR
where the host has AVX-512).
"""

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from ._config import WIDE_REGISTERS

_LEGAL = '"min-legal-vector-width"="512"'
_PREFER = '"prefer-vector-width"="512"'


class _WideAttributes(ir.values.FunctionAttributes):
    """llvmlite's function attributes plus :data:`_LEGAL` and, where ``prefer``, :data:`_PREFER`."""

    prefer = True

    def __bool__(self) -> bool:
        # The IR printer writes the attribute list only when the set is
        # non-empty; the string attributes are not members of the set.
        return True

    def _to_list(self, ret_type):
        return [*super()._to_list(ret_type), _LEGAL, *((_PREFER,) if self.prefer else ())]


def _widen(function, prefer: bool = True) -> None:
    """Give an llvmlite ``Function`` the 512-bit attributes.

    ``prefer`` False: only make 512-bit vectors legal (the explicit vectors
    of :mod:`._ahead`), leaving the loop vectoriser's width as it was.
    """
    if isinstance(function.attributes, _WideAttributes):
        function.attributes.prefer = function.attributes.prefer or prefer
        return
    try:
        wide = _WideAttributes()
        for name in function.attributes:
            wide.add(name)
        wide.alignstack = function.attributes.alignstack
        wide.personality = function.attributes.personality
    except Exception:  # pragma: no cover - an llvmlite without this interface
        return
    wide.prefer = prefer
    function.attributes = wide


def _codegen(wanted: bool):
    """Return the intrinsics' code: the attributes on the caller when ``wanted``, else nothing."""

    def codegen(context, builder, sig, args):
        if wanted:
            _widen(builder.function)
        return context.get_dummy_value()

    return codegen


@intrinsic
def _wide_vectors(typingctx, x):
    """Ask for 512-bit vectors in the calling function when x is a float32 array.

    A no-op for other dtypes and on hosts without AVX-512. Call it first in
    a kernel's (non-inlined) body; inlined helpers then compile in the same
    function and get the same width.
    """
    wanted = WIDE_REGISTERS and isinstance(x, types.Array) and x.dtype == types.float32
    return types.none(x), _codegen(wanted)


@intrinsic
def _wide_vectors_float64(typingctx, x):
    """:func:`_wide_vectors` for float64 arrays, for kernels whose loops run along long rows.

    There the remainder that kept float64 at LLVM's width is a small part
    of each loop: with it the GEMM strategy's kernel for rows of at least
    ``_common.LANES_FROM`` classes took 0.83-0.98x the time at n <= 100
    and k = 64 ... 1000, and 0.98-1.03x where the products dominate
    (BENCHMARKS.md, "Tenth session"). In float32 the same request made it
    1.11-1.26x slower at k = 64 and 100 in one run: float32 keeps LLVM's
    choice there.
    """
    wanted = WIDE_REGISTERS and isinstance(x, types.Array) and x.dtype == types.float64
    return types.none(x), _codegen(wanted)


# Width markers for kernels compiled in two widths (the rows kernels of
# _fused and _hessp): the choice has to be a type, as the attribute is set
# when the function is compiled, so the caller passes one of these empty
# arrays and Numba compiles one specialisation per marker, each on demand.
FLOAT64_512 = np.zeros(0, dtype=np.uint8)  # 512-bit vectors in float64 too
DEFAULT_WIDTH = np.zeros(0, dtype=np.int8)  # as _wide_vectors alone


@intrinsic
def _wide_vectors_marked(typingctx, marker, x):
    """:func:`_wide_vectors`, and in float64 too where ``marker`` is :data:`FLOAT64_512`.

    For kernels that serve rows of every length: :data:`DEFAULT_WIDTH`
    leaves float64 at LLVM's width.
    """
    wanted = WIDE_REGISTERS and isinstance(x, types.Array) and (
        x.dtype == types.float32
        or (x.dtype == types.float64 and isinstance(marker, types.Array)
            and marker.dtype == types.uint8))
    return types.none(marker, x), _codegen(wanted)
