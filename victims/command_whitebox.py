"""White-box observations of a command's record canaries, read from the noisy measurements its claim
hands back (docs/contracts.md, "A pipeline as a command"; `thirdparty/adapters/dpmm_synth.py`).

A claim's `measurements_cells` lists {"columns", "sigma", "noisy"}, one marginal's noisy counts
over the columns' public cells in C order (`Schema.codes`). Knowing every record but the
canary's coin, the auditor observes o_{m,j} = (noisy count of canary j's cell) - (the other
members in it): N(b_j, s_m^2) for a sensitivity-1 Gaussian measurement, as in `attacks.whitebox`.
`measured_observations` is pure; nothing here runs the command.
"""

from __future__ import annotations

import math

import numpy as np

from victims.tabular.schema import whitebox_observations

#: the claim's key for the measured cells
CELLS_KEY = "measurements_cells"


def _check_measurement(
    entry, index: int, names: tuple[str, ...], sizes: dict[str, int]
) -> tuple[tuple[int, ...], np.ndarray]:
    """(column indices, noisy counts) of one entry; ValueError naming what is wrong."""
    where = f"the claim's {CELLS_KEY}[{index}]"
    if not isinstance(entry, dict) or not {"columns", "noisy"} <= set(entry):
        raise ValueError(f"{where} is not an object with 'columns' and 'noisy'")
    columns = entry["columns"]
    if not isinstance(columns, list) or not columns or any(c not in sizes for c in columns):
        raise ValueError(f"{where}: columns {columns!r} are not columns of the schema ({', '.join(names)})")
    noisy = np.asarray(entry["noisy"], dtype=np.float64).reshape(-1)
    cells = math.prod(sizes[c] for c in columns)
    if noisy.size != cells:
        raise ValueError(
            f"{where}: {noisy.size} noisy counts for the {cells} public cells of {', '.join(columns)} "
            "(a compressed or binned domain is not the schema's)"
        )
    return tuple(names.index(c) for c in columns), noisy


def measured_observations(
    claim: dict,
    names: tuple[str, ...],
    domain_sizes: tuple[int, ...],
    canary_codes: np.ndarray,
    member_codes: np.ndarray,
) -> tuple[np.ndarray, float]:
    """(float32 [k, canaries] observations, the largest σ recorded) from a claim's `measurements_cells`.

    `names` and `domain_sizes`: the schema's columns in `Schema.codes` order and their cell counts;
    `canary_codes` [canaries, columns]: each canary's cell codes; `member_codes` [members, columns]:
    every member other than the canaries (their own cells' counts are subtracted). ValueError (one
    line) where the claim has no measurements or one does not fit the schema."""
    entries = (claim or {}).get(CELLS_KEY)
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"the command's claim has no {CELLS_KEY} (the noisy measurements a white-box audit reads)")
    sizes = dict(zip(names, (int(s) for s in domain_sizes)))
    canary_codes = np.asarray(canary_codes, dtype=np.int64).reshape(-1, len(names))
    member_codes = np.asarray(member_codes, dtype=np.int64).reshape(-1, len(names))
    checked = [_check_measurement(entry, m, names, sizes) for m, entry in enumerate(entries)]
    marginals = tuple(columns for columns, _ in checked)
    noisy = [counts.reshape(tuple(sizes[names[c]] for c in columns)) for columns, counts in checked]
    held = np.zeros(len(canary_codes))  # `member_codes` holds no canary: none to take out of the counts
    observed = whitebox_observations(noisy, member_codes, tuple(sizes.values()), marginals, canary_codes, held)
    return observed, max(float(entry.get("sigma", 0.0) or 0.0) for entry in entries)
