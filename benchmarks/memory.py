"""Peak resident memory of one loss_and_grad call, measured in a subprocess.

Target 3 of the performance issue: at m = 2,000,000, n = 50, k = 1000,
float32, the peak RSS must stay under the size of X + 1 GB (the kernels
allocate per-chunk (n, k) buffers and row-block scratch only, never an
(m, k) array). Usage::

    python benchmarks/memory.py [m n k [dtype]]

prints one line: the peak RSS, the size of X and the margin over X.
"""

import json
import subprocess
import sys

_CHILD = r"""
import json, resource, sys
import numpy as np
import fastsoftmax as fs


def peak_rss():
    # VmHWM is the high-water mark of this process's own address space. The
    # getrusage figure is not: Linux carries ru_maxrss across fork + exec, so
    # a child started by a large parent (a pytest run holding 1.5 GB) would
    # report the parent's size. getrusage only where /proc is missing.
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

m, n, k, dtype = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
# X is generated in blocks so that building it never needs a second copy.
X = np.empty((m, n), dtype=dtype)
rng = np.random.default_rng(0)
for i in range(0, m, 100_000):
    X[i:i + 100_000] = rng.standard_normal((min(100_000, m - i), n), dtype=np.float32)
y = rng.integers(0, k, m)
W = (0.01 * rng.standard_normal((n, k))).astype(dtype)
b = np.zeros(k, dtype)
before = peak_rss()
loss, gW, gb = fs.loss_and_grad(X, y, W, b)
peak = peak_rss()
print(json.dumps({"peak": peak, "before": before, "x_bytes": X.nbytes,
                  "y_bytes": y.nbytes, "loss": loss}))
"""


def measure(m, n, k, dtype="float32"):
    """Run one call in a fresh interpreter; return its peak-RSS report."""
    out = subprocess.run([sys.executable, "-c", _CHILD, str(m), str(n), str(k), dtype],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv):
    m, n, k = (int(a) for a in argv[:3]) if argv else (2_000_000, 50, 1000)
    dtype = argv[3] if len(argv) > 3 else "float32"
    r = measure(m, n, k, dtype)
    gib = 1 << 30
    print(f"m={m} n={n} k={k} {dtype}: peak RSS {r['peak'] / gib:.3f} GiB, "
          f"X {r['x_bytes'] / gib:.3f} GiB, peak - X {(r['peak'] - r['x_bytes']) / gib:.3f} GiB "
          f"(target < 1 GiB), RSS before the call {r['before'] / gib:.3f} GiB")
    return r


if __name__ == "__main__":
    main(sys.argv[1:])
