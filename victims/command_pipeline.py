"""A pipeline given as a command, run once per seed in whatever environment it names: its TOML
file, the files a run hands the command and reads back, and the command run under a time limit.
The victim is `command` (`victims.pipelines.command`); the contract and the TOML keys are
docs/contracts.md, "A pipeline as a command". The command, its executable and the SHA-256 of the
TOML, requirements and source files are the store's `victim_source.environment`: a changed
environment is refused as changed code is (`victims.source`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import signal
import string
import subprocess
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from victims.base import RunError
from victims.pool import DataError, Pool

KINDS = ("table", "images")
KEYS = ("kind", "command", "timeout_s", "batch", "requirements", "source")
#: what a command's arguments may name, `{name}`; each is also the environment variable MIA_<NAME>
PLACEHOLDERS = ("members", "seed", "out", "claim", "epsilon", "delta", "expected_members", "schema", "kind", "jobs")
#: what differs from seed to seed: a batched command (`batch`) finds them per job in {jobs} instead
PER_JOB = ("members", "seed", "out", "claim")
DEFAULT_TIMEOUT_S = 3600.0
#: characters of the end of the command's stdout and of its stderr kept with each run (runs/<r>.json's `command`)
LOG_KEPT = 20_000
#: a claim's `mechanism`: T Poisson-subsampled Gaussian steps (`victims.base.Observations.mechanism`)
MECHANISM_KEYS = ("noise_multiplier", "sample_rate", "steps")
#: characters of the log's end a failed run's one line quotes
TAIL_CHARS = 300


@dataclass(frozen=True)
class PipelineFile:
    """A pipeline's TOML file, checked (`load_pipeline`)."""

    path: Path  # absolute
    kind: str  # one of KINDS
    command: tuple[str, ...]
    timeout_s: float  # per seed: a call of K seeds (batch) has K times as long
    requirements: Path | None
    source: tuple[Path, ...]
    batch: int | None = None  # seeds per call at most, handed as a jobs file ({jobs}); None: one seed per call

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def tabular(self) -> bool:
        return self.kind == "table"

    def placeholders(self) -> set[str]:
        """The `{names}` the command's arguments use."""
        return {name for arg in self.command for _, name, _, _ in string.Formatter().parse(arg) if name}

    def executable(self) -> str:
        """The program to start: a relative path with a slash taken from the TOML's directory, a bare name as
        found on PATH (itself if not found: starting it then fails with one line)."""
        program = self.command[0]
        if "/" in program and not os.path.isabs(program):
            return str(self.path.parent / program)
        return program if "/" in program else shutil.which(program) or program

    def argv(self, values: dict[str, str]) -> list[str]:
        """The command's arguments with `values` in its placeholders."""
        return [self.executable(), *(arg.format_map(values) for arg in self.command[1:])]

    def environment(self) -> dict:
        """What identifies the environment the runs execute: the command as written, the executable it
        resolves to, and the SHA-256 of the TOML file and of every file it names (by path from its directory)."""
        files = [self.path, *([self.requirements] if self.requirements else []), *self.source]
        return {
            "command": list(self.command),
            "executable": self.executable(),
            "files": {os.path.relpath(f, self.path.parent): hashlib.sha256(f.read_bytes()).hexdigest() for f in files},
        }


def load_pipeline(path: str) -> PipelineFile:
    """The checked TOML file at `path`; ValueError (one line naming the file and the key) where it is not one."""
    where = f"--pipeline {path}"
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"{where}: no such file")
    try:
        found = tomllib.loads(file.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{where}: not valid TOML ({_first_line(e)})") from None
    if unknown := sorted(set(found) - set(KEYS)):
        raise ValueError(f"{where}: unknown key {unknown[0]!r} (the keys: {', '.join(KEYS)})")
    if found.get("kind") not in KINDS:
        raise ValueError(f"{where}: kind must be one of {', '.join(map(repr, KINDS))}, got {found.get('kind')!r}")
    command = found.get("command")
    if command is None:
        raise ValueError(f"{where}: no command (a list of strings: the program and its arguments)")
    if not isinstance(command, list) or not command or not all(isinstance(a, str) and a for a in command):
        raise ValueError(f"{where}: command must be a non-empty list of non-empty strings, got {command!r}")
    timeout = found.get("timeout_s", DEFAULT_TIMEOUT_S)
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not (timeout > 0 and math.isfinite(timeout))
    ):
        raise ValueError(f"{where}: timeout_s must be a number of seconds > 0, got {timeout!r}")
    batch = found.get("batch")
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
        raise ValueError(f"{where}: batch must be a whole number of seeds per call >= 1, got {batch!r}")
    root = file.resolve().parent
    requirements = found.get("requirements")
    source = found.get("source", [])
    if not isinstance(source, list):
        raise ValueError(f"{where}: source must be a list of file names, got {source!r}")
    for name in ([requirements] if requirements is not None else []) + source:
        if not isinstance(name, str) or not (root / name).is_file():
            key = "requirements" if name is requirements else "source"
            raise ValueError(f"{where}: {key} names {name!r}, which is no file beside it")
    spec = PipelineFile(
        path=file.resolve(),
        kind=found["kind"],
        command=tuple(command),
        timeout_s=float(timeout),
        requirements=root / requirements if requirements is not None else None,
        source=tuple(root / name for name in source),
        batch=batch,
    )
    _check_placeholders(spec, where)
    return spec


def _check_placeholders(spec: PipelineFile, where: str) -> None:
    try:
        used = spec.placeholders()
    except ValueError as e:  # an unmatched brace
        raise ValueError(
            f"{where}: command {list(spec.command)!r} does not parse ({e}; a literal brace is {{{{)"
        ) from None
    if unknown := sorted(used - set(PLACEHOLDERS)):
        known = ", ".join(f"{{{p}}}" for p in PLACEHOLDERS)
        raise ValueError(f"{where}: command uses {{{unknown[0]}}}, which is none of {known}")
    if spec.batch is None and "jobs" in used:
        raise ValueError(f"{where}: command uses {{jobs}}, which only a batched command gets (batch = K)")
    if spec.batch is not None and (per_job := [p for p in PER_JOB if p in used]):
        raise ValueError(
            f"{where}: command uses {{{per_job[0]}}}, which a batched command (batch = {spec.batch}) finds per job "
            "in {jobs}"
        )


def hand_over(pool: Pool, keep: np.ndarray, directory: Path, *, kind: str) -> dict[str, str]:
    """Write what a run hands its command into `directory`: the members (a CSV of their rows in the
    pool's schema, or an NPZ of `x`, `y`) and a table's schema; the paths as placeholder values."""
    return {"kind": kind, **job_files(pool, keep, directory), **schema_file(pool, directory)}


def job_files(pool: Pool, keep: np.ndarray, directory: Path) -> dict[str, str]:
    """One seed's members written into `directory`, and where its release and claim go: `members`, `out`, `claim`."""
    suffix = "csv" if pool.tabular else "npz"
    values = {"members": str(directory / f"members.{suffix}"), "out": str(directory / f"release.{suffix}")}
    values["claim"] = str(directory / "claim.json")
    if pool.tabular:
        pool.schema.decode(pool.x[keep], pool.y[keep]).to_csv(values["members"], index=False)
    else:
        np.savez(values["members"], x=pool.x[keep], y=pool.y[keep])
    return values


def schema_file(pool: Pool, directory: Path) -> dict[str, str]:
    """A table's public schema written into `directory` as JSON (`schema`); nothing for images."""
    if not pool.tabular:
        return {}
    path = directory / "schema.json"
    path.write_text(json.dumps(pool.schema.to_json(), indent=2) + "\n")
    return {"schema": str(path)}


@dataclass(frozen=True)
class Ended:
    """A command that ended: its exit status (None: killed at its time limit), its log's ends and its seconds."""

    returncode: int | None
    stdout: str
    stderr: str
    seconds: float


def run_command(spec: PipelineFile, argv: list[str], values: dict[str, str], *, log_dir: Path) -> Ended:
    """`run_process` under the file's time limit; RunError (one line, with the end of its log) for a command
    that cannot start, exits non-zero or runs out of time."""
    ended = run_process(spec, argv, values, log_dir=log_dir, timeout_s=spec.timeout_s)
    if (line := failure(spec, ended, timeout_s=spec.timeout_s)) is not None:
        raise RunError(line)
    return ended


def run_process(
    spec: PipelineFile, argv: list[str], values: dict[str, str], *, log_dir: Path, timeout_s: float
) -> Ended:
    """Run the command in the TOML's directory with MIA_<NAME> set for each value, its own process group
    killed at `timeout_s`, on an interrupt and after it exits. RunError (one line) where it cannot start."""
    env = {**os.environ, **{f"MIA_{k.upper()}": v for k, v in values.items()}}
    out_path, err_path = log_dir / "stdout.log", log_dir / "stderr.log"
    start = time.perf_counter()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        try:
            process = subprocess.Popen(
                argv,
                cwd=spec.path.parent,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        except OSError as e:
            raise RunError(f"{spec.name}: cannot start {argv[0]!r} ({e.strerror or e})") from None
        try:
            returncode = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            returncode = None
        finally:  # the time limit, Ctrl-C, or whatever it left running
            _kill_group(process)
    stdout, stderr = (_read_end(p) for p in (out_path, err_path))
    return Ended(returncode, stdout, stderr, seconds=round(time.perf_counter() - start, 3))


def failure(
    spec: PipelineFile, ended: Ended, *, timeout_s: float, limit: str = "timeout_s", left: str = ""
) -> str | None:
    """The one line of a command that ran out of time (`limit`: how its `timeout_s` is named) or exited
    non-zero, `left` (what it left undone) before its log's end; None for one that exited 0."""
    if ended.returncode is None:
        how = f"ran past {limit} = {timeout_s:g} s and was killed"
    elif ended.returncode < 0:
        how = f"was killed by {signal.Signals(-ended.returncode).name}"
    elif ended.returncode > 0:
        how = f"exited {ended.returncode}"
    else:
        return None
    return f"{spec.name}: the command {how}{left}; its log ends: {tail(ended.stdout, ended.stderr)}"


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


def _read_end(path: Path) -> str:
    """The last LOG_KEPT characters of a log file (bytes that are no UTF-8 replaced)."""
    with open(path, "rb") as f:
        f.seek(max(0, f.seek(0, os.SEEK_END) - 4 * LOG_KEPT))
        return f.read().decode(errors="replace")[-LOG_KEPT:]


def tail(stdout: str, stderr: str) -> str:
    """The end of a log in one line: the last 5 non-blank lines of stderr (of stdout if stderr has none),
    joined by ' | ', at most TAIL_CHARS characters."""
    lines = [line.strip() for line in (stderr if stderr.strip() else stdout).splitlines() if line.strip()]
    text = " | ".join(lines[-5:]) or "(no output)"
    return text if len(text) <= TAIL_CHARS else "..." + text[-TAIL_CHARS:]


def read_release(pool: Pool, path: Path, *, where: str, asked: str = "{out}, MIA_OUT") -> tuple[np.ndarray, np.ndarray]:
    """The release a command wrote: a table's CSV read through the pool's schema, or an NPZ's images
    checked against the pool's image shape; ValueError (one line naming what is wrong, `asked` where it is
    missing: where the command was told to write it) otherwise."""
    where = f"{where}: the release {path.name}"
    if not path.is_file():
        raise RunError(f"{where}: the command exited 0 and wrote no release ({asked})")
    if pool.tabular:
        import pandas as pd

        try:
            frame = pd.read_csv(path, keep_default_na=False)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
            raise RunError(f"{where}: not a CSV ({_first_line(e)})") from None
        try:
            return pool.schema.encode(frame, where=where)
        except DataError as e:
            raise RunError(str(e)) from None
    return _read_images(pool, path, where=where)


def _read_images(pool: Pool, path: Path, *, where: str) -> tuple[np.ndarray, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as z:
            found = {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise RunError(f"{where}: not an NPZ of arrays ({_first_line(e)})") from None
    if missing := [k for k in ("x", "y") if k not in found]:
        raise RunError(f"{where}: no array {missing[0]!r} (it holds {', '.join(sorted(found)) or 'none'})")
    x, y = found["x"], found["y"]
    shape = ", ".join(map(str, pool.image_shape))
    if x.ndim != 4 or x.shape[1:] != pool.image_shape or len(x) == 0:
        raise RunError(f"{where}: x must be [k, {shape}] (the pool's images, k >= 1), got shape {list(x.shape)}")
    if x.dtype.kind != "f":
        raise RunError(f"{where}: x is {x.dtype}; write floats on the pool's pixel scale (as the members are)")
    if not np.isfinite(x).all():
        raise RunError(f"{where}: x holds {x.size - np.count_nonzero(np.isfinite(x))} non-finite values")
    if y.shape != (len(x),) or y.dtype.kind not in "iu":
        raise RunError(f"{where}: y must be {len(x)} integer labels, got {y.dtype} of shape {list(y.shape)}")
    if y.min() < 0 or y.max() >= pool.n_classes:
        raise RunError(
            f"{where}: y holds label {int(y.min() if y.min() < 0 else y.max())}, outside 0..{pool.n_classes - 1}"
        )
    return x.astype(np.float32), y.astype(np.int64)


def read_claim(path: Path, *, where: str) -> dict | None:
    """The pipeline's own claim ({claim}, MIA_CLAIM), if it wrote one: a JSON object whose `epsilon`
    (> 0) and `delta` (in [0, 1)) are numbers or null where given; kept as it is."""
    if not path.exists():
        return None
    where = f"{where}: the claim {path.name}"
    try:
        claim = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RunError(f"{where}: not valid JSON ({_first_line(e)})") from None
    if not isinstance(claim, dict):
        raise RunError(f"{where}: must be a JSON object, got {type(claim).__name__}")
    for key, valid in (("epsilon", lambda v: v > 0), ("delta", lambda v: 0 <= v < 1)):
        value = claim.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not valid(value)):
            raise RunError(f"{where}: {key} {value!r} is not a valid {key}")
    mechanism = claim.get("mechanism")
    if mechanism is not None and (not isinstance(mechanism, dict) or set(mechanism) != set(MECHANISM_KEYS)):
        raise RunError(f"{where}: mechanism must be an object of {', '.join(MECHANISM_KEYS)}, got {mechanism!r}")
    return claim


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]
