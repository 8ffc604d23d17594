"""`ctgan`: CTGAN (Xu, Skoularidou, Cuesta-Infante and Veeramachaneni 2019) from the `ctgan`
package, trained per run on the members and sampling `rows` records. No formal claim: its
`formal_epsilon` is None, like `tabular-subset`'s, against which its leakage is read.

- Training data: the members decoded to the file's values (`Schema.decode`), every categorical
  column (the label among them) declared discrete; integer and continuous columns are CTGAN's
  continuous columns (its mode-specific normalisation).
- Its samples, back through the schema: a categorical column can only hold a category CTGAN saw,
  hence a public one. A number is sampled freely (a Gaussian mixture's tail can leave the bounds),
  so it is rounded (integer columns) and clipped into the column's public bounds before
  `Schema.encode`. Clipping is post-processing with the public schema alone (no member value is
  read to do it), so it leaks nothing the sample did not; refusing such a row instead would make
  the release's size depend on the sample, and mapping it elsewhere would invent a value.
- Determinism: the model's own numpy and torch generators are seeded by the run's seed
  (`CTGAN.set_random_state`; CTGAN swaps them in around `fit` and `sample` and puts the global
  states back), and torch runs on one thread during the fit and the sample (the result depends on
  the thread count; the caller's count is restored). On the CPU (`enable_gpu=False`) whatever the
  run's device: the same seed gives the same release.

Size. The defaults (`epochs` 30, generator and discriminator of two layers of 64, noise dimension
64, batch 500, pac 10) keep an audit of dozens of runs on two cores in minutes. Measured on fair
(2,507 members, one torch thread, 2 cores shared with other work): the release took 3.9 CPU-s (and
9.3 CPU-s at 100 epochs); `audit.lira --victim ctgan --dataset fair --n-shadow 16` took 96 s, its
runs 9.4 s of wall each on average (the downstream classifier included). CTGAN's own defaults (300
epochs, 256 wide, noise 128) would cost some 20 times as much (10 epochs took ~1.0 CPU-s at 64
and ~2.3 s at 256 on 3,000 rows). Raise `--epochs` and the widths for a stronger
generator: at 30 epochs its marginals are still far off (mean 2-way TV 0.17, against 0.08 for mst
at ε = 1 and 0.07 for a 1,000-record `tabular-subset`).
"""

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
def one_torch_thread():
    """torch on one intra-op thread inside the block; the caller's count afterwards."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
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
        with one_torch_thread():
            model.fit(frame, discrete_columns=discrete)
            sampled = model.sample(self.rows)
        x, y = schema.encode(clip_to_schema(sampled, schema), where="CTGAN's sample")
        return Released(x, y)
