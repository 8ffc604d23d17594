"""An audit's result as one frozen value, `AuditResult`: what summary.json holds (docs/contracts.md,
"summary.json"). `to_json` and `from_json` are the only code that knows summary.json's keys; the
terminal, the report, the rounds of `--until-decided`, the API and `audit.compare` read its
attributes. Like `audit.experiment`, it reads no file and imports nothing above the claim."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from audit.claim import Claim, checked_claim


@dataclass(frozen=True)
class AuditResult:
    """One audit's result. `claim` is the claim the command was given (None where none was);
    `bound` the one ε lower bound the verdict rests on (summary.json's `verdict`, None where no
    bound applies), `verdict` that verdict in words against the claim checked (derived from the rest
    by `audit.reporting.verdict`), `own_curve` the test of the claimed mechanism's own curve. The
    nested figures (`utility`, `evaluation`, each attack's entry, `sequential`) are summary.json's
    objects as they are."""

    victim: str
    dataset: str | None
    config: dict
    n_shadow: int
    target_runs: tuple[int, ...]
    formal_epsilon: float | None
    delta: float | None
    claim: Claim | None
    utility: dict
    evaluation: dict
    attacks: dict
    bound: dict | None
    #: the worst-case neighbour design's pair test; a release audit's leakage and subset comparison
    pair_test: dict | None = None
    release_leakage: dict | None = None
    subset_baseline: dict | None = None
    #: `--until-decided`'s record of the looks
    sequential: dict | None = None
    verdict: object = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "target_runs", tuple(self.target_runs))

    def checked_claim(self, given: Claim | None = None) -> Claim | None:
        """The claim this audit is checked against, both parts set (`audit.claim.checked_claim`): the
        given ε, else the claimed ε it records, else the victim's formal ε; None when there is none.
        Its δ: the given one, else the recorded claim's (the δ its verdict is at), else the audit's
        `delta`, else 0."""
        recorded = self.claim or Claim()
        delta = (self.delta or 0.0) if recorded.delta is None else recorded.delta
        if given is not None and given.delta is not None:
            delta = given.delta
        epsilon = given.epsilon if given is not None and given.epsilon is not None else recorded.epsilon
        return checked_claim(epsilon, delta, formal_epsilon=self.formal_epsilon)

    @property
    def own_curve(self) -> dict | None:
        """The test of the claimed mechanism's own curve (null where the runs record none)."""
        return (self.bound or {}).get("mechanism")

    @property
    def confidence(self) -> float:
        return self.evaluation.get("confidence", 0.95)

    @property
    def canaries(self) -> dict | None:
        """experiment.json's canary entry of an audit with `--canaries`, else None."""
        return self.evaluation.get("canaries")

    @property
    def n_canaries(self) -> int | None:
        return self.evaluation.get("n_canaries")

    @property
    def release_audit(self) -> bool:
        """Whether this is the audit of one release (`audit.release`) rather than of shadow runs."""
        return self.evaluation.get("membership") is not None

    def to_json(self) -> dict:
        """summary.json's content, its keys in the file's order."""
        claim = self.claim or Claim()
        optional = {
            "pair_test": self.pair_test,
            "release_leakage": self.release_leakage,
            "subset_baseline": self.subset_baseline,
            "sequential": self.sequential,
        }
        return {
            "victim": self.victim,
            "dataset": self.dataset,
            "config": self.config,
            "n_shadow": self.n_shadow,
            "target_runs": list(self.target_runs),
            "formal_epsilon": self.formal_epsilon,
            "delta": self.delta,
            "claimed_epsilon": claim.epsilon,
            "claimed_delta": claim.delta,
            "utility": self.utility,
            "evaluation": self.evaluation,
            "attacks": self.attacks,
            "verdict": self.bound,
            **{k: v for k, v in optional.items() if v is not None},
        }

    @classmethod
    def from_json(cls, data: Mapping, *, verdict=None) -> AuditResult:
        """The result summary.json (`data`) holds; keys an older file lacks read as null. `verdict`:
        its verdict in words, where known."""
        return cls(
            victim=data.get("victim"),
            dataset=data.get("dataset"),
            config=data.get("config") or {},
            n_shadow=data.get("n_shadow"),
            target_runs=data.get("target_runs") or (),
            formal_epsilon=data.get("formal_epsilon"),
            delta=data.get("delta"),
            claim=Claim.given(data.get("claimed_epsilon"), data.get("claimed_delta")),
            utility=data.get("utility") or {},
            evaluation=data.get("evaluation") or {},
            attacks=data.get("attacks") or {},
            bound=data.get("verdict"),
            pair_test=data.get("pair_test"),
            release_leakage=data.get("release_leakage"),
            subset_baseline=data.get("subset_baseline"),
            sequential=data.get("sequential"),
            verdict=verdict,
        )
