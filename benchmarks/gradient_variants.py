"""Two kernel variants of one engine, alternating in one process (the rules behind them).

    python benchmarks/gradient_variants.py transposed [--dtype float32] [--ns 2,4,8,...,64]
                                           [--ks 2,3,5,10,16,20,31] [--work 1e8] [--rounds 11]
    python benchmarks/gradient_variants.py products [--dtype float32] [--ns 4,8,16,24,32,48]
                                           [--ks 2,3,5,10] [--work 1e8] [--rounds 11]
    python benchmarks/gradient_variants.py fits [--dtype float64] [--shapes 400000x8x5,...]
                                           [--rounds 11]
    python benchmarks/gradient_variants.py width [--shapes 60000x784x10,...] [--rounds 11]
    python benchmarks/gradient_variants.py strategies [--dtype float64] [--ns 384,784]
                                           [--ks 48,100,200] [--work 1.2e8] [--shapes ...]
    python benchmarks/gradient_variants.py tiles [--dtype float32] [--ns 48,96,200]
                                           [--ks 20,30,48,100] [--work 2e8] [--shapes ...]
                                           [--products]
    python benchmarks/gradient_variants.py tile_blocks [--dtype float32] [--products]
                                           [--shapes 20000x100x100,3000x784x100,...]
    python benchmarks/gradient_variants.py split [--dtype float32]
                                           [--shapes 1000x3000x100,300x3000x100,...]
    python benchmarks/gradient_variants.py strips [--dtype float64]
                                           [--shapes 1000x3000x1000,300x3000x3000,...]
    python benchmarks/gradient_variants.py pairs [--dtype float32]
                                           [--shapes 20000x100x100,100000x20x100,...]
    python benchmarks/gradient_variants.py big_g [--dtype float64] [--products]
                                           [--shapes 1000x3000x1000,300x3000x3000,...]
    python benchmarks/gradient_variants.py block_rows [--dtype float32] [--rows 192,384]
                                           [--shapes 4000x784x1000,8000x784x500,...]
    python benchmarks/gradient_variants.py set_first [--dtype float64]
                                           [--shapes 1000x3000x1000,1000x784x1000,...]
    python benchmarks/gradient_variants.py weights_pass [--dtype float32]
                                           [--shapes 1000x3000x1000,1000x784x1000,...]
    python benchmarks/gradient_variants.py lbfgs_order [--dtype float64]
                                           [--shapes 1000x3000x1000,1000x784x1000,...]

``transposed``: the GEMM strategy's gradient with transposed logits
(``gemm_t``) against the row-wise GEMM kernel (``gemm``: its block
products by the outer-product tiles or by BLAS, as
``fastsoftmax._dense.outer_tiles`` says; from 32 classes the one with each
row's maximum in lanes, unless the shape's feature split takes over), for
every n and k given, m such that m n k is about
``--work``: the rule ``fastsoftmax._dense.transposed_logits``. ``products``:
the GEMM strategy's Hessian product with each block stored transposed
against the row-wise one, from the probabilities the gradient stored, on
the same grid: the rule ``fastsoftmax._dense.transposed_products``;
``fits``: default fits (Newton) at ``--shapes`` with those products on and
off (both in the strategy the fit chooses, which for the rule to matter
must be GEMM; the data of ``strategy_fits.py``). ``width``: float64 rows
kernels (gradient, then a Hessian product) compiled with the 512-bit
vector marker against the default width, the rule
``fastsoftmax._dense.rows_width`` (skipped, and said so, on a host without
AVX-512: there the request is a no-op, both kernels the same code).
``strategies``: the rows kernels against the GEMM strategy's (gradient
with P stored, then a Hessian product from it), for every n and k given
with m n k about ``--work`` (at least 500 rows), or at the ``--shapes``
given instead: the calibration grid's columns above 48 classes
(``fastsoftmax._calibration.GRID_K``). ``tiles``: the GEMM
strategy's gradient with its products by the outer-product tiles
(``gemm_tiles``) against the same with BLAS's (``gemm``) and against the
rows strategy, on the grid of ``transposed`` or at ``--shapes``: the rule
``fastsoftmax._dense.outer_tiles``; with ``--products`` the Hessian
products from the stored P, tiles against BLAS. ``tile_blocks``: the
tiles' gradient (``--products``: the Hessian products) in blocks by the
48-96-row rule against the rule in bytes of X of AVX-512 hosts, the
rules of ``fastsoftmax._dense.tiles_block_rows``. ``split``: the GEMM
gradient with its backward product split by features, by BLAS's products
and by the tiles' (where the tiles run), against the row split, the rules
``fastsoftmax._dense.split_features`` and ``tiles_split``; ``--chunks N``
runs every pass in N row chunks (N partial sums for the row split, N
parts of features for the splits), as N threads would, on the threads
there are. ``strips``: the tiles'
gradient with its forward products by strips of classes outer (each strip
of W over the block's row tiles: ``_outer.forward_block``) against the
same kernel with the block's row tiles outer (each tile over every strip,
the order before), defined here from ``_outer``'s tiles. Both variants run on the
same data, each on its own engine (the GEMM strategy, or the rows
strategy, forced), the order alternating
from round to round; each round takes the best of 5 calls; the table has
the medians over ``--rounds`` rounds after a warm-up round. Prints one
Markdown table; asserts nothing.

Several modes, comma-separated (``strips,pairs``), run one after the other
in one process, a table each (separated by a blank line), each with its
own defaults for the options left out and the options given for all.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
from _common import (  # benchmarks/ is on the path of a script run from it
    at_least_one,
    best_of,
    comma_list,
)

from fastsoftmax import _dense
from fastsoftmax._data import make_dataset
from fastsoftmax._kernels._width import DEFAULT_WIDTH, FLOAT64_512
from fastsoftmax._objective import Objective
from fastsoftmax._threads import thread_policy

CALLS = 5


def alternate(runs: dict, rounds: int) -> dict[str, float]:
    """Median ms of each callable's best of CALLS calls, the order alternating; a warm-up round."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    with thread_policy(None):
        for r in range(rounds + 1):
            for name in names if r % 2 else names[::-1]:
                t = best_of(runs[name], CALLS)
                if r:
                    times[name].append(t)
    return {name: 1e3 * float(np.median(v)) for name, v in times.items()}


def problem(m, n, k, dt, rng):
    X = rng.standard_normal((m, n)).astype(dt)
    data = make_dataset(X, rng.integers(0, k, m), None, None, k)
    return data, (0.01 * rng.standard_normal((k, n))).astype(dt), np.zeros(k, dt)


def grid(args, rng):
    """Yield (m, n, k, data, coef, b) for every n and k given, m n k about ``--work``."""
    dt = np.dtype(args.dtype)
    for n in map(int, args.ns.split(",")):
        for k in map(int, args.ks.split(",")):
            m = max(100, int(round(args.work / (n * k), -2)))
            yield (m, n, k, *problem(m, n, k, dt, rng))


def transposed(args, rng) -> None:
    dt = np.dtype(args.dtype)
    rule = _dense.transposed_logits

    def forced(engine, transpose, coef, b):
        def call():
            _dense.transposed_logits = lambda n, k, itemsize: transpose
            try:
                engine.gradient(coef, b)
            finally:
                _dense.transposed_logits = rule
        return call

    print(f"{dt.name}, GEMM strategy, m n k about {args.work:.0e}, medians of {args.rounds} "
          f"rounds of the best of {CALLS} calls")
    print("| (m, n, k) | gemm_t ms | gemm ms | gemm_t / gemm | the rule takes |")
    print("|---|---:|---:|---:|---|")
    for m, n, k, data, coef, b in grid(args, rng):
        runs = {"gemm_t": forced(Objective(data, "gemm", warm=True).engine, True, coef, b),
                "gemm": forced(Objective(data, "gemm", warm=True).engine, False, coef, b)}
        t = alternate(runs, args.rounds)
        takes = "gemm_t" if rule(n, k, dt.itemsize) else "gemm"
        print(f"| ({m}, {n}, {k}) | {t['gemm_t']:.2f} | {t['gemm']:.2f} | "
              f"{t['gemm_t'] / t['gemm']:.2f} | {takes} |", flush=True)


def products(args, rng) -> None:
    dt = np.dtype(args.dtype)
    rule = _dense.transposed_products

    def forced(engine, transpose, call_args):
        def call():
            _dense.transposed_products = lambda n, k, itemsize: transpose
            try:
                engine.hessp(*call_args)
            finally:
                _dense.transposed_products = rule
        return call

    print(f"{dt.name}, GEMM strategy, Hessian products from the stored P, m n k about "
          f"{args.work:.0e}, medians of {args.rounds} rounds of the best of {CALLS} calls")
    print("| (m, n, k) | transposed ms | row-wise ms | transposed / row-wise | the rule takes |")
    print("|---|---:|---:|---:|---|")
    for m, n, k, data, coef, b in grid(args, rng):
        V = (0.01 * rng.standard_normal((k, n))).astype(dt)
        cv = (0.01 * rng.standard_normal(k)).astype(dt)
        runs = {}
        for name, transpose in (("t", True), ("rows", False)):
            engine = Objective(data, "gemm", mode="cached", warm=True).engine
            P = engine.proba_buffer()
            engine.gradient(coef, b, P)
            runs[name] = forced(engine, transpose, (coef, b, P, V, cv))
        t = alternate(runs, args.rounds)
        takes = "transposed" if rule(n, k, dt.itemsize) else "row-wise"
        print(f"| ({m}, {n}, {k}) | {t['t']:.2f} | {t['rows']:.2f} | "
              f"{t['t'] / t['rows']:.2f} | {takes} |", flush=True)


def product_fits(args, rng) -> None:
    """Default fits (Newton: mostly Hessian products) with the transposed products on and off."""
    import strategy_fits  # benchmarks/ is on the path of a script run from it

    from fastsoftmax import SoftmaxRegression, show_config

    dt = np.dtype(args.dtype)
    rule = _dense.transposed_products
    print(f"{dt.name}, default fits (the strategy as chosen), the GEMM strategy's Hessian "
          f"products transposed or row-wise, medians of {args.rounds} rounds of the best of 2 "
          "fits")
    print("| (m, n, k) | strategy | Newton iterations | transposed s | row-wise s | "
          "transposed / row-wise |")
    print("|---|---|---:|---:|---:|---:|")
    for shape in args.shapes.split(","):
        m, n, k = map(int, shape.split("x"))
        X, y = strategy_fits.problem(m, n, k, dt.name)
        model = SoftmaxRegression()

        def fit(transpose, model=model, X=X, y=y):
            def call():
                _dense.transposed_products = lambda n, k, itemsize: transpose
                try:
                    model.fit(X, y)
                finally:
                    _dense.transposed_products = rule
            return call

        times: dict[bool, list[float]] = {True: [], False: []}
        with thread_policy(None):
            for r in range(args.rounds + 1):
                for transpose in (True, False) if r % 2 else (False, True):
                    t = best_of(fit(transpose), 2)
                    if r:
                        times[transpose].append(t)
        on, off = (float(np.median(times[t])) for t in (True, False))
        plan = show_config((m, n, k), dt.name, mode="dicts")["shape"][dt.name]
        print(f"| ({m}, {n}, {k}) | {plan['strategy']} | "
              f"{int(np.max(model.n_iter_))} | {on:.3f} | {off:.3f} | {on / off:.2f} |",
              flush=True)


def width(args, rng) -> None:
    if not _dense.WIDE_REGISTERS:
        # Without 512-bit registers LLVM has no wider vectors to use: the two
        # kernels would be the same code, compiled twice for nothing.
        print("width: skipped: this host has no AVX-512, where the 512-bit request is a no-op")
        return
    print(f"float64, rows strategy, P stored, medians of {args.rounds} rounds of the best of "
          f"{CALLS} calls")
    print("| (m, n, k) | gradient 512-bit ms | default ms | default / 512 | "
          "hessp 512-bit ms | default ms | default / 512 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for shape in args.shapes.split(","):
        m, n, k = map(int, shape.split("x"))
        data, coef, b = problem(m, n, k, np.dtype(np.float64), rng)
        V = rng.standard_normal((k, n))
        runs = {}
        for name, marker in (("wide", FLOAT64_512), ("default", DEFAULT_WIDTH)):
            engine = Objective(data, "rows", warm=True).engine
            engine._width = marker
            gargs = (coef, b, engine.proba_buffer())
            hargs = (*gargs, V, np.zeros(k))
            runs[f"grad {name}"] = lambda e=engine, a=gargs: e.gradient(*a)
            runs[f"hessp {name}"] = lambda e=engine, a=hargs: e.hessp(*a)
        t = alternate(runs, args.rounds)
        print(f"| ({m}, {n}, {k}) | {t['grad wide']:.2f} | {t['grad default']:.2f} | "
              f"{t['grad default'] / t['grad wide']:.2f} | {t['hessp wide']:.2f} | "
              f"{t['hessp default']:.2f} | {t['hessp default'] / t['hessp wide']:.2f} |",
              flush=True)


def strategies(args, rng) -> None:
    dt = np.dtype(args.dtype)
    if args.shapes:
        shapes = [tuple(map(int, s.split("x"))) for s in args.shapes.split(",")]
    else:
        shapes = [(max(500, int(round(args.work / (n * k), -2))), n, k)
                  for n in map(int, args.ns.split(",")) for k in map(int, args.ks.split(","))]
    print(f"{dt.name}, P stored, medians of {args.rounds} rounds of the best of {CALLS} calls")
    print("| (m, n, k) | gradient rows ms | gemm ms | rows / gemm | "
          "hessp rows ms | gemm ms | rows / gemm |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for m, n, k in shapes:
        data, coef, b = problem(m, n, k, dt, rng)
        V = (0.01 * rng.standard_normal((k, n))).astype(dt)
        cv = np.zeros(k, dt)
        runs = {}
        for name in ("rows", "gemm"):
            engine = Objective(data, name, warm=True).engine
            P = engine.proba_buffer()
            engine.gradient(coef, b, P)  # P for the products
            args_g = (coef, b, P)
            runs[f"grad {name}"] = lambda e=engine, a=args_g: e.gradient(*a)
            runs[f"hessp {name}"] = lambda e=engine, a=(*args_g, V, cv): e.hessp(*a)
        t = alternate(runs, args.rounds)
        print(f"| ({m}, {n}, {k}) | {t['grad rows']:.2f} | {t['grad gemm']:.2f} | "
              f"{t['grad rows'] / t['grad gemm']:.2f} | {t['hessp rows']:.2f} | "
              f"{t['hessp gemm']:.2f} | {t['hessp rows'] / t['hessp gemm']:.2f} |", flush=True)


def tiles(args, rng) -> None:
    dt = np.dtype(args.dtype)
    rule = _dense.outer_tiles

    def forced(engine, on, coef, b):
        def call():
            _dense.outer_tiles = lambda n, k, itemsize: on
            try:
                engine.gradient(coef, b)
            finally:
                _dense.outer_tiles = rule
        return call

    if args.products:
        tile_products(args, rng)
        return
    print(f"{dt.name}, medians of {args.rounds} rounds of the best of {CALLS} calls")
    print("| (m, n, k) | gemm_tiles ms | gemm ms | rows ms | tiles / gemm | tiles / rows | "
          "the rule takes |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for m, n, k, data, coef, b in _cases(args, rng):
        runs = {"tiles": forced(Objective(data, "gemm", warm=True).engine, True, coef, b),
                "gemm": forced(Objective(data, "gemm", warm=True).engine, False, coef, b),
                "rows": forced(Objective(data, "rows", warm=True).engine, False, coef, b)}
        t = alternate(runs, args.rounds)
        takes = "gemm_tiles" if rule(n, k, dt.itemsize) else "gemm"
        print(f"| ({m}, {n}, {k}) | {t['tiles']:.2f} | {t['gemm']:.2f} | {t['rows']:.2f} | "
              f"{t['tiles'] / t['gemm']:.2f} | {t['tiles'] / t['rows']:.2f} | {takes} |",
              flush=True)


def _cases(args, rng):
    """Yield (m, n, k, data, coef, b) at ``--shapes``, else on the grid of ``--ns``, ``--ks``."""
    if not args.shapes:
        yield from grid(args, rng)
        return
    dt = np.dtype(args.dtype)
    for m, n, k in (tuple(map(int, s.split("x"))) for s in args.shapes.split(",")):
        yield (m, n, k, *problem(m, n, k, dt, rng))


def _products_call(engine, coef, b, rng):
    """Return the arguments of engine.hessp from a stored P: (coef, b, P, V, cv)."""
    k, n = coef.shape
    P = engine.proba_buffer()
    engine.gradient(coef, b, P)
    V = (0.01 * rng.standard_normal((k, n))).astype(coef.dtype)
    return coef, b, P, V, (0.01 * rng.standard_normal(k)).astype(coef.dtype)


def _patched(engine, name, value, products, call_args):
    """Return a call of engine.gradient (products: engine.hessp) with _dense.<name> = value."""
    saved = getattr(_dense, name)

    def call():
        setattr(_dense, name, value)
        try:
            (engine.hessp if products else engine.gradient)(*call_args)
        finally:
            setattr(_dense, name, saved)
    return call


def tile_products(args, rng) -> None:
    dt = np.dtype(args.dtype)
    print(f"{dt.name}, GEMM strategy, Hessian products from the stored P, medians of "
          f"{args.rounds} rounds of the best of {CALLS} calls")
    print("| (m, n, k) | tiles ms | BLAS ms | tiles / BLAS | the rule takes |")
    print("|---|---:|---:|---:|---|")
    for m, n, k, data, coef, b in _cases(args, rng):
        runs = {}
        for name, on in (("tiles", True), ("blas", False)):
            engine = Objective(data, "gemm", mode="cached", warm=True).engine
            call_args = _products_call(engine, coef, b, rng)
            runs[name] = _patched(engine, "outer_tiles", lambda n, k, i, on=on: on, True,
                                  call_args)
            runs[name]()  # the scratch made under its variant
        t = alternate(runs, args.rounds)
        takes = "tiles" if _dense.outer_tiles(n, k, dt.itemsize) else "BLAS"
        print(f"| ({m}, {n}, {k}) | {t['tiles']:.2f} | {t['blas']:.2f} | "
              f"{t['tiles'] / t['blas']:.2f} | {takes} |", flush=True)


def _block_rules(args, rng, case, rules) -> tuple[dict, dict]:
    """Time the tiles' gradient (``--products``: Hessian products) under each block rule.

    ``case``: (m, n, k, data, coef, b); ``rules``: (name, rule) pairs, each
    rule standing in for ``_dense.tiles_block_rows`` on an engine of its
    own. Returns (medians by name, the rows each rule gives a chunk).
    """
    m, n, k, data, coef, b = case
    itemsize = np.dtype(args.dtype).itemsize
    runs, rows = {}, {}
    for name, fn in rules:
        engine = Objective(data, "gemm", mode="cached", warm=True).engine
        call_args = _products_call(engine, coef, b, rng) if args.products else (coef, b)
        runs[name] = _patched(engine, "tiles_block_rows", fn, args.products, call_args)
        runs[name]()  # the scratch made under its rule
        rows[name] = fn(n, itemsize, -(-m // engine._chunks()), args.products, k=k)
    return alternate(runs, args.rounds), rows


def tile_blocks(args, rng) -> None:
    dt = np.dtype(args.dtype)
    rule = _dense.tiles_block_rows
    wide = 160 << 10  # the AVX-512 hosts' _TILES_BLOCK_BYTES

    def rows_by(block_bytes):
        # The rule with _TILES_BLOCK_BYTES = block_bytes, for the products too.
        def rows(n, itemsize, m, products=False, k=1):  # (as if G were small)
            saved = _dense._TILES_BLOCK_BYTES
            _dense._TILES_BLOCK_BYTES = block_bytes
            try:
                return rule(n, itemsize, m)
            finally:
                _dense._TILES_BLOCK_BYTES = saved
        return rows

    what = "Hessian products" if args.products else "gradient"
    print(f"{dt.name}, the tiles' {what}, medians of {args.rounds} rounds of the best of "
          f"{CALLS} calls")
    print("| (m, n, k) | rows (48-96 rule) | ms | rows (bytes rule) | ms | bytes / 48-96 |")
    print("|---|---:|---:|---:|---:|---:|")
    for case in _cases(args, rng):
        m, n, k = case[:3]
        t, rows = _block_rules(args, rng, case,
                               (("narrow", rows_by(None)), ("wide", rows_by(wide))))
        print(f"| ({m}, {n}, {k}) | {rows['narrow']} | {t['narrow']:.2f} | {rows['wide']} | "
              f"{t['wide']:.2f} | {t['wide'] / t['narrow']:.2f} |", flush=True)


def big_g(args, rng) -> None:
    dt = np.dtype(args.dtype)
    rule = _dense.tiles_block_rows

    def small_g(n, itemsize, m, products=False, k=1):
        return rule(n, itemsize, m, products)  # (k = 1: as if G were small)

    def large_g_products(n, itemsize, m, products=False, k=1):
        # The gradient's rule for large G applied to the Hessian products too.
        return rule(n, itemsize, m, False, k) if products else rule(n, itemsize, m, products, k)

    what = "Hessian products" if args.products else "gradient"
    variants = ((("rule", large_g_products), ("without", rule)) if args.products
                else (("rule", rule), ("without", small_g)))
    print(f"{dt.name}, the tiles' {what}, blocks by the large-G rule against the rule "
          f"without it; medians of {args.rounds} rounds of the best of {CALLS} calls")
    print("| (m, n, k) | G MiB | rows (rule) | ms | rows (without) | ms | rule / without |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for case in _cases(args, rng):
        m, n, k = case[:3]
        t, rows = _block_rules(args, rng, case, variants)
        mib = n * _dense.padded_width(k, dt.itemsize) * dt.itemsize / 2**20
        print(f"| ({m}, {n}, {k}) | {mib:.1f} | {rows['rule']} | {t['rule']:.2f} | "
              f"{rows['without']} | {t['without']:.2f} | {t['rule'] / t['without']:.2f} |",
              flush=True)


def block_rows(args, rng) -> None:
    """The tiles' gradient in blocks of each ``--rows`` count at any G, against the rule."""
    rule = _dense.tiles_block_rows

    def fixed(rows):
        def by(n, itemsize, m, products=False, k=1):  # (the products keep the rule)
            return rule(n, itemsize, m, products, k) if products else max(1, min(rows, m))
        return by

    dt = np.dtype(args.dtype)
    variants = (("rule", rule),) + tuple((f"{r} rows", fixed(r)) for r in args.rows)
    print(f"{dt.name}, the tiles' gradient in blocks of a fixed row count against the rule; "
          f"medians of {args.rounds} rounds of the best of {CALLS} calls")
    print("| (m, n, k) | G MiB | rows (rule) | rule ms | "
          + " | ".join(f"{r} rows / rule" for r in args.rows) + " |")
    print("|---|---:|---:|---:|" + "---:|" * len(args.rows))
    for case in _cases(args, rng):
        m, n, k = case[:3]
        t, rows = _block_rules(args, rng, case, variants)
        mib = n * _dense.padded_width(k, dt.itemsize) * dt.itemsize / 2**20
        print(f"| ({m}, {n}, {k}) | {mib:.1f} | {rows['rule']} | {t['rule']:.2f} | "
              + " | ".join(f"{t[f'{r} rows'] / t['rule']:.2f}" for r in args.rows) + " |",
              flush=True)


def split(args, rng) -> None:
    dt = np.dtype(args.dtype)
    rules = {"split_features": _dense.split_features, "tiles_split": _dense.tiles_split}
    if args.chunks:  # the passes' structure at that many threads: partial sums, parts
        _dense.n_chunks = lambda m, c=args.chunks: c
    print(f"{dt.name}, GEMM strategy, medians of {args.rounds} rounds of the best of "
          f"{CALLS} calls" + (f", {args.chunks} row chunks a pass" if args.chunks else ""))
    print("| (m, n, k) | BLAS's split ms | tiles' split ms | row split ms | "
          "row split / BLAS's | row split / tiles' | the rules take | row split kernel |")
    print("|---|---:|---:|---:|---:|---:|---|---|")
    # Each variant with the two rules forced: BLAS's split, the tiles' split
    # (where the tiles run: _dense.tiles_split's other conditions), neither.
    variants = {"blas": (True, False), "tiles": (False, True), "rows": (False, False)}
    for m, n, k, data, coef, b in _cases(args, rng):
        runs, kernel = {}, {}
        for name, (blas, tiles) in variants.items():
            _dense.split_features = lambda *a, on=blas: on
            _dense.tiles_split = lambda *a, on=tiles: on
            _dense._layout.cache_clear()  # (layouts are kept by shape)
            try:
                engine = Objective(data, "gemm", warm=True).engine
            finally:
                for rule_name, rule in rules.items():
                    setattr(_dense, rule_name, rule)
                _dense._layout.cache_clear()
            kernel[name] = engine.describe()["kernel"]
            runs[name] = lambda engine=engine, coef=coef, b=b: engine.gradient(coef, b)
        t = alternate(runs, args.rounds)
        chunks = engine._chunks()
        takes = ("tiles' split" if rules["tiles_split"](m, n, k, dt.itemsize, chunks)
                 else "BLAS's split" if rules["split_features"](m, n, k, dt.itemsize, chunks)
                 else "row split")
        print(f"| ({m}, {n}, {k}) | {t['blas']:.2f} | {t['tiles']:.2f} | {t['rows']:.2f} | "
              f"{t['rows'] / t['blas']:.2f} | {t['rows'] / t['tiles']:.2f} | {takes} | "
              f"{kernel['rows']} |", flush=True)


def _rows_outer_forward():
    """Return the tiles' forward block product with the block's row tiles outer (the old order)."""
    from numba import njit

    from fastsoftmax._kernels import _outer
    from fastsoftmax._kernels._config import JIT

    @njit(**JIT)
    def forward(X, r0, rows, Wp, Z):
        k = Z.shape[1]
        L = _outer.lanes(X)
        vectors = -(-k // L)
        q = 0
        while q < rows:
            t = _outer._tile_rows(rows - q)
            v = vectors
            while v > 0:
                c = _outer._vectors(v)
                v -= c
                _outer.forward_tile(X, r0 + q, Wp, v * L, Z, q, 0, X.shape[1], True, t, c)
            q += t

    return forward


def _tiles_kernels(forward, lanes_error, zero_first=False):
    """Return {variant: (chunk, kernel)}: the tiles' gradient kernels with these pieces.

    ``forward``: the block's forward product; ``lanes_error``: the error of
    rows of LANES_FROM classes or more (below, ``_block_error_tiles``);
    ``zero_first``: each chunk's partial sum zeroed by a pass of its own,
    every block's backward product adding into it (the way before the
    first block's product set it).
    """
    from numba import njit, prange

    from fastsoftmax._kernels import _common, _fused, _outer
    from fastsoftmax._kernels._config import JIT, PJIT

    @njit(inline="always", **JIT)
    def adding(X, r0, rows, E, G, first):
        _outer.backward_block(X, r0, rows, E, G, False)

    backward = adding if zero_first else _fused._tiles_backward

    def pair(block_error, blocks, lanes):
        @njit(**JIT)
        def chunk(c, X, y, Y, sw, soft, weighted, scale, Wp, b, gW, gb, loss, bad_row,
                  scratch, P):
            if lanes:
                _fused._wide_vectors_float64(X)
            if zero_first:
                _common._zero2(gW[c])
            _fused._gemm_body(c, X, y, Y, sw, soft, weighted, scale, Wp, b, gW, gb, loss,
                              bad_row, scratch, P, block_error, forward, backward,
                              _outer.spare_rows(X, b.shape[0]), blocks)

        @njit(**PJIT)
        def kernel(X, y, Y, sw, soft, weighted, scale, Wp, b, gW, gb, loss, bad_row,
                   scratch, P):
            for c in prange(gW.shape[0]):
                chunk(np.int64(c), X, y, Y, sw, soft, weighted, scale, Wp, b, gW, gb, loss,
                      bad_row, scratch, P)
        return chunk, kernel

    return {"gemm_tiles": pair(_fused._block_error_tiles, 2, False),
            "gemm_tiles_lanes": pair(lanes_error, 1, True)}


def _kernel_swap(old: dict, what: str, args, rng, columns: tuple[str, str]) -> None:
    """Time the package's tiles gradient against the kernels ``old`` at every case, one table."""
    dt = np.dtype(args.dtype)
    saved = dict(_dense._GRADIENT_KERNELS)

    def swapped(engine, coef, b):
        def call():
            _dense._GRADIENT_KERNELS.update(old)
            try:
                engine.gradient(coef, b)
            finally:
                _dense._GRADIENT_KERNELS.update(saved)
        return call

    new, before = columns
    print(f"{dt.name}, the tiles' gradient (GEMM strategy), {what}; medians of {args.rounds} "
          f"rounds of the best of {CALLS} calls")
    print(f"| (m, n, k) | Wp MiB | {new} ms | {before} ms | {new} / {before} | kernel |")
    print("|---|---:|---:|---:|---:|---|")
    for m, n, k, data, coef, b in _cases(args, rng):
        engine = Objective(data, "gemm", warm=True).engine
        kernel = engine.describe()["kernel"]
        if kernel not in old:
            print(f"| ({m}, {n}, {k}) | - | - | - | - | {kernel} (not the tiles) |")
            continue
        runs = {"new": lambda engine=engine, coef=coef, b=b: engine.gradient(coef, b),
                "old": swapped(engine, coef, b)}
        t = alternate(runs, args.rounds)
        mib = n * _dense.padded_width(k, dt.itemsize) * dt.itemsize / 2**20
        print(f"| ({m}, {n}, {k}) | {mib:.1f} | {t['new']:.2f} | {t['old']:.2f} | "
              f"{t['new'] / t['old']:.2f} | {kernel} |", flush=True)


def strips(args, rng) -> None:
    from fastsoftmax._kernels._fused import _block_error_pairs

    _kernel_swap(_tiles_kernels(_rows_outer_forward(), _block_error_pairs),
                 "forward by strips of classes against row tiles outer", args, rng,
                 ("strips outer", "row tiles outer"))


def set_first(args, rng) -> None:
    from fastsoftmax._kernels._fused import _block_error_pairs
    from fastsoftmax._kernels._outer import forward_block

    _kernel_swap(_tiles_kernels(forward_block, _block_error_pairs, zero_first=True),
                 "each chunk's first block setting its partial sum against a pass zeroing it",
                 args, rng, ("set", "zeroed"))


def pairs(args, rng) -> None:
    from fastsoftmax._kernels._fused import _block_error_lanes
    from fastsoftmax._kernels._outer import forward_block

    _kernel_swap(_tiles_kernels(forward_block, _block_error_lanes),
                 "the error of many classes in pairs of rows against three sweeps", args, rng,
                 ("pairs", "sweeps"))


def _two_pass_weights(engine):
    """Patch ``engine`` (an instance) to take W and the L2 term as before this mode's change.

    The tiles' Wp by a transposing copy of coef (NumPy's, from the
    solvers' (k, n) coef), then the padding copy (NumPy's); the chunks'
    sum, then the L2 term in a second pass over the sum and the unpadded W
    (``_penalty.add_l2``). Returns the engine.
    """
    from fastsoftmax._kernels._fused import _sum_chunks
    from fastsoftmax._launch import n_chunks
    from fastsoftmax._penalty import add_l2, l2_penalty

    unpadded = {}

    def kernel_weights(variant, coef):
        W = np.ascontiguousarray(coef.T)
        unpadded["W"] = W
        if not variant.startswith("gemm_tiles"):
            return W
        Wp, = engine._buffer("old padded weights", 1, lambda _: (
            np.zeros((W.shape[0], _dense.padded_width(W.shape[1], W.dtype.itemsize)),
                     W.dtype),))
        Wp[:, :W.shape[1]] = W
        return Wp

    def to_coef(G, W, alpha=0.0):
        out = np.empty((G.shape[1], engine.k), G.dtype)
        _sum_chunks(G, W, G.dtype.type(0), out, np.empty(0), n_chunks(G.shape[1]))
        squares = add_l2(out, unpadded["W"], alpha) if alpha else 0.0
        if squares is None:
            squares = 2 * l2_penalty(unpadded["W"], 1.0)
        return out.T, squares

    engine._kernel_weights = kernel_weights
    engine._to_coef = to_coef
    return engine


def weights_pass(args, rng) -> None:
    dt = np.dtype(args.dtype)
    print(f"{dt.name}, the tiles' gradient with alpha 1e-4: W padded in one pass (none where "
          f"k is whole vectors) and the L2 term in the chunks' sum, against a transposing copy, "
          f"a padding copy and a second pass for the L2 term; coef (k, n) C-ordered (the "
          f"solvers') and W's transposed view (loss_and_grad's); medians of {args.rounds} "
          f"rounds of the best of {CALLS} calls")
    print("| (m, n, k) | coef | one pass ms | two passes ms | one / two | kernel |")
    print("|---|---|---:|---:|---:|---|")
    for m, n, k, data, coef, b in _cases(args, rng):
        new = Objective(data, "gemm", warm=True).engine
        old = _two_pass_weights(Objective(data, "gemm", warm=True).engine)
        for layout, c in (("(k, n) C", coef), ("W.T", np.ascontiguousarray(coef.T).T)):
            runs = {name: (lambda e=e, c=c, b=b: e.gradient(c, b, alpha=1e-4))
                    for name, e in (("new", new), ("old", old))}
            got, want = runs["new"](), runs["old"]()
            assert np.allclose(got[1], want[1], rtol=1e-4, atol=1e-6) and np.isclose(
                got[0], want[0], rtol=1e-6)
            t = alternate(runs, args.rounds)
            print(f"| ({m}, {n}, {k}) | {layout} | {t['new']:.2f} | {t['old']:.2f} | "
                  f"{t['new'] / t['old']:.2f} | {new.describe()['kernel']} |", flush=True)


class _COrdered:
    """An objective without its ``coef_order`` (L-BFGS then holds coef C-ordered, as before).

    With ``order``, the objective's own order is passed on instead. Counts
    the evaluations (``calls``): the two orders round differently, and the
    line search may take another evaluation or two in as many iterations.
    """

    def __init__(self, inner, order=None):
        self.inner, self.dtype, self.calls = inner, inner.dtype, 0
        if order is not None:
            self.coef_order = order

    def loss_grad(self, *args):
        self.calls += 1
        return self.inner.loss_grad(*args)


def lbfgs_order(args, rng) -> None:
    from fastsoftmax._solvers.lbfgs import lbfgs

    dt = np.dtype(args.dtype)
    iters = 10
    print(f"{dt.name}, L-BFGS ({iters} iterations, alpha 1e-4) with its flat vector in the "
          f"engine's memory order (coef F-ordered for the GEMM strategy) against C-ordered; "
          f"medians of {args.rounds} rounds of the best of {CALLS} fits; the time per "
          "evaluation of the loss and gradient (the two orders round differently: the "
          "evaluations in the ten iterations are counted)")
    print("| (m, n, k) | strategy | evaluations | engine's order ms | C order ms | "
          "engine's / C | kernel |")
    print("|---|---|---|---:|---:|---:|---|")
    for m, n, k, data, _, _ in _cases(args, rng):
        objective = Objective(data, "gemm", warm=True)
        start = np.zeros((k, n), dt), np.zeros(k, dt)
        counted = {"new": _COrdered(objective, objective.coef_order),
                   "old": _COrdered(objective)}

        def fit(obj, start=start):
            return lambda: lbfgs(obj, *start, 1e-4, max_iter=iters, tol=0.0)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the iteration limit, on purpose
            calls = {}
            for name, obj in counted.items():
                fit(obj)()
                calls[name], obj.calls = obj.calls, 0
            t = alternate({name: fit(obj) for name, obj in counted.items()}, args.rounds)
        per = {name: t[name] / calls[name] for name in t}
        print(f"| ({m}, {n}, {k}) | {objective.strategy} | {calls['new']} / {calls['old']} | "
              f"{per['new']:.2f} | {per['old']:.2f} | {per['new'] / per['old']:.2f} | "
              f"{objective.engine.describe()['kernel']} |", flush=True)


# Each mode's defaults for the options left out (None).
DEFAULTS = {
    "transposed": {"dtype": "float32", "ns": "2,4,8,16,20,32,48,64", "ks": "2,3,5,10,16,20,31",
                   "work": 1e8},
    "products": {"dtype": "float32", "ns": "4,8,16,24,32,48", "ks": "2,3,5,10", "work": 1e8},
    "fits": {"dtype": "float64", "shapes": "400000x8x5,300000x16x10,200000x24x3"},
    "width": {"shapes": "60000x784x10,200000x128x5,100000x300x3,20000x3000x4,300000x128x2"},
    "strategies": {"dtype": "float64", "ns": "384,784,1520,3040", "ks": "48,100,200",
                   "work": 1.2e8},
    "tiles": {"dtype": "float32", "ns": "48,96,200", "ks": "20,30,48,100", "work": 2e8},
    "tile_blocks": {"dtype": "float32", "shapes": "50000x20x100,20800x48x100,20000x100x100,"
                    "5000x200x100,3000x784x100,7000x3000x10"},
    "split": {"dtype": "float32", "shapes": "1000x3000x100,300x3000x100,100x3000x1000,"
              "400x784x300,1000x3000x1000,1000x784x1000"},
    "big_g": {"dtype": "float64", "shapes": "1000x3000x1000,300x3000x3000,1000x784x1000,"
              "500x1500x1000,1000x3000x300,1000x3000x100,3000x784x100"},
    "block_rows": {"dtype": "float32", "rows": [192, 384],
                   "shapes": "4000x784x1000,8000x784x500,4000x1500x500,3000x3000x300,"
                   "16000x784x200"},
    "set_first": {"dtype": "float64", "shapes": "1000x3000x1000,1000x784x1000,300x3000x3000,"
                  "1000x3000x100,3000x784x100,2000x100x1000,20000x100x100"},
    "pairs": {"dtype": "float32", "shapes": "20000x100x100,100000x20x100,60000x50x40,"
              "20000x100x64,50000x100x128,3000x784x100,1000x3000x100,2000x100x1000"},
    "strips": {"dtype": "float64", "shapes": "1000x3000x1000,300x3000x3000,500x1500x1000,"
               "1000x784x1000,1000x3000x100,3000x1500x300,2000x100x1000,20000x100x100,"
               "10000x20x1000,69000x96x30"},
    "lbfgs_order": {"dtype": "float64", "shapes": "1000x3000x1000,1000x784x1000,"
                    "3000x784x100,20000x100x100,60000x784x10"},
    "weights_pass": {"dtype": "float32", "shapes": "1000x3000x1000,1000x784x1000,"
                     "300x3000x3000,1000x3000x100,3000x784x100,20000x100x100,2000x100x1000"},
}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", type=comma_list(DEFAULTS),
                    help=f"one or more of {', '.join(DEFAULTS)}, comma-separated")
    ap.add_argument("--dtype")
    ap.add_argument("--ns")
    ap.add_argument("--ks")
    ap.add_argument("--work", type=float)
    ap.add_argument("--shapes")
    ap.add_argument("--rounds", type=at_least_one, default=11)
    ap.add_argument("--chunks", type=at_least_one,
                    help="split: row chunks (and feature parts) per pass, as with that many "
                         "threads, run on the threads there are")
    ap.add_argument("--rows", type=lambda v: [at_least_one(r) for r in v.split(",")],
                    help="block_rows: the gradient's blocks of each of these row counts at any "
                         "partial sum's size, against the rule")
    ap.add_argument("--products", action="store_true",
                    help="tiles, tile_blocks, big_g: time the Hessian products, not the gradient")
    given = ap.parse_args(argv)
    run = {"transposed": transposed, "products": products, "fits": product_fits,
           "width": width, "strategies": strategies, "tiles": tiles, "tile_blocks": tile_blocks,
           "split": split, "strips": strips, "pairs": pairs, "big_g": big_g,
           "block_rows": block_rows, "set_first": set_first, "weights_pass": weights_pass,
           "lbfgs_order": lbfgs_order}
    for i, mode in enumerate(given.what):
        args = argparse.Namespace(**vars(given))
        for name, value in DEFAULTS[mode].items():
            if getattr(args, name) is None:
                setattr(args, name, value)
        if i:
            print()
        run[mode](args, np.random.default_rng(0))


if __name__ == "__main__":
    main()
