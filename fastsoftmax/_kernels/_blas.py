"""A BLAS matrix product that adds into its output, C = A B + beta C, by a routine set at run time.

``np.dot(A, B, out)`` in Numba always overwrites ``out`` (beta = 0), so a
sum of products over row blocks, Σ_blocks Xbᵀ E_b, needed a second buffer
for each block's product and a pass adding it into the sum: n k entries
read twice and written once per block, which made small blocks expensive
however well they fit the caches. :func:`_gemm_into` passes beta to BLAS,
so the GEMM kernels accumulate straight into their partial sums; every
product of the kernels goes through it, ``np.dot``'s included.

Which BLAS: by default the one Numba's ``np.dot`` calls (``numba_xxgemm``
in Numba's helper library, which forwards to SciPy's BLAS). A process
often holds a second one, NumPy's own build, and the two need not be
equally fast: on the 2-core AVX-512 host the float32 products of the
GEMM kernels ran 5-8 % faster through NumPy's newer OpenBLAS
(BENCHMARKS.md, "Twenty-eighth session"). So the compiled code reads the
routine's address from :data:`TABLE`, a small array that this module
exports to the JIT linker under :data:`TABLE_SYMBOL` and that Python sets
(:func:`set_routine`; :mod:`fastsoftmax._blas_choice` finds the
candidates and the calibration picks one per dtype). Compiled code
refers to the table by name, so it is cached on disk as before and a
later process may point it elsewhere. An address of 0 (the default) calls
Numba's entry point, exactly the routine ``np.dot`` would.
"""

import ctypes

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.linalg import check_blas_return, ensure_blas, get_blas_kind

_CHAR = ir.IntType(8)
_VOID_P = _CHAR.as_pointer()
_I64 = ir.IntType(64)

TABLE_SYMBOL = "fastsoftmax_gemm_table"
# [sgemm's address, 1 if its integers are 64-bit (ILP64) else 0, dgemm's
# address, its integer flag]: Fortran ?gemm routines (every argument by
# reference). Registered with the linker before any kernel is compiled or
# loaded from the cache (this module is imported by every kernel module
# that multiplies).
TABLE = (ctypes.c_int64 * 4)()
llvm.add_symbol(TABLE_SYMBOL, ctypes.addressof(TABLE))


def _slot(dtype) -> int:
    """Return the index of ``dtype``'s routine in :data:`TABLE` (float32 0, float64 2)."""
    return 0 if np.dtype(dtype) == np.float32 else 2


def set_routine(dtype, address: int, ilp64: bool) -> None:
    """Point the kernels' ``dtype`` products (float32, float64) at the Fortran ?gemm ``address``.

    ``ilp64``: the routine takes 64-bit integers. ``address`` 0: Numba's
    own (SciPy's BLAS). The caller vouches for the routine and its integer
    width: a wrong one is undefined behaviour, not an error.
    """
    slot = _slot(dtype)
    TABLE[slot + 1] = int(bool(ilp64))
    TABLE[slot] = int(address)


def routine(dtype) -> tuple[int, bool]:
    """Return (address, ilp64) of the routine ``dtype``'s products call (address 0: Numba's own)."""
    slot = _slot(dtype)
    return int(TABLE[slot]), bool(TABLE[slot + 1])


def _table_ref(module):
    gv = module.globals.get(TABLE_SYMBOL)
    if gv is None:
        gv = ir.GlobalVariable(module, ir.ArrayType(_I64, 4), TABLE_SYMBOL)
        gv.linkage = "external"
    return gv


def _fortran_gemm(builder, address, int_t, float_t, trans, mnk, alpha, b, a, beta, c):
    """Call the Fortran ?gemm at ``address`` (every argument by reference)."""
    def ref(value, ty):
        return cgutils.alloca_once_value(builder, value if value.type == ty
                                         else builder.trunc(value, ty))
    int_p = int_t.as_pointer()
    float_p = float_t.as_pointer()
    fnty = ir.FunctionType(ir.VoidType(), [_VOID_P, _VOID_P, int_p, int_p, int_p, float_p,
                                           float_p, int_p, float_p, int_p, float_p, float_p,
                                           int_p])
    fn = builder.inttoptr(address, fnty.as_pointer())
    args = [ref(t, _CHAR) for t in trans] + [ref(x, int_t) for x in mnk]
    args.append(builder.bitcast(alpha, float_p))
    for data, ld in (b, a):
        args += [builder.bitcast(data, float_p), ref(ld, int_t)]
    args += [builder.bitcast(beta, float_p), builder.bitcast(c[0], float_p), ref(c[1], int_t)]
    builder.call(fn, args)


@intrinsic
def _gemm_into(typingctx, A, B, C, beta):
    """C = A @ B + beta * C by BLAS: the routine in :data:`TABLE` for the dtype, else Numba's.

    A (m, k) and B (k, n) C- or F-contiguous (a transposed view of a
    C-contiguous array is F-contiguous), or strided views with unit stride
    along one axis (a column range of a C-contiguous array, X[:, f0:f1],
    or its transpose: Numba's layout "A", read at run time), C (m, n)
    C-contiguous, all of one float dtype; beta any float (0 overwrites C:
    BLAS then does not read it). Shapes, and the unit stride of an "A"
    operand, are the caller's to check, as for BLAS itself.
    """
    arrays = (A, B, C)
    if not all(isinstance(a, types.Array) and a.ndim == 2 for a in arrays):
        return None
    if A.dtype != B.dtype or A.dtype != C.dtype or A.dtype not in (types.float32, types.float64):
        return None
    if A.layout not in "CFA" or B.layout not in "CFA" or C.layout != "C":
        return None
    if not isinstance(beta, types.Float):
        return None
    ensure_blas()
    dtype = A.dtype
    kind = get_blas_kind(dtype)

    def codegen(context, builder, sig, args):
        beta_val = args[3]
        intp = cgutils.intp_t
        fnty = ir.FunctionType(ir.IntType(32),
                               [_CHAR, _CHAR, _CHAR,   # kind, transa, transb
                                intp, intp, intp,      # m, n, k
                                _VOID_P, _VOID_P, intp,  # alpha, a, lda
                                _VOID_P, intp, _VOID_P,  # b, ldb, beta
                                _VOID_P, intp])        # c, ldc
        fn = cgutils.get_or_insert_function(builder.module, fnty, "numba_xxgemm")
        arr = [context.make_array(t)(context, builder, v) for t, v in zip(sig.args[:3], args[:3],
                                                                            strict=True)]
        shapes = [cgutils.unpack_tuple(builder, x.shape, 2) for x in arr]
        m, k = shapes[0]
        n = shapes[1][1]
        alpha = cgutils.alloca_once_value(builder, context.get_constant(dtype, 1.0))
        beta_slot = cgutils.alloca_once_value(
            builder, context.cast(builder, beta_val, sig.args[3], dtype))

        # Row-major C = A B is column-major Cᵀ = Bᵀ Aᵀ: B comes first, and an
        # F-contiguous operand is a transposed one.
        def operand(ty, shape, x):
            data = builder.bitcast(x.data, _VOID_P)
            if ty.layout != "A":
                trans = ir.Constant(_CHAR, ord("n" if ty.layout == "C" else "t"))
                return trans, shape[1] if ty.layout == "C" else shape[0], data
            # Strided (r, c): row-major where the unit stride runs along the
            # rows (or a row has one entry), else column-major (transposed);
            # the leading dimension is the other axis's stride in elements,
            # at least what BLAS requires (that stride says nothing where
            # its axis has one entry).
            strides = cgutils.unpack_tuple(builder, x.strides, 2)
            item = ir.Constant(intp, context.get_abi_sizeof(context.get_data_type(dtype)))
            one = ir.Constant(intp, 1)
            row = builder.or_(builder.icmp_signed("==", strides[1], item),
                              builder.icmp_signed("<=", shape[1], one))
            trans = builder.select(row, ir.Constant(_CHAR, ord("n")),
                                   ir.Constant(_CHAR, ord("t")))
            ld = builder.sdiv(builder.select(row, strides[0], strides[1]), item)
            least = builder.select(row, shape[1], shape[0])
            ld = builder.select(builder.icmp_signed("<", ld, least), least, ld)
            ld = builder.select(builder.icmp_signed("<", ld, one), one, ld)
            return trans, ld, data

        transb, ldb, data_b = operand(B, shapes[1], arr[1])
        transa, lda, data_a = operand(A, shapes[0], arr[0])
        ldc = shapes[2][1]
        alpha_p = builder.bitcast(alpha, _VOID_P)
        beta_p = builder.bitcast(beta_slot, _VOID_P)
        data_c = builder.bitcast(arr[2].data, _VOID_P)
        table = _table_ref(builder.module)
        slot = 0 if dtype == types.float32 else 2
        entry = [builder.load(builder.gep(table, [ir.Constant(ir.IntType(32), 0),
                                                  ir.Constant(ir.IntType(32), slot + i)]))
                 for i in (0, 1)]
        chosen = builder.icmp_unsigned("!=", entry[0], ir.Constant(_I64, 0))
        with builder.if_else(chosen) as (then, otherwise):
            with then:
                wide = builder.icmp_unsigned("!=", entry[1], ir.Constant(_I64, 0))
                with builder.if_else(wide) as (ilp64, lp64):
                    for block, int_t in ((ilp64, _I64), (lp64, ir.IntType(32))):
                        with block:
                            _fortran_gemm(builder, entry[0], int_t, context.get_data_type(dtype),
                                          (transb, transa), (n, m, k), alpha_p,
                                          (data_b, ldb), (data_a, lda), beta_p, (data_c, ldc))
            with otherwise:
                res = builder.call(fn, (ir.Constant(_CHAR, ord(kind)), transb, transa, n, m, k,
                                        alpha_p, data_b, ldb, data_a, lda, beta_p, data_c, ldc))
                check_blas_return(context, builder, res)
        return context.get_dummy_value()

    return types.none(A, B, C, beta), codegen
