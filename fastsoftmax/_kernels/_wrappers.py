"""The parallel loops' libraries: the chunk's code compiled once, in its own library.

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

* what a loop body compiled so hands on to the wrappers, and they to the
  kernel, is its own code only (without the chunk's), where every library
  the body links has its object code at hand to be cached (the chunk's
  own, which Numba keeps for its cache): the kernel's machine code calls
  the chunk where the JIT already has it, and the kernel's cache entry
  carries the objects of those libraries beside its own (its own kind,
  ``fastsoftmax-linked``). Loading it, each of those objects is loaded
  first unless the JIT already defines what the kernel takes from it;
  should anything the kernel takes still be missing, the entry is not
  used (:class:`Unlinkable`; the kernel is compiled again) rather than
  handed to the JIT's linker, which ends the process on a missing symbol.

So the chunk's code is optimized and compiled once, in its own library.
The code that runs is the same: in a process, the chunk and the body as
before, the wrappers as the kernel compiles them; from the cache, the
chunk's own object and the kernel's, bit for bit what they were
(``tests/test_numba_as_is.py``). Should anything ask a wrapper library for
its machine code, it is optimized and compiled then, as Numba would have.
The reading side (the new kind, and :class:`Unlinkable` taken as a cache
miss) is installed whenever Numba is as expected, also where
``FASTSOFTMAX_NUMBA_AS_IS`` leaves the writing side out: a cache written
with it stays readable.

It relies on internals of ``numba.core.codegen`` and
``numba.parfors.parfor_lowering`` (checked on install); should a later
Numba change them, nothing is installed and the kernels compile as
before, only more slowly. ``FASTSOFTMAX_NUMBA_AS_IS=wrappers`` (or
``all``) leaves Numba as it is.
"""

from __future__ import annotations

import threading

from llvmlite import binding as ll
from numba.core import caching, codegen
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
# A kernel's cache entry: its own serialized state and those of the
# libraries its code calls into (see the module docstring).
_KIND = "fastsoftmax-linked"
# The libraries loaded from kernels' cache entries (see _unserialize).
_carried: list = []
_METHODS = ("finalize", "_optimize_final_module", "_finalize_final_module",
            "_get_module_for_linking", "_raise_if_finalized", "serialize_using_object_code")

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
        _numba["finalize"](self)
        # A kernel: what its wrappers' code calls into (_serialize).
        _take_on_calls(self, dict.fromkeys(self._linking_libraries))
        return None
    if self.name.startswith(_BODY) and _finalize_body(self):
        return None
    if not _is_loop_wrapper(self):
        return _numba["finalize"](self)
    # Numba's finalize up to the optimization: the same modules linked in,
    # in the same order; then done, with the machine code left to the
    # kernel that links this library.
    require_global_compiler_lock()
    self._raise_if_finalized()
    links = _links(self)
    for library in links:
        self._final_module.link_in(library._get_module_for_linking(), preserve=True)
    self._final_module.verify()
    self._finalized = True
    self._fastsoftmax_linked_only = True
    _take_on_calls(self, links)


def _take_on_calls(self, links) -> None:
    """Record on ``self`` the libraries whose code its own calls, as the libraries it links do."""
    calls = [called for library in links
             for called in getattr(library, "_fastsoftmax_calls", ())]
    if calls:
        self._fastsoftmax_calls = list(dict.fromkeys(calls))


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
    # For linking (by the wrappers and the kernel only): the body with the
    # libraries it links whose code cannot be cached beside the kernel
    # (such as Numba's runtime, small); the others' (the chunk's), they
    # call where the JIT has it, and the kernel's cache entry carries.
    calls = [library for library in links if _cacheable(library)]
    shared = self._final_module.clone()
    for library in links:
        if library not in calls:
            shared.link_in(library._get_module_for_linking(), preserve=True)
    self._shared_module = _for_linking(shared)
    if calls:
        self._fastsoftmax_calls = calls
    return True


def _for_linking(module):
    """Return ``module`` with its external functions made linkonce_odr, as Numba links them."""
    for function in module.functions:
        if not function.is_declaration and function.linkage == ll.Linkage.external:
            function.linkage = ll.Linkage.linkonce_odr
    return module


def _cacheable(library) -> bool:
    """Whether ``library``'s object code can be cached beside a kernel calling into it."""
    return (getattr(library, "_object_caching_enabled", False)
            and getattr(library, "_compiled_object", None) is not None
            and not getattr(library, "_fastsoftmax_calls", None))


class Unlinkable(RuntimeError):
    """A kernel's cache entry calling code the JIT lacks, even with the objects it carries."""


def _serialize(self):
    state = _numba["serialize"](self)
    calls = getattr(self, "_fastsoftmax_calls", None)
    if not calls:
        return state
    module = self._get_module_for_linking()
    declared = {g.name for g in (*module.functions, *module.global_variables)
                if g.is_declaration}
    carried = []
    for library in calls:
        linked = library._get_module_for_linking()
        names = sorted(declared.intersection(
            g.name for g in (*linked.functions, *linked.global_variables)
            if not g.is_declaration))
        if names:
            carried.append((_numba["serialize"](library), names))
    return (state[0], _KIND, (state, carried))


def _unserialize(cls, codegen_, state):
    name, kind, data = state
    if kind != _KIND:
        return _reader["unserialize"](cls, codegen_, state)
    own, carried = data
    defined = codegen_._engine.is_symbol_defined
    loaded = []
    for called, names in carried:
        present = [defined(symbol) for symbol in names]
        if not all(present):
            if any(present):  # another copy of some of it: not loaded beside it
                raise Unlinkable(f"{name}: part of what it calls in {called[0]} is in the JIT")
            library = codegen_.unserialize_library(called)
            # The JIT drops a library's code when the library is collected,
            # but Numba's record of the symbols defined keeps its names, so
            # a later kernel would be linked against code no longer there:
            # what is loaded here stays for the process's life.
            _carried.append(library)
            loaded.append(library)
    missing = [symbol for _, names in carried for symbol in names if not defined(symbol)]
    if missing:
        raise Unlinkable(f"{name}: {missing[0]} is not defined")
    library = _reader["unserialize"](cls, codegen_, own)
    library._fastsoftmax_loaded = loaded
    return library


def _load_overload(self, sig, target_context):
    try:
        return _reader["load"](self, sig, target_context)
    except Unlinkable:
        return None  # compiled again, as on any other cache miss


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


# What install_reader() replaces: the reading side of the kernels' cache entries.
_reader: dict = {}


def install_reader() -> bool:
    """Read the kernels' own kind of cache entry (once); return whether it is installed.

    Installed wherever Numba is as this module expects, whatever
    ``FASTSOFTMAX_NUMBA_AS_IS`` says: an entry written with the writing
    side in place must stay readable without it.
    """
    if _reader:
        return True
    unserialize = vars(_LIBRARY).get("_unserialize")
    if (not isinstance(unserialize, classmethod) or not _numba_as_expected()
            or not hasattr(caching.Cache, "load_overload")):
        return False
    _reader.update(unserialize=unserialize.__func__, load=caching.Cache.load_overload)
    _LIBRARY._unserialize = classmethod(_unserialize)  # type: ignore[method-assign,assignment]
    caching.Cache.load_overload = _load_overload  # type: ignore[method-assign]
    return True


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
    reading = install_reader()
    if "wrappers" in as_is or not reading or _JIT_LIBRARY is None:
        return False
    _numba.update(lower=parfor_lowering._lower_parfor_parallel_std,
                  finalize=_LIBRARY.finalize,
                  pointer=_JIT_LIBRARY.get_pointer_to_function,
                  serialize=_LIBRARY.serialize_using_object_code)
    parfor_lowering._lower_parfor_parallel_std = _lower_parfor
    _LIBRARY.finalize = _finalize  # type: ignore[method-assign]
    _JIT_LIBRARY.get_pointer_to_function = _get_pointer_to_function
    _LIBRARY.serialize_using_object_code = _serialize  # type: ignore[method-assign]
    return True


def installed() -> bool:
    """Return whether :func:`install` has put the linking-only wrappers in place."""
    return bool(_numba)
