"""Arithmetic precision of a run's training (`--precision fp32|tf32|bf16`), scoped like
`victims.compiled`: fp32 is torch's defaults; tf32 allows TensorFloat-32 matrix products on CUDA;
bf16 adds bfloat16 autocast to the training forward passes (`training_autocast`).

What a DP mechanism's guarantee rests on never leaves float32 (`exact_float32`): per-example
gradients, their norms, clipping and sum, and the Gaussian noise. The clipping factor comes from
the very factors it scales, so each clipped norm is at most C. Observations are float32."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import torch

PRECISIONS = ("fp32", "tf32", "bf16")

_PRECISION: contextvars.ContextVar[str] = contextvars.ContextVar("precision", default="fp32")


@contextlib.contextmanager
def precision(mode: str) -> Iterator[None]:
    """Within the block, runs train at `mode`; TF32 matrix products allowed unless fp32 (restored after)."""
    if mode not in PRECISIONS:
        raise ValueError(f"--precision must be one of {PRECISIONS}, got {mode!r}")
    token = _PRECISION.set(mode)
    try:
        if mode == "fp32":
            yield
        else:
            with _tf32(True):
                yield
    finally:
        _PRECISION.reset(token)


def current() -> str:
    return _PRECISION.get()


def training_autocast(device: torch.device | str) -> contextlib.AbstractContextManager:
    """bfloat16 autocast on `device` for a training forward pass at bf16; a no-op otherwise."""
    if current() != "bf16":
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)


@contextlib.contextmanager
def exact_float32() -> Iterator[None]:
    """Float32 arithmetic, whatever the precision outside: no autocast, no TF32 matrix products."""
    with contextlib.ExitStack() as stack:
        for device in ("cpu", "cuda") if torch.cuda.is_available() else ("cpu",):
            stack.enter_context(torch.autocast(device, enabled=False))
        stack.enter_context(_tf32(False))
        yield


@contextlib.contextmanager
def _tf32(allowed: bool) -> Iterator[None]:
    """TF32 matrix products on CUDA allowed or not (cuDNN's convolutions keep torch's setting)."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = allowed
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
