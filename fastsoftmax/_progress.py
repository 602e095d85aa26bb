"""A progress bar over solver iterations, showing the current loss.

:class:`SoftmaxRegression` turns it on when ``verbose`` is set; the command
line sets ``verbose`` when it runs on a terminal. tqdm is imported only when a
bar is actually made, so ``import fastsoftmax`` stays light.
"""

from __future__ import annotations

import sys
from typing import IO, Any

__all__ = ["IterationProgress"]


class IterationProgress:
    """``callback(iteration, loss)`` for the solvers, drawing a tqdm bar.

    Parameters
    ----------
    total : int or None
        Expected number of iterations (``max_iter``); the bar simply stops
        short when the solver converges earlier.
    desc : str
        Label at the left of the bar (the solver's name).
    unit : str, default="it"
        "it" for iterations, "epoch" for SGD epochs.
    echo : bool, default=False
        Also print one line per iteration (``verbose >= 2``) on stdout,
        through tqdm so that the lines do not tear the bar.
    file : file object, optional
        Where the bar goes; sys.stderr (looked up when the bar is made, so
        that redirections and pytest's capture are honoured).

    Notes
    -----
    The bar is drawn whether or not ``file`` is a terminal: the caller has
    already decided that the user asked for it. Call :meth:`close` when the
    solver returns (the estimator does so in a ``finally``).
    """

    def __init__(self, total: int | None, desc: str, *, unit: str = "it",
                 echo: bool = False, file: IO[str] | None = None) -> None:
        from tqdm import tqdm

        self._bar: Any = tqdm(total=total, desc=desc, unit=unit, leave=True,
                              file=sys.stderr if file is None else file,
                              disable=False, dynamic_ncols=True)
        self._desc = desc
        self._echo = echo
        self._done = 0

    def __call__(self, iteration: int, loss: float) -> None:
        """Advance the bar to ``iteration`` and show ``loss``."""
        self._bar.set_postfix_str(f"loss={loss:.6g}", refresh=False)
        step = max(0, int(iteration) - self._done)
        self._done = max(self._done, int(iteration))
        self._bar.update(step)
        if self._echo:
            self._bar.write(f"{self._desc} iteration {iteration}: loss {loss:.6g}",
                            file=sys.stdout)

    def close(self) -> None:
        """Finish the bar (idempotent)."""
        self._bar.close()
