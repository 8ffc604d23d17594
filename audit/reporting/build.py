"""An audit report: report.json's content and the figures of report.html (docs/contracts.md,
"report.json and report.html"). Verdicts first (`audit.reporting.verdict`), then, for several
experiments, a comparison and overlaid ROC curves, then one section per experiment."""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from attacks.registry import HEADLINE_ATTACK
from audit.claim import Claim
from audit.provenance import provenance
from audit.reporting import figures
from audit.reporting.comparison_tables import to_json as comparison_json
from audit.reporting.evidence import (
    fair_coins,
    find_subset,
    highest_risk,
    verdict_evidence,
    no_epsilon_reason,
    protocol,
    run_provenance,
    utility,
)
from audit.reporting.remarks import remarks
from audit.result import AuditResult
from audit.reporting.verdict import (
    NO_FAIR_COINS,
    Verdict,
    count,
    duplicate_canaries_verdict,
    epsilon_verdict,
    no_fair_coins_verdict,
    no_subset_verdict,
    one_decision,
    release_leakage_verdict,
    release_subset_verdict,
    subset_verdict,
)
from audit.results import Audited, pool_images
from audit.stats import bootstrap
from audit.stats.epsilon import bound_applies
from audit.stats.significance import compare_experiments
from shadow_runs.plan import natural_coins
from shadow_runs.atomic_files import atomic_write, write_json


@dataclass(frozen=True)
class Settings:
    """What the report is asked to check and how hard to resample. `claim`: the claim given (either
    part may be None, the experiment's own; `AuditResult.checked_claim`), None for the experiment's."""

    claim: Claim | None = None
    alpha: float = 0.05
    seed: int = 0
    n_boot: int = bootstrap.N_BOOT
    n_boot_eps: int = bootstrap.N_BOOT_EPS
    top_k: int = 16

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1:
            raise ValueError(f"--alpha must be in (0, 1), got {self.alpha}")
        for name, least in (("n_boot", 1), ("n_boot_eps", 0), ("top_k", 1)):
            if getattr(self, name) < least:
                raise ValueError(f"--{name.replace('_', '-')} must be >= {least}, got {getattr(self, name)}")


@dataclass(frozen=True, eq=False)
class Report:
    """report.json's content and the PNG figures of the HTML page."""

    data: dict
    experiments: tuple[Audited, ...]
    roc: Mapping[str, bytes]  # experiment path -> its ROC figure
    overlays: Mapping[str, bytes]  # attack -> ROC of every experiment
    releases: Mapping[str, bytes] = field(default_factory=dict)  # experiment path -> image grid
    risks: Mapping[str, bytes] = field(default_factory=dict)  # experiment path -> thumbnails


def build_report(
    experiments: Sequence[Audited],
    *,
    baseline: Audited | None = None,
    settings: Settings = Settings(),
    images: Mapping[str, np.ndarray] | None = None,
    data_root: str | None = None,
    command: Sequence[str] = (),
) -> Report:
    """Everything the report shows. `images` maps an experiment path to its pool images (else
    `pool_images` finds them). ValueError on a claim that cannot be checked."""
    images = dict(images or {})
    candidates = [*experiments, *([baseline] if baseline is not None else [])]
    entries, comparisons, roc, releases, risks = [], [], {}, {}, {}
    for index, audited in enumerate(experiments):
        seed = settings.seed + index
        entry, comparison = _experiment_entry(audited, candidates, settings=settings, seed=seed)
        entries.append(entry)
        if comparison is not None:
            comparisons.append(comparison_json(comparison))
        key = str(audited.path)
        curves = (
            {a: audited.scores(a) for a in audited.attacks}
            if not audited.canaries
            else {
                f"{a} ({g})": pair
                for a in audited.attacks
                for g in ("canaries", "natural")
                for pair in [audited.group_scores(a, g)]
                if min(len(pair[0]), len(pair[1])) > 0
            }
        )
        roc[key] = figures.roc_png(curves, title=audited.label)
        release = audited.release()
        if release is not None:
            run, x, y = release
            entry["release"] = {"run": run, "n_images": int(len(x)), "shape": list(x.shape)}
            if x.ndim != 2:  # images; a table's records [k, d] are not drawn
                releases[key] = figures.image_grid_png(
                    x, [str(int(c)) for c in y], columns=min(20, max(10, len(x) // 10)), size=0.6
                )
        pool_x = images.get(key)
        if pool_x is None:
            pool_x = pool_images(audited, data_root=data_root)
        risky = entry["highest_risk"]["examples"]
        if pool_x is not None and pool_x.ndim != 2 and risky:  # images, not a table's records
            risks[key] = figures.image_grid_png(
                pool_x[[e["index"] for e in risky]],
                [f"#{e['index']} ({e['label']})\n{e['nonmember_percentile']:.1%}" for e in risky],
                columns=8,
                size=1.0,
            )
    shared = (
        [a for a in experiments[0].attacks if all(a in e.attacks for e in experiments)] if len(experiments) > 1 else []
    )
    overlays = {a: figures.roc_png({e.label: e.scores(a) for e in experiments}, title=a) for a in shared}
    data = {
        "settings": {
            "claimed_epsilon": None if settings.claim is None else settings.claim.epsilon,
            "claimed_delta": None if settings.claim is None else settings.claim.delta,
            "alpha": settings.alpha,
            "seed": settings.seed,
            "n_boot": settings.n_boot,
            "n_boot_eps": settings.n_boot_eps,
            "top_k": settings.top_k,
        },
        "generated": {
            "command": list(command),
            "utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            **provenance(),
        },
        "experiments": entries,
        "comparisons": comparisons,
    }
    return Report(
        data=_finite(data), experiments=tuple(experiments), roc=roc, overlays=overlays, releases=releases, risks=risks
    )


def _on_canaries(eps: Verdict, audited: Audited) -> Verdict:
    """`eps` with its reason saying the bounds are on the inserted canaries, where the audit has them."""
    canaries = audited.canaries
    if canaries and eps.kind != NO_FAIR_COINS:
        kind = canaries["kind"]
        inserted = count(canaries["n"], f"inserted {kind} canary", f"inserted {kind} canaries")
        natural = (
            "which are reported beside them"
            if natural_coins(audited.experiment.plan)
            else f"members of every run ({audited.experiment.plan})"
        )
        eps = replace(
            eps,
            reason=eps.reason
            + (
                f". The ε bounds are on the {inserted} per target run (designated before any training), not on "
                f"the natural examples, {natural}"
            ),
        )
    return eps


def _epsilon_entry(audited: Audited, claim, *, seed: int) -> tuple[Verdict, dict | None]:
    """(the ε verdict, report.json's `claim`) of one experiment against `claim` (checked, or None): the
    terminal's one decision, with the own curve's test, its bounds re-read at the claim's δ."""
    result = audited.result
    confidence = audited.experiment.confidence
    claim_json = (
        None
        if claim is None
        else {
            "epsilon": claim.epsilon,
            "delta": claim.delta,
            "source": claim.source,
            "confidence": confidence,
            "joint_confidence": None,
            "bounds": None,
            "ceilings": None,
            "n_canaries": None,
        }
    )
    canaries = audited.canaries
    # "fixed" where the reference runs predicted no bound for any attack: the report says so, as the terminal does
    recorded = result.bound or {}
    chosen_by = recorded.get("chosen_by")
    level = recorded.get("confidence", confidence)  # the ε test's: half the error where the own curve is tested too
    if not fair_coins(audited):
        duplicates = (
            canaries and canaries.get("kind") == "duplicate" and bound_applies(result.evaluation.get("inclusion_rate"))
        )
        eps = (duplicate_canaries_verdict if duplicates else no_fair_coins_verdict)(no_epsilon_reason(audited))
    elif claim is None:
        found = verdict_evidence(audited, delta=result.delta or 0.0, confidence=level, seed=seed)
        eps = epsilon_verdict(
            found["bounds"],
            ceiling=found["ceilings"],
            claim=None,
            delta=found["delta"],
            confidence=level,
            rule=found["rule"],
            chosen_by=chosen_by,
        )
    else:
        found = verdict_evidence(audited, delta=claim.delta, confidence=level, seed=seed)
        bounds, ceilings = found["bounds"], found["ceilings"]
        membership = audited.experiment.membership
        n_canaries, per_target = int(membership.size), int(membership.shape[1])
        if canaries:  # the bound is on the inserted canaries alone
            n_canaries, per_target = len(result.target_runs) * int(canaries["n"]), int(canaries["n"])
        eps = epsilon_verdict(
            bounds,
            ceiling=ceilings,
            claim=claim,
            delta=claim.delta,
            confidence=level,
            n_canaries=n_canaries,
            per_target=per_target,
            rule=found["rule"],
            chosen_by=chosen_by,
        )
        claim_json.update(
            {
                "joint_confidence": found["per_attack_confidence"],
                "bounds": bounds,
                "ceilings": ceilings,
                "n_canaries": n_canaries,
                "rule": found["rule"],
                "analysis": found["analysis"],
                "guesses": found["guesses"],
            }
        )
    eps = one_decision(eps, recorded.get("mechanism"), level=level)  # with the own curve's test, as the terminal
    return _on_canaries(eps, audited), claim_json


def _experiment_entry(audited: Audited, candidates: Sequence[Audited], *, settings: Settings, seed: int):
    result = audited.result
    claim = result.checked_claim(settings.claim)
    eps, claim_json = _epsilon_entry(audited, claim, seed=seed)
    attacks = {a: result.attacks[a] for a in audited.attacks if a in result.attacks}
    comparison = None
    if result.release_leakage is not None:  # a release audit: how much it leaks, better than a subset, then any claim
        verdicts = [
            release_leakage_verdict(
                result.release_leakage,
                epsilon=result.bound,
                no_epsilon=None if result.bound else no_epsilon_reason(audited),
            ),
            release_subset_verdict(result.subset_baseline),
            *([eps] if claim is not None else []),
        ]
    else:
        verdicts, comparison = _pipeline_verdicts(audited, eps, candidates, settings=settings, seed=seed)
    attack = risk_attack(audited, result)
    entry = {
        "path": str(audited.path),
        "label": audited.label,
        "victim": audited.victim,
        "dataset": audited.experiment.dataset,
        "n_shadow": result.n_shadow,
        "target_runs": list(result.target_runs),
        "formal_epsilon": result.formal_epsilon,
        "delta": result.delta,
        "protocol": protocol(audited),
        "claim": claim_json,
        "verdicts": [v.to_json() for v in verdicts],
        **remarks(result).to_json(),  # the own-curve test, figures at chance, warnings: as the terminal says them
        "attacks": attacks,
        "utility": utility(audited),
        "highest_risk": {"attack": attack, "examples": highest_risk(audited, attack=attack, top_k=settings.top_k)},
        "release": None,
        "release_audit": result.release_leakage is not None,  # an audit of one release a user made (audit.release)
        "provenance": run_provenance(audited),
    }
    return entry, comparison


def _pipeline_verdicts(audited: Audited, eps: Verdict, candidates: Sequence[Audited], *, settings: Settings, seed: int):
    """(verdicts, comparison) of an audit of shadow runs: the ε verdict, then the comparison with an
    experiment of its baseline (`subset`, `tabular-subset`) of the same size when one is among `candidates`."""
    confidence = audited.experiment.confidence
    verdicts: list[Verdict] = [eps]
    comparison = None
    if audited.victim != audited.baseline:
        subset = find_subset(audited, candidates)
        if audited.experiment.n_targets < 2:
            verdicts.append(
                no_subset_verdict(
                    "one target (a single release): the comparison with a random real subset resamples target runs, so "
                    f"it needs an audit of the pipeline (python -m audit.lira for it and for {audited.baseline}, then "
                    "audit.report)"
                )
            )
        elif subset is None:
            size = f"{audited.size} {'rows' if audited.table else 'per class'}"
            verdicts.append(
                no_subset_verdict(
                    f"no `{audited.baseline}` experiment of the same dataset and size "
                    f"({'no released set of a fixed size' if audited.size is None else size}) was "
                    "given (add one as a RUN_DIR or --baseline)"
                )
            )
        else:
            try:
                result = compare_experiments(
                    [audited.experiment],
                    subset.experiment,
                    groups=("all",),
                    confidence=confidence,
                    alpha=settings.alpha,
                    n_boot=settings.n_boot,
                    n_boot_eps=settings.n_boot_eps,
                    seed=seed,
                )
            except ValueError as e:
                verdicts.append(no_subset_verdict(f"the comparison with {subset.label} is not possible: {e}"))
            else:
                comparison = result
                verdicts.append(
                    subset_verdict(result.comparisons[0].tests, baseline_label=subset.label, alpha=settings.alpha)
                )
    return verdicts, comparison


def risk_attack(audited: Audited, result: AuditResult) -> str:
    """The attack whose examples at highest risk the report lists: a release's strongest attack
    (chosen on the reference runs), else HEADLINE_ATTACK where scored, else the first."""
    strongest = (result.release_leakage or {}).get("strongest")
    if strongest in audited.attacks:
        return strongest
    return HEADLINE_ATTACK if HEADLINE_ATTACK in audited.attacks else audited.attacks[0]


def _finite(value):
    """JSON-safe: NaN and infinities as null, numpy scalars as Python numbers."""
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, (np.floating, float)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def write_report(report: Report, out_dir: Path) -> tuple[Path, Path]:
    """report.html and report.json in `out_dir` (each written atomically)."""
    from audit.reporting.html import render

    html_path, json_path = out_dir / "report.html", out_dir / "report.json"
    page = render(report).encode("utf-8")
    atomic_write(html_path, lambda f: f.write(page))
    write_json(json_path, report.data)
    return html_path, json_path
