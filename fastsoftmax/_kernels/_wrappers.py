"""The parallel loops' two wrapper libraries, compiled once, inside their kernel.

Numba compiles a ``prange`` loop as four code libraries, each linking the
one before and with it everything that one links: the loop's body (which
calls this package's chunk function, itself a library), a wrapper giving
the body the gufunc calling convention (``_GufuncWrapper``), a wrapper that
hands the work to the threads (``parallelgufuncwrapper``), and the kernel.
Each library is finalized on its own: its module, with every library it
links, optimized by LLVM's full pipeline and compiled to machine code. A
kernel's chunk function is most of the code, so it went through LLVM's
optimization and code generation five times: its own library, the three
of the loop and the kernel's. The two wrapper libraries are never called
on their own: nothing asks for their machine code, and the kernel links
them, optimizes and compiles them again with everything else (which is
what a process runs after loading the kernel from the cache).

:func:`install` finalizes those two wrapper libraries by linking only
(their modules take in what they link, unoptimized and uncompiled), for
the ``prange`` loops of this package's functions: the kernel's library,
finalized as before, optimizes and compiles them with the rest, once. The
loop's body keeps its own code generation (Numba sets its environment in
the compiled code). The code that runs is the same: the body and the
chunk as before, the wrappers as the kernel compiles them, and the cached
kernel bit for bit what it was (``tests/test_wrappers.py``). Should
anything ask a wrapper library for its machine code, it is optimized and
compiled then, as Numba would have done.

It relies on internals of ``numba.core.codegen`` and
``numba.parfors.parfor_lowering`` (checked on install); should a later
Numba change them, nothing is installed and the kernels compile as
before, only more slowly. ``FASTSOFTMAX_NUMBA_AS_IS=wrappers`` (or
``all``) leaves Numba as it is.
"""

from __future__ import annotations

import threading

from numba.core import codegen
from numba.core.compiler_lock import require_global_compiler_lock
from numba.parfors import parfor_lowering

from ._config import left_to_numba

_PACKAGE = __name__.split(".")[0] + "."
# The names Numba gives the two wrapper libraries of a prange loop
# (numba.np.ufunc.parallel.build_gufunc_kernel; the str() of a
# numba.np.ufunc.wrappers._GufuncWrapper).
_PARALLEL = "parallelgufuncwrapper"
_GUFUNC = "<numba.np.ufunc.wrappers._GufuncWrapper object"
# What install() replaces, on these classes.
_LIBRARY = codegen.CPUCodeLibrary
_JIT_LIBRARY = getattr(codegen, "JITCodeLibrary", None)
_ATTRIBUTES = ("_linking_libraries", "_reload_init", "_final_module")
_METHODS = ("finalize", "_optimize_final_module", "_finalize_final_module",
            "_get_module_for_linking", "_raise_if_finalized")

# Whether the prange loop being lowered now belongs to this package (Numba
# compiles under one lock; a thread-local keeps any other thread's apart).
_lowering = threading.local()
_numba: dict = {}


def _lower_parfor(lowerer, parfor):
    ours = lowerer.fndesc.modname.startswith(_PACKAGE)
    before = getattr(_lowering, "ours", False)
    _lowering.ours = ours
    try:
        return _numba["lower"](lowerer, parfor)
    finally:
        _lowering.ours = before


def _is_loop_wrapper(library) -> bool:
    name = library.name
    return name == _PARALLEL or name.startswith(_GUFUNC)


def _finalize(self):
    if not (getattr(_lowering, "ours", False) and _is_loop_wrapper(self)):
        return _numba["finalize"](self)
    # Numba's finalize up to the optimization: the same modules linked in,
    # in the same order; then done, with the machine code left to the
    # kernel that links this library.
    require_global_compiler_lock()
    self._raise_if_finalized()
    seen = set()
    for library in self._linking_libraries:
        if library not in seen:
            self._reload_init.update(library._reload_init)
            seen.add(library)
            self._final_module.link_in(library._get_module_for_linking(), preserve=True)
    self._final_module.verify()
    self._finalized = True
    self._fastsoftmax_linked_only = True


def _get_pointer_to_function(self, name):
    if getattr(self, "_fastsoftmax_linked_only", False):
        # Asked for its machine code after all: made now, as Numba would have.
        self._fastsoftmax_linked_only = False
        self._optimize_final_module()
        self._final_module.verify()
        self._finalize_final_module()
    return _numba["pointer"](self, name)


def _numba_as_expected() -> bool:
    if (_JIT_LIBRARY is None or "finalize" in vars(_JIT_LIBRARY)
            or not hasattr(parfor_lowering, "_lower_parfor_parallel_std")
            or not hasattr(_JIT_LIBRARY, "get_pointer_to_function")):
        return False
    # The attributes finalize() reads, as the libraries' __init__ methods set them.
    assigned: set[str] = set()
    for cls in _LIBRARY.__mro__:
        init = vars(cls).get("__init__")
        assigned.update(getattr(getattr(init, "__code__", None), "co_names", ()))
    return (all(name in assigned for name in _ATTRIBUTES)
            and all(hasattr(_LIBRARY, name) for name in _METHODS))


def install() -> bool:
    """Compile the wrapper libraries of this package's ``prange`` loops inside their kernel (once).

    Returns whether it is installed: False where Numba's code libraries
    are not as the module docstring describes, or where
    ``FASTSOFTMAX_NUMBA_AS_IS`` names ``wrappers``. Raises ValueError,
    before anything changes, where that variable names anything unknown.
    """
    as_is = left_to_numba()
    if _numba:
        return True
    if "wrappers" in as_is or not _numba_as_expected() or _JIT_LIBRARY is None:
        return False
    _numba.update(lower=parfor_lowering._lower_parfor_parallel_std,
                  finalize=_LIBRARY.finalize,
                  pointer=_JIT_LIBRARY.get_pointer_to_function)
    parfor_lowering._lower_parfor_parallel_std = _lower_parfor
    _LIBRARY.finalize = _finalize  # type: ignore[method-assign]
    _JIT_LIBRARY.get_pointer_to_function = _get_pointer_to_function
    return True


def installed() -> bool:
    """Return whether :func:`install` has put the linking-only wrappers in place."""
    return bool(_numba)
