"""Atomic operations on int64 array elements, for threads of one parallel region.

Numba has no atomics; these intrinsics emit LLVM's. They let the threads
of one ``prange`` region hand work to each other without ending the region:
the SGD epochs (:func:`._sgd._sgd_epoch`, :func:`._sgd._feature_split_epoch`)
run a whole epoch in one region instead of one region per batch.

Ordering follows C++'s memory model: :func:`publish` is a release store
and :func:`wait_nonzero` an acquire load, so whatever a thread wrote before
publishing a flag is visible to a thread that has seen it; the
read-modify-writes (:func:`fetch_add`, :func:`exchange`) are sequentially
consistent.
"""

import platform
import sys

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from ._config import JIT

# A waiting thread spins this many times (each with a PAUSE on x86) before
# it starts giving its core away at every turn: long enough for a peer
# that is running (an SGD batch's share takes tens of microseconds), short
# enough that a peer waiting for a core (more threads than free cores)
# gets one within about a scheduler tick.
SPINS_BEFORE_YIELD = 1 << 12

_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686", "x86")
# sched_yield is POSIX; elsewhere (Windows) a waiting thread only spins.
_YIELD = sys.platform != "win32"


def _element(context, builder, sig, args):
    """Return a pointer to arr[i], from the intrinsics' first two arguments (arr, i)."""
    aty, ity = sig.args[0], sig.args[1]
    i = context.cast(builder, args[1], ity, types.intp)
    return cgutils.get_item_pointer(context, builder, aty,
                                    context.make_array(aty)(context, builder, args[0]), [i])


def _check(arr, i):
    if not (isinstance(arr, types.Array) and arr.dtype == types.int64 and arr.ndim == 1):
        raise TypeError("atomics take a 1-D int64 array")
    if not isinstance(i, types.Integer):
        raise TypeError("atomics take an integer index")


def _read_modify_write(op):
    """Return an intrinsic ``f(arr, i, v)``: LLVM's atomicrmw ``op`` on arr[i], seq_cst.

    It returns arr[i]'s value before.
    """

    @intrinsic
    def rmw(typingctx, arr, i, v):
        _check(arr, i)

        def codegen(context, builder, sig, args):
            ptr = _element(context, builder, sig, args)
            value = context.cast(builder, args[2], sig.args[2], types.int64)
            return builder.atomic_rmw(op, ptr, value, "seq_cst")

        return types.int64(arr, i, v), codegen

    return rmw


# arr[i] += v atomically; returns the value before.
fetch_add = _read_modify_write("add")
# arr[i] <- v atomically; returns the value before.
exchange = _read_modify_write("xchg")


@intrinsic
def load_acquire(typingctx, arr, i):
    """arr[i], read with acquire ordering."""
    _check(arr, i)

    def codegen(context, builder, sig, args):
        ptr = _element(context, builder, sig, args)
        return builder.load_atomic(ptr, "acquire", 8)

    return types.int64(arr, i), codegen


@intrinsic
def publish(typingctx, arr, i, v):
    """arr[i] <- v with release ordering: what this thread wrote before is seen with it."""
    _check(arr, i)

    def codegen(context, builder, sig, args):
        ptr = _element(context, builder, sig, args)
        builder.store_atomic(context.cast(builder, args[2], sig.args[2], types.int64), ptr,
                             "release", 8)
        return context.get_dummy_value()

    return types.void(arr, i, v), codegen


@intrinsic
def _relax(typingctx, give_core):
    """One turn of a wait: PAUSE on x86; with give_core, sched_yield() too (POSIX)."""

    def codegen(context, builder, sig, args):
        mod = builder.module
        if _X86:
            fn = cgutils.get_or_insert_function(mod, ir.FunctionType(ir.VoidType(), []),
                                                "llvm.x86.sse2.pause")
            builder.call(fn, [])
        if _YIELD:
            fn = cgutils.get_or_insert_function(mod, ir.FunctionType(ir.IntType(32), []),
                                                "sched_yield")
            with builder.if_then(args[0], likely=False):
                builder.call(fn, [])
        return context.get_dummy_value()

    return types.void(types.boolean), codegen


@njit(inline="always", **JIT)
def try_take(arr, i):
    """Set arr[i] from 0 to 1; return True if this call did it, False if it was set before.

    Reads first and exchanges only a flag it saw at 0: where many threads
    look at flags that another has already taken, they read a shared copy
    of the cache line instead of each taking it from the others' caches
    in turn.
    """
    return load_acquire(arr, i) == 0 and exchange(arr, i, 1) == 0


@njit(**JIT)
def wait_nonzero(arr, i):
    """Wait until arr[i] != 0 (acquire); return it.

    Spins, then (after SPINS_BEFORE_YIELD turns) yields the core at every
    turn, so that a thread it waits for that has no core of its own runs.
    """
    spins = 0
    v = load_acquire(arr, i)
    while v == 0:
        spins += 1
        _relax(spins > SPINS_BEFORE_YIELD)
        v = load_acquire(arr, i)
    return v
