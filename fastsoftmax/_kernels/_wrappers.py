"""The parallel loops' libraries: the chunk's code compiled once more, inside the kernel only.

Numba compiles a ``prange`` loop as four code libraries, each linking the
one before and with it everything that one links: the loop's body (which
calls this package's chunk function, itself a library), a wrapper giving
the body the gufunc calling convention (``_GufuncWrapper``), a wrapper that
hands the work to the threads (``parallelgufuncwrapper``), and the kernel.
Each library is finalized on its own: its module, with every library it
links, optimized by LLVM's full pipeline and compiled to machine code. A
kernel's chunk function is most of the code, so it went through LLVM's
optimization and code generation five times: its own library, the three
of the loop and the kernel's. In a process, the code that runs is the
first of each: the chunk's own, the body's own (the later copies are weak
definitions, which the JIT's linker resolves to the first); a process that
loads the kernel from the cache runs the kernel's copies of all of them.

:func:`install` changes this for the ``prange`` loops of this package's
functions:

* the two wrapper libraries are never called on their own, and nothing
  asks for their machine code: they are finalized by linking only (their
  modules take in what they link, unoptimized and uncompiled), and the
  kernel optimizes and compiles them with the rest;
* the loop's body is optimized and compiled to machine code on its own
  (Numba sets its environment in that code) but without the libraries it
  links, whose code the JIT's linker finds where it already is (every
  symbol the body takes from them must be defined in the JIT already, or
  the body is finalized as Numba does); what the body hands on for
  linking is its module with those libraries linked in, as before.

So the chunk's code is optimized and compiled twice, in its own library
and in the kernel's. The code that runs is the same: in a process, the
chunk and the body as before, the wrappers as the kernel compiles them;
from the cache, the kernel's copies, bit for bit what they were
(``tests/test_numba_as_is.py``). Should anything ask a wrapper library for
its machine code, it is optimized and compiled then, as Numba would have.

It relies on internals of ``numba.core.codegen`` and
``numba.parfors.parfor_lowering`` (checked on install); should a later
Numba change them, nothing is installed and the kernels compile as
before, only more slowly. ``FASTSOFTMAX_NUMBA_AS_IS=wrappers`` (or
``all``) leaves Numba as it is.
"""

from __future__ import annotations

import threading

from llvmlite import binding as ll
from numba.core import codegen
from numba.core.compiler_lock import require_global_compiler_lock
from numba.parfors import parfor_lowering

from .._settings import left_to_numba

_PACKAGE = __name__.split(".")[0] + "."
# The names Numba gives the two wrapper libraries of a prange loop
# (numba.np.ufunc.parallel.build_gufunc_kernel; the str() of a
# numba.np.ufunc.wrappers._GufuncWrapper).
_PARALLEL = "parallelgufuncwrapper"
_GUFUNC = "<numba.np.ufunc.wrappers._GufuncWrapper object"
# The loop body's (numba.parfors.parfor_lowering._create_gufunc_for_parfor_body).
_BODY = "__numba_parfor_gufunc_"
# What install() replaces, on these classes.
_LIBRARY = codegen.CPUCodeLibrary
_JIT_LIBRARY = getattr(codegen, "JITCodeLibrary", None)
_ATTRIBUTES = ("_linking_libraries", "_reload_init", "_final_module", "_shared_module",
               "_codegen")
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
    if not getattr(_lowering, "ours", False):
        return _numba["finalize"](self)
    if self.name.startswith(_BODY) and _finalize_body(self):
        return None
    if not _is_loop_wrapper(self):
        return _numba["finalize"](self)
    # Numba's finalize up to the optimization: the same modules linked in,
    # in the same order; then done, with the machine code left to the
    # kernel that links this library.
    require_global_compiler_lock()
    self._raise_if_finalized()
    for library in _links(self):
        self._final_module.link_in(library._get_module_for_linking(), preserve=True)
    self._final_module.verify()
    self._finalized = True
    self._fastsoftmax_linked_only = True


def _links(self) -> list:
    """Return the libraries ``self`` links, each once, in order, taking on their reload hooks.

    As Numba's own finalize does before linking them.
    """
    links = list(dict.fromkeys(self._linking_libraries))
    for library in links:
        self._reload_init.update(library._reload_init)
    return links


def _finalize_body(self) -> bool:
    """Finalize a loop body without the libraries it links; False (nothing done) where it cannot."""
    require_global_compiler_lock()
    self._raise_if_finalized()
    links = list(dict.fromkeys(self._linking_libraries))
    engine = self._codegen._engine
    linked: set[str] = set()
    for library in links:
        module = library._get_module_for_linking()
        linked.update(f.name for f in module.functions if not f.is_declaration)
        linked.update(g.name for g in module.global_variables if not g.is_declaration)
    own = self._final_module
    for symbol in (*own.functions, *own.global_variables):
        # What the body takes from the libraries it links must be in the JIT
        # already (and not be one of Numba's, which Numba insists on linking).
        if (symbol.is_declaration and symbol.name in linked
                and (symbol.name.startswith("_ZN5numba")
                     or not engine.is_symbol_defined(symbol.name))):
            return False
    _links(self)  # the reload hooks, now that the body is finalized here
    self._optimize_final_module()  # (which may put a new module in _final_module)
    self._final_module.verify()
    self._finalize_final_module()
    # For linking: the body with what it links, as Numba's own would be.
    shared = self._final_module.clone()
    for library in links:
        shared.link_in(library._get_module_for_linking(), preserve=True)
    for function in shared.functions:
        if not function.is_declaration and function.linkage == ll.Linkage.external:
            function.linkage = ll.Linkage.linkonce_odr
    self._shared_module = shared
    return True


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
