"""`marginals` and its bugs audited with crafted tabular record canaries (until `victims.canaries` makes them).

    python bench/marginals_canaries.py distinct <audit.lira flags> --canaries 4 --canary-kind mislabeled \\
        --threat-model white-box
    python bench/marginals_canaries.py unique <audit.lira flags> --canaries 34 --canary-kind mislabeled

Runs `python -m audit.lira` with the given flags, its `--canaries N` rows replaced (in place of
`victims.canaries.add_canaries`, which makes image canaries only) by N records of the table's schema:

* `distinct`: canary j holds cell j of every column, so the N canaries lie in distinct cells of every
  marginal (N at most the smallest column's cells: 4 on fair): the white-box `marginals` design;
* `unique`: canary j holds an empty (label, last feature) cell, one no pool record occupies (cell 1 of
  every other column): a record the domain bug (`victims.dp.bugs.MarginalsDomainFromData`) creates a cell
  for only when it is a member. N at most the empty cells (34 on fair, whose last feature is affairs).

`--canary-kind` names a kind the flags accept; the rows are these whatever it says. The measurements
are in docs/results/white-box.md, "The marginals bugs (tables)".
"""

from __future__ import annotations

import sys

import numpy as np

DESIGNS = ("distinct", "unique")


def canary_codes(pool, n: int, design: str) -> np.ndarray:
    """int64 [n, d + 1]: the canaries' cells (the module docstring's designs); ValueError if they do not fit."""
    from victims.pipelines.marginals import marginal_counts

    sizes = pool.schema.domain_sizes
    if design == "distinct":
        if n > min(sizes):
            raise ValueError(f"--canaries {n}: distinct cells in every column allow at most {min(sizes)}")
        return np.repeat(np.arange(n)[:, None], len(sizes), axis=1)
    label, last = len(sizes) - 1, len(sizes) - 2
    empty = np.argwhere(marginal_counts(pool.schema.codes(pool.x, pool.y), sizes, (label, last)) == 0)
    if n > len(empty):
        raise ValueError(f"--canaries {n}: the pool leaves only {len(empty)} (label, last feature) cells empty")
    codes = np.ones((n, len(sizes)), dtype=np.int64)
    codes[:, label], codes[:, last] = empty[:n, 0], empty[:n, 1]
    return codes


def planter(design: str):
    """An `add_canaries(pool, config)` that appends the design's canary records to a table."""
    from victims.pool import make_pool

    def plant(pool, config):
        if config is None:
            return pool
        x, y = pool.schema.from_codes(canary_codes(pool, config.n, design), np.random.default_rng(config.seed))
        return make_pool(
            pool.name,
            np.concatenate([pool.x, x]),
            np.concatenate([pool.y, y]),
            pool.x_test,
            pool.y_test,
            pool.classes,
            pool.flip_ok,
            schema=pool.schema,
        )

    return plant


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in DESIGNS:
        print(
            f"marginals_canaries.py: error: the first argument is a design, one of {', '.join(DESIGNS)}",
            file=sys.stderr,
        )
        return 2
    import audit.cli.shadow_audit as shadow_audit
    from audit import lira

    shadow_audit.add_canaries = planter(sys.argv[1])
    return lira.main(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
