"""Plot the peers grid: loss-and-gradient time against k, one panel per (n, dtype).

    python benchmarks/peers.py > grid.md
    python benchmarks/peers_plot.py grid.md [--out benchmarks/peers_vs_k.png]

Reads the Markdown table that benchmarks/peers.py prints (its rows are
"| (m, n, k) | dtype | fastsoftmax ms | one column per peer | ..."), and
draws, for every n and dtype of the grid, each contender's time per
multiply-add (ns per m n k, so that cells with different m compare) against
k, on log axes. A peer that failed or is absent in a cell has no point there.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROW = re.compile(r"^\| \((\d+), (\d+), (\d+)\) \| (float32|float64) \|(.*)$")


def read_grid(text: str) -> tuple[list[str], list[dict]]:
    """Return (contenders, cells) from peers.py's table."""
    header = next(line for line in text.splitlines() if line.startswith("| (m, n, k)"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    names = columns[2:columns.index("fastest peer")]
    cells = []
    for line in text.splitlines():
        match = ROW.match(line)
        if not match:
            continue
        m, n, k = (int(v) for v in match.groups()[:3])
        values = [c.strip() for c in match.group(5).strip().strip("|").split("|")]
        times = {}
        for name, value in zip(names, values[:len(names)], strict=False):
            try:
                times[name] = float(value)
            except ValueError:
                pass  # "failed (...)" or "absent"
        cells.append({"m": m, "n": n, "k": k, "dtype": match.group(4), "ms": times})
    return names, cells


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("grid")
    ap.add_argument("--out", default=str(Path(__file__).parent / "peers_vs_k.png"))
    args = ap.parse_args(argv)
    names, cells = read_grid(Path(args.grid).read_text())
    ns = sorted({c["n"] for c in cells})
    dtypes = sorted({c["dtype"] for c in cells})
    fig, axes = plt.subplots(len(dtypes), len(ns), figsize=(4 * len(ns), 3.4 * len(dtypes)),
                             squeeze=False, sharey="row")
    for r, dtype in enumerate(dtypes):
        for c, n in enumerate(ns):
            ax = axes[r][c]
            part = sorted((x for x in cells if x["n"] == n and x["dtype"] == dtype),
                          key=lambda x: x["k"])
            for name in names:
                pts = [(x["k"], 1e6 * x["ms"][name] / (x["m"] * x["n"] * x["k"]))
                       for x in part if name in x["ms"]]
                if pts:
                    ks, ts = zip(*pts, strict=True)
                    style = dict(lw=2.5, color="black") if name == "fastsoftmax" else dict(lw=1)
                    ax.plot(ks, ts, marker="o", ms=3, label=name, **style)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_title(f"n = {n}, {dtype}", fontsize=9)
            ax.set_xlabel("k (classes)")
            if c == 0:
                ax.set_ylabel("ns per m·n·k")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle("loss and gradient, time per multiply-add (lower is faster); "
                 "m chosen so that m·n·k ≈ 2e8", fontsize=10)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
