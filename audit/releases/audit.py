"""The audit of a release the user already made (`python -m audit.release`): `prepare` checks everything and opens the
shadow store, writing nothing outside it; `run_release_audit` trains the missing shadow runs (the reference runs) and
attacks the release as the one target, with the user's membership as ground truth. docs/contracts.md, "audit.release".
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from attacks.lira import variance_for
from attacks.registry import attack_names
from audit import outputs
from audit.claim import verdict_delta
from audit.evaluate import StoredRuns, run_delta, score_attacks
from audit.executor import ExecutorConfig
from audit.pipeline import experiment_record, train_missing_runs
from audit.releases.inputs import ReleaseError, ReleaseInputs, read_inputs
from audit.releases.table_inputs import read_table_inputs
from audit.releases.leakage import compare_with_subsets, leave_one_out, release_leakage
from audit.releases.target import check_out_dir, release_id, target_run, victim_for, with_target
from audit.reporting.build import Report, Settings, build_report, write_report
from audit.reporting.verdict import judged
from audit.results import load_audited
from audit.result import AuditResult
from audit.summary import EvaluationSettings, release_summary
from shadow_runs import RunStore, membership_matrix
from shadow_runs.atomic_files import write_json, write_npy
from victims import get_victim
from victims.train import TrainConfig

#: subset runs the comparison needs: each is judged against the others, whose pseudo-targets need two references
MIN_SUBSET_RUNS = 4


@dataclass(frozen=True)
class ReleaseRequest:
    """What to audit and how: the user's files, the release's pipeline, the shadow runs, evaluation and report."""

    pool_file: Path | None  # POOL.npz of images; None for a table (`dataset`, `members_file`)
    release_file: Path
    victim: str
    n_shadow: int
    evaluation: EvaluationSettings
    executor: ExecutorConfig
    report: Settings
    dataset: str | None = None  # a table (fair, randhie, a .json schema file) in place of POOL.npz
    members_file: Path | None = None  # the table's membership over its pool rows (audit.releases.table_inputs)
    runs_dir: Path = Path("runs")
    out: Path | None = None  # default: <runs_dir>/release-<sha256 of the release, 10 hex>
    overrides: Mapping[str, Any] = field(default_factory=dict)
    lira_variance: str = "auto"
    device: str = "auto"
    quiet: bool = False
    command: Sequence[str] = ()  # recorded in report.json
    keep_other_code: bool = False  # use shadow stores made by other victim code (`RunStore.open`)


@dataclass(frozen=True)
class PreparedRelease:
    """A checked request: its inputs, victim, plan, open shadow store and the audit's record."""

    request: ReleaseRequest
    inputs: ReleaseInputs
    victim: Any
    experiment: dict
    record: dict
    out: Path
    store: RunStore
    keep: np.ndarray
    subset: SubsetBaseline


def prepare(request: ReleaseRequest) -> PreparedRelease:
    """Every check before any training: ValueError (ReleaseError, DataError, StoreError included;
    one line) on bad or inconsistent inputs, an --out holding another release's audit, or a store
    of another configuration. Writes nothing but the shadow store's plan."""
    settings = request.evaluation
    if request.dataset is not None:
        inputs = read_table_inputs(request.dataset, request.members_file, request.release_file)
    else:
        inputs = read_inputs(request.pool_file, request.release_file)
    dataset = request.dataset or str(request.pool_file)
    if inputs.coins is not None and inputs.coins.seed == settings.seed:
        raise ReleaseError(
            f"--seed {settings.seed} is the pool's membership_seed: the shadow runs' coins would repeat "
            "the release's own; choose another --seed"
        )
    victim = victim_for(request.victim, request.overrides, inputs)
    victim.check(inputs.pool, inclusion_rate=settings.inclusion_rate)  # the shadow runs, at the plan's rate
    experiment = experiment_record(
        victim, inputs.pool, dataset=dataset, seed=settings.seed, inclusion_rate=settings.inclusion_rate
    )
    digest = release_id(request.release_file)
    out = request.out or Path(request.runs_dir) / f"release-{digest[:10]}"
    record = {
        **experiment,
        "n_shadow": request.n_shadow,
        "pool_file": str(Path(request.pool_file).resolve()) if request.pool_file else None,
        **({"members_file": str(Path(request.members_file).resolve())} if request.members_file else {}),
        "release_file": str(Path(request.release_file).resolve()),
        "release_sha256": digest,
        "membership_sha256": hashlib.sha256(np.packbits(inputs.member).tobytes()).hexdigest(),
        "membership_rate": None if inputs.coins is None else inputs.coins.rate,
        "membership_seed": None if inputs.coins is None else inputs.coins.seed,
    }
    check_out_dir(out, record)
    store = RunStore.open(
        request.runs_dir, experiment=experiment, pool_labels=inputs.pool.y, keep_other_code=request.keep_other_code
    )
    keep = membership_matrix(
        inputs.pool.y, n_runs=request.n_shadow, master_seed=settings.seed, inclusion_rate=settings.inclusion_rate
    )
    subset = subset_baseline(request, inputs, victim)
    store.extend_plan(keep)
    if subset.store is not None:
        subset.store.extend_plan(keep)
    return PreparedRelease(
        request=request,
        inputs=inputs,
        victim=victim,
        experiment=experiment,
        record={**record, "shadow_store": str(store.root.resolve())},
        out=out,
        store=store,
        keep=keep,
        subset=subset,
    )


@dataclass(frozen=True)
class SubsetBaseline:
    """The random real subsets the release is compared with: `subset` runs of the release's size on
    the same pool and plan (the same coins as the reference runs), or why there are none."""

    victim: Any = None
    store: RunStore | None = None
    reason: str | None = None  # why there is no comparison


def subset_baseline(request: ReleaseRequest, inputs: ReleaseInputs, victim) -> SubsetBaseline:
    """The `subset` victim and store of the comparison (checked and opened before any training), or
    the reason it cannot be made: a release of uneven class counts, a size the pool cannot supply,
    or fewer than MIN_SUBSET_RUNS runs. A table's is `tabular-subset` at the release's row count."""
    counts = inputs.per_class
    if inputs.pool.tabular:
        subset_class = get_victim("tabular-subset")
        iterations = {f: getattr(victim, f) for f in ("classifier_iterations",) if hasattr(victim, f)}
        return _subset_store(request, inputs, subset_class(rows=len(inputs.release_y), **iterations))
    if len(set(counts.tolist())) != 1:
        return SubsetBaseline(
            reason=f"the release holds {counts.tolist()} images per class, and a random real subset "
            "of the same size is drawn with the same number of every class"
        )
    train = getattr(victim, "train", None)
    subset_class = get_victim("subset")
    subset = subset_class(ipc=int(counts[0]), **({"train": train} if isinstance(train, TrainConfig) else {}))
    return _subset_store(request, inputs, subset, size=f"{int(counts[0])} per class")


def _subset_store(request: ReleaseRequest, inputs: ReleaseInputs, subset, *, size: str = "") -> SubsetBaseline:
    """The subset victim `subset` checked on the pool and its store opened, or why it cannot be drawn."""
    settings = request.evaluation
    if request.n_shadow < MIN_SUBSET_RUNS:
        return SubsetBaseline(
            reason=f"--n-shadow {request.n_shadow} leaves too few subset runs for the comparison "
            f"(each is judged against the others: at least {MIN_SUBSET_RUNS})"
        )
    try:
        subset.check(inputs.pool, inclusion_rate=settings.inclusion_rate)
    except ValueError as e:
        return SubsetBaseline(reason=f"a random real subset of {size or 'the release size'} cannot be drawn: {e}")
    experiment = experiment_record(
        subset,
        inputs.pool,
        dataset=request.dataset or str(request.pool_file),
        seed=settings.seed,
        inclusion_rate=settings.inclusion_rate,
    )
    store = RunStore.open(
        request.runs_dir, experiment=experiment, pool_labels=inputs.pool.y, keep_other_code=request.keep_other_code
    )
    return SubsetBaseline(victim=subset, store=store)


def run_release_audit(prepared: PreparedRelease) -> tuple[AuditResult, Report, Path, Path]:
    """Train the missing shadow runs, attack the release, measure its leakage against the subsets', write the audit
    directory and report; returns (result with its verdict, report, report.html, report.json)."""
    request, inputs, settings = prepared.request, prepared.inputs, prepared.request.evaluation
    _train_missing(prepared)
    shadows = StoredRuns.load(
        prepared.store, keep=prepared.keep, images=inputs.pool.x, labels=inputs.pool.y, schema=inputs.pool.schema
    )
    obs, meta = target_run(prepared.victim, inputs, seed=settings.seed, device=request.device)
    runs = with_target(shadows, obs, inputs, meta)
    # the user's release is the one target (the last run); every shadow run is a reference run, its shadow
    targets = np.array([request.n_shadow])
    variance = variance_for(request.lira_variance, n_reference=request.n_shadow)
    bounded = inputs.coins is not None and inputs.coins.fair
    # the reference runs tune the guess counts at the verdict's δ: the claim's, else the audit's own
    delta = verdict_delta(request.report.claim, run_delta(shadows.meta) or 0.0)
    scores, choices = score_attacks(
        runs,
        attack_names(),
        targets,
        variance=variance,
        columns=slice(None),
        delta=delta,
        confidence=settings.confidence,
        bounded=bounded,
    )
    leakage, release_flag = release_leakage(
        runs,
        scores,
        choices,
        inputs.member,
        variance=variance,
        inclusion_rate=settings.inclusion_rate,
        alpha=request.report.alpha,
    )
    comparison = _subset_comparison(prepared, release_flag)
    summary = release_summary(
        scores,
        inputs.member,
        inputs.init_idx,
        shadows,
        obs,
        coins=None if inputs.coins is None else (inputs.coins.rate, inputs.coins.seed),
        experiment=prepared.experiment,
        variance=variance,
        settings=settings,
        claimed_delta=None if request.report.claim is None else request.report.claim.delta,
        choices=choices,
    )
    result = replace(judged(summary, request.report.claim), release_leakage=leakage, subset_baseline=comparison)
    built, html_path, json_path = _write_audit_and_report(
        prepared, result, scores, obs.to_store(meta), init_mask=runs.init_mask[targets]
    )
    return result, built, html_path, json_path


def _train_missing(prepared: PreparedRelease) -> None:
    """Train the shadow runs the stores lack: the pipeline's, then the random subsets' (if any)."""
    request, inputs, settings = prepared.request, prepared.inputs, prepared.request.evaluation
    baseline = prepared.subset
    stores = [(prepared.store, prepared.victim)] + ([(baseline.store, baseline.victim)] if baseline.store else [])
    for store, victim in stores:
        train_missing_runs(
            store,
            victim=victim,
            pool=inputs.pool,
            keep=prepared.keep,
            seed=settings.seed,
            inclusion_rate=settings.inclusion_rate,
            executor=request.executor,
            quiet=request.quiet,
        )


def _subset_comparison(prepared: PreparedRelease, release_flag) -> dict:
    """summary.json's `subset_baseline`: the release against the subsets' leave-one-out flags, or why none."""
    request, inputs, baseline = prepared.request, prepared.inputs, prepared.subset
    if baseline.store is None:
        return {"outcome": None, "reason": baseline.reason}
    subsets = StoredRuns.load(
        baseline.store, keep=prepared.keep, images=inputs.pool.x, labels=inputs.pool.y, schema=inputs.pool.schema
    )
    subset_flags = leave_one_out(
        subsets,
        list(attack_names()),
        variance=variance_for(request.lira_variance, n_reference=len(subsets.keep) - 1),
    )
    return {
        **compare_with_subsets(release_flag, subset_flags, alpha=request.report.alpha),
        "subset_store": str(baseline.store.root.resolve()),
        "n_subset_runs": len(subsets.keep),
        "subset_test_accuracy": float(np.mean([m["test_accuracy"] for m in subsets.meta])),
    }


def _write_audit_and_report(prepared: PreparedRelease, result: AuditResult, scores, stored_run, *, init_mask):
    """Write the audit directory (the release as run 0) and its report; returns (report, html path, json path)."""
    request, inputs, out = prepared.request, prepared.inputs, prepared.out
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "experiment.json", prepared.record)
    write_npy(out / "pool_labels.npy", inputs.pool.y)
    RunStore(out).write_run(0, *stored_run)
    write_npy(out / "audit" / "pool_index.npy", inputs.pool_index)
    outputs.write_audit(
        out / "audit", result=result, scores=scores, membership=inputs.member[None], init_mask=init_mask
    )
    audited = load_audited(out)
    built = build_report(
        [audited], settings=request.report, images={str(audited.path): inputs.pool.x}, command=list(request.command)
    )
    html_path, json_path = write_report(built, out / "audit")
    return built, html_path, json_path
