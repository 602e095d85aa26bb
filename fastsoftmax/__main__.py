"""``python -m fastsoftmax``: the same as the ``fastsoftmax`` command."""

from .cli import main

raise SystemExit(main())
