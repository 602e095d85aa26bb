"""A BLAS matrix product that adds into its output: C = A B + beta C.

``np.dot(A, B, out)`` in Numba always overwrites ``out`` (beta = 0), so a
sum of products over row blocks, Σ_blocks Xbᵀ E_b, needed a second buffer
for each block's product and a pass adding it into the sum: n k entries
read twice and written once per block, which made small blocks expensive
however well they fit the caches. :func:`_gemm_into` passes beta to the
same BLAS entry point Numba's ``np.dot`` calls (``numba_xxgemm`` in
Numba's helper library, which forwards to SciPy's BLAS), so the GEMM
kernels accumulate straight into their partial sums. Compiled code that
calls it is cached on disk like ``np.dot``'s.
"""

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.linalg import check_blas_return, ensure_blas, get_blas_kind

_CHAR = ir.IntType(8)
_VOID_P = _CHAR.as_pointer()


@intrinsic
def _gemm_into(typingctx, A, B, C, beta):
    """C = A @ B + beta * C, through BLAS.

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
        res = builder.call(fn, (ir.Constant(_CHAR, ord(kind)), transb, transa, n, m, k,
                                builder.bitcast(alpha, _VOID_P), data_b, ldb,
                                data_a, lda, builder.bitcast(beta_slot, _VOID_P),
                                builder.bitcast(arr[2].data, _VOID_P), ldc))
        check_blas_return(context, builder, res)
        return context.get_dummy_value()

    return types.none(A, B, C, beta), codegen
