"""Adapter: a dpmm pipeline (MST, AIM, PrivBayes) as `--victim command`.

Runs inside thirdparty/envs/dpmm (dpmm 0.1.9, its own pins); only its public API:
`MSTPipeline` / `AIMPipeline` / `PrivBayesPipeline(epsilon=, delta=, ...)`, `.fit(df, domain=)`,
`.generate(n_records=)`.

    python dpmm_synth.py --model mst|aim|priv-bayes --preprocessing schema|defaults [--n-iters N] --epsilon E --delta D

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

The release has MIA_EXPECTED_MEMBERS rows (the public count). The claim written back is the ε and δ
spent in all, and dpmm's noisy measurements' count and σ (`gen.generator.measures`).
"""

from __future__ import annotations

import argparse
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
    parser.add_argument("--preprocessing", required=True, choices=["schema", "defaults"])
    parser.add_argument(
        "--n-iters", type=int, default=None, help="mst/aim/priv-bayes: estimation iterations (dpmm's n_iters)"
    )
    add_claim_flags(parser)
    args = parser.parse_args()
    from dpmm.pipelines import AIMPipeline, MSTPipeline, PrivBayesPipeline

    pipeline_class = {"mst": MSTPipeline, "aim": AIMPipeline, "priv-bayes": PrivBayesPipeline}[args.model]
    for _ in each_job():
        fit(args, pipeline_class, read_handed(args))


def fit(args: argparse.Namespace, pipeline_class, handed: Handed) -> None:
    """One seed's release and claim, written where the run (or the job) asks."""
    random.seed(handed.seed)
    np.random.seed(handed.seed % 2**32)
    gen_kwargs = {} if args.n_iters is None else {"n_iters": args.n_iters}
    if args.preprocessing == "schema":
        bins = max([int(c.get("bins") or 10) for c in handed.numeric] + [2])
        pipeline = pipeline_class(
            epsilon=handed.epsilon,
            delta=handed.delta,
            gen_kwargs=gen_kwargs,
            n_jobs=1,
            binner_type="uniform",
            proc_epsilon=None,
            n_bins=bins,
        )
        pipeline.fit(handed.members, domain=public_domain(handed), random_state=handed.seed)
    else:
        pipeline = pipeline_class(
            epsilon=handed.epsilon - PROC_EPSILON, delta=handed.delta, gen_kwargs=gen_kwargs, n_jobs=1
        )
        pipeline.fit(handed.members, random_state=handed.seed)
    release = pipeline.generate(n_records=handed.rows, random_state=handed.seed)
    write_release(handed, release)
    # the noisy measurements (query, noisy answer, σ, clique) the model's mechanism keeps after fitting
    measures = getattr(getattr(pipeline.gen, "generator", None), "measures", None) or []
    sigmas = sorted({float(m[2]) for m in measures if len(m) > 2 and np.isscalar(m[2])}) if measures else []
    write_claim(
        {
            "epsilon": handed.epsilon,
            "delta": handed.delta,
            "accountant": f"dpmm {args.model} (zCDP; preprocessing {args.preprocessing})",
            "library": "dpmm 0.1.9",
            "preprocessing": args.preprocessing,
            "measurements": len(measures),
            "measurement_sigmas": sigmas[:10],
        }
    )


if __name__ == "__main__":
    main()
