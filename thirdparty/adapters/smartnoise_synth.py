"""Adapter: a smartnoise-synth marginal synthesizer (MST, AIM, MWEM) as `--victim command`.

Runs inside thirdparty/envs/smartnoise (smartnoise-synth 1.0.8) through its public API only; its
GANs are not adapted (docs/results/third-party.md). --preprocessing schema builds the transformer
from the public schema, so nothing about the domain is read from the members; --preprocessing
defaults lets the library infer categories from the rows and numeric bounds with a tenth of ε.
The release has MIA_EXPECTED_MEMBERS rows; the claim written back is the ε and δ the synthesizer
was created with, and its noise figure where the library exposes one.
"""

from __future__ import annotations

import argparse
import random

import numpy as np
import pandas as pd
from handover import Handed, add_claim_flags, read_handed, write_claim, write_release
from snsynth import Synthesizer
from snsynth.transform import BinTransformer, LabelTransformer, TableTransformer

PREPROCESSOR_SHARE = 0.1  # of ε, for the bounds smartnoise infers under --preprocessing defaults


def schema_transformer(handed: Handed, columns: list[str]) -> TableTransformer:
    """The public domain as a fitted TableTransformer: fitted on a frame of the schema's values only."""
    parts, public = [], {}
    width = max([len(handed.categories(c)) for c in handed.categorical] + [2])
    for name in columns:
        if name in handed.categorical:
            values = handed.categories(name)
            parts.append(LabelTransformer(nullable=False))
        else:
            column = next(c for c in handed.numeric if c["name"] == name)
            values = [float(column["lower"]), float(column["upper"])]
            parts.append(BinTransformer(bins=int(column.get("bins") or 10), lower=values[0], upper=values[1]))
        public[name] = [values[i % len(values)] for i in range(width)]
    transformer = TableTransformer(parts)
    transformer.fit(pd.DataFrame(public)[columns], epsilon=0.0)
    return transformer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--synth", required=True, choices=["mst", "aim", "mwem"])
    parser.add_argument("--preprocessing", required=True, choices=["schema", "defaults"])
    parser.add_argument("--iterations", type=int, default=None, help="mwem: iterations")
    parser.add_argument("--split-factor", type=int, default=None, help="mwem: columns per sub-histogram")
    add_claim_flags(parser)
    args = parser.parse_args()
    handed = read_handed(args)
    random.seed(handed.seed)
    np.random.seed(handed.seed % 2**32)
    options = {}
    if args.iterations is not None:
        options["iterations"] = args.iterations
    if args.split_factor is not None:
        options["split_factor"] = args.split_factor
    if args.synth != "mwem":  # MWEM is pure ε-DP: its constructor takes no delta
        options["delta"] = handed.delta
    synth = Synthesizer.create(args.synth, epsilon=handed.epsilon, **options)
    data = handed.members
    columns = list(data.columns)
    if args.preprocessing == "schema":
        synth.fit(data, transformer=schema_transformer(handed, columns))
    else:
        synth.fit(
            data,
            categorical_columns=handed.categorical,
            continuous_columns=[c["name"] for c in handed.numeric],
            preprocessor_eps=PREPROCESSOR_SHARE * handed.epsilon,
        )
    release = synth.sample(handed.rows)
    if not isinstance(release, pd.DataFrame):
        release = pd.DataFrame(release, columns=columns)
    write_release(handed, release)
    write_claim(
        {
            "epsilon": handed.epsilon,
            "delta": 0.0 if args.synth == "mwem" else handed.delta,
            "accountant": f"smartnoise-synth {args.synth} (zCDP for mst and aim, pure ε-DP for mwem)",
            "library": "smartnoise-synth 1.0.8",
            "preprocessing": args.preprocessing,
            "epsilon_after_preprocessing": float(getattr(synth, "epsilon", handed.epsilon)),
        }
    )


if __name__ == "__main__":
    main()
