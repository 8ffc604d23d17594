"""A custodian's release audited end to end, timed: 1,200 digits as the pool, members drawn by
recorded fair coins (`audit.releases.files.draw_membership`), a release made from them by one of
the suite's pipelines (default `dm`, 10 per class), the two files written with
`audit.releases.files`, then `python -m audit.release` with R shadow runs of the pipeline and R
random real subsets. Prints the report's verdicts and the whole audit's wall time.

    python bench/release.py --victim dm --n-shadow 16 --out /tmp/release-bench
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from audit.releases.files import draw_membership, write_pool, write_release
from timing import audit_into
from victims import get_victim, load_pool
from victims.pool import make_pool

MEMBERSHIP_SEED = 2024


def make_files(out: Path, *, victim: str, n_pool: int, ipc: int) -> tuple[Path, Path]:
    digits = load_pool("digits")
    rows = np.sort(np.random.default_rng(0).permutation(len(digits.x))[:n_pool])
    x, y = digits.x[rows], digits.y[rows]
    member = draw_membership(n_pool, seed=MEMBERSHIP_SEED)
    pool = make_pool("custodian", x, y, digits.x_test, digits.y_test, digits.classes, flip_ok=False)
    obs = get_victim(victim)(ipc=ipc).run(pool, member, seed=MEMBERSHIP_SEED)
    pool_file = write_pool(out / "pool.npz", x[:, 0], y, member=member, membership_seed=MEMBERSHIP_SEED)
    release_file = write_release(out / "release.npz", obs.release_x, obs.release_y, init_idx=obs.init_idx)
    outside = float(np.mean((obs.release_x < 0) | (obs.release_x > 1)))
    print(
        f"pool {n_pool} digits, {int(member.sum())} members; release {len(obs.release_x)} images "
        f"({outside:.0%} of pixels outside [0, 1], kept)"
    )
    return pool_file, release_file


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--victim", default="dm")
    p.add_argument("--n-shadow", type=int, default=16)
    p.add_argument("--n-pool", type=int, default=1200)
    p.add_argument("--ipc", type=int, default=10)
    p.add_argument("--out", type=Path, default=Path("/tmp/release-bench"))
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    pool_file, release_file = make_files(args.out, victim=args.victim, n_pool=args.n_pool, ipc=args.ipc)
    flags = ["--pool", pool_file, "--release", release_file, "--victim", args.victim, "--n-shadow", args.n_shadow]
    done = audit_into(args.out / "runs", [*flags, "--workers", args.workers], command="release")
    # the verdicts are the report's (audit/report.json, which the release audit writes beside its summary): audit
    # has no loader for that file, so it is read here
    report = json.loads((done.store / "audit" / "report.json").read_text())
    for verdict in report["experiments"][0]["verdicts"]:
        print(f"- {verdict['text']}\n    {verdict['reason']}")
    print(f"whole audit ({args.n_shadow} runs of {args.victim} and {args.n_shadow} subset runs): {done.wall_s:.0f} s")


if __name__ == "__main__":
    main()
