"""The lecture notes' toy problem, solved with fastsoftmax.loss_and_grad.

Three Gaussian classes in 2-D (means (2, 2), (8, 3), (3, 6), identity
covariance, 500 points each), standardised, fitted by plain full-batch
gradient descent. Then one gradient of the fused kernel is timed against the
plain NumPy reference on an MNIST-sized problem (60000 x 784, 10 classes,
float32), both measured here, in this run.
"""

import time

import numpy as np

import fastsoftmax
from fastsoftmax import reference


def toy_data(seed=0):
    rng = np.random.default_rng(seed)
    means = np.array([[2.0, 2.0], [8.0, 3.0], [3.0, 6.0]])
    X = np.concatenate([rng.standard_normal((500, 2)) + mu for mu in means])
    y = np.repeat(np.arange(3), 500)
    return X, y


def train(X, y, k, learning_rate=1.0, n_iter=300):
    W = np.zeros((X.shape[1], k))
    b = np.zeros(k)
    for it in range(n_iter + 1):
        loss, grad_W, grad_b = fastsoftmax.loss_and_grad(X, y, W, b)
        if it % 50 == 0:
            print(f"  iteration {it:3d}  loss {loss:.4f}")
        if it < n_iter:
            W -= learning_rate * grad_W
            b -= learning_rate * grad_b
    return W, b


def best_time(f, repeat=5):
    f()  # warm-up (and JIT compile on a machine without a cache)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times)


def main():
    X, y = toy_data()
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    print("Toy data: 3 classes x 500 points in 2-D; batch gradient descent")
    W, b = train(X, y, k=3)
    accuracy = np.mean(np.argmax(X @ W + b, axis=1) == y)
    print(f"Training accuracy: {accuracy:.4f}")

    m, n, k = 60_000, 784, 10
    rng = np.random.default_rng(1)
    Xb = rng.standard_normal((m, n), dtype=np.float32)
    yb = rng.integers(0, k, size=m)
    Wb = (0.01 * rng.standard_normal((n, k))).astype(np.float32)
    bb = np.zeros(k, dtype=np.float32)
    t_fused = best_time(lambda: fastsoftmax.loss_and_grad(Xb, yb, Wb, bb))
    t_ref = best_time(lambda: reference.loss_and_grad(Xb, yb, Wb, bb))
    print(f"\nOne gradient, {m} x {n}, {k} classes, float32 (best of 5, this machine):")
    print(f"  fastsoftmax.loss_and_grad  {1e3 * t_fused:8.1f} ms")
    print(f"  reference.loss_and_grad    {1e3 * t_ref:8.1f} ms")
    print(f"  reference / fused          {t_ref / t_fused:8.2f}x")


if __name__ == "__main__":
    main()
