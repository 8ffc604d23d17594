"""The pool an audit draws its members from: a training split and a held-out test split, validated
and read-only, of images or of a table's records (`victims.tabular`); the datasets load into it
(`victims.data`)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

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
    #: victims.tabular.schema.Schema of a table (x, x_test float32 [n, d] of its feature columns, y its label);
    #: None for images
    schema: object | None = None

    def __post_init__(self):
        rows = 2 if self.schema is not None else 4
        for field, kind, dtype, ndim in (
            ("x", "biuf", np.float32, rows),
            ("x_test", "biuf", np.float32, rows),
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
        bad = count_nonfinite(x) + count_nonfinite(xt)
        if bad:
            raise DataError(f"{self.name}: {bad} non-finite values in x/x_test")
        labels = np.concatenate([y, yt])
        if labels.min() < 0 or labels.max() >= len(self.classes):
            raise DataError(
                f"{self.name}: labels span {labels.min()}..{labels.max()}, expected 0..{len(self.classes) - 1}"
            )
        if self.schema is None and not len(self.mean) == len(self.std) == x.shape[1]:
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

    @property
    def tabular(self) -> bool:
        """Whether the pool is a table (`schema` set): records of columns, not images."""
        return self.schema is not None


def count_nonfinite(a: np.ndarray) -> int:
    return int(a.size - np.count_nonzero(np.isfinite(a)))


def to_float(a: np.ndarray) -> np.ndarray:
    """uint8 -> float32 / 255; other numbers cast to float32 as they are (C-contiguous)."""
    out = np.ascontiguousarray(a, dtype=np.float32)
    if a.dtype == np.uint8:
        out /= 255
    return out


def _fingerprint(*arrays: np.ndarray, extra: bytes = b"") -> str:
    h = hashlib.sha256(extra)
    for a in arrays:
        h.update(f"{a.dtype.str}{a.shape};".encode())
        h.update(np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")))
    return h.hexdigest()[:16]


def make_pool(name, x, y, x_test, y_test, classes, flip_ok, schema=None) -> Pool:
    """Build a Pool, computing per-channel mean/std of x (none for a table) and the fingerprint (of
    the arrays, and of a table's schema)."""
    x, x_test = to_float(x), to_float(x_test)
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
        fingerprint=_fingerprint(x, y, x_test, y_test, extra=schema.fingerprint_bytes() if schema else b""),
        schema=schema,
    )


def train_test_split(*arrays, **options):
    """scikit-learn's `train_test_split`, imported on first use (it takes about 0.4 s to import)."""
    from sklearn.model_selection import train_test_split as split

    return split(*arrays, **options)
