"""`ctgan`: CTGAN (Xu, Skoularidou, Cuesta-Infante and Veeramachaneni 2019) from the `ctgan`
package, trained per run on the members and sampling `rows` records. No formal claim
(`formal_epsilon` None), read against `tabular-subset`.

Its numbers are rounded and clipped into the columns' public bounds: post-processing with the
public schema alone, so it leaks nothing the sample did not. Its numpy and torch generators are
seeded by the run's seed and it runs on the CPU in one process on one torch thread, so a seed gives one release.
The defaults (30 epochs, widths 64) are far smaller than CTGAN's own, to keep an audit in minutes
(docs/results/tabular.md, "Cost")."""

from __future__ import annotations

import contextlib
import importlib.util
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from victims.base import register_victim, require_at_least
from victims.pool import Pool
from victims.tabular.release import Released, TableRelease
from victims.tabular.schema import Schema

#: how to get the package (pyproject.toml's extra "ctgan")
CTGAN_INSTALL = 'pip install -e ".[ctgan]"'


def _ctgan_class() -> Any:
    """The `ctgan.CTGAN` class; ImportError in one line, with the install command, if it is missing."""
    try:
        from ctgan import CTGAN
    except ImportError:
        raise ImportError(f"--victim ctgan needs the ctgan package: {CTGAN_INSTALL}") from None
    return CTGAN


@contextlib.contextmanager
def one_process_one_thread():
    """Inside the block: torch on one intra-op thread (the caller's count afterwards), and joblib, which
    CTGAN's data transformer asks for every core, sequential: no worker processes to start and import
    torch and pandas again in each run (the executor runs the runs side by side). Each column is
    transformed from the same state either way, so the release is the same."""
    import joblib
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with joblib.parallel_config(backend="sequential"):
            yield
    finally:
        torch.set_num_threads(threads)


def clip_to_schema(frame, schema: Schema):
    """A copy of a sampled DataFrame with every number rounded (integer columns) and clipped into
    its column's public bounds: post-processing with the public schema alone."""
    frame = frame.copy()
    for column in schema.features:
        if column.kind == "categorical":
            continue
        values = frame[column.name].to_numpy(dtype=np.float64)
        if column.kind == "integer":
            values = np.round(values)
            low, high = np.ceil(column.lower), np.floor(column.upper)
        else:
            low, high = column.lower, column.upper
        frame[column.name] = np.clip(values, low, high)
    return frame


@register_victim("ctgan")
@dataclass(frozen=True)
class CTGANRelease(TableRelease):
    """CTGAN trained on the members, `rows` records sampled from it (module docstring)."""

    epochs: int = field(default=30, metadata={"help": "CTGAN training epochs over the members"})
    gen_width: int = field(default=64, metadata={"help": "width of each of the two layers of CTGAN's generator"})
    disc_width: int = field(default=64, metadata={"help": "width of each of the two layers of CTGAN's discriminator"})
    latent_dim: int = field(default=64, metadata={"help": "CTGAN's noise (embedding) dimension"})
    batch_size: int = field(default=500, metadata={"help": "CTGAN's batch size (a multiple of --pac)"})
    pac: int = field(default=10, metadata={"help": "records the discriminator judges together (PacGAN)"})

    def __post_init__(self) -> None:
        super().__post_init__()
        require_at_least(
            self, {"epochs": 1, "gen_width": 1, "disc_width": 1, "latent_dim": 1, "batch_size": 2, "pac": 1}
        )
        if self.batch_size % self.pac:
            raise ValueError(f"--batch-size must be a multiple of --pac {self.pac}, got {self.batch_size}")

    def check(self, pool: Pool, **kwargs: Any) -> None:
        super().check(pool, **kwargs)
        if importlib.util.find_spec("ctgan") is None:
            raise ValueError(f"--victim ctgan needs the ctgan package: {CTGAN_INSTALL}")

    def release(self, pool: Pool, keep: np.ndarray, seed: int, *, inclusion_rate: float) -> Released:
        schema = pool.schema
        members = np.flatnonzero(keep)
        frame = schema.decode(pool.x[members], pool.y[members])
        discrete = [c.name for c in schema.columns if c.kind == "categorical"]
        model = _ctgan_class()(
            embedding_dim=self.latent_dim,
            generator_dim=(self.gen_width, self.gen_width),
            discriminator_dim=(self.disc_width, self.disc_width),
            batch_size=self.batch_size,
            pac=self.pac,
            epochs=self.epochs,
            enable_gpu=False,
        )
        model.set_random_state(int(seed % 2**31))
        with one_process_one_thread():
            model.fit(frame, discrete_columns=discrete)
            sampled = model.sample(self.rows)
        x, y = schema.encode(clip_to_schema(sampled, schema), where="CTGAN's sample")
        return Released(x, y)
