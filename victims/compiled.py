"""Compiled steps (`--compile auto|on|off`): the downstream ConvNet's training step and query pass
through `torch.compile`, once per worker process. The first run a worker trains pays the
compilation; later runs of the same shapes reuse it (docs/performance.md, "Compiled steps").
`compiled_steps(True)` scopes it around a run, `maybe_compiled` reads it where a step is built.
A compiled run equals the eager run within float reordering (tests/contracts/test_victims.py)."""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator


COMPILE_MODES = ("auto", "on", "off")
#: `auto` compiles when a worker trains at least this many runs (images of at least that many
#: pixels), for a victim whose only compiled steps are the downstream ConvNet's (docs/performance.md,
#: "Compiled steps"); a victim with compiled steps of its own sets `compile_break_even` (kip, psg)
BREAK_EVEN_RUNS = {64: 160, 784: 3}

_COMPILED: contextvars.ContextVar[bool] = contextvars.ContextVar("compiled_steps", default=False)


@contextlib.contextmanager
def compiled_steps(on: bool) -> Iterator[None]:
    """Within the block, `maybe_compiled` compiles (on) or not (off)."""
    token = _COMPILED.set(bool(on))
    try:
        yield
    finally:
        _COMPILED.reset(token)


def compiling() -> bool:
    """Whether the steps built here are compiled (inside `compiled_steps(True)`)."""
    return _COMPILED.get()


def maybe_compiled(step, **options):
    """`step` itself (a module or a function), or `torch.compile(step, **options)` inside
    `compiled_steps(True)`; a compiled module shares its parameters, and wrapping again reuses the cache."""
    if not compiling():
        return step
    import torch

    return torch.compile(step, **options)


def resolve_compile(
    mode: str,
    *,
    runs_per_worker: int,
    pixels: int,
    inline: bool = False,
    break_even: dict[int, int] | None = None,
    device: str = "cpu",
) -> bool:
    """`--compile` for an execution: on, off, or (auto) on when each worker trains at least the
    break-even number of runs for images of `pixels` (`break_even` by pixels, default BREAK_EVEN_RUNS;
    between measured sizes the smaller's count), never `inline` nor on `cuda`, where compiling did
    not pay (docs/performance.md, "On a GPU"); `on` still compiles there."""
    if mode not in COMPILE_MODES:
        raise ValueError(f"--compile must be one of {COMPILE_MODES}, got {mode!r}")
    if mode != "auto":
        return mode == "on"
    if inline or device == "cuda":
        return False
    counts = break_even or BREAK_EVEN_RUNS
    sizes = sorted(counts)
    size = max([s for s in sizes if s <= pixels], default=sizes[0])
    return runs_per_worker >= counts[size]


def runs_per_worker(n_runs: int, workers: int) -> int:
    return math.ceil(n_runs / max(1, workers))
