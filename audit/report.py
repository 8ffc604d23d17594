"""`python -m audit.report RUN_DIR [RUN_DIR ...]`: an audit report, `report.html` and `report.json`.

    python -m audit.report RUN_DIR [RUN_DIR ...] [--baseline RUN_DIR] [--claimed-epsilon E]
        [--claimed-delta D] [--out DIR] [--seed 0] [--n-boot 1000] [--n-boot-eps 0]
        [--alpha 0.05] [--top-k 16] [--data-root DIR]

A RUN_DIR is an audited experiment directory (`<runs-dir>/<experiment-id>`, after `python -m
audit.lira`) or a folder holding such directories (each one is taken). The report goes to
`--out` (default: `RUN_DIR/audit/` for one experiment, the current directory for several).
`report.html` is self-contained (figures embedded as `data:` URIs, no external CSS, JS or
fonts): it opens offline. Verdicts come first (see `audit.verdict`), then, for several
experiments, a comparison table and overlaid ROC curves, then one section per experiment.

The protocol read here (`shadow_runs.plan`, "independent-coins-v1"): every example is in every
run by an independent coin; the first runs are the targets, whose coins are the canaries
(m = targets x pool size), and the remaining reference runs are the only shadows. An
experiment audited with an earlier plan is refused (exit 2, naming its plan).

The ε claim checked is `--claimed-epsilon` (with `--claimed-delta`, default the experiment's
δ or 0) when given, else a `claimed_epsilon` recorded in summary.json (`audit.release` writes
one), else the victim's formal ε. Its verdict uses every attack's one-run ε lower bound
(`audit.epsilon`) recomputed from scores.npz at confidence 1 - (1 - c) / k for k attacks
(Bonferroni), so the bounds hold jointly at c (summary.json's `confidence`, 0.95), and the
design's ceiling (what a perfect attack would certify) at that same confidence: a claim at or
above it is "not testable with this design". Where the coins were not fair (--inclusion-rate
other than 0.5, or a release whose members the custodian chose) no ε verdict is given.
With inserted canaries (`audit.lira --canaries N`, `victims.canaries`) the bounds, ceilings and
n_canaries are over the canary records alone (the natural examples are shown beside them in the
protocol paragraph, one "canaries vs natural examples" line per attack, and in the ROC figure);
duplicate canaries get no ε verdict (one coin moves several rows).
An experiment with a released set of k images per class (`ipc`, or `spc` for psg) is compared
by `audit.compare` with a `subset` experiment of the same size and dataset among the RUN_DIRs
or `--baseline`.

report.json keys
----------------
* `settings`: claimed_epsilon, claimed_delta, alpha, seed, n_boot, n_boot_eps, top_k.
* `generated`: command, UTC time, and the reporting code's provenance (versions, git commit).
* `experiments`: one object per experiment, in order:
  - `path`, `label` (as `audit.compare` names it), `victim`, `dataset`, `n_shadow`,
    `target_runs`, `formal_epsilon`, `delta`;
  - `protocol`: one paragraph saying how membership was drawn, which runs are targets and
    shadows, and what the ε numbers are;
  - `claim`: null, or {`epsilon`, `delta`, `source` ("claimed" or "formal"), `confidence`,
    `joint_confidence` (per attack), `bounds` (attack -> ε lower bound at joint_confidence),
    `ceilings` (attack -> the design's ceiling at joint_confidence), `n_canaries`}; the last
    four null where the coins were not fair;
  - `verdicts`: [{`kind`, `text`, `reason`, `evidence`}] (kinds in `audit.verdict.KINDS`);
    the ε verdict first, then the subset one (absent for a `subset` experiment);
  - `attacks`: summary.json's metrics per attack (auc, advantage, tpr_at_fpr, fp_at_fpr,
    eps_hat, eps_lower, eps_ceiling, confidence, delta, n_members, n_nonmembers, subgroups;
    eps_lower and eps_ceiling null where the coins were not fair; sub-groups carry no ε);
  - `utility`: test_accuracy_mean, test_accuracy_std, n_runs;
  - `highest_risk`: {`attack`, `examples`: [{`index`, `label`, `mean_score`,
    `nonmember_percentile`, `member_targets`}]}: the pool examples whose scores when members,
    averaged over the targets holding them, are highest; `nonmember_percentile` is the mean
    share of that target's non-members scoring below the example;
  - `release`: null, or {`run`, `n_images`, `shape`} of the release shown;
  - `provenance`: config, master_seed, evaluation, versions, git_commit, python, run_seeds,
    wall_s_total, wall_s_mean, hosts.
* `comparisons`: `audit.compare.to_json` of each victim-vs-subset comparison made (baseline,
  experiments, tests with Holm-adjusted p-values), or [].

Bad input (a missing or unaudited directory, a bad number, --out not a directory) exits with
status 2 and one line on stderr; nothing is written.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from audit import compare, figures
from audit.arguments import ArgumentParser, delta_in_unit, int_at_least, positive_number, probability
from audit.epsilon import epsilon_ceiling, epsilon_lower_bound, unfair_coins_reason
from audit.outputs import provenance
from audit.verdict import NO_FAIR_COINS, Verdict, epsilon_verdict, no_fair_coins_verdict, no_subset_verdict, subset_verdict
from shadow_runs.files import atomic_write, write_json

HEADLINE_ATTACK = "lira_online"
SIZE_KEYS = ("ipc", "spc")  # config keys giving a release's images per class


# -- loading --------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Audited:
    """An audited experiment directory: `audit.compare`'s view of it plus experiment.json and the runs' metadata."""

    experiment: compare.Experiment
    meta: Mapping  # experiment.json ({} if absent)
    runs: tuple[Mapping, ...]  # runs/<r>.json, in run order
    label: str

    @property
    def path(self) -> Path:
        return self.experiment.path

    @property
    def summary(self) -> Mapping:
        return self.experiment.summary

    @property
    def victim(self) -> str:
        return self.experiment.victim

    @property
    def attacks(self) -> tuple[str, ...]:
        return tuple(self.experiment.scores)

    @property
    def size(self) -> int | None:
        """Released images per class, if the victim releases a set of a fixed size."""
        return next((self.experiment.config[k] for k in SIZE_KEYS if k in self.experiment.config), None)

    def scores(self, attack: str, group: str = "all") -> tuple[np.ndarray, np.ndarray]:
        """(member scores, non-member scores) of `attack`, pooled over the targets."""
        masks = self.experiment.group_masks()
        if group not in masks:
            raise ValueError(f"{self.path}: no group {group!r} (has: {', '.join(masks)})")
        s = self.experiment.scores[attack]
        return s[masks[group]], s[~self.experiment.membership]

    @property
    def canaries(self) -> Mapping | None:
        """summary.json's canary entry (`victims.canaries`) for an audit with inserted canaries, else None."""
        return (self.summary.get("evaluation") or {}).get("canaries") or None

    def group_scores(self, attack: str, group: str) -> tuple[np.ndarray, np.ndarray]:
        """(member, non-member) scores of an audit with canaries, pooled over the targets: group
        "canaries" (each canary record on its first row: the ε bound's guesses) or "natural"."""
        from shadow_runs.records import CanaryColumns

        canaries = CanaryColumns.from_entry(self.canaries)
        columns = canaries.scored if group == "canaries" else canaries.natural
        s, m = self.experiment.scores[attack][:, columns], self.experiment.membership[:, columns]
        return s[m], s[~m]

    def bound_scores(self, attack: str) -> tuple[np.ndarray, np.ndarray]:
        """The scores the ε bound is on: the canary records when the audit inserted canaries, else every example."""
        return self.group_scores(attack, "canaries") if self.canaries else self.scores(attack)

    def release(self) -> tuple[int, np.ndarray, np.ndarray] | None:
        """(run, release_x, release_y) of the first target run, if it stored a release."""
        run = int(self.summary["target_runs"][0])
        path = self.path / "runs" / f"{run:05d}.npz"
        if not path.is_file():
            return None
        with np.load(path) as z:
            if "release_x" not in z.files:
                return None
            return run, z["release_x"], z["release_y"]


def load_audited(path: str | os.PathLike, *, label: str | None = None) -> Audited:
    """One audited experiment directory; `compare.ExperimentError` (one line) if unusable."""
    exp = compare.load_experiment(path)
    meta_path = exp.path / "experiment.json"
    try:
        meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
        runs = tuple(json.loads(p.read_text()) for p in sorted((exp.path / "runs").glob("[0-9]" * 5 + ".json")))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise compare.ExperimentError(f"{exp.path}: unreadable metadata ({' '.join(str(e).split())})") from None
    return Audited(experiment=exp, meta=meta, runs=runs, label=label or compare.experiment_labels([exp])[0])


def experiment_dirs(paths: Sequence[str | os.PathLike]) -> list[Path]:
    """Each path itself if it is an audited experiment, else the audited experiments directly under it."""
    found = []
    for path in map(Path, paths):
        if (path / "audit" / "summary.json").is_file() or (path / "experiment.json").is_file():
            found.append(path)
            continue
        inside = sorted(p for p in path.iterdir() if (p / "audit" / "summary.json").is_file()) if path.is_dir() else []
        if not inside:
            raise compare.ExperimentError(f"{path}: not an audited experiment directory (no audit/summary.json), "
                                          "nor a folder of them")
        found.extend(inside)
    return found


def load_many(paths: Sequence[str | os.PathLike]) -> list[Audited]:
    """Every experiment `experiment_dirs` finds, labelled so that the labels tell them apart."""
    experiments = [compare.load_experiment(p) for p in experiment_dirs(paths)]
    labels = compare.experiment_labels(experiments)
    return [load_audited(e.path, label=label) for e, label in zip(experiments, labels)]


def pool_images(audited: Audited, *, data_root: str | None = None) -> np.ndarray | None:
    """The pool images [n, c, h, w] of a built-in dataset (checked against the experiment's
    fingerprint) or of the user's pool file `audit.release` recorded; None if unavailable."""
    from victims import DataError, load_pool
    from victims.data import dataset_names

    meta = audited.meta
    if meta.get("pool_file"):
        return _release_pool_images(audited)
    if meta.get("dataset") not in dataset_names():
        return None
    try:
        pool = load_pool(meta["dataset"], data_root=data_root)
    except DataError:
        return None
    if meta.get("canaries"):  # the canary rows follow the natural ones (victims.canaries)
        from victims.canaries import CanaryConfig, add_canaries

        try:
            pool = add_canaries(pool, CanaryConfig.from_entry(meta["canaries"]))
        except (KeyError, TypeError, ValueError):
            return None
    if meta.get("dataset_fingerprint") not in (None, pool.fingerprint):
        return None
    return pool.x


def _release_pool_images(audited: Audited) -> np.ndarray | None:
    from audit.release import read_pool_images

    try:
        return read_pool_images(Path(audited.meta["pool_file"]), audited.path / "audit" / "pool_index.npy")
    except (OSError, ValueError, KeyError):
        return None


# -- the numbers ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Claim:
    """An ε claim to check: the ε, its δ, and where it comes from ("claimed" or "formal")."""

    epsilon: float
    delta: float
    source: str

    def __post_init__(self) -> None:
        if not (math.isfinite(self.epsilon) and self.epsilon > 0):
            raise ValueError(f"claimed epsilon must be a finite number > 0, got {self.epsilon}")
        if not 0 <= self.delta < 1:
            raise ValueError(f"claimed delta must be in [0, 1), got {self.delta}")


def claim_of(audited: Audited, *, epsilon: float | None = None, delta: float | None = None) -> Claim | None:
    """The claim to check: the given one, else summary.json's claimed ε, else the formal ε."""
    summary = audited.summary
    own_delta = summary.get("claimed_delta") if summary.get("claimed_delta") is not None else (summary.get("delta") or 0.0)
    if epsilon is not None:
        return Claim(epsilon=epsilon, delta=own_delta if delta is None else delta, source="claimed")
    if summary.get("claimed_epsilon") is not None:
        return Claim(epsilon=summary["claimed_epsilon"], delta=own_delta if delta is None else delta, source="claimed")
    if summary.get("formal_epsilon") is not None:
        return Claim(epsilon=summary["formal_epsilon"], delta=(summary.get("delta") or 0.0) if delta is None else delta,
                     source="formal")
    return None


def joint_bounds(audited: Audited, *, delta: float, confidence: float, seed: int) -> dict[str, float]:
    """Every attack's one-run ε lower bound at confidence 1 - (1 - confidence) / k (k attacks): all
    hold together with probability >= confidence (Bonferroni). Each attack's tie-breaking is
    seeded by (seed, attack name)."""
    each = 1 - (1 - confidence) / len(audited.attacks)
    return {attack: epsilon_lower_bound(*audited.bound_scores(attack), delta=delta, confidence=each,
                                        rng=np.random.default_rng([seed, zlib.crc32(attack.encode())]))
            for attack in audited.attacks}


def joint_ceilings(audited: Audited, *, delta: float, confidence: float) -> dict[str, float]:
    """Every attack's ceiling (`audit.epsilon.epsilon_ceiling` of its m canaries) at the same
    per-attack confidence 1 - (1 - confidence) / k as `joint_bounds`: what a perfect attack would
    certify there."""
    each = 1 - (1 - confidence) / len(audited.attacks)
    cache: dict[int, float] = {}
    ceilings = {}
    for attack in audited.attacks:
        m = sum(s.size for s in audited.bound_scores(attack))
        if m not in cache:
            cache[m] = epsilon_ceiling(m, delta=delta, confidence=each)
        ceilings[attack] = cache[m]
    return ceilings


def fair_coins(audited: Audited) -> bool:
    """Whether the ε numbers apply: every attack of summary.json has an eps_lower (null where the
    plan's coins were not fair, or where a release's members were chosen)."""
    attacks = audited.summary.get("attacks") or {}
    return all(attacks.get(a, {}).get("eps_lower") is not None for a in audited.attacks)


def no_epsilon_reason(audited: Audited) -> str:
    """Why an experiment has no ε numbers, in one sentence (a release records its own)."""
    evaluation = audited.summary.get("evaluation") or {}
    if evaluation.get("epsilon_note"):  # audit.lira and audit.release record why
        return str(evaluation["epsilon_note"])
    rate = evaluation.get("inclusion_rate")
    if isinstance(rate, (int, float)):
        return unfair_coins_reason(rate)
    return "the membership coins are not recorded as fair, so these numbers describe leakage and bound no ε"


def protocol(audited: Audited) -> str:
    """How membership was drawn, which runs are targets and shadows, and what the ε numbers are."""
    summary, evaluation = audited.summary, audited.summary.get("evaluation") or {}
    targets = list(summary.get("target_runs", []))
    n_runs = int(summary.get("n_shadow") or len(targets))
    n_pool = int(audited.experiment.membership.shape[1])
    if evaluation.get("membership"):
        text = (f"One target, the user's release; its members: {evaluation['membership']}. The "
                f"{n_runs} shadow runs of the same pipeline on the same pool, each example in each by an "
                f"independent coin of probability {evaluation.get('inclusion_rate', 0.5):g}, are reference runs, "
                "the attacks' only shadows.")
    else:
        rate = evaluation.get("inclusion_rate", 0.5)
        what = "pool examples"
        if audited.canaries:  # one coin per record: a duplicate canary's rows share one
            n_pool, what = int(audited.canaries["n_natural"]) + int(audited.canaries["n"]), "records (examples and canaries)"
        text = (f"Each of the {n_pool:,} {what} is in each of the {n_runs} runs by an independent coin of "
                f"probability {rate:g} (plan {evaluation.get('plan', 'independent-coins-v1')}). The first "
                f"{len(targets)} runs are the targets, whose {len(targets) * n_pool:,} coins "
                f"{'are the canaries' if fair_coins(audited) and not audited.canaries else 'the attacks guess'}; the "
                f"other {n_runs - len(targets)} runs are reference runs, the attacks' only shadows, so no guess "
                "depends on a target's coins.")
    if audited.canaries:
        text += " " + canary_protocol(audited)
    if fair_coins(audited):
        text += (" ε lower is the one-run bound (Steinke, Nasr & Jagielski 2023) on all the canaries, which "
                 "holds at the stated confidence; ε ceiling is what a perfect attack would certify with this "
                 "design, so a claim at or above it cannot be tested.")
    else:
        text += " No ε bound: " + no_epsilon_reason(audited) + "."
    return text


def canary_protocol(audited: Audited) -> str:
    """What the inserted canaries are, and per attack a "canaries vs natural examples" line."""
    entry, targets = audited.canaries, audited.summary.get("target_runs", [])
    copies = f" of {entry['copies']} identical rows sharing one coin" if entry.get("copies") else ""
    text = (f"The audit inserted {entry['n']:,} {entry['kind']} canaries{copies} (pool rows from {entry['first_row']:,} "
            f"on, after the {entry['n_natural']:,} natural examples) before the plan was drawn, each a record with its "
            f"own coin per run: the top-level numbers (and any ε verdict) are over the {len(targets) * entry['n']:,} "
            "canary coins of the target runs, designated before any training; the natural examples are reported "
            "beside them, descriptively.")
    lines = []
    for attack in audited.attacks:
        m = (audited.summary.get("attacks") or {}).get(attack) or {}
        n = m.get("natural")
        if not n:
            continue
        eps = ("" if m.get("eps_lower") is None and n.get("eps_lower") is None else
               f", ε lower {_eps_text(m.get('eps_lower'))} vs {_eps_text(n.get('eps_lower'))}")
        lines.append(f"{attack}: AUC {m['auc']:.3f} vs {n['auc']:.3f}, TPR at 1% FPR {m['tpr_at_fpr']['0.01']:.4f} vs "
                     f"{n['tpr_at_fpr']['0.01']:.4f}{eps}")
    if lines:
        text += " Canaries vs natural examples: " + "; ".join(lines) + "."
    return text


def _eps_text(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def highest_risk(audited: Audited, *, attack: str, top_k: int) -> list[dict]:
    """The `top_k` pool examples with the highest mean score over the targets where they are members."""
    exp = audited.experiment
    scores, membership = exp.scores[attack], exp.membership
    counts = membership.sum(0)
    mean = np.where(counts > 0, (scores * membership).sum(0) / np.maximum(counts, 1), -np.inf)
    percentile = np.zeros(scores.shape)
    for t in range(len(scores)):
        nonmember = np.sort(scores[t][~membership[t]])
        percentile[t] = np.searchsorted(nonmember, scores[t], side="left") / len(nonmember)
    mean_percentile = (percentile * membership).sum(0) / np.maximum(counts, 1)
    order = [int(i) for i in np.argsort(-mean, kind="stable") if counts[i] > 0][:top_k]
    labels = _pool_labels(audited)
    return [{"index": i, "label": None if labels is None else int(labels[i]), "mean_score": float(mean[i]),
             "nonmember_percentile": float(mean_percentile[i]), "member_targets": int(counts[i])} for i in order]


def _pool_labels(audited: Audited) -> np.ndarray | None:
    path = audited.path / "pool_labels.npy"
    return np.load(path) if path.is_file() else None


def utility(audited: Audited) -> dict:
    accuracy = audited.experiment.test_accuracy
    return {"test_accuracy_mean": float(accuracy.mean()), "test_accuracy_std": float(accuracy.std()),
            "n_runs": int(accuracy.size)}


def run_provenance(audited: Audited) -> dict:
    meta, runs = audited.meta, audited.runs
    walls = [r["wall_s"] for r in runs if isinstance(r.get("wall_s"), (int, float))]
    return {"config": audited.experiment.config, "master_seed": meta.get("master_seed"),
            "evaluation": audited.summary.get("evaluation"), "versions": meta.get("versions"),
            "git_commit": meta.get("git_commit"), "python": meta.get("python"),
            "run_seeds": [r.get("seed") for r in runs], "wall_s_total": float(sum(walls)),
            "wall_s_mean": float(np.mean(walls)) if walls else None,
            "hosts": sorted({str(r.get("host")) for r in runs if r.get("host") is not None})}


def find_subset(audited: Audited, candidates: Sequence[Audited]) -> Audited | None:
    """A `subset` experiment of the same dataset and images per class, if one is among `candidates`."""
    if audited.victim == "subset" or audited.size is None:
        return None
    return next((c for c in candidates if c.victim == "subset" and c.size == audited.size
                 and c.experiment.dataset == audited.experiment.dataset), None)


# -- the report -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Settings:
    """What the report is asked to check and how hard to resample."""

    claimed_epsilon: float | None = None
    claimed_delta: float | None = None
    alpha: float = 0.05
    seed: int = 0
    n_boot: int = compare.N_BOOT
    n_boot_eps: int = compare.N_BOOT_EPS
    top_k: int = 16

    def __post_init__(self) -> None:
        if self.claimed_epsilon is not None:
            Claim(epsilon=self.claimed_epsilon, delta=self.claimed_delta or 0.0, source="claimed")  # validates
        if self.claimed_delta is not None and not 0 <= self.claimed_delta < 1:
            raise ValueError(f"--claimed-delta must be in [0, 1), got {self.claimed_delta}")
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


def build_report(experiments: Sequence[Audited], *, baseline: Audited | None = None, settings: Settings = Settings(),
                 images: Mapping[str, np.ndarray] | None = None, data_root: str | None = None,
                 command: Sequence[str] = ()) -> Report:
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
            comparisons.append(compare.to_json(comparison))
        key = str(audited.path)
        curves = ({a: audited.scores(a) for a in audited.attacks} if not audited.canaries else
                  {f"{a} ({g})": audited.group_scores(a, g) for a in audited.attacks for g in ("canaries", "natural")})
        roc[key] = figures.roc_png(curves, title=audited.label)
        release = audited.release()
        if release is not None:
            run, x, y = release
            entry["release"] = {"run": run, "n_images": int(len(x)), "shape": list(x.shape)}
            releases[key] = figures.image_grid_png(x, [str(int(c)) for c in y], columns=min(20, max(10, len(x) // 10)),
                                                   size=0.6)
        pool_x = images.get(key)
        if pool_x is None:
            pool_x = pool_images(audited, data_root=data_root)
        risky = entry["highest_risk"]["examples"]
        if pool_x is not None and risky:
            risks[key] = figures.image_grid_png(
                pool_x[[e["index"] for e in risky]],
                [f"#{e['index']} ({e['label']})\n{e['nonmember_percentile']:.1%}" for e in risky], columns=8, size=1.0)
    shared = [a for a in experiments[0].attacks if all(a in e.attacks for e in experiments)] if len(experiments) > 1 else []
    overlays = {a: figures.roc_png({e.label: e.scores(a) for e in experiments}, title=a) for a in shared}
    data = {
        "settings": {"claimed_epsilon": settings.claimed_epsilon, "claimed_delta": settings.claimed_delta,
                     "alpha": settings.alpha, "seed": settings.seed, "n_boot": settings.n_boot,
                     "n_boot_eps": settings.n_boot_eps, "top_k": settings.top_k},
        "generated": {"command": list(command), "utc": datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"), **provenance()},
        "experiments": entries,
        "comparisons": comparisons,
    }
    return Report(data=_finite(data), experiments=tuple(experiments), roc=roc, overlays=overlays, releases=releases,
                  risks=risks)


def _experiment_entry(audited: Audited, candidates: Sequence[Audited], *, settings: Settings, seed: int):
    summary = audited.summary
    confidence = audited.experiment.confidence
    claim = claim_of(audited, epsilon=settings.claimed_epsilon, delta=settings.claimed_delta)
    claim_json = None if claim is None else {"epsilon": claim.epsilon, "delta": claim.delta, "source": claim.source,
                                             "confidence": confidence, "joint_confidence": None, "bounds": None,
                                             "ceilings": None, "n_canaries": None}
    attacks = {a: summary["attacks"][a] for a in audited.attacks if a in summary.get("attacks", {})}
    canaries = audited.canaries
    if not fair_coins(audited):
        eps = no_fair_coins_verdict(no_epsilon_reason(audited))
        if canaries and canaries.get("kind") == "duplicate" and (summary.get("evaluation") or {}).get("inclusion_rate") == 0.5:
            eps = dataclasses.replace(eps, text="no ε verdict: each duplicate canary is several rows moved by one coin")
    elif claim is None:
        eps = epsilon_verdict({a: m["eps_lower"] for a, m in attacks.items()},
                              ceiling={a: m["eps_ceiling"] for a, m in attacks.items()},
                              claimed_epsilon=None, delta=0.0, confidence=confidence)
    else:
        bounds = joint_bounds(audited, delta=claim.delta, confidence=confidence, seed=seed)
        ceilings = joint_ceilings(audited, delta=claim.delta, confidence=confidence)
        membership = audited.experiment.membership
        n_canaries, per_target = int(membership.size), int(membership.shape[1])
        if canaries:  # the bound is on the inserted canaries alone
            n_canaries, per_target = len(summary.get("target_runs", [])) * int(canaries["n"]), int(canaries["n"])
        eps = epsilon_verdict(bounds, ceiling=ceilings, claimed_epsilon=claim.epsilon, delta=claim.delta,
                              confidence=confidence, source=claim.source, n_canaries=n_canaries,
                              per_target=per_target)
        claim_json.update({"joint_confidence": 1 - (1 - confidence) / len(bounds), "bounds": bounds,
                           "ceilings": ceilings, "n_canaries": n_canaries})
    if canaries and eps.kind != NO_FAIR_COINS:
        eps = dataclasses.replace(eps, reason=eps.reason + (
            f". The ε bounds are on the {canaries['n']:,} inserted {canaries['kind']} canaries per target run "
            "(designated before any training), not on the natural examples, which are reported beside them"))
    verdicts: list[Verdict] = [eps]
    comparison = None
    if audited.victim != "subset":
        subset = find_subset(audited, candidates)
        if audited.experiment.n_targets < 2:
            verdicts.append(no_subset_verdict(
                "one target (a single release): the comparison with a random real subset resamples target runs, so "
                "it needs an audit of the pipeline (python -m audit.lira for it and for subset, then audit.report)"))
        elif subset is None:
            size = "no released set of a fixed size" if audited.size is None else f"{audited.size} per class"
            verdicts.append(no_subset_verdict(f"no `subset` experiment of the same dataset and size ({size}) was "
                                              "given (add one as a RUN_DIR or --baseline)"))
        else:
            try:
                result = compare.compare_experiments([audited.experiment], subset.experiment, groups=("all",),
                                                     confidence=confidence, alpha=settings.alpha, n_boot=settings.n_boot,
                                                     n_boot_eps=settings.n_boot_eps, seed=seed)
            except ValueError as e:
                verdicts.append(no_subset_verdict(f"the comparison with {subset.label} is not possible: {e}"))
            else:
                comparison = result
                verdicts.append(subset_verdict(result.comparisons[0].tests, baseline_label=subset.label,
                                               alpha=settings.alpha))
    attack = HEADLINE_ATTACK if HEADLINE_ATTACK in audited.attacks else audited.attacks[0]
    entry = {
        "path": str(audited.path), "label": audited.label, "victim": audited.victim,
        "dataset": audited.experiment.dataset, "n_shadow": summary.get("n_shadow"),
        "target_runs": list(summary.get("target_runs", [])), "formal_epsilon": summary.get("formal_epsilon"),
        "delta": summary.get("delta"), "protocol": protocol(audited), "claim": claim_json,
        "verdicts": [v.to_json() for v in verdicts], "attacks": attacks,
        "utility": utility(audited),
        "highest_risk": {"attack": attack, "examples": highest_risk(audited, attack=attack, top_k=settings.top_k)},
        "release": None, "provenance": run_provenance(audited),
    }
    return entry, comparison


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
    from audit.report_html import render

    html_path, json_path = out_dir / "report.html", out_dir / "report.json"
    page = render(report).encode("utf-8")
    atomic_write(html_path, lambda f: f.write(page))
    write_json(json_path, report.data)
    for path in (html_path, json_path):  # meant to be read and shared: readable by all, like a plain file
        path.chmod(0o644)
    return html_path, json_path


# -- command line ---------------------------------------------------------------------------------
def add_claim_flags(parser) -> None:
    parser.add_argument("--claimed-epsilon", type=positive_number, default=None,
                        help="the ε the release claims (default: the victim's formal ε, if any)")
    parser.add_argument("--claimed-delta", type=delta_in_unit, default=None,
                        help="the δ of that claim (default: the victim's δ, or 0)")


def add_report_flags(parser, *, seed: bool = True) -> None:
    if seed:
        parser.add_argument("--seed", type=int_at_least(0), default=0, help="seed of the bounds' splits and the bootstrap")
    parser.add_argument("--n-boot", type=int_at_least(1), default=compare.N_BOOT, help="bootstrap replicates (AUC, TPR)")
    parser.add_argument("--n-boot-eps", type=int_at_least(0), default=compare.N_BOOT_EPS,
                        help="bootstrap replicates of eps_lower in the comparison with the subset (default 0: "
                             "not resampled nor tested; each replicate costs 0.1-2 s per attack)")
    parser.add_argument("--alpha", type=probability, default=0.05, help="significance level after Holm's adjustment")
    parser.add_argument("--top-k", type=int_at_least(1), default=16, help="examples at highest risk to show")
    parser.add_argument("--data-root", default=None, help="where torchvision datasets live (for the thumbnails)")


def settings_from(args) -> Settings:
    return Settings(claimed_epsilon=args.claimed_epsilon, claimed_delta=args.claimed_delta, alpha=args.alpha,
                    seed=args.seed, n_boot=args.n_boot, n_boot_eps=args.n_boot_eps, top_k=args.top_k)


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="python -m audit.report",
                       description="Write report.html (self-contained) and report.json for audited experiments.")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="audited experiment directories (or folders of them)")
    p.add_argument("--baseline", default=None, metavar="RUN_DIR", help="a `subset` experiment to compare with")
    p.add_argument("--out", type=Path, default=None,
                   help="directory for report.html and report.json (default: RUN_DIR/audit for one experiment, "
                        "else the current directory)")
    add_claim_flags(p)
    add_report_flags(p)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        experiments = load_many(args.run_dirs)
        baseline = load_audited(args.baseline) if args.baseline else None
        out = args.out or (experiments[0].path / "audit" if len(experiments) == 1 else Path("."))
        if not out.is_dir():
            raise ValueError(f"--out {out}: no such directory")
        report = build_report(experiments, baseline=baseline, settings=settings_from(args), data_root=args.data_root,
                              command=["python", "-m", "audit.report", *(sys.argv[1:] if argv is None else argv)])
    except ValueError as e:  # ExperimentError included
        parser.error(str(e))
    html_path, json_path = write_report(report, out)
    for entry in report.data["experiments"]:
        print(f"{entry['label']}: " + "; ".join(v["text"] for v in entry["verdicts"]))
    print(f"  -> {html_path}\n  -> {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
