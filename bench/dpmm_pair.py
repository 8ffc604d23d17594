"""dpmm's MST on the worst-case neighbour pair, many fits, certified by the suite's threshold test
(docs/results/third-party.md, "The worst-case pair").

    python bench/dpmm_pair.py fit --out DIR [--runs 2000] [--batch 200] [--pipeline FILE.toml] [--seed 0]
    python bench/dpmm_pair.py certify --out DIR [--references 0.1] [--split-seed 0]
    python bench/dpmm_pair.py time [--batch 20] [--pipeline FILE.toml]

`fit`: `--runs` runs of the pipeline (default thirdparty/pipelines/dpmm-mst-pair.toml) on `--dataset
pair-3bin`'s D = ten records [0, 0, 0], the target [1, 1, 1] a member by its own fair coin, handed as
an audit hands a batched command its jobs (`victims.command_jobs.run_jobs`, `--batch` seeds a call,
one call at a time); each call's results are appended to DIR/fits.npz as it ends (so a cut-off run
keeps what it fitted): the coin, the release's 8 cell counts, and the white-box observations
(`victims.command_whitebox.measured_observations`: each noisy measurement's count in the target's
cell, less the members in it other than the target), with the call's seconds.

`certify`: the noise each measurement drew (its observation's standard deviation over the OUT fits,
where the target's cells hold no member), and the runs split at random (`--split-seed`) into
references (`--references`, a fraction) and judged runs. The scores, each a fixed function of one run's output:

* black-box (the release): `released_target`, the released rows equal to the target; `released_cells`,
  the released rows holding the target's value, summed over the columns (its 1-way counts);
* white-box (the claim's noisy measurements): `noisy_one_way`, the target's cells in the 1-way
  measurements summed (what the dpmm audit's white-box features are); `noisy_all`, summed over
  every measurement.

Per set (black-box alone; any attack) the attack is either declared before any fit (`DECLARED`:
`released_cells` black-box, `noisy_all` with the white-box ones: the continuous scores; the rows
marked "declared") or picked on the references alone by `audit.pair_design.choose_attack` ("chosen":
on a score with few values, `released_target`, mostly 0, the references' prediction is mostly luck);
`audit.stats.threshold.threshold_audit` then chooses its direction and threshold on the references
and bounds μ and ε on the judged runs, at 90% and 95%. Beside it, on the same judged counts, the
dpmm audit's own computation (`audit.stats.joint_beta`, labelled: a posterior bound).

`time`: the start-and-import seconds and the fit seconds of the pipeline on the pair (a call of 1
seed and of `--batch` seeds, the difference), and the fits per hour both ways.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from audit.pair_design import choose_attack
from audit.stats.joint_beta import joint_beta_mu
from audit.stats.threshold import threshold_audit
from victims.canaries import CanaryConfig, add_canaries
from victims.command_jobs import run_jobs
from victims.command_pipeline import load_pipeline
from victims.command_whitebox import measured_observations
from victims.data import load_pool
from victims.dp.privacy import gdp_mu_for

ROOT = Path(__file__).resolve().parents[1]
PIPELINE = ROOT / "thirdparty" / "pipelines" / "dpmm-mst-pair.toml"
TARGET = "a=1,b=1,c=1"
EPSILON, DELTA = 1.0, 1e-2
#: the μ the claim allows as the dpmm audit states it: MST's zCDP ρ at (1, 1e-2) as √(2ρ)
ANCHOR_MU = 0.455
BLACK_BOX = ("released_target", "released_cells")
WHITE_BOX = ("noisy_one_way", "noisy_all")
#: the attack of each set declared before any fit (module docstring)
DECLARED = {"black-box": "released_cells", "any attack": "noisy_all"}


def pair_pool():
    """pair-3bin with its target as the one record canary (the pool's last row)."""
    return add_canaries(load_pool("pair-3bin"), CanaryConfig(n=1, kind="record", record=TARGET))


def shared_values(pool) -> dict[str, str]:
    """What the audit hands every job: under the fixed remainder the expected member count is the ten
    records of D and half the target, 10.5 (11 rows released)."""
    expected = pool.n_pool - 1 + 0.5
    return {"kind": "table", "expected_members": repr(expected), "epsilon": repr(EPSILON), "delta": repr(DELTA)}


def one_call(spec, pool, coins: np.ndarray, seeds: list[int]) -> tuple[float, list]:
    """One batched call: its seconds and each job's (x, y, claim)."""
    keeps = np.ones((len(coins), pool.n_pool), dtype=bool)
    keeps[:, -1] = coins
    with tempfile.TemporaryDirectory(prefix="bench-dpmm-pair-") as tmp:
        fitted, ended = run_jobs(spec, pool, keeps, seeds, shared_values(pool), directory=Path(tmp))
    return ended.seconds, fitted


def run_features(pool, fitted, coins) -> tuple[np.ndarray, np.ndarray]:
    """Per run: the release's 8 cell counts, and the white-box observations [k]."""
    schema = pool.schema
    names = tuple(c.name for c in schema.features) + (schema.label,)
    target = schema.codes(pool.x[-1:], pool.y[-1:])
    others = schema.codes(pool.x[:-1], pool.y[:-1])
    cells, observed = [], []
    for (x, y, claim), coin in zip(fitted, coins):
        codes = schema.codes(x, y)
        cells.append(np.bincount(np.ravel_multi_index(codes.T, schema.domain_sizes), minlength=8))
        obs, _ = measured_observations(claim, names, schema.domain_sizes, target, others)
        observed.append(obs[:, 0])
    return np.array(cells), np.array(observed)


def fit(args) -> None:
    spec = load_pipeline(str(args.pipeline))
    spec = dataclasses.replace(spec, batch=args.batch)
    pool = pair_pool()
    store = args.out / "fits.npz"
    args.out.mkdir(parents=True, exist_ok=True)
    # `observed` has a column per measurement the pipeline keeps (5 for dpmm's MST, 3 with --one-way-only)
    found = dict(np.load(store)) if store.exists() else {"coin": np.zeros(0, bool)}
    rng = np.random.default_rng([args.seed, len(found["coin"])])
    while len(found["coin"]) < args.runs:
        k = min(args.batch, args.runs - len(found["coin"]))
        coins = rng.random(k) < 0.5
        seeds = [int(s) for s in rng.integers(0, 2**31, size=k)]
        seconds, fitted = one_call(spec, pool, coins, seeds)
        cells, observed = run_features(pool, fitted, coins)
        call = {"coin": coins, "cells": cells, "observed": observed, "seconds": np.array([seconds])}
        found = {key: np.concatenate([found[key], value]) if key in found else value for key, value in call.items()}
        np.savez(store, **found)
        print(
            f"{len(found['coin'])} runs, call of {k} in {seconds:.1f} s ({k / seconds * 3600:.0f} fits/h)", flush=True
        )


def scores(found: dict) -> dict[str, np.ndarray]:
    """Each attack's score per run (module docstring); cell index a*4 + b*2 + c, the target's 7."""
    cells, observed = found["cells"], found["observed"]
    ones = np.array([[(i >> 2) & 1, (i >> 1) & 1, i & 1] for i in range(8)])
    return {
        "released_target": cells[:, 7].astype(float),
        "released_cells": (cells @ ones).sum(axis=1).astype(float),
        "noisy_one_way": observed[:, :3].sum(axis=1),
        "noisy_all": observed.sum(axis=1),
    }


def certify(args) -> None:
    found = dict(np.load(args.out / "fits.npz"))
    coin = found["coin"].astype(bool)
    n = len(coin)
    reference = np.zeros(n, bool)
    reference[np.random.default_rng(args.split_seed).permutation(n)[: int(round(args.references * n))]] = True
    all_scores = scores(found)
    samples = {a: (s[reference & coin], s[reference & ~coin], s[~reference & coin], s[~reference & ~coin])
               for a, s in all_scores.items()}  # fmt: skip
    print(
        f"{n} runs: {coin.sum()} IN, {(~coin).sum()} OUT; references {reference.sum()} "
        f"({(reference & coin).sum()} IN), judged {(~reference).sum()} ({(~reference & coin).sum()} IN)"
    )
    print(f"call seconds: {found['seconds'].sum():.0f} s in all, {n / found['seconds'].sum() * 3600:.0f} fits/h")
    out_std = found["observed"][~coin].std(axis=0, ddof=1)
    shift = all_scores["noisy_all"][coin].mean() - all_scores["noisy_all"][~coin].mean()
    print(
        f"the noise drawn: each measurement's target-cell observation over the OUT fits has std "
        f"{[round(float(v), 3) for v in out_std]}; noisy_all's IN - OUT mean over its OUT std "
        f"{shift / all_scores['noisy_all'][~coin].std(ddof=1):.3f}"
    )
    print(
        f"claim (1, 1e-2): the dpmm audit's mu {ANCHOR_MU}, the Gaussian mechanism exactly (1, 1e-2)-DP "
        f"{gdp_mu_for(EPSILON, DELTA):.4f}"
    )
    rows = []
    for label, names in (("black-box", BLACK_BOX), ("any attack", BLACK_BOX + WHITE_BOX)):
        for confidence in (0.90, 0.95):
            chosen = {a: samples[a] for a in names}
            picked, predicted = choose_attack(chosen, confidence=confidence, delta=DELTA)
            for how, attack in (("declared", DECLARED[label]), ("chosen", picked)):
                row = certified_row(samples[attack], confidence=confidence)
                row = {"set": label, "attack": attack, "how": how, **row}
                row["predicted"] = {a: round(v, 3) for a, v in predicted.items()}
                rows.append(row)
                print(json.dumps(row))
    (args.out / "certified.json").write_text(json.dumps(rows, indent=1) + "\n")


def certified_row(sample, *, confidence: float) -> dict:
    """`threshold_audit` of one attack's (reference IN, reference OUT, judged IN, judged OUT) scores, and
    the dpmm audit's joint-beta μ on the same judged counts."""
    audit = threshold_audit(*sample, delta=DELTA, confidence=confidence)
    counts = {"tp": audit.tp, "fn": audit.n_in - audit.tp, "fp": audit.fp, "tn": audit.n_out - audit.fp}
    return {
        "confidence": confidence,
        "tp": audit.tp,
        "n_in": audit.n_in,
        "fp": audit.fp,
        "n_out": audit.n_out,
        "mu_exact": audit.mu_lower,
        "mu_clopper_pearson": audit.mu_lower_baseline,
        "eps_exact": audit.epsilon_lower,
        "mu_joint_beta_anchor": joint_beta_mu(**counts, alpha=1 - confidence),
    }


def timing(args) -> None:
    """Start + import against fit (a call of 1 seed and of K), and fits per hour both ways."""
    spec = dataclasses.replace(load_pipeline(str(args.pipeline)), batch=args.batch)
    pool = pair_pool()
    coins = np.arange(args.batch) % 2 == 1
    seeds = list(range(args.batch))
    one = [one_call(spec, pool, coins[:1], seeds[:1])[0] for _ in range(3)]
    many = one_call(spec, pool, coins, seeds)[0]
    fit_s = (many - np.median(one)) / (args.batch - 1)
    print(" ".join(spec.command))
    print(f"a call of 1 seed: {np.round(one, 2).tolist()} s; of {args.batch} seeds: {many:.2f} s")
    print(f"-> start and import {np.median(one) - fit_s:.2f} s, fit {fit_s:.3f} s a seed")
    print(
        f"one process per seed: {3600 / np.median(one):.0f} fits/h; one process for {args.batch}: "
        f"{args.batch / many * 3600:.0f} fits/h (one process at a time)"
    )


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("step", choices=["fit", "certify", "time"])
    p.add_argument("--out", type=Path, default=Path("runs/dpmm-pair"))
    p.add_argument("--pipeline", type=Path, default=PIPELINE)
    p.add_argument("--runs", type=int, default=2000)
    p.add_argument("--batch", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--references", type=float, default=0.1)
    p.add_argument("--split-seed", type=int, default=0)
    args = p.parse_args(argv)
    {"fit": fit, "certify": certify, "time": timing}[args.step](args)


if __name__ == "__main__":
    sys.exit(main())
