"""dpmm 0.1.9's binner drops a column constant in the private rows, even given its public domain:
a target whose value there differs is released only when it is a member (docs/results/third-party.md,
"The worst-case pair"). Runs in dpmm's environment, not the suite's:

    thirdparty/envs/dpmm/bin/python bench/dpmm_static_column.py

D: 50 records over four binary columns, a, b, c drawn at random and d = 0 in all; the target
[1, 1, 1, 1]. MSTPipeline at (1, 1e-2) given every column's categories (`fit(df, domain=...)`, a
uniform binner, no preprocessing budget: the adapter's `--preprocessing schema`), fitted on D and on
D plus the target three times each; prints the released rows with d = 1 and the columns the binner
found static. The selection's and the estimate's iterations are cut to 10 (as in
thirdparty/pipelines/dpmm-mst-pair.toml) and `cdp_rho` memoised, for time only.
"""

import functools

import dpmm.models.base.mechanisms.mechanism as mechanism
import dpmm.models.mst as mst
import numpy as np
import pandas as pd
from dpmm.pipelines import MSTPipeline


def main() -> None:
    cached = functools.lru_cache(None)(mst.cdp_rho)
    mst.cdp_rho = mechanism.cdp_rho = cached
    inference = mst.FactoredInference
    mst.FactoredInference = lambda domain, iters=None, **kwargs: inference(domain, **{**kwargs, "iters": 10})
    rng = np.random.default_rng(0)
    d = pd.DataFrame({name: rng.choice(["0", "1"], 50) for name in "abc"} | {"d": ["0"] * 50})
    target = pd.DataFrame({name: ["1"] for name in "abcd"})
    domain = {name: {"categories": ["0", "1"]} for name in "abcd"}
    for side, frame in (("OUT", d), ("IN", pd.concat([d, target], ignore_index=True))) * 3:
        pipeline = MSTPipeline(
            epsilon=1.0, delta=1e-2, gen_kwargs={"n_iters": 10}, n_jobs=1, binner_type="uniform",
            proc_epsilon=None, n_bins=2,
        )  # fmt: skip
        pipeline.fit(frame, domain=domain, random_state=1)
        release = pipeline.generate(n_records=50, random_state=1)
        held = int((release["d"].astype(str) == "1").sum())
        print(f"{side}: released rows with d = 1: {held}; static columns: {list(pipeline.proc.static_columns)}")


if __name__ == "__main__":
    main()
