"""A tiny table synthesizer with a one-column domain leak, run as a batched command (docs/contracts.md,
"Batched commands"): deliberately broken, for tests/victims/test_domain_leak.py.

Each column's counts among the members over its categories, plus Laplace noise (scale: the columns over
MIA_EPSILON), clipped at 0, sampled column by column, MIA_EXPECTED_MEMBERS rows, every draw from numpy's
generator seeded by the seed alone. Every column's categories are the public schema's (MIA_SCHEMA) but
those of `--domain-from-rows COLUMN`: the schema's categories some member holds, the bug that
thirdparty/adapters/dpmm_synth.py plants with the same flag. A category of COLUMN that only the target
holds is then released only when the target is a member; in the other columns the noise releases
some of every empty category, member or not.

    python one_column_leak_command.py --domain-from-rows COLUMN
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd


def text(value) -> str:
    """A schema category as the members' CSV holds it (22.0 -> "22")."""
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def fit(members: str, seed: int, out: str, *, schema: dict, leaking: str, rows: int, epsilon: float) -> None:
    """The release of one seed (module docstring), written to `out`."""
    frame = pd.read_csv(members, keep_default_na=False, dtype=str)
    rng = np.random.default_rng(seed)
    released = {}
    for column in schema["columns"]:
        name, categories = column["name"], [text(v) for v in column["categories"]]
        if name == leaking:
            categories = [c for c in categories if c in set(frame[name])]
        counts = frame[name].value_counts().reindex(categories, fill_value=0).to_numpy()
        noisy = np.clip(counts + rng.laplace(scale=len(frame.columns) / epsilon, size=len(counts)), 0, None) + 1e-9
        released[name] = rng.choice(categories, size=rows, p=noisy / noisy.sum())
    pd.DataFrame(released).to_csv(out, index=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domain-from-rows", metavar="COLUMN", required=True)
    args = parser.parse_args()
    schema = json.loads(Path(os.environ["MIA_SCHEMA"]).read_text())
    rows = int(round(float(os.environ["MIA_EXPECTED_MEMBERS"])))
    epsilon = float(os.environ.get("MIA_EPSILON", "1"))
    for job in json.loads(Path(os.environ["MIA_JOBS"]).read_text()):
        fit(
            job["members"],
            job["seed"],
            job["out"],
            schema=schema,
            leaking=args.domain_from_rows,
            rows=rows,
            epsilon=epsilon,
        )


if __name__ == "__main__":
    main()
