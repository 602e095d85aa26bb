"""The ``fastsoftmax`` command: demo, train, predict, bench, info.

Run ``fastsoftmax --help`` or ``fastsoftmax COMMAND --help``; also available
as ``python -m fastsoftmax``. Exit status: 0 on success, 2 for bad usage,
1 for any other failure, reported as one line ``fastsoftmax: error: ...``
naming the file, line, column or option at fault.

Data: CSV with a header row (gzip-compressed or not; pandas' C parser),
Parquet and Feather / Arrow IPC (pyarrow, ``pip install
fastsoftmax[parquet]``), ``.npz`` with arrays ``X`` and ``y``, svmlight /
libsvm text, and ``.npz`` files of ``scipy.sparse.save_npz`` (labels for
training in an extra array ``y``). svmlight and sparse ``.npz`` files stay
sparse (CSR) from reading through training and prediction, never
densified; ``train --n-features N`` gives an svmlight file whose last
columns are empty its full width, and ``--standardize`` scales sparse data
without centring it (:mod:`fastsoftmax.cli._sparse_io`). ``train
--chunksize ROWS`` streams a CSV, Parquet or Feather file through
:meth:`SoftmaxRegression.partial_fit` without ever holding it whole
(:mod:`fastsoftmax.cli._stream`); ``predict --chunksize ROWS`` predicts
and writes a chunk at a time. Sparse formats are read whole: they are
small next to their dense equivalent.

Model files are the ``.npz`` of :meth:`SoftmaxRegression.save` plus a few
extra arrays that only the command line reads (``SoftmaxRegression.load``
reads the arrays it knows and ignores the rest):

``scaler_mean``, ``scaler_scale``
    ``--standardize``: predictions use ``(X - scaler_mean) / scaler_scale``;
    ``scaler_mean`` is 0 for a model trained on sparse data.
``feature_names``, ``target_name``
    The table's column names at training: at prediction the columns are
    matched by name and the target column, if present, is ignored.
``svmlight_zero_based``
    How svmlight feature indices were read at training.

Modules: ``_io`` (formats, whole-file reads, model files, prediction
output), ``_sparse_io`` (svmlight and sparse ``.npz``, sparse scaling),
``_tables`` (CSV, Parquet and Feather read a chunk at a time),
``_commands`` (train, predict), ``_stream`` (train --chunksize),
``_demo``, ``_common`` (the error type, standardisation).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Sequence

from .._settings import SettingError
from . import _commands, _io
from ._common import PARAM_OPTIONS, PROG, CLIError, one_line

__all__ = ["CLIError", "build_parser", "main"]

_BENCH_HELP = ("Time fastsoftmax against the plain NumPy implementations of "
               "fastsoftmax.reference (fused loss and gradient, row-wise softmax, one SGD "
               "epoch) on a few standard shapes and print a table of medians and speed-ups. "
               "Options: --quick (small shapes, a few seconds), --rounds R (timed rounds per "
               "contender), --threads T (Numba threads); 'fastsoftmax bench --help' "
               "describes them.")
_PROGRESS_HELP = ("show a progress bar with the current loss on stderr; default: only when "
                  "stderr is a terminal")


def _run_bench(argv: list[str]) -> int:
    """``fastsoftmax bench``: hand every argument over to :func:`fastsoftmax.bench.main`."""
    bench = importlib.import_module("fastsoftmax.bench")
    result = bench.main(argv)
    return 0 if result is None else int(result)


def _demo(args: argparse.Namespace) -> int:
    from ._demo import demo

    return demo(args)


# ---------------------------------------------------------------- parser
class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    pass


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return value


def _add_data_args(p: argparse.ArgumentParser, chunk_help: str) -> None:
    p.add_argument("--format", choices=_io.FORMATS, default="auto",
                   help="input format; auto: from the extension (.csv, .csv.gz, .parquet, "
                        ".feather/.arrow, .npz, .svm/.libsvm), else from the content")
    p.add_argument("--chunksize", type=_positive, default=None, metavar="ROWS",
                   help=chunk_help)


def _add_train_options(train: argparse.ArgumentParser) -> None:
    from .._model import SoftmaxModel  # SoftmaxRegression less scikit-learn's import

    default = SoftmaxModel().get_params()
    option = PARAM_OPTIONS
    train.add_argument(option["solver"], choices=("auto", "newton", "lbfgs", "sgd", "bgd"),
                       default=argparse.SUPPRESS,
                       help="auto: the solver the estimator picks for the data (newton for "
                            "in-memory data); newton: truncated Newton with fused Hessian "
                            "products; lbfgs: quasi-Newton; sgd: mini-batch SGD with "
                            f"momentum; bgd: full-batch gradient descent (default: "
                            f"{default['solver']}; --chunksize trains with sgd)")
    train.add_argument(option["alpha"], type=float, default=default["alpha"],
                       help="L2 penalty strength on W")
    train.add_argument(option["max_iter"], type=int, default=default["max_iter"],
                       help="iterations (lbfgs, bgd) or epochs (sgd)")
    train.add_argument(option["tol"], type=float, default=default["tol"],
                       help="stopping tolerance (gradient for lbfgs, loss improvement else)")
    train.add_argument(option["n_iter_no_change"], type=int,
                       default=default["n_iter_no_change"],
                       help="sgd/bgd: stop after this many iterations without improvement")
    train.add_argument(option["batch_size"], type=int, default=default["batch_size"],
                       help="sgd: rows per mini-batch")
    train.add_argument(option["learning_rate"], choices=("adaptive", "constant", "invscaling"),
                       default=default["learning_rate"],
                       help="sgd/bgd: step-size schedule (with --chunksize, adaptive "
                            "divides the step by 5 when --n-iter-no-change chunks in a row "
                            "do not lower the loss)")
    train.add_argument(option["eta0"], type=float, default=default["eta0"],
                       help="sgd/bgd: initial step size")
    train.add_argument(option["momentum"], type=float, default=default["momentum"],
                       help="sgd/bgd: momentum in [0, 1)")
    train.add_argument(option["early_stopping"], action="store_true",
                       default=default["early_stopping"],
                       help="hold out --validation-fraction of the training rows and stop when "
                            "their loss stops improving")
    train.add_argument(option["validation_fraction"], type=float,
                       default=default["validation_fraction"],
                       help="share of training rows held out by --early-stopping")
    train.add_argument(option["class_weight"], choices=("balanced",),
                       default=default["class_weight"],
                       help="balanced: weight classes inversely to their frequency (with "
                            "--chunksize, counted in the first pass)")
    train.add_argument(option["random_state"], type=int, default=default["random_state"],
                       metavar="SEED",
                       help="seed for shuffling and the splits (same seed, same model)")
    train.add_argument(option["n_threads"], type=int, default=default["n_threads"],
                       help="Numba threads (default: Numba's setting, usually all cores)")


def _train_parser(sub: argparse._SubParsersAction,
                  estimator_options: bool = True) -> argparse.ArgumentParser:
    train = sub.add_parser(
        "train", formatter_class=_Formatter, help="fit a model to a data file",
        description="Fit a softmax regression model to DATA and write it to MODEL.npz.\n\n"
                    "DATA: CSV with a header row, plain or gzip (.csv.gz); Parquet or Feather "
                    "(pip install fastsoftmax[parquet]); for these the target column is "
                    "--target, default the last, and labels may be strings. Also .npz with "
                    "arrays X (rows x features) and y, svmlight/libsvm text, or a "
                    "scipy.sparse .npz with the labels as an extra array y, written with "
                    "np.savez(path, data=X.data, indices=X.indices, indptr=X.indptr, "
                    "shape=X.shape, format=X.format, y=y). svmlight and sparse .npz files "
                    "stay sparse throughout (never densified).\n\n"
                    "--chunksize ROWS streams a CSV, Parquet or Feather file bigger than "
                    "memory: a first pass finds the classes (unless --classes lists them) "
                    "and the --standardize statistics, then --epochs passes train with sgd "
                    "(partial_fit) one chunk at a time.")
    train.add_argument("data", metavar="DATA", help="training data file")
    train.add_argument("-o", "--output", required=True, metavar="MODEL.npz",
                       help="where to write the model")
    train.add_argument("--target", metavar="COLUMN", default=None,
                       help="CSV, Parquet, Feather: name of the label column (default: the "
                            "last column)")
    _add_data_args(train, "CSV, Parquet, Feather: read and train ROWS rows at a time with "
                          "sgd (partial_fit), memory bounded by the chunk, not the file")
    train.add_argument("--epochs", type=_positive, default=1, metavar="E",
                       help="--chunksize: passes over the file")
    train.add_argument("--classes", default=None, metavar="A,B,...",
                       help="--chunksize: every class, comma-separated, instead of a first "
                            "pass over the label column")
    train.add_argument("--test-size", type=float, default=None, metavar="FRACTION",
                       help="hold out this fraction (or, if >= 1, this many rows) for a test "
                            "accuracy; stratified by class when possible")
    train.add_argument("--standardize", action="store_true",
                       help="scale each feature to mean 0 and variance 1 (statistics from the "
                            "training rows, saved in the model and applied by predict); "
                            "sparse data is scaled to variance 1 without centring, which "
                            "would fill every empty entry")
    train.add_argument("--n-features", type=_positive, default=None, metavar="N",
                       help="svmlight/libsvm: the number of features, for a file whose last "
                            "columns are empty in every row (default: the largest index "
                            "seen); smaller than that is an error")
    if estimator_options:
        _add_train_options(train)
    train.add_argument("--dtype", choices=("float32", "float64"), default="float64",
                       help="precision to train in (float32 halves memory traffic)")
    train.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                       help=_PROGRESS_HELP)
    train.set_defaults(func=_commands.train, parser=train)
    return train


def build_parser(estimator_options: bool = True) -> argparse.ArgumentParser:
    """Build the argument parser of the ``fastsoftmax`` command.

    ``estimator_options`` False leaves out train's estimator options
    (--solver, --alpha, ...), whose defaults are read from the estimator and
    so import scikit-learn (about a second): :func:`main` builds them only
    when the command is ``train``.
    """
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog=PROG, formatter_class=_Formatter,
        description="Softmax (multinomial logistic) regression on multicore CPUs.",
        epilog="Run 'fastsoftmax COMMAND --help' for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    demo = sub.add_parser(
        "demo", formatter_class=_Formatter, help="train on digits and the toy data, show plots",
        description="Train every solver (newton, lbfgs, sgd, bgd) on scikit-learn's digits, "
                    "on the lecture notes' toy data (3 Gaussian classes in 2-D) and on a "
                    "sparse text-like problem, print test accuracy "
                    "and training time, measure the fused kernel's speed-up over the plain "
                    "NumPy reference, and write plots (needs matplotlib: "
                    "pip install fastsoftmax[plot]). Nothing is downloaded.")
    demo.add_argument("--out", default="fastsoftmax-demo", metavar="DIR",
                      help="folder for the plots (created if needed)")
    demo.add_argument("--quick", action="store_true",
                      help="fewer iterations and a smaller timing problem (a few seconds)")
    demo.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                      help=_PROGRESS_HELP)
    demo.set_defaults(func=_demo, parser=demo)

    _train_parser(sub, estimator_options)

    predict = sub.add_parser(
        "predict", formatter_class=_Formatter, help="predict labels or probabilities",
        description="Predict the class of every row of DATA with a model written by "
                    "'fastsoftmax train' and write CSV: a header line (the target's name, or "
                    "'label') then one label per row, or with --proba one column per class "
                    "(header: the class names). DATA is in any format train reads; for CSV, "
                    "Parquet and Feather the columns are matched by name and the training "
                    "target column is ignored. Output to a file appears only once every row "
                    "is predicted. svmlight and sparse .npz files stay sparse; an "
                    "svmlight file is read as wide as the model (trailing empty columns).")
    predict.add_argument("model", metavar="MODEL.npz", help="model file")
    predict.add_argument("data", metavar="DATA", help="data file")
    predict.add_argument("-o", "--output", default=None, metavar="OUT.csv",
                         help="output file (default: standard output)")
    predict.add_argument("--proba", action="store_true",
                         help="write class probabilities instead of labels")
    _add_data_args(predict, "CSV, Parquet, Feather: read, predict and write ROWS rows at a "
                            "time, memory bounded by the chunk, not the file")
    predict.set_defaults(func=_commands.predict, parser=predict)

    sub.add_parser("bench", help="benchmark the kernels (fastsoftmax bench --help)",
                   description=_BENCH_HELP, add_help=False)

    info = sub.add_parser(
        "info",
        help="what fastsoftmax runs on this machine, and why",
        description="Print the versions, CPU, thread settings, BLAS libraries and this "
                    "host's calibration (fastsoftmax.show_config); with --shape, also the "
                    "kernel strategy (and why), variant, threads and blocks that a fit's "
                    "gradient on dense data of that shape runs. Times and calibrates "
                    "nothing.")
    info.add_argument("--shape", type=_shape_arg, default=None, metavar="MxNxK",
                      help="n_samples x n_features x n_classes, e.g. 60000x784x10")
    info.add_argument("--dtype", choices=("float32", "float64"), default=None,
                      help="the dtype of --shape's plan (default: both)")
    info.add_argument("--json", action="store_true", help="print the report as JSON")
    info.set_defaults(func=_info, parser=info)
    return parser


def _shape_arg(text: str) -> tuple[int, int, int]:
    """Parse --shape MxNxK (argparse turns the ValueError into a usage error)."""
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.strip().isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"expected MxNxK (three whole numbers), got {text!r}")
    m, n, k = (int(p) for p in parts)
    if min(m, n) < 1 or k < 2:
        raise argparse.ArgumentTypeError(
            f"n_samples and n_features must be at least 1, n_classes at least 2: {text!r}")
    return m, n, k


def _info(args: argparse.Namespace) -> int:
    from .._report import config, format_report, to_json

    report = config(args.shape, args.dtype)
    print(to_json(report) if args.json else format_report(report))
    return 0


def _check_combinations(args: argparse.Namespace) -> None:
    """Options that make no sense together: a usage error (exit status 2)."""
    if args.command != "train":
        return
    fail = args.parser.error
    if args.chunksize is None:
        if args.epochs != 1:
            fail("--epochs applies to --chunksize training only (see --max-iter)")
        if args.classes is not None:
            fail("--classes applies to --chunksize training only")
        return
    if getattr(args, "solver", "sgd") != "sgd":
        fail(f"--chunksize trains with sgd (partial_fit); --solver {args.solver} needs the "
             "whole file in memory")
    if args.test_size is not None:
        fail("--test-size cannot be used with --chunksize: hold out a file of your own and "
             "run predict on it")
    if args.early_stopping:
        fail("--early-stopping cannot be used with --chunksize")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``fastsoftmax`` command; returns the exit status.

    argparse exits with status 2 (``SystemExit``) on bad usage.
    """
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        if args_list and args_list[0] == "bench":
            return _run_bench(args_list[1:])
        train = bool(args_list) and args_list[0] == "train"
        args = build_parser(estimator_options=train).parse_args(args_list)
        _check_combinations(args)
        return int(args.func(args))
    except (CLIError, SettingError) as exc:
        print(f"{PROG}: error: {one_line(str(exc))}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # Whoever read the output (head, less) has gone: stop quietly, as
        # command-line tools do, and spare Python's complaint at exit.
        with contextlib.suppress(OSError, ValueError, AttributeError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as exc:
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        print(f"{PROG}: error: {where}{one_line(exc.strerror or str(exc))}", file=sys.stderr)
        return 1
    except ImportError as exc:
        print(f"{PROG}: error: {one_line(str(exc))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
