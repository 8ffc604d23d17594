"""The built-in `subset` victim's release made by a command, and the same release made in process:
test_command_victim.py audits digits with `--victim subset`, with `--victim subset_as_command:SubsetGenerator`
and with `--victim command` running this file (docs/contracts.md, "A pipeline as a command").

As the command of a batched pipeline of kind "images" (`python subset_as_command.py --ipc K --n-classes C`,
`batch = N`: its start imports the suite, torch among it, ~5 CPU-s, once for N seeds) it reads each job
of MIA_JOBS in turn, the members (the members' x, y, in pool order) and the seed, and writes to the
job's `out` the K images per class that `SubsetVictim.choose` draws with that seed, called on the
members alone: the members of class c are the pool rows of class c in the same order, so the same
draw picks the same images without the pool rows the command never sees. (MIA_EXPECTED_MEMBERS is
not needed: subset is not calibrated to the member count.) It prints one JSON line naming the
interpreter and the `victims` it imported, which each run of the call keeps in runs/<r>.json's
`command.stdout`.

`SubsetGenerator` is the in-process path a generator of your own takes (`SyntheticDataVictim`,
README "Audit your own generator"): subset's choice on the pool rows, then the downstream ConvNet
from the downstream seed, as the command victim trains it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

import victims
from victims.base import DEFAULT_INCLUSION_RATE
from victims.pipelines.subset import SubsetVictim
from victims.synthetic import SyntheticDataVictim


def subset_of_members(x: np.ndarray, y: np.ndarray, *, ipc: int, n_classes: int, seed: int):
    """`SubsetVictim.choose` on the members alone (it reads the pool's labels and class count): the
    released images and labels."""
    members = SimpleNamespace(y=y, n_classes=n_classes)
    chosen = SubsetVictim(ipc=ipc).choose(members, np.ones(len(y), dtype=bool), seed)
    return x[chosen], y[chosen]


@dataclass(frozen=True)
class SubsetGenerator(SyntheticDataVictim):
    """subset's release as a generator of your own: the downstream ConvNet from the downstream seed."""

    name = "subset-generator"

    ipc: int = field(default=10, metadata={"help": "images per class in the released subset"})

    def check(self, pool, *, inclusion_rate: float = DEFAULT_INCLUSION_RATE) -> None:
        SubsetVictim(ipc=self.ipc).check(pool, inclusion_rate=inclusion_rate)

    def generate(self, pool, keep, seed, *, device="cpu", inclusion_rate=DEFAULT_INCLUSION_RATE):
        chosen = SubsetVictim(ipc=self.ipc).choose(pool, keep, seed)
        return pool.x[chosen], pool.y[chosen]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ipc", type=int, required=True, help="images per class, as subset's --ipc")
    parser.add_argument("--n-classes", type=int, required=True, help="the pool's classes (the members may lack one)")
    args = parser.parse_args(argv)
    with open(os.environ["MIA_JOBS"]) as f:
        jobs = json.load(f)
    for job in jobs:
        with np.load(job["members"]) as members:
            x, y = members["x"], members["y"]
        try:
            release_x, release_y = subset_of_members(x, y, ipc=args.ipc, n_classes=args.n_classes, seed=job["seed"])
        except ValueError as e:  # a class with fewer than ipc members: the run fails with subset's own line
            sys.exit(str(e))
        np.savez(job["out"], x=release_x, y=release_y)
    print(json.dumps({"prefix": sys.prefix, "executable": sys.executable, "victims": victims.__file__}))


if __name__ == "__main__":
    main()
