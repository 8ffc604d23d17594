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
    """One audit's result: `claim` the claim its command was given (None: none); `bound` the ε lower bound the verdict
    rests on (summary.json's `verdict`); `verdict` that verdict in words (set by the audit and `audit.load`, None
    elsewhere; not compared). Nested figures are summary.json's objects."""

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
    pair_test: dict | None = None
    release_leakage: dict | None = None
    subset_baseline: dict | None = None
    sequential: dict | None = None
    verdict: object = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "target_runs", tuple(self.target_runs))

    def checked_claim(self, given: Claim | None = None) -> Claim | None:
        """The claim this audit is checked against, both parts set (`audit.claim.checked_claim`): ε given, else
        recorded, else the victim's formal ε (None when none); δ given, else the recorded claim's, else the audit's
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
        values = {k: getattr(self, k) for k in SAME}
        values.update(target_runs=list(self.target_runs), verdict=self.bound)
        values.update(claimed_epsilon=claim.epsilon, claimed_delta=claim.delta)
        return {k: values[k] for k in (*KEYS, *OPTIONAL) if k in KEYS or values[k] is not None}

    @classmethod
    def from_json(cls, data: Mapping, *, verdict=None) -> AuditResult:
        """The result summary.json (`data`) holds, with `verdict` in words where known; keys an older
        file lacks read as null (as empty, for the objects)."""
        values = {k: data.get(k) for k in SAME}
        values.update({k: values[k] or {} for k in ("config", "utility", "evaluation", "attacks")})
        claim = Claim.given(data.get("claimed_epsilon"), data.get("claimed_delta"))
        return cls(
            **values, target_runs=data.get("target_runs") or (), claim=claim, bound=data.get("verdict"), verdict=verdict
        )


#: summary.json's keys in the file's order, then those only some audits have (null ones left out)
KEYS = (
    "victim",
    "dataset",
    "config",
    "n_shadow",
    "target_runs",
    "formal_epsilon",
    "delta",
    "claimed_epsilon",
    "claimed_delta",
    "utility",
    "evaluation",
    "attacks",
    "verdict",
)
OPTIONAL = ("pair_test", "release_leakage", "subset_baseline", "sequential")
#: the keys read and written as the field of the same name (the claim is two keys, `bound` is `verdict`)
SAME = tuple(k for k in (*KEYS, *OPTIONAL) if k not in ("target_runs", "claimed_epsilon", "claimed_delta", "verdict"))
