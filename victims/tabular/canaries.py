"""Canaries of a table: worst-case records inside its public schema (`victims.canaries` adds them
after the natural rows, each with its own coin). Drawn from the master seed's canary stream, they
read nothing but the public schema and the audit's own pool.

* `unseen`: N records in distinct cells of the schema's discrete domain (`Schema.codes`) that no
  pool record falls in. Where the schema has feature categories no pool record holds, canary j
  holds the j-th of them (cyclically) and its other cells are drawn among those the pool holds,
  so up to U canaries each hold theirs alone; else every cell is drawn uniformly, redrawn where a
  pool record or earlier canary holds it. A number is uniform inside its bin.
* `extreme`: N distinct records, canary j with the (j mod M)-th numeric feature at the public
  bound farther from the pool, its other numbers at the pool's median, every categorical column
  (the label too) at one of the ⌈K/2⌉ rarest of its K categories: up to M canaries each open a
  part of the domain no other record reaches.
* `unheld`: N records, canary j with the (j mod L)-th label and in each feature column the
  (⌊j / L⌋ mod U)-th of its U cells the pool leaves empty: two canaries share no such
  (label, feature) cell, so every 2-way (label, feature) marginal moves there by its coin alone,
  up to the pipeline's noise (pair with `--pool-unheld K` and the `pairs` attack).
* `record`: one record the auditor names (`--target-record 'a=1,b=1,c=1'`; a built-in pair's
  target by default, `victims.tabular.pools.PAIR_TARGETS`). With `--plan fixed-remainder
  --canaries 1`, every run releases from D or D ∪ {target} by its coin. Nothing is drawn.

Refused (ValueError, one line) where the schema cannot hold N such records.
"""

from __future__ import annotations

import math

import numpy as np

from victims.pool import DataError
from victims.tabular.schema import Schema

UNSEEN, EXTREME, UNHELD, RECORD = "unseen", "extreme", "unheld", "record"
#: the canary kinds of a table (`victims.canaries.CANARY_KINDS` holds them beside the image kinds)
TABULAR_KINDS = (UNSEEN, EXTREME, UNHELD, RECORD)
#: candidate cells drawn per batch, and the most batches, while looking for empty cells
BATCH, MOST_BATCHES = 256, 4000


def tabular_canaries(
    schema: Schema, x: np.ndarray, y: np.ndarray, n: int, kind: str, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """(x float32 [n, d], y int64 [n]): n canaries of `kind` for the pool rows `x`, `y` (module docstring)."""
    if kind == UNSEEN:
        return unseen_records(schema, x, y, n, rng)
    if kind == EXTREME:
        return extreme_records(schema, x, y, n, rng)
    if kind == UNHELD:
        return unheld_records(schema, x, y, n, rng)
    raise ValueError(f"--canary-kind {kind!r} is not one of a table's kinds ({', '.join(TABULAR_KINDS)})")


def parse_target_record(schema: Schema, text: str) -> tuple[np.ndarray, np.ndarray]:
    """(x float32 [1, d], y int64 [1]) of the record `text` names ('column=value,...', every schema
    column once, in any order); DataError of one line naming the bad entry, column or value."""
    values: dict[str, str] = {}
    for entry in text.split(","):
        name, equals, value = entry.partition("=")
        name, value = name.strip(), value.strip()
        if not equals or not name or not value:
            raise DataError(f"--target-record {text!r}: entry {entry.strip()!r} is not column=value")
        if name not in schema.names:
            raise DataError(f"--target-record: column {name!r} is not in the schema ({', '.join(schema.names)})")
        if name in values:
            raise DataError(f"--target-record: column {name!r} is named twice")
        values[name] = value
    if missing := [n for n in schema.names if n not in values]:
        raise DataError(
            f"--target-record names no value for column {missing[0]!r} (the schema's: {', '.join(schema.names)})"
        )
    encoded = {
        c.name: c.encode(np.array([values[c.name]], dtype=object), where="--target-record") for c in schema.columns
    }
    x = np.stack([encoded[c.name] for c in schema.features], axis=1).astype(np.float32)
    return x, encoded[schema.label].astype(np.int64)


def canonical_record(schema: Schema, text: str) -> str:
    """The record `text` names as 'column=value,...' in schema order, each value as the schema spells it."""
    x, y = parse_target_record(schema, text)
    row = schema.decode(x, y).iloc[0]
    return ",".join(f"{name}={row[name]}" for name in schema.names)


def unheld_categories(schema: Schema, x: np.ndarray) -> list[tuple[int, int]]:
    """(feature column, category index) of every feature category no pool row holds, in schema order."""
    found = []
    for j, column in enumerate(schema.features):
        if column.kind == "categorical":
            held = np.bincount(x[:, j].astype(np.int64), minlength=column.size)
            found += [(j, int(c)) for c in np.flatnonzero(held == 0)]
    return found


def unheld_records(
    schema: Schema, x: np.ndarray, y: np.ndarray, n: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """n records, each the only one of its label in every feature cell the pool leaves empty (module
    docstring); `rng` draws the numbers inside their bins."""
    codes = schema.codes(x, y)
    sizes, labels = schema.domain_sizes, schema.label_column.size
    d = len(schema.features)
    empty = [np.flatnonzero(np.bincount(codes[:, j], minlength=sizes[j]) == 0) for j in range(d)]
    fewest = min((len(cells) for cells in empty if len(cells)), default=0)
    if n > labels * fewest:
        raise ValueError(
            f"--canaries {n} unheld canaries need as many that share no empty (label, feature) cell; the pool "
            f"leaves {fewest} cells of a feature empty ({labels} labels: at most {labels * fewest})"
        )
    cells = np.zeros((n, d + 1), dtype=np.int64)
    cells[:, d] = np.arange(n) % labels
    turn = np.arange(n) // labels
    for j in range(d):
        if len(empty[j]):
            cells[:, j] = empty[j][turn % len(empty[j])]
            continue
        for label in range(min(n, labels)):  # no empty cell in this column: the label's most common one
            held = codes[codes[:, d] == label, j]
            held = held if len(held) else codes[:, j]
            cells[cells[:, d] == label, j] = int(np.argmax(np.bincount(held, minlength=sizes[j])))
    if not n:
        return np.zeros((0, d), dtype=np.float32), np.zeros(0, dtype=np.int64)
    for _ in range(MOST_BATCHES):  # a number drawn in its bin may round out of it: drawn again
        x_new, y_new = schema.from_codes(cells, rng)
        if (schema.codes(x_new, y_new) == cells).all():
            return x_new.astype(np.float32), y_new.astype(np.int64)
    raise ValueError(f"--canaries {n}: no number of an unheld canary stayed inside its bin")


def unseen_records(
    schema: Schema, x: np.ndarray, y: np.ndarray, n: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """n records in distinct cells of the discrete domain that no pool row falls in (module docstring)."""
    sizes = np.array(schema.domain_sizes, dtype=np.int64)
    taken = {tuple(row) for row in schema.codes(x, y).tolist()}
    empty = math.prod(int(s) for s in sizes) - len(taken)
    if n > empty:
        raise ValueError(
            f"--canaries {n} unseen canaries need as many cells of the schema's domain that no pool record "
            f"falls in; it has {empty}"
        )
    unheld = unheld_categories(schema, x)
    # per column, the codes a canary's other cells draw from: the held ones where some are unheld
    drawn = [np.arange(s) for s in sizes]
    for column, category in unheld:
        drawn[column] = drawn[column][drawn[column] != category]
    rows: list[tuple[np.ndarray, np.ndarray]] = []
    for _ in range(MOST_BATCHES):
        if len(rows) == n:
            break
        cells = np.stack([codes[rng.integers(0, len(codes), size=BATCH)] for codes in drawn], axis=1)
        for cell in cells:
            if unheld:
                column, category = unheld[len(rows) % len(unheld)]
                cell[column] = category
            if tuple(cell.tolist()) in taken or len(rows) == n:
                continue
            record = schema.from_codes(cell[None], rng)  # a number drawn in its bin (rounding may move it)
            key = tuple(schema.codes(*record)[0].tolist())
            if key not in taken:
                taken.add(key)
                rows.append(record)
    if len(rows) < n:
        raise ValueError(f"--canaries {n}: found {len(rows)} empty cells of the schema's domain for unseen canaries")
    if not rows:
        return np.zeros((0, len(schema.features)), dtype=np.float32), np.zeros(0, dtype=np.int64)
    return np.concatenate([r[0] for r in rows]), np.concatenate([r[1] for r in rows])


def extreme_bound(values: np.ndarray, lower: float, upper: float) -> float:
    """The public bound of a numeric column that its pool values `values` keep farthest from (the
    bound none reaches, where one is unreached; on a tie, the upper)."""
    if len(values) == 0:
        return float(upper)
    below = float(np.min(np.abs(values - lower)))
    above = float(np.min(np.abs(values - upper)))
    return float(lower) if below > above else float(upper)


def rare_categories(counts: np.ndarray) -> np.ndarray:
    """The ⌈K/2⌉ category indices of K that the fewest pool records hold (ties in order)."""
    return np.argsort(counts, kind="stable")[: math.ceil(len(counts) / 2)]


def extreme_records(
    schema: Schema, x: np.ndarray, y: np.ndarray, n: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """n distinct records: numbers at a public bound, categories (the label too) rare ones (module docstring)."""
    columns = [*schema.features, schema.label_column]
    values = np.concatenate([x.astype(np.float64), y[:, None].astype(np.float64)], axis=1)
    choices = []  # per column: the values a canary may take there
    for j, column in enumerate(columns):
        if column.kind == "categorical":
            counts = np.bincount(values[:, j].astype(np.int64), minlength=column.size)
            choices.append(rare_categories(counts).astype(np.float64))
        else:
            choices.append(np.array([extreme_bound(values[:, j], column.lower, column.upper)]))
    numeric = [j for j, column in enumerate(columns) if column.kind != "categorical"]
    turns = max(1, len(numeric))  # canary i opens the (i mod turns)-th numeric column's bound
    distinct = turns * math.prod(len(c) for c in choices)
    if n > distinct:
        raise ValueError(
            f"--canaries {n} extreme canaries need as many distinct records; the schema's bounds and rare "
            f"categories make {distinct}"
        )
    chosen: list[tuple] = []
    seen: set[tuple] = set()
    for _ in range(MOST_BATCHES):
        if len(chosen) == n:
            break
        picks = np.stack([rng.integers(0, len(c), size=BATCH) for c in choices], axis=1)
        for pick in picks:
            key = (len(chosen) % turns, *pick.tolist())
            if key not in seen and len(chosen) < n:
                seen.add(key)
                chosen.append(key[1:])
    if len(chosen) < n:
        raise ValueError(f"--canaries {n}: found {len(chosen)} distinct extreme records")
    rows = np.array([[choices[j][k] for j, k in enumerate(key)] for key in chosen], dtype=np.float64)
    rows = rows.reshape(n, len(columns))
    for i in range(n):  # canary i at the bound of one numeric column, the pool's median in the others
        for j in numeric:
            if j != numeric[i % len(numeric)]:
                rows[i, j] = float(np.median(values[:, j]))
    return rows[:, :-1].astype(np.float32), rows[:, -1].astype(np.int64)
