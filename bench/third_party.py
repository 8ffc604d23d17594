"""The third-party catalogue (docs/results/third-party.md): maintained DP synthesizers, each run as
`--victim command` in a virtual environment of its own, audited on a cut of the embedded `fair` table.

    python bench/third_party.py [--build] [--configs smartnoise-mst dpmm-priv-bayes ...]
                                [--preprocessing schema defaults] [--epsilons 1 10]
                                [--designs independent fixed-remainder] [--n-shadow 16]
                                [--canaries 4] [--rows 1000] [--seed 0] [--runs-dir DIR] [--jsonl F]

`--build` first builds the environments (`bash thirdparty/build_envs.sh`: one per library, from
thirdparty/requirements/<name>.lock). Each configuration is a pipeline file,
thirdparty/pipelines/<config>-<preprocessing>.toml, whose command runs the library's adapter
(thirdparty/adapters/) in its environment; each row is one
`python -m audit.lira --victim command --pipeline FILE --dataset CUT --epsilon E --delta 1e-5
--canaries 4 --canary-kind unseen [--plan fixed-remainder] --n-shadow N` in a store of its own
under `--runs-dir` (a temporary directory by default; a store given there is reused, so a second
call only scores). The references `tabular-subset` (the naive baseline) and `ctgan` (no claim) are
audited on the same cut under the same designs (`--configs subset ctgan`).

The cut (`write_cut`): fair's pool without the records that hold any of four of its rarest public
categories (occupation 1, husband's occupation 1, education 9, age 17.5), `--rows` records drawn
from the rest with a fixed seed, and fair's test split; the schema is fair's, unchanged (the
public codebook still lists the four). So the four `unseen` canaries of a run each hold one category
no other record holds (canary j the j-th): a pipeline that reads its categories from the rows
without spending budget can only release that category when its canary is IN. Smaller than fair's
5,000 because a run of these libraries costs tens of seconds on 2 cores.

Printed as markdown rows (bench/tabular.py's columns, with the configuration, preprocessing, design
and claim in the first); `--jsonl` keeps every row's figures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from tabular import audit, markdown, row_figures  # bench/tabular.py, beside this script
from victims.tabular.pools import load_fair, member_table, write_schema_file

ROOT = Path(__file__).resolve().parents[1]
PIPELINES = ROOT / "thirdparty" / "pipelines"
CONFIGS = ["smartnoise-mst", "smartnoise-aim", "smartnoise-mwem", "dpmm-mst", "dpmm-aim", "dpmm-priv-bayes"]
REFERENCES = {"subset": ["--victim", "tabular-subset"], "ctgan": ["--victim", "ctgan"]}
#: (column, public category) pairs no record of the cut holds: one per canary
UNHELD = [("occupation", 1), ("occupation_husb", 1), ("educ", 9), ("age", 17.5)]
CUT_SEED = 20261127
HEADER = (
    "| configuration | formal ε | test acc | 2-way TV | best attack, AUC | TPR@1%FPR | verdict | own curve | s/run |"
)


def write_cut(directory: Path, rows: int) -> Path:
    """The cut of fair (module docstring) as a schema file naming its CSVs; its path."""
    pool = load_fair()
    table = member_table(pool, np.arange(pool.n_pool))
    held = np.ones(len(table), dtype=bool)
    for column, category in UNHELD:
        held &= table[column].to_numpy(dtype=float) != category
    kept = np.flatnonzero(held)
    chosen = np.sort(np.random.default_rng(CUT_SEED).choice(kept, size=min(rows, kept.size), replace=False))
    directory.mkdir(parents=True, exist_ok=True)
    table.iloc[chosen].to_csv(directory / "rows.csv", index=False)
    pool.schema.decode(pool.x_test, pool.y_test).to_csv(directory / "test.csv", index=False)
    return write_schema_file(directory / f"fair-cut-{rows}.json", pool.schema, "rows.csv", "test.csv")


def flags_of(config: str, preprocessing: str, epsilon: float | None) -> list[str]:
    if config in REFERENCES:
        return REFERENCES[config]
    pipeline = PIPELINES / f"{config}-{preprocessing}.toml"
    return ["--victim", "command", "--pipeline", str(pipeline), "--epsilon", f"{epsilon:g}", "--delta", "1e-5"]


def design_flags(args: argparse.Namespace, design: str) -> list[str]:
    """The canaries and the plan every row is audited with (after its configuration's flags)."""
    flags = ["--canaries", str(args.canaries), "--canary-kind", "unseen"]
    return flags + (["--plan", "fixed-remainder"] if design == "fixed-remainder" else [])


def rows_asked(args: argparse.Namespace):
    """(config, preprocessing, ε, design) of every row asked for, references once per design."""
    for config in args.configs:
        for design in args.designs:
            if config in REFERENCES:
                yield config, "-", None, design
                continue
            for preprocessing in args.preprocessing:
                for epsilon in args.epsilons:
                    yield config, preprocessing, epsilon, design


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", action="store_true", help="build the environments first (thirdparty/build_envs.sh)")
    p.add_argument("--configs", nargs="+", default=CONFIGS, choices=CONFIGS + list(REFERENCES))
    p.add_argument("--preprocessing", nargs="+", default=["schema", "defaults"], choices=["schema", "defaults"])
    p.add_argument("--epsilons", nargs="+", type=float, default=[1.0, 10.0])
    p.add_argument(
        "--designs", nargs="+", default=["independent", "fixed-remainder"], choices=["independent", "fixed-remainder"]
    )
    p.add_argument("--n-shadow", type=int, default=16)
    p.add_argument("--canaries", type=int, default=len(UNHELD))
    p.add_argument("--rows", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--runs-dir", type=Path, default=None)
    p.add_argument("--jsonl", type=Path, default=None)
    args = p.parse_args()
    if args.build:
        subprocess.run(["bash", str(ROOT / "thirdparty" / "build_envs.sh")], check=True)
    print(HEADER)
    print("|---" * HEADER.count("|", 1) + "|")
    with tempfile.TemporaryDirectory() as scratch:
        runs_dir = args.runs_dir or Path(scratch)
        dataset = write_cut(runs_dir / "dataset", args.rows)
        for config, preprocessing, epsilon, design in rows_asked(args):
            name = f"{config} {preprocessing} ε={epsilon:g} {design}" if epsilon else f"{config} {design}"
            where = runs_dir / name.replace(" ", "_").replace("ε=", "eps")
            where.mkdir(parents=True, exist_ok=True)
            flags = [*flags_of(config, preprocessing, epsilon), *design_flags(args, design)]
            done = audit(flags, dataset=str(dataset), n_shadow=args.n_shadow, seed=args.seed, runs_dir=where)
            figures = row_figures(name, done)
            figures.update(
                config=config, preprocessing=preprocessing, epsilon=epsilon, design=design, n_shadow=args.n_shadow
            )
            print(markdown(figures), flush=True)
            if args.jsonl:
                with args.jsonl.open("a") as f:
                    f.write(json.dumps(figures, default=str) + "\n")


if __name__ == "__main__":
    main()
