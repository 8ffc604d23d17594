"""Adapter: a dpmm pipeline (MST, AIM, PrivBayes) as `--victim command`.

Runs inside thirdparty/envs/dpmm (dpmm 0.1.9) through its public API only, unless `--select-iters`,
`--memoise-rho` or `--one-way-only` is given: those three patch dpmm's internals (below), and only
the worst-case pair's pipelines set them. Batched, each seed is fitted as a call of its own would fit
it; OpenDP draws the noise from the OS, so no two fits agree.

--preprocessing schema: the schema's public categories, bounds and bins, no budget on
preprocessing: nothing about the domain is read from the members. --preprocessing defaults:
dpmm's README use, its PrivTree binner spending `proc_epsilon` = 0.1 of the claimed ε, categories
read from the rows. --preprocessing none: no binner, categorical columns coded by the schema's
order (dpmm's binner drops single-valued columns, so the worst-case pair fails to fit with it:
docs/results/third-party.md). `--select-iters` replaces MST's selection-step estimate's 2,500
iterations (`mst.FactoredInference`): a post-processing of the noisy 1-way measurements, the
mechanism and its budget unchanged. `--memoise-rho` memoises the pure `cdp_rho` per process, its
value unchanged. `--one-way-only` (mst) changes the mechanism, as the dpmm audit's own MST does: no
2-way cliques are selected (`MST.select` returns none, spending nothing) so none are measured, and
MST's recorded σ is `one_way_sigma(ρ)`, so its 1-way measurements spend the whole ρ; the release is
sampled from the model estimated on those alone.

--domain-from-rows COLUMN plants a bug, on purpose: that one categorical column's categories are
the schema's categories some member holds (read from the private rows, no budget spent), every other
column's the schema's, so a category of COLUMN that only the target holds is released only when the
target is a member. A deliberately broken victim for testing audits (docs/results/white-box.md, "The
catalogue of bugs"; docs/results/third-party.md, "A one-column domain leak"), never a configuration
to release with.

The claim written back is the ε and δ spent in all and dpmm's noisy measurements (with
--preprocessing none each as {"columns", "sigma", "noisy"}, C order over the schema's codes, under
`measurements_cells`, read by `victims.command_whitebox`). MST draws each measurement's noise
with σ/w, w = 1/√(number of 1-way cliques): √d times the σ it records.
"""

from __future__ import annotations

import argparse
import functools
import math
import random
import sys

import numpy as np
from handover import Handed, add_claim_flags, read_handed, write_claim, write_release
from jobs import each_job

PROC_EPSILON = 0.1  # dpmm's default preprocessing budget (MMPipeline's proc_epsilon)


def categories(handed: Handed, name: str, from_rows: str | None) -> list[str]:
    """The categories `name` is given: the schema's, or for the column `from_rows` (the planted bug,
    module docstring) those of them some member holds, in the schema's order."""
    if name != from_rows:
        return handed.categories(name)
    held = set(handed.members[name])
    return [category for category in handed.categories(name) if category in held]


def public_domain(handed: Handed, from_rows: str | None = None) -> dict:
    domain = {name: {"categories": categories(handed, name, from_rows)} for name in handed.categorical}
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
    parser.add_argument("--memoise-rho", action="store_true", help="dpmm's cdp_rho remembered per process")
    parser.add_argument("--one-way-only", action="store_true", help="mst: the whole budget on the 1-way marginals")
    parser.add_argument("--no-compress", action="store_true", help="dpmm's compress=False")
    parser.add_argument("--n-records", type=int, default=None, help="release rows (default MIA_EXPECTED_MEMBERS)")
    parser.add_argument(
        "--domain-from-rows",
        metavar="COLUMN",
        default=None,
        help="a planted bug: COLUMN's categories read from the rows",
    )
    add_claim_flags(parser)
    args = parser.parse_args()
    if args.one_way_only and args.model != "mst":
        print(f"dpmm_synth.py: --one-way-only is MST's, not --model {args.model}'s", file=sys.stderr)
        raise SystemExit(2)
    from dpmm.pipelines import AIMPipeline, MSTPipeline, PrivBayesPipeline

    if args.domain_from_rows is not None and args.preprocessing == "defaults":
        parser.error("--domain-from-rows: the defaults read every column's categories from the rows already")
    set_knobs(args)
    pipeline_class = {"mst": MSTPipeline, "aim": AIMPipeline, "priv-bayes": PrivBayesPipeline}[args.model]
    for _ in each_job():
        fit(args, pipeline_class, read_handed(args))


def one_way_sigma(rho: float) -> float:
    """The σ MST records for its d 1-way measurements to spend all of ρ (zCDP): each is drawn with
    σ·√d (module docstring) and moves by at most 1 between neighbours, so each spends 1/(2dσ²) and
    the d together 1/(2σ²) = ρ: σ = √(1/(2ρ)), whatever d. Then a record moving one cell in each of
    the d marginals is told apart at μ = √d/(σ·√d) = √(2ρ)."""
    return math.sqrt(1 / (2 * rho))


def set_knobs(args: argparse.Namespace) -> None:
    """The three patches of dpmm's internals, each only where its flag is given (module docstring)."""
    import dpmm.models.base.mechanisms.mechanism as mechanism
    import dpmm.models.mst as mst
    import dpmm.models.priv_bayes as priv_bayes

    if args.memoise_rho:
        cached = functools.lru_cache(maxsize=None)(mst.cdp_rho)
        for module in (mechanism, mst, priv_bayes):
            module.cdp_rho = cached
    if args.select_iters is not None:
        inference, iters = mst.FactoredInference, args.select_iters
        mst.FactoredInference = lambda domain, iters_=None, **kwargs: inference(domain, **{**kwargs, "iters": iters})
    if args.one_way_only:
        init = mst.MST.__init__

        def one_way_init(self, *pos, **kwargs):
            init(self, *pos, **kwargs)
            self.sigma = one_way_sigma(self.rho)

        mst.MST.__init__ = one_way_init
        mst.MST.select = lambda self, *pos, **kwargs: []


def schema_codes(handed: Handed, given: dict[str, list[str]]):
    """(codes, domain): the members' categories as their index in the column's `given` list, per
    column, and each column's number of categories (--preprocessing none)."""
    if handed.numeric:
        raise SystemExit("dpmm_synth.py: --preprocessing none takes categorical columns only")
    codes = handed.members[handed.categorical].copy()
    for name in handed.categorical:
        codes[name] = codes[name].map({v: i for i, v in enumerate(given[name])}).astype(int)
    return codes, {name: len(given[name]) for name in handed.categorical}


def fit(args: argparse.Namespace, pipeline_class, handed: Handed) -> None:
    """One seed's release and claim, written where the run (or the job) asks."""
    random.seed(handed.seed)
    np.random.seed(handed.seed % 2**32)
    gen_kwargs = {} if args.n_iters is None else {"n_iters": args.n_iters}
    common = {"gen_kwargs": gen_kwargs, "n_jobs": 1, **({"compress": False} if args.no_compress else {})}
    rows = handed.rows if args.n_records is None else args.n_records
    if args.domain_from_rows is not None and args.domain_from_rows not in handed.categorical:
        raise SystemExit(
            f"dpmm_synth.py: --domain-from-rows {args.domain_from_rows!r}: no categorical column of that name"
        )
    if args.preprocessing == "none":
        given = {name: categories(handed, name, args.domain_from_rows) for name in handed.categorical}
        codes, sizes = schema_codes(handed, given)
        pipeline = pipeline_class(epsilon=handed.epsilon, delta=handed.delta, disable_processing=True, **common)
        pipeline.fit(codes, domain=sizes, random_state=handed.seed)
        release = pipeline.generate(n_records=rows, random_state=handed.seed)
        for name in handed.categorical:
            release[name] = release[name].map(dict(enumerate(given[name])))
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
        pipeline.fit(handed.members, domain=public_domain(handed, args.domain_from_rows), random_state=handed.seed)
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
            "accountant": f"dpmm {args.model} (zCDP; preprocessing {args.preprocessing}"
            + ("; the whole ρ on the 1-way marginals)" if args.one_way_only else ")"),
            "library": "dpmm 0.1.9",
            "preprocessing": args.preprocessing,
            **({"domain_from_rows": args.domain_from_rows} if args.domain_from_rows else {}),
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
