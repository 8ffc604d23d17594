"""Canaries: records added to the pool before the plan is drawn, made to be easy to detect.

Each canary has its own independent inclusion coin in every run, so the canaries are the audit's
guesses for the one-run epsilon bound (Steinke, Nasr & Jagielski 2023), designated before any
training. All are drawn from the master seed's own stream, so they depend on the seed and the pool
alone. Kinds (docs/contracts.md, "Canaries"): `mislabeled`, `outlier`, `duplicate` (K rows, one
record: group privacy gives K epsilon, so no epsilon bound for them), `blank` and `marked` (the
crafted canaries of the worst-case black-box design), `gradient` (white-box only: no image, a
vector of norm Delta in the mechanism), and a table's (`victims.tabular.canaries`).
Natural records keep rows 0 .. n_natural - 1; canaries follow (`shadow_runs.records`)."""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass

import numpy as np

from victims.pool import Pool, make_pool
from victims.tabular.canaries import RECORD, TABULAR_KINDS, canonical_record, parse_target_record, tabular_canaries
from victims.tabular.pools import PAIR_TARGETS

#: the kinds of canary images
CANARY_KINDS = ("mislabeled", "outlier", "duplicate", "gradient", "blank", "marked")
IMAGE_KINDS = CANARY_KINDS
#: every kind `--canary-kind` takes: the image kinds, then a table's (`victims.tabular.canaries`)
ALL_KINDS = (*IMAGE_KINDS, *TABULAR_KINDS)
#: the record canaries a white-box audit can score (one row, one image)
RECORD_KINDS = ("mislabeled", "outlier", "blank", "marked")
#: the kinds that copy no pool image (so they are not limited by the pool's size)
CRAFTED_KINDS = ("gradient", "blank", "marked")
#: a marked canary's mark covers at most this share of the image's pixels
MARK_SHARE = 1 / 8
DEFAULT_COPIES = 4  # rows per duplicate canary
#: SeedSequence stream of the canaries under the master seed (shadow_runs.plan uses 0 for the coins
#: and 1 for the run seeds; audit.selftest's 2 and audit.release's 7 are other streams again)
CANARY_STREAM = 3


@dataclass(frozen=True)
class CanaryConfig:
    """N canaries of one kind; `copies` (rows per record) for duplicates only, None otherwise."""

    n: int
    kind: str = "mislabeled"
    copies: int | None = None
    seed: int = 0
    record: str | None = None  # --canary-kind record: the target, 'column=value,...'

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, numbers.Integral) or self.n < 0:
            raise ValueError(f"--canaries {self.n!r} must be an integer >= 0")
        object.__setattr__(self, "n", int(self.n))
        if self.kind not in ALL_KINDS:
            raise ValueError(f"--canary-kind {self.kind!r} is not one of {', '.join(ALL_KINDS)}")
        if self.kind == "duplicate":
            copies = DEFAULT_COPIES if self.copies is None else self.copies
            if isinstance(copies, bool) or not isinstance(copies, numbers.Integral) or copies < 2:
                raise ValueError(f"--canary-copies {copies!r} must be an integer >= 2")
            object.__setattr__(self, "copies", int(copies))
        elif self.copies is not None:
            raise ValueError(f"--canary-copies {self.copies} applies to --canary-kind duplicate only, not {self.kind}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral) or self.seed < 0:
            raise ValueError(f"canary seed {self.seed!r} must be an integer >= 0")
        if self.record is not None and self.kind != RECORD:
            raise ValueError(f"--target-record applies to --canary-kind record only, not {self.kind}")
        if self.kind == RECORD and self.n != 1:
            raise ValueError(f"--canary-kind record plants one target record: --canaries must be 1, got {self.n}")

    @property
    def rows_per_record(self) -> int:
        return self.copies if self.kind == "duplicate" else 1

    @property
    def n_rows(self) -> int:
        """Rows the canaries add to the pool."""
        return self.n * self.rows_per_record

    def entry(self, n_natural: int) -> dict:
        """experiment.json's (and summary.json's evaluation) `canaries` entry (`record` for that kind only)."""
        found = {
            "n": self.n,
            "kind": self.kind,
            "copies": self.copies,
            "seed": self.seed,
            "first_row": int(n_natural),
            "n_natural": int(n_natural),
        }
        return {**found, "record": self.record} if self.kind == RECORD else found

    @classmethod
    def from_entry(cls, entry: dict) -> CanaryConfig:
        return cls(
            n=entry["n"], kind=entry["kind"], copies=entry.get("copies"), seed=entry["seed"], record=entry.get("record")
        )


def resolve_record(pool: Pool, config: CanaryConfig | None) -> CanaryConfig | None:
    """`config` with a record canary's target spelled in schema order, a built-in pair's own where none
    is named. ValueError / DataError (one line) for a record canary on images, an empty pool, no
    target, or a target outside the schema."""
    if config is None or config.kind != RECORD:
        return config
    check_kind(pool, config.kind)
    if pool.n_pool == 0:
        raise ValueError(f"--canary-kind record: --dataset {pool.name} has no records (D is empty)")
    text = config.record or PAIR_TARGETS.get(pool.name)
    if text is None:
        raise ValueError(f"--canary-kind record needs --target-record 'column=value,...' for --dataset {pool.name}")
    return dataclasses.replace(config, record=canonical_record(pool.schema, text))


def check_fits(pool: Pool, config: CanaryConfig) -> None:
    """ValueError (one line) unless `pool` can hold the canaries of `config`: a kind of its own
    (a table's for a table, an image kind for images), and room for them."""
    check_kind(pool, config.kind)
    if pool.tabular:
        return  # whether the schema has room is known once they are drawn (victims.tabular.canaries)
    if config.kind not in CRAFTED_KINDS and config.n > pool.n_pool:
        raise ValueError(f"--canaries {config.n} is more than the pool's {pool.n_pool} examples can hold")
    pixels = pool.image_shape[1] * pool.image_shape[2]
    if config.kind == "marked" and config.n > pixels:
        raise ValueError(f"--canaries {config.n} marked canaries need a pixel each; the images have {pixels}")
    if config.kind == "mislabeled" and config.n and pool.n_classes < 2:
        raise ValueError(f"--canary-kind mislabeled needs at least 2 classes, the pool has {pool.n_classes}")


def check_kind(pool: Pool, kind: str) -> None:
    """ValueError (one line naming the kind and the dataset) for an image kind on a table or a
    table's kind on images."""
    if pool.tabular and kind not in (*TABULAR_KINDS, "gradient"):
        raise ValueError(
            f"--canary-kind {kind} makes images; --dataset {pool.name} is a table "
            f"(its kinds: {', '.join(TABULAR_KINDS)}, and gradient under white-box)"
        )
    if not pool.tabular and kind in TABULAR_KINDS:
        raise ValueError(
            f"--canary-kind {kind} makes table records; --dataset {pool.name} holds images "
            f"(its kinds: {', '.join(IMAGE_KINDS)})"
        )


def canary_arrays(pool: Pool, config: CanaryConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x float32 [n_rows, c, h, w] (a table's: [n_rows, d]), y int64 [n_rows], source int64 [n_rows])
    of the canary rows, deterministic from config.seed; `source` is the pool row each was copied from
    (-1 for outliers and crafted canaries)."""
    check_fits(pool, config)
    rng = np.random.default_rng(np.random.SeedSequence([config.seed, CANARY_STREAM]))
    n, n_classes = config.n, pool.n_classes
    if pool.tabular and config.kind == "gradient":  # no record: the victim adds cells of their own
        x = np.broadcast_to(pool.x.min(axis=0), (n, pool.x.shape[1])).astype(np.float32)
        return x, rng.integers(0, n_classes, size=n).astype(np.int64), np.full(n, -1, dtype=np.int64)
    if pool.tabular and config.kind == RECORD:
        x, y = parse_target_record(pool.schema, resolve_record(pool, config).record)
        return x, y, np.full(n, -1, dtype=np.int64)
    if pool.tabular:
        x, y = tabular_canaries(pool.schema, pool.x, pool.y, n, config.kind, rng)
        return x, y, np.full(n, -1, dtype=np.int64)
    if config.kind == "mislabeled":
        source = rng.choice(pool.n_pool, size=n, replace=False)
        shift = rng.integers(1, n_classes, size=n)  # uniform over the C - 1 wrong labels
        return pool.x[source].copy(), (pool.y[source] + shift) % n_classes, source.astype(np.int64)
    if config.kind == "outlier":
        low = pool.x.min(axis=(0, 2, 3)).astype(np.float64)[None, :, None, None]
        high = pool.x.max(axis=(0, 2, 3)).astype(np.float64)[None, :, None, None]
        noise = low + (high - low) * rng.random((n, *pool.image_shape))
        x = np.clip(noise, low, high).astype(np.float32)
        return x, rng.integers(0, n_classes, size=n).astype(np.int64), np.full(n, -1, dtype=np.int64)
    if config.kind == "blank":
        low = pool.x.min(axis=(0, 2, 3)).astype(np.float32)[None, :, None, None]
        x = np.broadcast_to(low, (n, *pool.image_shape)).copy()
        return x, (np.arange(n) % n_classes).astype(np.int64), np.full(n, -1, dtype=np.int64)
    if config.kind == "marked":
        return marked_pages(pool, n, rng), (np.arange(n) % n_classes).astype(np.int64), np.full(n, -1, dtype=np.int64)
    if config.kind == "gradient":  # no image: the victim's mechanism adds these (victims.dp.whitebox_canaries)
        x = np.zeros((n, *pool.image_shape), dtype=np.float32)
        return x, rng.integers(0, n_classes, size=n).astype(np.int64), np.full(n, -1, dtype=np.int64)
    source = np.repeat(rng.choice(pool.n_pool, size=n, replace=False), config.copies)  # duplicate
    return pool.x[source].copy(), pool.y[source].copy(), source.astype(np.int64)


def mark_size(n: int, pixels: int) -> int:
    """Pixels in each of n disjoint marks on an image of `pixels` pixels: at most `MARK_SHARE` of the
    image, at least one."""
    return max(1, min(pixels // n, int(pixels * MARK_SHARE)))


def marked_pages(pool: Pool, n: int, rng: np.random.Generator) -> np.ndarray:
    """n blank pages (the pool's per-channel minimum), page j with its own disjoint mark of `mark_size`
    pixels at the per-channel maximum, drawn from `rng`."""
    channels, height, width = pool.image_shape
    low = pool.x.min(axis=(0, 2, 3)).astype(np.float32)
    high = pool.x.max(axis=(0, 2, 3)).astype(np.float32)
    size = mark_size(n, height * width)
    order = rng.permutation(height * width)
    pages = np.broadcast_to(low[None, :, None], (n, channels, height * width)).copy()
    for j in range(n):
        pages[j][:, order[j * size : (j + 1) * size]] = high[:, None]
    return pages.reshape(n, channels, height, width)


def add_canaries(pool: Pool, config: CanaryConfig | None) -> Pool:
    """A new Pool: `pool`'s rows, then the canary rows, with the natural pool's test split and
    normalisation and a recomputed fingerprint; `pool` itself when there are no canaries."""
    if config is None:
        return pool
    check_fits(pool, config)
    if config.n == 0:
        return pool
    x, y, _ = canary_arrays(pool, config)
    with_canaries = make_pool(
        pool.name,
        np.concatenate([pool.x, x]),
        np.concatenate([pool.y, y.astype(np.int64)]),
        pool.x_test,
        pool.y_test,
        pool.classes,
        pool.flip_ok,
        schema=pool.schema,
    )
    # the natural pool's normalisation: canaries must not change how the natural examples are seen
    return dataclasses.replace(with_canaries, mean=pool.mean, std=pool.std)
