"""Compiled steps (`--compile auto|on|off`): the downstream ConvNet's training step and its
forward pass over the pool's query views, the two loops every victim's run ends with, through
`torch.compile`, once per worker process.

torch.compile caches what it compiles by the code it traces and the shapes it sees, for the life
of the process: the first run a worker trains pays the compilation (11-26 s cold on one thread,
a few seconds with inductor's on-disk cache warm), and every later run of the same shapes in that
worker reuses it, whatever its model instance. So the saving grows with the runs each worker
trains; `bench/compile.py` measures both (docs/performance.md, "Compiled steps").

Whether a run's steps are compiled is scoped, like torch's grad mode: `compiled_steps(True)`
around a run (the executor's task), read by `maybe_compiled` where a step is built. A compiled run
equals the eager run within float reordering (`tests/contracts/test_victims.py`).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator


COMPILE_MODES = ("auto", "on", "off")
#: `auto` compiles when a worker trains at least this many runs (images of at least that many
#: pixels), for a victim whose only compiled steps are the downstream ConvNet's: at 8x8 a steady
#: run saves 0.13-0.5 s against 23-29 s of cold compilation (break-even 46-227 runs over real,
#: subset, dm), at 28x28 8-14 s against 21-28 s (2-3 runs over real, subset, dm);
#: docs/performance.md, "Compiled steps". A victim with compiled steps of its own states its own
#: counts as a class attribute `compile_break_even` (kip, psg).
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
    `compiled_steps(True)`; a compiled module shares its parameters. torch.compile caches by the
    code it traces, so wrapping the same step again in every call reuses what was compiled."""
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
    break-even number of runs for images of `pixels` (h x w; between the measured sizes, the
    smaller size's count; above, the larger's; `break_even` by pixels, default BREAK_EVEN_RUNS),
    and never `inline` (the debugging executor, and the unit tests') nor on a `cuda` device.

    The break-even counts are the CPU's. On an H100 compiling did not pay where a run trains, in
    packs (`bench/gpu.py --compiled-packs 64`, digits, docs/performance.md "On a GPU"): psg's
    compiled pack of 64 ran 0.542 s a run against 0.039 eager (after 37.7 s of compilation),
    real's 0.018 against 0.019. So auto leaves a GPU's runs eager; `on` still compiles there."""
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
