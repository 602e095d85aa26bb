"""Sphinx configuration of the fastsoftmax documentation.

Built by ``make docs`` with ``-W --keep-going -n``: every warning is an
error and every cross-reference must resolve. Nothing is fetched from the
network at build time: intersphinx is off (no inventories are vendored),
so references to other projects' objects are listed in ``nitpick_ignore_regex``
below instead of being linked.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
# The checkout's package, not an installed copy, is the one documented.
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(DOCS / "sphinxext"))  # gallery_order

import fastsoftmax  # noqa: E402

project = "fastsoftmax"
author = "the fastsoftmax developers"
copyright = "2026, the fastsoftmax developers"  # noqa: A001
version = release = fastsoftmax.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
    "myst_parser",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "auto_examples/*.ipynb", "auto_examples/*.py",
                    "auto_examples/*.zip", "auto_examples/*.md5", "auto_examples/*.codeobj.json",
                    "_generated"]
templates_path = ["_templates"]
# Single backquotes are code, as in scikit-learn's docstrings that the estimator inherits.
default_role = "literal"
nitpicky = True

# -- other projects' names (no intersphinx: nothing is downloaded at build time)
nitpick_ignore_regex = [
    (r"py:.*", r"(numpy|np|scipy|sklearn|matplotlib|dask|distributed|numba|pandas)(\..*)?"),
    (r"py:.*", r"(ndarray|array_like|array-like|optional|default|callable|ConvergenceWarning)"),
]

# -- autodoc / autosummary / numpydoc
autosummary_generate = True
autosummary_ignore_module_all = False       # a module's public names are its __all__
autosummary_imported_members = True         # fastsoftmax re-exports from private modules
autodoc_default_options = {"member-order": "bysource"}
autodoc_typehints = "none"                  # the numpydoc sections carry the types
# The class template (_templates/autosummary/class.rst) lists the methods.
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

# scikit-learn's metadata-routing plumbing (set_fit_request, ...) is inherited
# by every estimator and documented by scikit-learn; its docstrings point into
# scikit-learn's own user guide.
_SKLEARN_PLUMBING = {"get_metadata_routing", "set_fit_request", "set_partial_fit_request",
                     "set_score_request", "set_predict_request", "set_predict_proba_request"}


def _skip_member(app, what, name, obj, skip, options):
    if name in _SKLEARN_PLUMBING:
        return True
    return None


# Methods inherited from scikit-learn (score, get_params, set_params) keep
# their docstrings, whose :ref: roles point into scikit-learn's user guide:
# without intersphinx they become plain text.
_SKLEARN_REF = re.compile(r":ref:`([^`<]*?)\s*(?:<[^`>]*>)?`")


def _unlink_sklearn_refs(app, what, name, obj, options, lines):
    if (getattr(obj, "__module__", None) or "").startswith("sklearn."):
        lines[:] = [_SKLEARN_REF.sub(lambda match: match.group(1), line) for line in lines]


# -- sphinx-gallery: examples/ run at build time and draw their figures
sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",          # every example in examples/ is executed
    "ignore_pattern": r"^_",
    "within_subsection_order": "gallery_order.ExampleOrder",
    "abort_on_example_error": True,
    "download_all_examples": False,
    "remove_config_comments": True,
    "doc_module": ("fastsoftmax",),
    "backreferences_dir": "api/generated/backreferences",
    "image_scrapers": ("matplotlib",),
    "matplotlib_animations": False,
    "min_reported_time": 1,
    "show_memory": False,
    "write_computation_times": True,
    "capture_repr": (),                     # print() output only, not the last value
}

# -- MyST (CHANGELOG.md and BENCHMARKS.md are included from the repository root)
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

# -- HTML
html_theme = "pydata_sphinx_theme"
html_title = f"fastsoftmax {release}"
html_theme_options = {
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "header_links_before_dropdown": 7,
    "secondary_sidebar_items": ["page-toc", "sourcelink"],
}
html_show_sourcelink = False
html_context = {"default_mode": "auto"}


# -- the command line's --help, captured at build time for docs/user_guide/cli.rst
def _write_cli_help(app):
    from fastsoftmax import cli

    out_dir = DOCS / "_generated"
    out_dir.mkdir(exist_ok=True)
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "88"
    try:
        for command in ("", "train", "predict", "demo", "bench", "info"):
            argv = [command, "--help"] if command else ["--help"]
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf), contextlib.suppress(SystemExit):
                cli.main(argv)
            text = f"$ fastsoftmax {' '.join(argv)}\n{buf.getvalue()}"
            path = out_dir / f"cli_{command or 'main'}.txt"
            if not path.exists() or path.read_text() != text:
                path.write_text(text)
    finally:
        if saved is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved


def setup(app):
    app.connect("builder-inited", _write_cli_help)
    app.connect("autodoc-skip-member", _skip_member)
    app.connect("autodoc-process-docstring", _unlink_sklearn_refs)
