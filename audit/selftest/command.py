"""`python -m audit.selftest`'s command line: every design of `audit.selftest.designs` at a number of
repetitions, one table block per design, the power line, and last the verdict (`verdict`): exit
status 0 when the self-test passes, 1 when a judged row fails."""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np

from audit.cli.arguments import ArgumentParser, int_at_least, probability
from audit.stats.bounds import get_bound
from audit.selftest.sequential import (
    BOTH_TESTS,
    combined_designs,
    combined_row,
    fixed_combined_designs,
    fixed_schedule,
    judged_row,
    looks_schedule,
    sequential_designs,
    sequential_row,
)
from audit.stats import guesses
from audit.stats.bounds import BOUNDS
from audit.stats.guesses import RULES, BoundCache
from audit.selftest.designs import (
    CONFIDENCE,
    FAMILY_LEVEL,
    KEYS,
    QUICK_REPETITIONS,
    REPETITIONS,
    Design,
    bounds,
    clopper_pearson,
    designs,
    false_alarms,
    truth,
    values_of,
    verdict,
)


# the table: a block per design

HEADER = (
    f"  {'rule':<5} {'analysis':<8} {'alarms':>6} {'rate':>6} {'95% CP interval':>16} {'median':>7} "
    f"{'truth':>6} {'med/truth':>9} {'ceiling':>7} {'eps@delta':>9}"
)


#: what the line of a design under the retired pairs plan ends with, and its rows' alarms column says
RETIRED = "[retired pairs plan: shown for comparison, not judged]"
NOT_JUDGED = "(not judged)"
#: what the line of a design whose claimed noise is twice the real one ends with: its alarms are detections
HALVED = "[the claim is false: alarms here are detections (power), not judged]"


def design_line(design: Design, repetitions: int) -> str:
    """The line above a design's block: what it is, its truth and m (under the retired pairs plan, `RETIRED`)."""
    truths = f"eps0 {design.epsilon:g}, delta {design.delta:g}"
    if design.mu is not None:
        truths += f", mu {design.mu:.4g}"
    attacks = f", max of {design.attacks} attacks at {design.attacks}-way Bonferroni" if design.attacks > 1 else ""
    retired = "" if design.judged else f" {HALVED if design.noise_halved else RETIRED}"
    return (
        f"{design.name} [{design.plan_name} plan] {truths}; m = {design.n_targets} x {design.labels.size} = "
        f"{design.m} (+ {design.n_runs - design.n_targets} reference runs){attacks}; {repetitions} reps{retired}"
    )


def table_lines(design: Design, found: np.ndarray, ceilings: dict) -> list[str]:
    """One line per (rule, analysis): alarms (or '-' where descriptive), their rate and 95%
    Clopper-Pearson interval, the median bound, the truth, their ratio, the ceiling of the rule,
    and for the Gaussian family the median ε at δ that its μ implies. Under the retired pairs
    plan (not `Design.judged`) the counts are the same and the line ends with `NOT_JUDGED`."""
    reps = found.shape[0]
    lines = []
    for rule in RULES:
        for bound in BOUNDS:
            analysis = bound.name
            if analysis not in guesses.applicable(design.claimed, design.delta, rule):
                continue  # the claimed mechanism's own curve: only with a claimed mechanism, only tuned
            values = values_of(found, rule, analysis)
            median = float(np.median(values))
            limit = truth(design, analysis)
            alarms = false_alarms(design, found, rule, analysis)
            if alarms is None:
                counts = f"{'-':>6} {'-':>6} {'(descriptive)':>16}"
            else:
                low, high = clopper_pearson(alarms, reps)
                counts = f"{alarms:>6d} {alarms / reps:>6.3f} {f'[{low:.3f}, {high:.3f}]':>16}"
            shown_truth = f"{'-':>6}" if limit is None else f"{limit:>6.3g}"
            ratio = f"{median / limit:>9.2f}" if limit else f"{'-':>9}"
            eps_at_delta = f"{'-':>9}"
            if bound.epsilon_key:
                eps_g = found[:, RULES.index(rule), KEYS.index(bound.epsilon_key)]
                if not np.isnan(eps_g).any():
                    eps_at_delta = f"{float(np.median(eps_g)):>9.3f}"
            note = (
                "" if design.judged or alarms is None else f" {'(detections)' if design.noise_halved else NOT_JUDGED}"
            )
            lines.append(
                f"  {rule:<5} {bound.label:<8} {counts} {median:>7.3f} {shown_truth} {ratio} "
                f"{ceilings[rule, analysis]:>7.3f} {eps_at_delta}{note}"
            )
    return lines


def power_line(found: np.ndarray, design: Design) -> str:
    """The power row's medians: certified ε per rule and bound (the verdict's first), each μ bound beside the true μ."""
    eps_bounds = sorted((b for b in BOUNDS if b.unit == "eps"), key=lambda b: not b.verdict)
    eps = ", ".join(
        f"{rule}+{b.name} {np.median(values_of(found, rule, b.name)):.3f}"
        for rule in RULES
        for b in eps_bounds
        if b.name in guesses.applicable(design.claimed, design.delta, rule)
    )
    mu = "; ".join(
        f"median {b.lower_key} "
        + ", ".join(f"{rule} {np.median(values_of(found, rule, b.name)):.3f}" for rule in RULES)
        for b in BOUNDS
        if b.unit == "mu"
    )
    return (
        f"power ({design.name}, eps0 {design.epsilon:g}, delta {design.delta:g}, m = {design.m}): median "
        f"certified eps {eps}; {mu} (true mu {design.mu:.3f})"
    )


@dataclass(frozen=True)
class SequentialBlock:
    lines: list[str]
    judged: list  # the rows `verdict` judges beside the fixed designs'


def sequential_line(design: Design, label: str, found, looks: int) -> str:
    """One sequential row: its alarms (detections for a false claim), rate and 95% Clopper-Pearson
    interval, and for a false claim the median target runs to the first detection."""
    low, high = found.interval
    line = (
        f"  {design.name} ({label}): {found.alarms}/{found.repetitions} "
        f"{'detections' if design.noise_halved else 'alarms'} = {found.alarms / found.repetitions:.3f} "
        f"[{low:.3f}, {high:.3f}]"
    )
    if design.noise_halved and found.first_alarm_runs and looks > 1:
        line += f"; target runs to the first: median {np.median(found.first_alarm_runs):g} of {looks}"
    return line


def sequential_block(args: argparse.Namespace, results) -> SequentialBlock:
    """The sequential rows (`audit.selftest.sequential`), a look after each target run: per row its alarms, rate and 95%
    Clopper-Pearson interval, and for the false claim its detections and the runs to the first. Then the combined rows
    (`combined_row`: both tests a look, each at alpha_k / 2) and the same rule at fixed designs (`fixed_schedule`: one
    look, each test at alpha / 2)."""
    schedule = looks_schedule(args.confidence)
    lines = [
        f"sequential looks: after each of {schedule.looks} target runs, look k at confidence 1 - alpha_k, the "
        f"alpha_k summing to {1 - args.confidence:.2g} (Bonferroni over the looks, audit.stats.sequential); "
        "alarm = some look above the truth"
    ]
    judged = []
    for design, analysis in sequential_designs():
        found = sequential_row(design, schedule, analysis=analysis, repetitions=args.repetitions, seed=args.seed)
        lines.append(sequential_line(design, get_bound(analysis).label, found, schedule.looks))
        row = judged_row(design, found, confidence=args.confidence)
        if row is not None:
            judged.append(row)
    both = looks_schedule(args.confidence, tests=len(BOTH_TESTS))
    lines.append(
        f"sequential looks, both tests where the runs record a mechanism: each look runs the eps verdict and the "
        f"own curve, each at confidence 1 - alpha_k/{both.tests}, and rejects if either does; "
        "alarm = some look with either test above its truth"
    )
    label = " or ".join(get_bound(analysis).label for analysis in BOTH_TESTS)
    for design in combined_designs():
        found = combined_row(design, both, repetitions=args.repetitions, seed=args.seed)
        lines.append(sequential_line(design, label, found, both.looks))
        row = judged_row(design, found, confidence=args.confidence)
        if row is not None:
            judged.append(row)
    lines.append(
        "fixed design, both tests where the runs record a mechanism (the audit's one decision): the eps verdict and "
        "the own curve on every target run, each at confidence 1 - alpha/2, violated if either rejects"
    )
    for design in fixed_combined_designs():
        found = combined_row(
            design, fixed_schedule(design, args.confidence), repetitions=args.repetitions, seed=args.seed
        )
        lines.append(sequential_line(design, label, found, 1))
        row = judged_row(design, found, confidence=args.confidence, rule="fixed")
        if row is not None:
            judged.append(row)
    return SequentialBlock(lines, judged)


def parse_args(argv=None) -> argparse.Namespace:
    parser = ArgumentParser(
        prog="python -m audit.selftest",
        description="Audit mechanisms of known epsilon through the suite's plan and one-run bounds (tuned and "
        "grid guess rules; Steinke, f-DP and Gaussian analyses); print each one's false-alarm rate "
        "(bound > true epsilon, or mu) and median bound. The last line is the verdict: 'self-test passed: ...', "
        "or 'self-test FAILED: ...' naming each failing row and why. A row (a design under the independent plan, "
        "a rule and an analysis whose alarms are judged) fails when its alarm rate is significantly above the "
        f"allowed 1 - confidence (one-sided exact binomial test at {FAMILY_LEVEL:g} / the number of judged rows, "
        "Bonferroni); the rows of the retired pairs plan are shown for comparison and not judged. Exit status: "
        "0 when the self-test passes, 1 when it fails, 2 on a bad flag.",
    )
    parser.add_argument(
        "--repetitions",
        type=int_at_least(1),
        default=None,
        help=f"repetitions per row (default {REPETITIONS}, or {QUICK_REPETITIONS} with --quick)",
    )
    parser.add_argument(
        "--seed",
        type=int_at_least(0),
        default=0,
        help="repetition k uses master seed SEED + k for its plan and noise (default 0)",
    )
    parser.add_argument(
        "--confidence",
        type=probability,
        default=CONFIDENCE,
        help=f"confidence of the bound (default {CONFIDENCE}); false-alarm rate <= 1 - confidence",
    )
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_REPETITIONS} repetitions per row")
    args = parser.parse_args(argv)
    if args.repetitions is None:
        args.repetitions = QUICK_REPETITIONS if args.quick else REPETITIONS
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    print(
        f"self-test: {args.repetitions} repetitions per design (master seeds {args.seed}.."
        f"{args.seed + args.repetitions - 1}), confidence {args.confidence}; alarm = bound > true eps0 "
        f"(mu-GDP: mu_lower > true mu; null: > 0)"
    )
    print(HEADER)
    started = time.perf_counter()
    power, cache, results = None, BoundCache(), []
    for design in designs():
        found = bounds(design, repetitions=args.repetitions, seed=args.seed, confidence=args.confidence, cache=cache)
        level = 1.0 - (1.0 - args.confidence) / design.attacks
        ceilings = {
            (rule, analysis): guesses.ceiling(
                design.m,
                analysis=analysis,
                rule=rule,
                delta=design.delta,
                confidence=level,
                cache=cache,
                mechanism=design.claimed,
            )
            for rule in RULES
            for analysis in guesses.applicable(design.claimed, design.delta, rule)
        }
        results.append((design, found))
        print(design_line(design, args.repetitions))
        print("\n".join(table_lines(design, found, ceilings)), flush=True)
        if design.power_row:
            power = power_line(found, design)
    if power is not None:
        print(power)
    sequential = sequential_block(args, results)
    print("\n".join(sequential.lines), flush=True)
    print(
        f"Under the independent plan the theorems allow an alarm rate of at most {1 - args.confidence:.2f} for\n"
        f"every rule and analysis (tuned: counts chosen on the reference runs, applied once at full\n"
        f"confidence; grid: the fixed grid with Bonferroni). mu-GDP is judged only on mechanisms that are\n"
        f"exactly mu-GDP (Gaussian, null); on Laplace and randomised response its mu and eps@delta are\n"
        f"descriptive, not alarms: those are not mu-GDP at the matching mu (RR with a published coin is not\n"
        f"mu-GDP for any mu). eps@delta is '-' at delta 0 (mu-GDP implies no pure eps). ceiling: what a\n"
        f"perfect attack certifies under the rule.\n"
        f"OLD pairs: the plan the suite used before (complementary runs, each with half of every class), for\n"
        f"comparison only, not judged. There IN versus OUT replaces a record by another of its class, worth up\n"
        f"to 2 eps0 to the Laplace class sum; the rule that ranks atypical records first exposes it. It was\n"
        f"removed for this.\n"
        f"({time.perf_counter() - started:.0f} s)"
    )
    passed, closing = verdict(results, confidence=args.confidence, more=sequential.judged)
    print(closing)
    return 0 if passed else 1
