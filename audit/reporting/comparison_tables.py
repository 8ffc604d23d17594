"""`audit.compare`'s output: the markdown tables it prints and the JSON it writes (`--out`)."""

from __future__ import annotations

import math
from typing import Sequence

from audit.stats.bootstrap import METRICS, ExperimentSummary, Interval
from audit.stats.significance import Comparison, MetricComparison, Report


_DIGITS = {"auc": 3, "tpr_at_fpr_0.01": 3, "tpr_at_fpr_0.001": 4, "eps_lower": 2, "test_accuracy": 3}
_TITLES = {
    "test_accuracy": "test acc",
    "auc": "AUC",
    "tpr_at_fpr_0.01": "TPR@1% FPR",
    "tpr_at_fpr_0.001": "TPR@0.1% FPR",
    "eps_lower": "eps_lower",
}


def markdown_table(report: Report) -> str:
    """Two markdown tables (estimates with the ΔAUC against the baseline; every difference
    with its Holm-adjusted p) and a legend of the protocol."""
    baseline = report.baseline
    head = [
        "experiment",
        "attack",
        "group",
        *(_TITLES[m] for m in ("test_accuracy", *METRICS)),
        "eps_ceiling",
        f"vs {baseline.label}",
    ]
    lines = [_row(head), _row(["---"] * len(head))]
    for summary, comparison in [(baseline, None), *zip(report.experiments, report.comparisons)]:
        for (attack, group), estimate in summary.estimates.items():
            versus = "baseline" if comparison is None else _versus(comparison, attack, group)
            lines.append(
                _row(
                    [
                        summary.label,
                        attack,
                        group,
                        _estimate_cell(summary.test_accuracy, "test_accuracy"),
                        *(_estimate_cell(estimate.metrics.get(m), m) for m in METRICS),
                        "-" if estimate.eps_ceiling is None else f"{estimate.eps_ceiling:.2f}",
                        versus,
                    ]
                )
            )
    lines += [
        "",
        _row(["experiment", "attack", "group", *(f"Δ{_TITLES[m]}" for m in ("test_accuracy", *METRICS))]),
        _row(["---"] * (4 + len(METRICS))),
    ]
    for summary, comparison in zip(report.experiments, report.comparisons):
        accuracy = _difference_cell(comparison.get("test_accuracy"))
        for attack, group in summary.estimates:
            if (attack, group) in baseline.estimates:
                cells = [_difference_cell(_tested(comparison, m, attack, group)) for m in METRICS]
                lines.append(_row([summary.label, attack, group, accuracy, *cells]))
    lines += ["", _legend(report)]
    return "\n".join(lines)


def _tested(comparison: Comparison, metric: str, attack: str, group: str) -> MetricComparison | None:
    try:
        return comparison.get(metric, attack, group)
    except KeyError:  # eps_lower not resampled, or absent on a side
        return None


def _versus(comparison: Comparison, attack: str, group: str) -> str:
    if (attack, group) not in comparison.baseline.estimates:
        return f"no {group} group in the baseline"
    return f"ΔAUC {_difference_cell(comparison.get('auc', attack, group))}"


def _legend(report: Report) -> str:
    s = report.baseline
    sizes = [len(c.tests) for c in report.comparisons]
    family = f"the {sizes[0]} tests" if sizes and len(set(sizes)) == 1 else "all tests"
    eps = (
        f"eps_lower {s.n_boot_eps}"
        if s.n_boot_eps
        else "eps_lower: summary.json's point, not resampled (--n-boot-eps) nor tested"
    )
    return (
        f"Intervals: {s.confidence:.0%} percentile, cluster bootstrap over target runs ({s.n_boot} replicates; "
        f"{eps}); test accuracy: t-interval over runs, Δ by Welch's t-test. eps_lower: one-run lower bound on "
        f"the pooled targets' canaries (group all, fair coins only; sub-groups have none), eps_ceiling: what a "
        f"perfect attack would certify with that design. "
        f"Δ = experiment - baseline; p: two-sided Wald test with the bootstrap standard error, Holm-adjusted "
        f"over {family} of each comparison; * adjusted p < {report.alpha:g}. Seed {report.seed}."
    )


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"


def _estimate_cell(interval: Interval | None, metric: str) -> str:
    if interval is None:
        return "-"
    d = _DIGITS[metric]
    if metric == "eps_lower" and math.isnan(interval.low) and math.isnan(interval.high):
        return f"{interval.point:.{d}f}"  # not resampled (--n-boot-eps 0)
    return f"{interval.point:.{d}f} [{_bound(interval.low, d)}, {_bound(interval.high, d)}]"


def _difference_cell(test: MetricComparison | None) -> str:
    if test is None:
        return "-"
    d = _DIGITS[test.metric]
    iv = test.difference
    p = "p<0.001" if test.p_adjusted < 0.001 else f"p={test.p_adjusted:.3f}"
    return f"{_bound(iv.point, d, sign=True)} [{_bound(iv.low, d, sign=True)}, {_bound(iv.high, d, sign=True)}] {p}" + (
        " *" if test.significant else ""
    )


def _bound(value: float, digits: int, *, sign: bool = False) -> str:
    if math.isnan(value):
        return "-"
    value = value if round(value, digits) != 0 else 0.0  # no "-0.000"
    return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


def to_json(report: Report) -> dict:
    """The report as JSON-able data (NaN as null)."""
    first = report.baseline
    return {
        "seed": report.seed,
        "alpha": report.alpha,
        "confidence": first.confidence,
        "n_boot": first.n_boot,
        "n_boot_eps": first.n_boot_eps,
        "baseline": _summary_json(first),
        "experiments": [_summary_json(s) for s in report.experiments],
        "comparisons": [
            {
                "experiment": str(c.victim.experiment.path),
                "baseline": str(c.baseline.experiment.path),
                "n_tests": len(c.tests),
                "tests": [t.to_json() for t in c.tests],
            }
            for c in report.comparisons
        ],
    }


def _summary_json(summary: ExperimentSummary) -> dict:
    exp = summary.experiment
    attacks: dict[str, dict] = {}
    for (attack, group), estimate in summary.estimates.items():
        attacks.setdefault(attack, {})[group] = {
            **{m: estimate.metrics[m].to_json() if m in estimate.metrics else None for m in METRICS},
            "eps_ceiling": estimate.eps_ceiling,
            "n_members": estimate.n_members,
            "n_nonmembers": estimate.n_nonmembers,
        }
    return {
        "path": str(exp.path),
        "label": summary.label,
        "victim": exp.victim,
        "dataset": exp.dataset,
        "n_targets": exp.n_targets,
        "n_runs": int(exp.test_accuracy.size),
        "delta": exp.delta,
        "eps_confidence": exp.confidence,
        "test_accuracy": summary.test_accuracy.to_json(),
        "attacks": attacks,
    }
