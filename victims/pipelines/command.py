"""`command`: a pipeline given as a command, run once per seed in the environment its TOML file names
(`--pipeline FILE.toml`; docs/contracts.md "A pipeline as a command"), its release read back
through the schema (or the pool's image shape) and the downstream model trained on it as the
built-in victims do. The command's claim, if any, replaces `--epsilon`/`--delta`. Either kind of
pool. White-box (record canaries on a table): the claim's `measurements_cells` are observed as
`marginals` is (`victims.command_whitebox`); a claim without them fails with one line, and
canaries must lie in distinct cells of every measurement.
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np

from victims.base import (
    DEFAULT_INCLUSION_RATE,
    Observations,
    RunError,
    expected_members,
    register_victim,
    require_at_least,
)
from victims.command_jobs import Fitted, run_jobs
from victims.command_whitebox import measured_observations
from victims.command_pipeline import (
    Ended,
    PipelineFile,
    hand_over,
    load_pipeline,
    read_claim,
    read_release,
    run_command,
)
from victims.packed import PacksRuns
from victims.pool import Pool
from victims.synthetic import DOWNSTREAM_STREAM, train_on_release
from victims.tabular.release import Released, observe_release
from victims.train import TrainConfig, small_set_training


@register_victim("command")
@dataclass(frozen=True)
class CommandVictim(PacksRuns):
    """A pipeline run as a command per seed (module docstring)."""

    #: either kind: the pipeline file's `kind` ("table" or "images") says which pool it takes (`check`)
    tabular: ClassVar[bool | None] = None
    #: under white-box, record canaries are observed through the claim's noisy measurements (module docstring)
    white_box_record_canaries: ClassVar[bool] = True

    pipeline: str | None = field(
        default=None,
        metadata={
            "help": "the pipeline's TOML file: its kind (table or images), the command run once per seed, its "
            "timeout_s, and the requirements and source files hashed as its environment "
            "(docs/contracts.md, 'A pipeline as a command')"
        },
    )
    epsilon: float | None = field(
        default=None, metadata={"help": "the epsilon handed to the command ({epsilon}, MIA_EPSILON); none if not given"}
    )
    delta: float | None = field(
        default=None, metadata={"help": "the delta handed to the command ({delta}, MIA_DELTA); none if not given"}
    )
    classifier_iterations: int = field(
        default=100, metadata={"help": "boosting rounds of the downstream classifier trained on the release"}
    )
    train: TrainConfig = field(default_factory=small_set_training)  # images: the downstream ConvNet on the release

    def __post_init__(self) -> None:
        require_at_least(self, {"classifier_iterations": 1})
        if self.epsilon is not None and not (self.epsilon > 0 and math.isfinite(self.epsilon)):
            raise ValueError(f"--epsilon must be a positive number, got {self.epsilon}")
        if self.delta is not None and not 0 < self.delta < 1:
            raise ValueError(f"--delta must be in (0, 1), got {self.delta}")
        # read once, where the victim is built: the runs (Ray workers included) use this copy
        object.__setattr__(self, "_spec", load_pipeline(self.pipeline) if self.pipeline is not None else None)

    @property
    def spec(self) -> PipelineFile:
        if self._spec is None:
            raise ValueError("--victim command needs --pipeline FILE.toml (the command and its environment)")
        return self._spec

    def environment(self) -> dict:
        """The command and the hashes of its files: part of the store's `victim_source` (`victims.source`)."""
        return self.spec.environment()

    def check(self, pool: Pool, *, inclusion_rate: float = DEFAULT_INCLUSION_RATE) -> None:
        spec = self.spec
        if spec.tabular != pool.tabular:
            holds = "is a table" if pool.tabular else "holds images"
            raise ValueError(f"--pipeline {self.pipeline} has kind = {spec.kind!r}, and --dataset {pool.name} {holds}")
        used = spec.placeholders()
        for name in ("epsilon", "delta"):
            if name in used and getattr(self, name) is None:
                raise ValueError(f"--pipeline {self.pipeline}: its command passes {{{name}}}; give --{name}")
        if "schema" in used and not pool.tabular:
            raise ValueError(f"--pipeline {self.pipeline}: its command passes {{schema}}, which only a table has")

    def release_dimension(self, pool: Pool) -> int:
        """Gradient canaries a run can observe: none (a command adds no cells of the auditor's)."""
        return 0

    @property
    def packs(self) -> bool:
        """Whether the executor hands `run_packed` a task's runs: only a batched command's (`batch`)."""
        return self._spec is not None and self._spec.batch is not None

    @property
    def runs_per_call(self) -> int | None:
        """A batched command's `batch`: the runs per task where --runs-per-task is not given."""
        return self._spec.batch if self._spec is not None else None

    def run(
        self,
        pool: Pool,
        keep: np.ndarray,
        seed: int,
        *,
        device: str = "cpu",
        inclusion_rate: float = DEFAULT_INCLUSION_RATE,
    ) -> Observations:
        """The command on the members `keep`, then the downstream model on its release (module docstring).
        ValueError (one line) where the command fails, runs out of time or releases what the pool cannot hold."""
        spec = self.spec
        if spec.batch is not None:  # a batched command is always handed jobs, one here
            return self.run_packed(pool, np.asarray(keep)[None], [seed], device=device, inclusion_rate=inclusion_rate)[
                0
            ]
        keep = np.asarray(keep, dtype=bool)
        with tempfile.TemporaryDirectory(prefix="mia-command-") as tmp:
            directory = Path(tmp)
            values = hand_over(pool, keep, directory, kind=spec.kind)
            values["seed"] = str(seed)
            values.update(self._shared(pool, inclusion_rate))
            ended = run_command(spec, spec.argv(values), values, log_dir=directory)
            x, y = read_release(pool, Path(values["out"]), where=spec.name)
            claim = read_claim(Path(values["claim"]), where=spec.name)
        return self._observe(pool, (x, y, claim), ended, seed, device=device, keep=keep)

    def pack_runs(
        self, pool: Pool, keeps: np.ndarray, seeds: list[int], *, device: str, inclusion_rate: float
    ) -> list[Observations]:
        """The runs of `seeds` (members `keeps[k]`): a batched command's in calls of up to `batch` seeds, an
        unbatched one's one call per seed; then each run's downstream model. SeedFailed (one line) where
        a seed fails."""
        spec = self.spec
        if spec.batch is None:
            return [self.run(pool, k, s, device=device, inclusion_rate=inclusion_rate) for k, s in zip(keeps, seeds)]
        observed = []
        for first in range(0, len(seeds), spec.batch):
            call = [int(s) for s in seeds[first : first + spec.batch]]
            with tempfile.TemporaryDirectory(prefix="mia-command-") as tmp:
                shared = {"kind": spec.kind, **self._shared(pool, inclusion_rate)}
                fitted, ended = run_jobs(
                    spec, pool, keeps[first : first + len(call)], call, shared, directory=Path(tmp), first=first
                )
            for j, (seed, release) in enumerate(zip(call, fitted)):
                keep = np.asarray(keeps[first + j], dtype=bool)
                observed.append(self._observe(pool, release, ended, seed, device=device, seeds_in_call=call, keep=keep))
        return observed

    def _shared(self, pool: Pool, inclusion_rate: float) -> dict[str, str]:
        """What every seed's call is handed alike: the expected member count, --epsilon and --delta where given."""
        values = {"expected_members": repr(expected_members(pool, inclusion_rate))}
        values.update({k: repr(getattr(self, k)) for k in ("epsilon", "delta") if getattr(self, k) is not None})
        return values

    def _observe(
        self,
        pool: Pool,
        fitted: Fitted,
        ended: Ended,
        seed: int,
        *,
        device: str,
        seeds_in_call: list[int] | None = None,
        keep: np.ndarray | None = None,
    ) -> Observations:
        """The downstream model on a release (x, y, claim), with its call's record (`seeds_in_call`, batched)
        and, under white-box, the canaries' observations from the claim (`keep`: the run's members)."""
        x, y, claim = fitted
        extra = self._claimed(claim)
        if pool.white_box is not None and pool.tabular:
            extra.update(white_box_fields(pool, claim, keep, where=self.spec.name))
        extra["record"] = {
            "command": {
                "argv": list(self.spec.command),
                "seconds": ended.seconds,
                "stdout": ended.stdout,
                "stderr": ended.stderr,
                **({"claim": claim} if claim is not None else {}),
                **({"seeds_in_call": seeds_in_call} if seeds_in_call is not None else {}),
            }
        }
        if pool.tabular:
            return observe_release(pool, Released(x, y, extra), seed=seed, iterations=self.classifier_iterations)
        downstream = int(np.random.SeedSequence([seed, DOWNSTREAM_STREAM]).generate_state(1)[0] >> 1)
        observed = train_on_release(pool, x, y, config=self.train, seed=downstream, device=device)
        return dataclasses.replace(observed, **extra)

    def _claimed(self, claim: dict | None) -> dict:
        """The run's formal ε and δ (the command's own claim where it gives them, else --epsilon, --delta) and
        the mechanism its claim names, if any."""
        claim = claim or {}
        extra = {
            "formal_epsilon": claim.get("epsilon", self.epsilon),
            "delta": claim.get("delta", self.delta),
        }
        if claim.get("mechanism") is not None:
            extra["mechanism"] = claim["mechanism"]
        return extra


def white_box_fields(pool: Pool, claim: dict | None, keep: np.ndarray, *, where: str) -> dict:
    """`whitebox` [k, canaries] and `whitebox_mechanism` from the claim's measured cells (module
    docstring); RunError (one line, naming the pipeline) where the claim cannot give them."""
    spec, schema = pool.white_box, pool.schema
    rows = np.arange(spec.first_row, spec.first_row + spec.n)
    others = np.flatnonzero(np.asarray(keep, dtype=bool)[: spec.first_row])  # members other than the canaries
    names = (*(c.name for c in schema.features), schema.label)
    try:
        observed, sigma = measured_observations(
            claim or {},
            names,
            schema.domain_sizes,
            schema.codes(pool.x[rows], pool.y[rows]),
            schema.codes(pool.x[others], pool.y[others]),
        )
    except ValueError as e:
        raise RunError(f"{where}: --threat-model white-box: {e}") from None
    return {"whitebox": observed, "whitebox_mechanism": {"noise_multiplier": sigma, "sample_rate": 1.0}}
