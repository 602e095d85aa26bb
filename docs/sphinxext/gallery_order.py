"""The order of the examples in the gallery: from first steps to measurements.

Examples not listed come after these, by file name, so a new example needs
no change here to appear.
"""

from __future__ import annotations

import os

ORDER = [
    "plot_toy_decision_regions.py",
    "plot_digits_weights.py",
    "plot_solver_loss_curves.py",
    "plot_partial_fit_stream.py",
    "plot_early_stopping.py",
    "plot_regularization.py",
    "plot_speed_comparison.py",
    "plot_sparse_text.py",
]


class ExampleOrder:
    """Sort key of sphinx-gallery's ``within_subsection_order``."""

    def __init__(self, src_dir: str) -> None:
        self.src_dir = src_dir

    def __call__(self, filename: str) -> tuple[int, str]:
        name = os.path.basename(filename)
        return (ORDER.index(name) if name in ORDER else len(ORDER), name)

    def __repr__(self) -> str:
        return f"<{self.__class__.__name__}>"
