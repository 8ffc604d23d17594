"""A catalogue of DP implementation bugs the audit must flag, each a victim that differs from a
correct one in one place, audited under both threat models beside its correct twin.

    python bench/dp_bugs.py [--n-shadow 16] [--rows a b c ...] [--runs-dir runs/dp_bugs]

Every bug victim below is loaded through the `--victim module:Class` path (`dp_bugs:NoiseForTen`,
with this directory on PYTHONPATH, as the script does) and CLAIMS the ε of its `epsilon` field;
each audit is reported against that claim (`python -m audit.report DIR --claimed-epsilon EPS`).

    a  NoiseForTen          dpsgd whose noise is calibrated for 10 x the claimed ε
    b  NoClipping           dpsgd that skips per-example clipping (the noise still assumes norm C)
    c  ReusedNoise          dpsgd that draws its noise once and reuses it at every step
    d  HalfRateAccountant   dpsgd whose accountant is told half the true sampling rate
    e  KernelNoiseOffGraph  dpkernel whose generator trains on the noiseless embedding loss (the
                            noise enters the loss as a constant, outside the autograd graph)
    f  RealisedDivisor      dpsgd that divides the noisy sum by the realised batch size, not B

Each row runs black-box (record canaries, mislabeled) and white-box (gradient canaries, which in
dpsgd enter as per-example gradients of 10 C before clipping) audits; row b also white-box with
mislabeled record canaries scored through their own gradients (`--threats record`). Printed per audit: the
claimed ε, the verdict's bound with its ceiling (summary.json's `verdict`, recomputed by the
report at the claim's δ), the verdict against the claim, runs and minutes. The correct twins
(`dpsgd1` ... `datalens4`) are the built-in victims at ε = 1 and 4, reported against their own ε.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


from victims.dpkernel import DPKernelVictim, class_embedding_sum
from victims.dpsgd import DPSGDPrivacy, DPSGDVictim
from victims.privacy import noise_multiplier_for

HERE = Path(__file__).resolve().parent


# -- the bugs -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class NoiseForTen(DPSGDVictim):
    """Bug a: sigma calibrated for 10 x epsilon while epsilon is claimed."""

    name = "dpsgd_noise_for_ten"

    def privacy(self, pool, inclusion_rate=0.5) -> DPSGDPrivacy:
        return DPSGDVictim.privacy(dataclasses.replace(self, epsilon=10 * self.epsilon), pool, inclusion_rate)


@dataclass(frozen=True)
class NoClipping(DPSGDVictim):
    """Bug b: per-example gradients summed unclipped; the noise is still N(0, sigma^2 C^2)."""

    name = "dpsgd_no_clipping"

    def optimizer(self, model, plan, *, generator, probe):
        optimizer = DPSGDVictim.optimizer(self, model, plan, generator=generator, probe=probe)
        clip_and_accumulate = optimizer.clip_and_accumulate

        def sum_unclipped() -> None:  # opacus clips to max_grad_norm here, and draws noise from it after
            optimizer.max_grad_norm = float("inf")
            try:
                clip_and_accumulate()
            finally:
                optimizer.max_grad_norm = self.max_grad_norm

        optimizer.clip_and_accumulate = sum_unclipped
        return optimizer


@dataclass(frozen=True)
class ReusedNoise(DPSGDVictim):
    """Bug c: the noise generator is reset before every step, so every step adds the same noise."""

    name = "dpsgd_reused_noise"

    def optimizer(self, model, plan, *, generator, probe):
        optimizer = DPSGDVictim.optimizer(self, model, plan, generator=generator, probe=probe)
        start, add_noise = generator.get_state(), optimizer.add_noise

        def same_noise() -> None:
            generator.set_state(start)
            add_noise()

        optimizer.add_noise = same_noise
        return optimizer


@dataclass(frozen=True)
class HalfRateAccountant(DPSGDVictim):
    """Bug d: sigma from an accountant told half the true Poisson rate."""

    name = "dpsgd_half_rate"

    def privacy(self, pool, inclusion_rate=0.5) -> DPSGDPrivacy:
        plan = DPSGDVictim.privacy(self, pool, inclusion_rate)
        sigma = noise_multiplier_for(
            epsilon=self.epsilon,
            delta=self.delta,
            sample_rate=plan.sample_rate / 2,
            steps=plan.steps,
            accountant=self.accountant,
        )
        return dataclasses.replace(plan, noise_multiplier=sigma)


@dataclass(frozen=True)
class KernelNoiseOffGraph(DPKernelVictim):
    """Bug e: the released noisy embedding is computed, but the generator's loss is the noiseless
    distance (the noise enters it, if at all, as a constant outside the autograd graph, which
    leaves the gradient that of the noiseless loss)."""

    name = "dpkernel_noise_off_graph"

    def matched_embedding(self, features, labels, *, n_classes, sigma, generator, probe=None):
        DPKernelVictim.matched_embedding(
            self, features, labels, n_classes=n_classes, sigma=sigma, generator=generator, probe=probe
        )  # the noisy release is made (and observed), then left out of the generator's loss: the bug
        return class_embedding_sum(features, labels, n_classes=n_classes) / self.batch_size


@dataclass(frozen=True)
class RealisedDivisor(DPSGDVictim):
    """Bug f: the noisy sum divided by the realised batch size instead of the expected B."""

    name = "dpsgd_realised_divisor"

    def optimizer(self, model, plan, *, generator, probe):
        optimizer = DPSGDVictim.optimizer(self, model, plan, generator=generator, probe=probe)

        def scale_grad() -> None:
            per_example = optimizer.params[0].grad_sample
            realised = max(1, 0 if per_example is None else len(per_example))
            for p in optimizer.params:
                p.grad /= realised

        optimizer.scale_grad = scale_grad
        return optimizer


# -- the catalogue --------------------------------------------------------------------------------
DPSGD_SMALL = ["--epochs", "10"]  # 100-140 steps: the catalogue's runs stay under ~5 s each
ROWS = {  # label -> (what, victim flags, claimed epsilon)
    "a": ("noise for 10 x the claim", ["--victim", "dp_bugs:NoiseForTen", "--epsilon", "1", *DPSGD_SMALL], 1.0),
    "b": ("no per-example clipping", ["--victim", "dp_bugs:NoClipping", "--epsilon", "1", *DPSGD_SMALL], 1.0),
    "c": ("one noise draw reused", ["--victim", "dp_bugs:ReusedNoise", "--epsilon", "1", *DPSGD_SMALL], 1.0),
    "d": (
        "accountant told half the rate",
        ["--victim", "dp_bugs:HalfRateAccountant", "--epsilon", "1", *DPSGD_SMALL],
        1.0,
    ),
    "e": ("dpkernel: noise off the graph", ["--victim", "dp_bugs:KernelNoiseOffGraph", "--epsilon", "1"], 1.0),
    "f": (
        "divided by the realised batch",
        ["--victim", "dp_bugs:RealisedDivisor", "--epsilon", "1", *DPSGD_SMALL],
        1.0,
    ),
    "dpsgd1": ("correct dpsgd", ["--victim", "dpsgd", "--epsilon", "1", *DPSGD_SMALL], 1.0),
    "dpsgd4": ("correct dpsgd", ["--victim", "dpsgd", "--epsilon", "4", *DPSGD_SMALL], 4.0),
    "dpkernel1": ("correct dpkernel", ["--victim", "dpkernel", "--epsilon", "1"], 1.0),
    "dpkernel4": ("correct dpkernel", ["--victim", "dpkernel", "--epsilon", "4"], 4.0),
    "psg1": ("correct psg", ["--victim", "psg", "--epsilon", "1"], 1.0),
    "psg4": ("correct psg", ["--victim", "psg", "--epsilon", "4"], 4.0),
    "dpcgan1": ("correct dpcgan", ["--victim", "dpcgan", "--epsilon", "1"], 1.0),
    "dpcgan4": ("correct dpcgan", ["--victim", "dpcgan", "--epsilon", "4"], 4.0),
    "datalens1": ("correct datalens", ["--victim", "datalens", "--epsilon", "1"], 1.0),
    "datalens4": ("correct datalens", ["--victim", "datalens", "--epsilon", "4"], 4.0),
}
THREATS = {  # label -> canary flags
    "black-box": ["--canaries", "500", "--canary-kind", "mislabeled"],
    "white-box": ["--canaries", "1000", "--canary-kind", "gradient", "--threat-model", "white-box"],
    "record": ["--canaries", "500", "--canary-kind", "mislabeled", "--threat-model", "white-box"],  # dpsgd only
}


def audit(where: Path, flags: list[str], claim: float) -> tuple[dict, dict, float]:
    """(summary.json, report.json's claim entry, minutes) of one audit reported against `claim`."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "audit.lira", *flags, "--runs-dir", str(where), "--quiet"], check=True, env=env
    )
    minutes = (time.perf_counter() - start) / 60
    experiment = next(where.glob("*/audit/summary.json")).parent.parent
    subprocess.run(
        [sys.executable, "-m", "audit.report", str(experiment), "--claimed-epsilon", str(claim)],
        check=True,
        env=env,
        capture_output=True,
    )
    report = json.loads((experiment / "audit" / "report.json").read_text())
    summary = json.loads((experiment / "audit" / "summary.json").read_text())
    return summary, report["experiments"][0], minutes


def row(label: str, threat: str, summary: dict, reported: dict, claim: float, minutes: float) -> str:
    what = ROWS[label][0]
    claimed = reported.get("claim") or {}
    verdict = next((v for v in reported.get("verdicts", []) if v["kind"].startswith("epsilon")), {})
    word = {
        "epsilon_violated": "violated",
        "epsilon_consistent": "consistent",
        "epsilon_not_testable": "not testable",
    }.get(verdict.get("kind"), "-")
    bounds, ceilings = claimed.get("bounds") or {}, claimed.get("ceilings") or {}
    if bounds:
        attack = max(bounds, key=lambda a: bounds[a])
        cell = f"{bounds[attack]:.2f} ({attack}) / {ceilings[attack]:.2f}"
    else:
        cell = "-"
    return f"| {label} | {what} | {threat} | {claim:g} | {cell} | {word} | {summary['n_shadow']} | {minutes:.1f} |"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n-shadow", type=int, default=16)
    p.add_argument("--runs-dir", type=Path, default=Path("runs/dp_bugs"))
    p.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS))
    p.add_argument("--threats", nargs="+", choices=THREATS, default=["black-box", "white-box"])
    args = p.parse_args()
    print("| bug | what | threat model | claimed eps | verdict's bound (attack) / ceiling | verdict | runs | minutes |")
    print("|---|---|---|---|---|---|---|---|")
    for label in args.rows:
        _, flags, claim = ROWS[label]
        for threat in args.threats:
            where = args.runs_dir / f"{label}_{threat}"
            summary, reported, minutes = audit(
                where, [*flags, *THREATS[threat], "--n-shadow", str(args.n_shadow)], claim
            )
            print(row(label, threat, summary, reported, claim, minutes), flush=True)


if __name__ == "__main__":
    main()
