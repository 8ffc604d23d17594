"""Adapter: a dpmm pipeline (MST, AIM, PrivBayes) as `--victim command`.

Runs inside thirdparty/envs/dpmm (dpmm 0.1.9, its own pins); only its public API:
`MSTPipeline` / `AIMPipeline` / `PrivBayesPipeline(epsilon=, delta=, ...)`, `.fit(df, domain=)`,
`.generate(n_records=)`.

    python dpmm_synth.py --model mst|aim|priv-bayes --preprocessing schema|defaults|none [--n-iters N]
                         [--select-iters N] [--no-compress] [--n-records N] --epsilon E --delta D

Batched (the pipeline's `batch = K`): dpmm is imported once and the call's seeds fitted one after the
other (jobs.py), each as a call of its own fits it: a new pipeline object, Python's and numpy's global
generators seeded by the seed. Its measurements' noise is OpenDP's, drawn from the operating system
(`dpmm.models.base.utils.gaussian_noise`), so no two fits of one seed are equal, batched or not.

--preprocessing schema: `fit(df, domain=...)` with every categorical column's public categories and
every numeric column's public bounds, a uniform binner with the schema's bins and no budget spent on
preprocessing (`proc_epsilon=None`): nothing about the domain is read from the members.
--preprocessing defaults: `Pipeline(epsilon=ε − 0.1, delta=δ)` and `fit(df)` as dpmm's README
shows it: its PrivTree binner spends its default `proc_epsilon` = 0.1 on the numeric columns (so the
run claims ε in all), and the categories are read from the rows ("PrivacyLeakage: No categorical
domain provided ... will be imputed").

--preprocessing none: `Pipeline(..., disable_processing=True)` and `fit(codes, domain={column: size})`,
every column a categorical one coded by its public categories' order in the schema (numeric columns
are refused): no binner at all. dpmm's `TableBinner` (schema and defaults alike) drops every column
that holds one value in the private rows ("static columns", read from the rows, no budget), so on
the worst-case table (D = ten records [0, 0, 0]) its `fit` fails for D and not for D ∪ {[1, 1, 1]};
with the binner off the same MST fits both (docs/results/third-party.md, "The worst-case pair").

Knobs, each stated in the pipeline file that sets it: `--n-iters` (dpmm's estimation iterations, the
PGM fit the release is sampled from), `--select-iters` (MST only: the iterations of the PGM estimate
its selection step computes from the noisy 1-way measurements, hard-coded 2,500 in
`dpmm.models.mst.MST.select`; set by handing `select` a `FactoredInference` with that many: the
estimate is post-processing of noisy measurements, so the mechanism and its budget are unchanged),
`--no-compress` (dpmm's `compress=False`: the measured cells are then the schema's cells) and
`--n-records` (the release's rows; default the public expected member count, MIA_EXPECTED_MEMBERS).
dpmm's `cdp_rho(ε, δ)` (a bisection of about 2,000 ρ-to-δ conversions, each a 1,000-term loop: 80%
of a fit on the worst-case table once the iterations are cut) is memoised per process: a pure
function of the claim, its value unchanged.

The claim written back is the ε and δ spent in all, and dpmm's noisy measurements
(`gen.generator.measures`, a list of (Q, noisy answer y, σ, clique)): their count and σ, and with
--preprocessing none each one as {"columns", "sigma", "noisy"} (the noisy counts flattened in
C order over the columns' codes, i.e. the schema's categories' order) under `measurements_cells`,
what a white-box auditor reads the target's cells from (`victims.command_whitebox`). The σ dpmm
records is its `sigma` before the per-clique weight: MST draws each measurement's noise with σ/w,
w = 1/√(number of 1-way cliques), so the noise drawn is √d times the σ it records.
"""

from __future__ import annotations

import argparse
import functools
import random

import numpy as np
from handover import Handed, add_claim_flags, read_handed, write_claim, write_release
from jobs import each_job

PROC_EPSILON = 0.1  # dpmm's default preprocessing budget (MMPipeline's proc_epsilon)


def public_domain(handed: Handed) -> dict:
    domain = {name: {"categories": handed.categories(name)} for name in handed.categorical}
    for column in handed.numeric:
        domain[column["name"]] = {"lower": float(column["lower"]), "upper": float(column["upper"])}
    return domain


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, choices=["mst", "aim", "priv-bayes"])
    parser.add_argument("--preprocessing", required=True, choices=["schema", "defaults", "none"])
    parser.add_argument(
        "--n-iters", type=int, default=None, help="mst/aim/priv-bayes: estimation iterations (dpmm's n_iters)"
    )
    parser.add_argument(
        "--select-iters", type=int, default=None, help="mst: the selection step's estimation iterations (dpmm: 2500)"
    )
    parser.add_argument("--no-compress", action="store_true", help="dpmm's compress=False")
    parser.add_argument("--n-records", type=int, default=None, help="release rows (default MIA_EXPECTED_MEMBERS)")
    add_claim_flags(parser)
    args = parser.parse_args()
    from dpmm.pipelines import AIMPipeline, MSTPipeline, PrivBayesPipeline

    set_knobs(args)
    pipeline_class = {"mst": MSTPipeline, "aim": AIMPipeline, "priv-bayes": PrivBayesPipeline}[args.model]
    for _ in each_job():
        fit(args, pipeline_class, read_handed(args))


def set_knobs(args: argparse.Namespace) -> None:
    """dpmm's `cdp_rho` memoised (module docstring), and MST's selection iterations where given."""
    import dpmm.models.base.mechanisms.mechanism as mechanism
    import dpmm.models.mst as mst
    import dpmm.models.priv_bayes as priv_bayes

    cached = functools.lru_cache(maxsize=None)(mst.cdp_rho)
    for module in (mechanism, mst, priv_bayes):
        module.cdp_rho = cached
    if args.select_iters is not None:
        inference, iters = mst.FactoredInference, args.select_iters
        mst.FactoredInference = lambda domain, iters_=None, **kwargs: inference(domain, **{**kwargs, "iters": iters})


def schema_codes(handed: Handed):
    """(codes, domain): the members' categories as their index in the schema's list, per column, and
    each column's number of categories (--preprocessing none)."""
    if handed.numeric:
        raise SystemExit("dpmm_synth.py: --preprocessing none takes categorical columns only")
    codes = handed.members[handed.categorical].copy()
    for name in handed.categorical:
        codes[name] = codes[name].map({v: i for i, v in enumerate(handed.categories(name))}).astype(int)
    return codes, {name: len(handed.categories(name)) for name in handed.categorical}


def fit(args: argparse.Namespace, pipeline_class, handed: Handed) -> None:
    """One seed's release and claim, written where the run (or the job) asks."""
    random.seed(handed.seed)
    np.random.seed(handed.seed % 2**32)
    gen_kwargs = {} if args.n_iters is None else {"n_iters": args.n_iters}
    common = {"gen_kwargs": gen_kwargs, "n_jobs": 1, **({"compress": False} if args.no_compress else {})}
    rows = handed.rows if args.n_records is None else args.n_records
    if args.preprocessing == "none":
        codes, sizes = schema_codes(handed)
        pipeline = pipeline_class(epsilon=handed.epsilon, delta=handed.delta, disable_processing=True, **common)
        pipeline.fit(codes, domain=sizes, random_state=handed.seed)
        release = pipeline.generate(n_records=rows, random_state=handed.seed)
        for name in handed.categorical:
            release[name] = release[name].map(dict(enumerate(handed.categories(name))))
    elif args.preprocessing == "schema":
        bins = max([int(c.get("bins") or 10) for c in handed.numeric] + [2])
        pipeline = pipeline_class(
            epsilon=handed.epsilon,
            delta=handed.delta,
            **common,
            binner_type="uniform",
            proc_epsilon=None,
            n_bins=bins,
        )
        pipeline.fit(handed.members, domain=public_domain(handed), random_state=handed.seed)
        release = pipeline.generate(n_records=rows, random_state=handed.seed)
    else:
        pipeline = pipeline_class(epsilon=handed.epsilon - PROC_EPSILON, delta=handed.delta, **common)
        pipeline.fit(handed.members, random_state=handed.seed)
        release = pipeline.generate(n_records=rows, random_state=handed.seed)
    write_release(handed, release)
    # the noisy measurements (query, noisy answer, σ, clique) the model's mechanism keeps after fitting
    measures = getattr(getattr(pipeline.gen, "generator", None), "measures", None) or []
    sigmas = sorted({float(m[2]) for m in measures if len(m) > 2 and np.isscalar(m[2])}) if measures else []
    cells = {"measurements_cells": measured_cells(measures)} if args.preprocessing == "none" else {}
    write_claim(
        {
            "epsilon": handed.epsilon,
            "delta": handed.delta,
            "accountant": f"dpmm {args.model} (zCDP; preprocessing {args.preprocessing})",
            "library": "dpmm 0.1.9",
            "preprocessing": args.preprocessing,
            "measurements": len(measures),
            "measurement_sigmas": sigmas[:10],
            **cells,
        }
    )


def measured_cells(measures) -> list[dict]:
    """Each noisy measurement as {"columns", "sigma", "noisy"} (module docstring): dpmm's (Q,
    y, σ, clique) with Q the identity on the clique's cells, y their noisy counts in C order."""
    found = []
    for _, noisy, sigma, clique in measures:
        noisy = np.asarray(noisy, dtype=float).reshape(-1)
        found.append({"columns": list(clique), "sigma": float(sigma), "noisy": noisy.tolist()})
    return found


if __name__ == "__main__":
    main()
