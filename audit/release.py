"""`python -m audit.release`: audit a data release the user already made with one of our pipelines.

    python -m audit.release --pool POOL.npz --release RELEASE.npz --victim NAME --n-shadow R
        [--claimed-epsilon E] [--claimed-delta D] [--out DIR] [--runs-dir runs] [--seed 0]
        [--inclusion-rate 0.5] [--executor ray|inline] [--workers W] [--device auto]
        [victim flags] [report flags]

Inputs
------
* POOL.npz, the custodian's data: `x` [n, h, w] or [n, c, h, w] (uint8 pixels 0..255, or
  floats), `y` int [n] with labels 0..C-1, and the membership of the release, as exactly one
  of `member` bool [n] or `member_idx` int [m] (distinct indices into x). Optional `x_test`,
  `y_test`: a held-out split for the downstream test accuracy. Optional, together:
  `membership_rate` (a number in (0, 1)) and `membership_seed` (an integer >= 0), recording
  that the members were drawn by independent coins, `draw_membership(n, seed=membership_seed,
  rate=membership_rate)` (that is `shadow_runs.plan.membership_row(n, master_seed=seed, run=0,
  inclusion_rate=rate)` over the rows of x). The members must be exactly those coins, or the
  input is refused.
* RELEASE.npz, what was published: `x` [k, c, h, w] or [k, h, w] at the pool's pixel scale
  (uint8 if the pool's x is), `y` int [k]; optional `init_idx` int: the pool indices (into the
  file's x) of real member images the release contains or started from, audited as a sub-group.

Without `x_test`, `y_test` a test split is held out of the pool: when no coins are recorded, a
stratified 20% of the *non-members* (so no member is lost); when coins are recorded, a
stratified 20% of *all* rows drawn without looking at the coins, whose non-members are the test
split and whose members leave the audit (they stay in the release, they are just not
canaries): choosing the held-out rows among the non-members would make which coins remain
depend on the coins, and the ε bound needs canaries chosen before the coins are seen.

For victims with images per class (`--ipc`, `--spc`), a release of k images over C classes
sets it to k / C when the flag is not given (k must hold the same number of every class).

What it does
------------
R shadow runs of `--victim` on the same pool (stored under `--runs-dir`, reused and extended
like `audit.lira`'s; each example in each run by an independent coin of `--inclusion-rate`,
`shadow_runs.plan`) are the reference runs: all of them are the attacks' shadows, and their
coins are public and independent of the release's. The user's release is the one target, with
the user's membership as ground truth: `dcr` (minus the distance to the nearest released image
of the same class), `dcr_lira` (that distance calibrated on the shadows, offline LiRA), and
`loss`, `lira_online`, `lira_offline`, `rmia`, `rmia_offline` on a downstream ConvNet trained on the
user's release with the victim's own downstream configuration and seeded by `--seed`, exactly as
in a shadow run. `--seed` must differ from the pool's `membership_seed`: the shadow plan would
otherwise redraw the release's own coins. The result is an audited experiment directory (default
`<runs-dir>/release-<first 10 hex of the release file's sha256>`):

    experiment.json   pool_labels.npy   runs/00000.npz (logits, the release)   runs/00000.json
    audit/summary.json (with claimed_epsilon, claimed_delta)   audit/scores.npz   audit/roc.png
    audit/pool_index.npy (pool row -> row of POOL.npz's x)   audit/report.html   audit/report.json

so `python -m audit.report` reads it again later.

When is there an ε verdict?
---------------------------
Only when the pool file records coins (rate and seed), the members are reproduced exactly by
those coins, and the rate is 0.5. Then every pool example's membership is an independent fair
coin, the release is a function of the members, and the one-run theorem of `audit.epsilon`
applies with the n pool examples as canaries (m = n, one target, so the ceiling is low: a
claim at or above it is "not testable with this design"). Otherwise `eps_lower` and
`eps_ceiling` are null and the report says in one sentence why: the custodian chose the
members, and any difference between members and non-members (their typicality, a source, a
date) is found by the attacks and reads as leakage even for a pipeline with ε = 0; coins of
another rate do not fit the theorem used here. The check reproduces the coins because a
member set cannot show by itself how it was drawn, and "I used random coins" cannot be taken on
trust; a recorded seed reproduces them exactly and costs the custodian nothing
(`draw_membership`). What it cannot show is that the seed was fixed before the data were
looked at: a custodian who tried many seeds and kept the one whose members suit a property
selects among those sets, a selection of about log2(seeds tried) bits over n coins, which
a handful of seeds leaves negligible and a search of millions does not.

One release is one target: the ε lower bounds are valid but weaker than an audit's pooled over
many targets, and the comparison with a random real subset (which needs several targets) is
left to `audit.lira` + `audit.report`.

Bad or inconsistent inputs (shapes, labels, a release larger than the pool, a member mask of
the wrong length, recorded coins that do not reproduce the members, --seed equal to the
membership seed, ...) exit with status 2 and one line on stderr before anything is written;
an --out holding the audit of another release is refused untouched.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import socket
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from audit import cli, outputs, report
from attacks.lira import variance_for
from audit.arguments import ArgumentParser, int_at_least
from audit.epsilon import bound_applies, unfair_coins_reason
from audit.evaluate import ATTACKS, StoredRuns, attack_scores, attack_summary
from shadow_runs import RunStore, StoreError, membership_matrix
from shadow_runs.executor import ExecutorConfig
from shadow_runs.plan import PLAN, membership_row
from shadow_runs.files import write_json, write_npy
from victims import DataError, get_victim, victim_names
from victims.data import Pool

TARGET_STREAM = 7  # SeedSequence stream of the downstream training on the user's release
MEMBERSHIP_RUN = 0  # a release's recorded coins are run 0 of the plan under its membership_seed
TARGET = "the user's release"
EPSILON_NOTE = ("eps_lower: one-run bound (Steinke, Nasr & Jagielski 2023) over the release's membership coins, "
                "m = n_canaries; eps_ceiling: what a perfect attack would certify with this design")
CHOSEN_NOTE = ("the custodian chose the members rather than drawing them by recorded independent fair coins, so any "
               "difference between members and non-members (their typicality, a source) is found by the attacks and "
               "would read as leakage even for a pipeline with ε = 0; these numbers describe the release, they bound "
               "no ε")
unfair_note = unfair_coins_reason  # coins recorded, but not fair


def draw_membership(n: int, *, seed: int, rate: float = 0.5) -> np.ndarray:
    """bool [n]: members drawn by independent coins, as `audit.release` reproduces them from a pool
    file's `membership_seed` and `membership_rate` (draw them so, before making the release)."""
    return membership_row(n, master_seed=seed, run=MEMBERSHIP_RUN, inclusion_rate=rate)


@dataclass(frozen=True)
class Coins:
    """The recorded coins of a release's membership (checked against the members)."""

    rate: float
    seed: int

    @property
    def fair(self) -> bool:
        return bound_applies(self.rate)


class ReleaseError(ValueError):
    """Bad input to `audit.release`; the message is one line naming the bad value."""


@dataclass(frozen=True, eq=False)
class ReleaseInputs:
    """The audit pool, the user's membership over it, and the release, all checked."""

    pool: Pool
    member: np.ndarray  # bool [n_pool]
    pool_index: np.ndarray  # int64 [n_pool]: row of POOL.npz's x behind each pool row
    release_x: np.ndarray  # float32 [k, c, h, w], pixel scale of pool.x
    release_y: np.ndarray  # int64 [k]
    init_idx: np.ndarray  # int64: pool rows (not file rows) of real images behind the release
    coins: Coins | None = None  # how the members were drawn, if recorded (and reproduced)

    @property
    def per_class(self) -> np.ndarray:
        return np.bincount(self.release_y, minlength=self.pool.n_classes)


# -- reading ------------------------------------------------------------------------------------
def _npz(path: Path, what: str) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise ReleaseError(f"--{what} {path}: no such file")
    try:
        with np.load(path, allow_pickle=False) as z:
            if not isinstance(z, np.lib.npyio.NpzFile):
                raise ValueError("not an npz archive")
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, AttributeError, TypeError) as e:
        raise ReleaseError(f"--{what} {path} is not a readable .npz file ({' '.join(str(e).split())})") from None


def _images(x: np.ndarray, where: str) -> np.ndarray:
    """[n, h, w] or [n, c, h, w] numbers -> float32 [n, c, h, w] (uint8 / 255), finite."""
    if x.dtype.kind not in "biuf" or x.ndim not in (3, 4):
        raise ReleaseError(f"{where} must be numeric [n, h, w] or [n, c, h, w], got {x.dtype} {x.shape}")
    out = np.ascontiguousarray(x[:, None] if x.ndim == 3 else x, dtype=np.float32)
    if x.dtype == np.uint8:
        out /= 255
    if not np.isfinite(out).all():
        raise ReleaseError(f"{where} has {int((~np.isfinite(out)).sum())} non-finite values")
    return out


def _labels(y: np.ndarray, n: int, where: str) -> np.ndarray:
    if y.ndim != 1 or len(y) != n:
        raise ReleaseError(f"{where} has shape {y.shape}, expected ({n},)")
    if y.dtype.kind not in "iuf" or not np.isfinite(y).all() or np.any(y != np.round(y)):
        raise ReleaseError(f"{where} must hold integer labels, got {y.dtype} values")
    return y.astype(np.int64)


def _membership(arrays: dict, n: int, path: Path) -> np.ndarray:
    given = [k for k in ("member", "member_idx") if k in arrays]
    if len(given) != 1:
        raise ReleaseError(f"--pool {path} needs exactly one of 'member' (bool [n]) or 'member_idx' (int [m]), "
                           f"got {given or 'neither'}")
    if given[0] == "member":
        member = arrays["member"]
        if member.shape != (n,):
            raise ReleaseError(f"--pool {path}: 'member' has shape {member.shape}, expected ({n},) like 'x'")
        if member.dtype != bool and not (member.dtype.kind in "iu" and np.isin(member, (0, 1)).all()):
            raise ReleaseError(f"--pool {path}: 'member' must be boolean (or 0/1), got {member.dtype}")
        return member.astype(bool)
    idx = arrays["member_idx"]
    if idx.ndim != 1 or idx.dtype.kind not in "iu":
        raise ReleaseError(f"--pool {path}: 'member_idx' must be 1-d integers, got {idx.dtype} {idx.shape}")
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        bad = idx[(idx < 0) | (idx >= n)][0]
        raise ReleaseError(f"--pool {path}: 'member_idx' holds {int(bad)}, outside 0..{n - 1}")
    if len(np.unique(idx)) != len(idx):
        raise ReleaseError(f"--pool {path}: 'member_idx' repeats an index")
    member = np.zeros(n, dtype=bool)
    member[idx] = True
    return member


def _coins(arrays: dict, member: np.ndarray, path: Path) -> Coins | None:
    """The recorded coins, checked: both keys or neither, a rate in (0, 1), a seed >= 0, and the
    members exactly what those coins draw."""
    keys = ("membership_rate", "membership_seed")
    given = [k for k in keys if k in arrays]
    if not given:
        return None
    if len(given) == 1:
        other = next(k for k in keys if k not in given)
        raise ReleaseError(f"--pool {path} has {given[0]!r} without {other!r}: record both (the coins' rate and seed) "
                           "or neither")
    rate, seed = arrays["membership_rate"], arrays["membership_seed"]
    if rate.shape != () or rate.dtype.kind not in "iuf" or not 0 < float(rate) < 1:
        raise ReleaseError(f"--pool {path}: 'membership_rate' must be one number strictly between 0 and 1, got "
                           f"{rate.dtype} {rate.tolist()!r}")
    if seed.shape != () or seed.dtype.kind not in "iu" or int(seed) < 0:
        raise ReleaseError(f"--pool {path}: 'membership_seed' must be one integer >= 0, got {seed.dtype} {seed.tolist()!r}")
    coins = Coins(rate=float(rate), seed=int(seed))
    differ = int(np.sum(draw_membership(len(member), seed=coins.seed, rate=coins.rate) != member))
    if differ:
        raise ReleaseError(f"--pool {path}: the members are not the coins of membership_seed {coins.seed} and "
                           f"membership_rate {coins.rate:g} ({differ} of {len(member)} rows differ); record the seed "
                           "and rate they were drawn with (audit.release.draw_membership), or neither")
    return coins


def read_inputs(pool_path: str | os.PathLike, release_path: str | os.PathLike) -> ReleaseInputs:
    """Read and check the two files; ReleaseError (one line naming the bad value) on bad input."""
    from sklearn.model_selection import train_test_split

    from victims.data import make_pool

    pool_path, release_path = Path(pool_path), Path(release_path)
    arrays = _npz(pool_path, "pool")
    for key in ("x", "y"):
        if key not in arrays:
            raise ReleaseError(f"--pool {pool_path} has no {key!r} array (needs 'x', 'y', and 'member' or 'member_idx')")
    x = _images(arrays["x"], f"--pool {pool_path}: 'x'")
    y = _labels(arrays["y"], len(x), f"--pool {pool_path}: 'y'")
    if y.size and y.min() < 0:
        raise ReleaseError(f"--pool {pool_path}: 'y' has negative label {int(y.min())}")
    member = _membership(arrays, len(x), pool_path)
    coins = _coins(arrays, member, pool_path)
    if member.all() or not member.any():
        raise ReleaseError(f"--pool {pool_path}: the membership must have members and non-members, "
                           f"got {int(member.sum())} members of {len(member)}")
    n_classes = int(y.max()) + 1
    if missing := sorted(set(range(n_classes)) - set(np.unique(y).tolist())):
        raise ReleaseError(f"--pool {pool_path}: labels in 'y' must be consecutive 0..{n_classes - 1}; missing {missing[:10]}")
    if ("x_test" in arrays) != ("y_test" in arrays):
        raise ReleaseError(f"--pool {pool_path}: 'x_test' and 'y_test' must be given together")
    index = np.arange(len(x))
    if "x_test" in arrays:
        x_test = _images(arrays["x_test"], f"--pool {pool_path}: 'x_test'")
        y_test = _labels(arrays["y_test"], len(x_test), f"--pool {pool_path}: 'y_test'")
        if x_test.shape[1:] != x.shape[1:]:
            raise ReleaseError(f"--pool {pool_path}: 'x_test' images {x_test.shape[1:]} differ from 'x' images {x.shape[1:]}")
    elif coins is not None:
        # Rows drawn without looking at the coins: their non-members are the test split, their
        # members leave the audit, so which coins stay canaries does not depend on the coins.
        rows = np.arange(len(x))
        try:
            kept, held_rows = train_test_split(rows, test_size=0.2, stratify=y, random_state=0)
        except ValueError:  # a class too small to stratify
            kept, held_rows = train_test_split(rows, test_size=0.2, random_state=0)
        held = np.sort(held_rows[~member[held_rows]])
        if len(held) < 2:
            raise ReleaseError(f"--pool {pool_path}: {len(held)} non-member(s) in the held-out rows, too few for a "
                               "test split (give 'x_test', 'y_test')")
        index = np.sort(kept)
        if member[index].all() or not member[index].any():
            raise ReleaseError(f"--pool {pool_path}: the audit pool left after the test split needs members and "
                               "non-members (give 'x_test', 'y_test')")
        x_test, y_test = x[held], y[held]
    else:
        outside = np.flatnonzero(~member)
        if len(outside) < 2:
            raise ReleaseError(f"--pool {pool_path}: {len(outside)} non-member(s), too few to hold out a test split "
                               "(give 'x_test', 'y_test')")
        try:
            index, held = train_test_split(outside, test_size=0.2, stratify=y[outside], random_state=0)
        except ValueError:  # a class too small to stratify
            index, held = train_test_split(outside, test_size=0.2, random_state=0)
        index = np.sort(np.concatenate([np.flatnonzero(member), index]))
        x_test, y_test = x[np.sort(held)], y[np.sort(held)]
    try:
        pool = make_pool(str(pool_path), x[index], y[index], x_test, y_test,
                          [str(c) for c in range(max(n_classes, int(y_test.max(initial=0)) + 1))], flip_ok=False)
    except DataError as e:
        raise ReleaseError(f"--pool {pool_path}: {e}") from None
    release = _npz(release_path, "release")
    for key in ("x", "y"):
        if key not in release:
            raise ReleaseError(f"--release {release_path} has no {key!r} array (needs 'x', 'y'; optional 'init_idx')")
    if (release["x"].dtype == np.uint8) != (arrays["x"].dtype == np.uint8):
        raise ReleaseError(f"--release {release_path}: 'x' is {release['x'].dtype} but the pool's 'x' is "
                           f"{arrays['x'].dtype}; give both at the same pixel scale")
    release_x = _images(release["x"], f"--release {release_path}: 'x'")
    release_y = _labels(release["y"], len(release_x), f"--release {release_path}: 'y'")
    if release_x.shape[1:] != pool.image_shape:
        raise ReleaseError(f"--release {release_path}: images {release_x.shape[1:]} differ from the pool's {pool.image_shape}")
    if len(release_x) == 0:
        raise ReleaseError(f"--release {release_path} is empty")
    if len(release_x) > len(x):
        raise ReleaseError(f"--release {release_path} has {len(release_x)} images, more than the pool's {len(x)}")
    if release_y.min() < 0 or release_y.max() >= pool.n_classes:
        bad = release_y[(release_y < 0) | (release_y >= pool.n_classes)][0]
        raise ReleaseError(f"--release {release_path}: label {int(bad)} outside the pool's 0..{pool.n_classes - 1}")
    init_idx = np.zeros(0, dtype=np.int64)
    if "init_idx" in release:
        file_rows = release["init_idx"]
        if file_rows.ndim != 1 or file_rows.dtype.kind not in "iu":
            raise ReleaseError(f"--release {release_path}: 'init_idx' must be 1-d integers, got {file_rows.dtype} {file_rows.shape}")
        not_members = file_rows[(file_rows < 0) | (file_rows >= len(x))]
        if not_members.size == 0:
            not_members = file_rows[~member[file_rows]]
        if not_members.size:
            raise ReleaseError(f"--release {release_path}: 'init_idx' holds {int(not_members[0])}, not a member of the pool")
        file_rows = file_rows[np.isin(file_rows, index)]  # a member held out with the test split leaves the sub-group
        init_idx = np.searchsorted(index, file_rows).astype(np.int64)
    return ReleaseInputs(pool=pool, member=member[index], pool_index=index.astype(np.int64), release_x=release_x,
                         release_y=release_y, init_idx=init_idx, coins=coins)


def read_pool_images(pool_file: Path, pool_index_file: Path) -> np.ndarray:
    """The audit pool's images [n, c, h, w] again, from POOL.npz and audit/pool_index.npy (for `audit.report`)."""
    with np.load(pool_file, allow_pickle=False) as z:
        x = z["x"]
    return _images(x, str(pool_file))[np.load(pool_index_file)]


# -- the victim -----------------------------------------------------------------------------------
def size_field(victim_name: str) -> str | None:
    """The victim's images-per-class field (`ipc`, `spc`), if it has one."""
    names = {f.name for f in dataclasses.fields(get_victim(victim_name))}
    return next((k for k in report.SIZE_KEYS if k in names), None)


def victim_for(args, inputs: ReleaseInputs):
    """The victim of the flags, its images per class set from the release when not given."""
    cls = get_victim(args.victim)
    if "train" not in {f.name for f in dataclasses.fields(cls)}:
        raise ReleaseError(f"--victim {args.victim} releases no data set to audit (no downstream training on a release)")
    key = size_field(args.victim)
    if key is not None:
        counts = inputs.per_class
        if len(set(counts.tolist())) != 1:
            raise ReleaseError(f"the release holds {counts.tolist()} images per class; --victim {args.victim} "
                               f"releases the same number of every class")
        given = getattr(args, f"victim__{key}", None)
        if given is not None and given != counts[0]:
            raise ReleaseError(f"--{key} {given} does not match the release's {counts[0]} images per class")
        setattr(args, f"victim__{key}", int(counts[0]))
    return cli.build_victim(args.victim, args)


# -- the audit ------------------------------------------------------------------------------------
def target_run(victim, inputs: ReleaseInputs, *, seed: int, device: str):
    """Observations of the downstream ConvNet trained on the user's release, as a shadow run makes them."""
    import torch

    from victims.base import observe, resolve_device, seeded
    from victims.train import fit, to_model_space

    device = resolve_device(device)
    pool = inputs.pool
    run_seed = int(np.random.SeedSequence([seed, TARGET_STREAM]).generate_state(1)[0] >> 1)
    start = time.perf_counter()
    with seeded(run_seed, device) as generator:
        x = to_model_space(inputs.release_x, mean=pool.mean, std=pool.std, device=device)
        y = torch.as_tensor(inputs.release_y, device=device)
        model = fit(x, y, n_classes=pool.n_classes, config=victim.train, flip_ok=pool.flip_ok, generator=generator)
        obs = observe(model, pool, device=device, init_idx=inputs.init_idx, release_x=inputs.release_x,
                      release_y=inputs.release_y)
    meta = {"run": 0, "seed": run_seed, "wall_s": round(time.perf_counter() - start, 3), "host": socket.gethostname(),
            "device": device, "target": TARGET}
    return obs, meta


def with_target(shadows: StoredRuns, obs, inputs: ReleaseInputs, meta: dict) -> StoredRuns:
    """The shadow runs plus the user's release as one more run (the last), for `attack_scores`."""
    from attacks import cross_entropy, dcr_scores, logit_confidence

    pool = inputs.pool
    init = np.zeros(pool.n_pool, dtype=bool)
    init[inputs.init_idx] = True
    dcr = None
    if shadows.dcr is not None:
        dcr = np.vstack([shadows.dcr, dcr_scores(pool.x, pool.y, inputs.release_x, inputs.release_y)[None]])
    return StoredRuns(keep=np.vstack([shadows.keep, inputs.member[None]]),
                      confidence=np.concatenate([shadows.confidence, logit_confidence(obs.logits, pool.y)[None]]),
                      loss=np.vstack([shadows.loss, cross_entropy(obs.logits[:, 0, :], pool.y)[None]]),
                      init_mask=np.vstack([shadows.init_mask, init[None]]), meta=(*shadows.meta, meta), dcr=dcr)


def release_id(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check_out_dir(out: Path, record: dict) -> None:
    """Refuse an --out that is not a directory, or that holds the audit of another release or pool."""
    if out.exists() and not out.is_dir():
        raise ReleaseError(f"--out {out} is not a directory")
    meta_path = out / "experiment.json"
    if meta_path.exists():
        try:
            stored = json.loads(meta_path.read_text())
        except (OSError, json.JSONDecodeError):
            raise ReleaseError(f"{meta_path} is not valid JSON; refusing to overwrite it") from None
        keys = ("victim", "config", "dataset_fingerprint", "release_sha256", "master_seed", "n_shadow", "membership_sha256",
                "plan", "inclusion_rate", "membership_rate", "membership_seed")
        differing = [k for k in keys if stored.get(k) != record.get(k)]
        if differing:
            raise ReleaseError(f"--out {out} holds another release audit (differs in: {', '.join(differing)}); "
                               "refusing to overwrite it")
    elif out.is_dir() and any(out.iterdir()):
        raise ReleaseError(f"--out {out} is a non-empty directory that is no release audit; refusing to write there")


def build_parser(argv: list[str] | None = None) -> ArgumentParser:
    p = ArgumentParser(prog="python -m audit.release",
                       description="Audit a data release made with one of the victim pipelines: shadow runs of the "
                                   "same pipeline on the same pool, attacks on the actual release, a report.")
    p.add_argument("--pool", required=True, type=Path, help="POOL.npz: x, y, and member (bool) or member_idx (int)")
    p.add_argument("--release", required=True, type=Path, help="RELEASE.npz: x, y (and optional init_idx)")
    p.add_argument("--victim", required=True, type=cli.victim_argument(), metavar="VICTIM",
                   help=f"the pipeline that made the release: {', '.join(victim_names())}, or module:Class")
    p.add_argument("--n-shadow", type=int_at_least(2), required=True,
                   help="shadow runs: reference runs, each example in each by an independent coin (--inclusion-rate)")
    p.add_argument("--out", type=Path, default=None,
                   help="the audit directory (default: <runs-dir>/release-<sha256 of the release, 10 hex>)")
    cli.add_run_flags(p)
    report.add_claim_flags(p)
    report.add_report_flags(p, seed=False)  # --seed is the run flags' master seed
    cli.add_victim_flags(p, argv)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    try:
        inputs = read_inputs(args.pool, args.release)
        if inputs.coins is not None and inputs.coins.seed == args.seed:
            raise ReleaseError(f"--seed {args.seed} is the pool's membership_seed: the shadow runs' coins would repeat "
                               "the release's own; choose another --seed")
        victim = victim_for(args, inputs)
        victim.check(inputs.pool, inclusion_rate=args.inclusion_rate)  # the shadow runs, at the plan's rate
        executor = ExecutorConfig(kind=args.executor, workers=args.workers, address=args.address,
                                  gpus_per_run=args.gpus_per_run, device=args.device)
        settings = report.settings_from(args)
        experiment = cli.experiment_record(victim, inputs.pool, dataset=str(args.pool), seed=args.seed,
                                           inclusion_rate=args.inclusion_rate)
        digest = release_id(args.release)
        out = args.out or Path(args.runs_dir) / f"release-{digest[:10]}"
        record = {**experiment, "n_shadow": args.n_shadow, "pool_file": str(args.pool.resolve()),
                  "release_file": str(args.release.resolve()), "release_sha256": digest,
                  "membership_sha256": hashlib.sha256(np.packbits(inputs.member).tobytes()).hexdigest(),
                  "membership_rate": None if inputs.coins is None else inputs.coins.rate,
                  "membership_seed": None if inputs.coins is None else inputs.coins.seed}
        check_out_dir(out, record)
        store = RunStore.open(args.runs_dir, experiment=experiment, pool_labels=inputs.pool.y)
        keep = membership_matrix(inputs.pool.y, n_runs=args.n_shadow, master_seed=args.seed,
                                 inclusion_rate=args.inclusion_rate)
        store.extend_plan(keep)
    except (DataError, StoreError, ValueError) as e:  # ReleaseError included
        parser.error(str(e))
    record["shadow_store"] = str(store.root.resolve())

    cli.train_missing_runs(store, victim=victim, pool=inputs.pool, keep=keep, seed=args.seed,
                           inclusion_rate=args.inclusion_rate, executor=executor, quiet=args.quiet)
    shadows = StoredRuns.load(store, keep=keep, images=inputs.pool.x, labels=inputs.pool.y)
    obs, meta = target_run(victim, inputs, seed=args.seed, device=args.device)
    runs = with_target(shadows, obs, inputs, meta)
    # the user's release is the one target (the last run); every shadow run is a reference run, its shadow
    targets = np.array([args.n_shadow])
    variance = variance_for(args.lira_variance, n_reference=args.n_shadow)
    scores = {a: attack_scores(runs, a, targets, variance=variance)[0][None] for a in runs.available(ATTACKS)}
    summary = release_summary(scores, inputs, shadows, obs, experiment=experiment, variance=variance, args=args)

    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "experiment.json", record)
    write_npy(out / "pool_labels.npy", inputs.pool.y)
    RunStore(out).write_run(0, *obs.to_store(meta))
    write_npy(out / "audit" / "pool_index.npy", inputs.pool_index)
    outputs.write_audit(out / "audit", summary=summary, scores=scores, membership=inputs.member[None],
                        init_mask=runs.init_mask[targets])
    audited = report.load_audited(out)
    built = report.build_report([audited], settings=settings, images={str(audited.path): inputs.pool.x},
                                command=["python", "-m", "audit.release", *(sys.argv[1:] if argv is None else argv)])
    html_path, json_path = report.write_report(built, out / "audit")
    if not args.quiet:
        print(outputs.describe(summary, out / "audit" / "summary.json"))
    print("; ".join(v["text"] for v in built.data["experiments"][0]["verdicts"]))
    print(f"  -> {html_path}\n  -> {json_path}")
    return 0


def release_summary(scores: dict, inputs: ReleaseInputs, shadows: StoredRuns, obs, *, experiment: dict, variance: str,
                    args) -> dict:
    """summary.json of the release audit: the contract's keys (one target: the release) plus the claim."""
    import zlib

    formal = [m["formal_epsilon"] for m in shadows.meta if m["formal_epsilon"] is not None]
    delta = next((m["delta"] for m in shadows.meta if m["delta"] is not None), None)
    bound_delta = args.claimed_delta if args.claimed_delta is not None else (delta or 0.0)
    coins = inputs.coins
    fair = coins is not None and coins.fair
    if coins is None:
        drawn, note = "chosen by the custodian (no coins recorded)", CHOSEN_NOTE
    else:
        drawn = (f"independent {'fair ' if fair else ''}coins of rate {coins.rate:g}, membership_seed {coins.seed} "
                 "(reproduced)")
        note = EPSILON_NOTE if fair else unfair_note(coins.rate)
    membership, init = inputs.member[None], np.zeros((1, inputs.pool.n_pool), dtype=bool)
    init[0, inputs.init_idx] = True
    shadow_accuracy = [m["test_accuracy"] for m in shadows.meta]
    return {
        "victim": experiment["victim"], "dataset": experiment["dataset"], "config": experiment["config"],
        "n_shadow": len(shadows.keep), "target_runs": [0],
        "formal_epsilon": max(formal) if formal else None, "delta": delta,
        "claimed_epsilon": args.claimed_epsilon,
        "claimed_delta": bound_delta if args.claimed_epsilon is not None else args.claimed_delta,
        "utility": {"test_accuracy": obs.test_accuracy, "test_accuracy_std": 0.0,
                    "shadow_test_accuracy": float(np.mean(shadow_accuracy)),
                    "shadow_test_accuracy_std": float(np.std(shadow_accuracy))},
        "evaluation": {"lira_variance": variance, "lira_variance_flag": args.lira_variance, "confidence": args.confidence, "master_seed": args.seed,
                       "target": TARGET, "plan": PLAN, "inclusion_rate": args.inclusion_rate, "membership": drawn,
                       "membership_rate": None if coins is None else coins.rate,
                       "membership_seed": None if coins is None else coins.seed,
                       "n_canaries": int(membership.size) if fair else None, "epsilon_note": note},
        "attacks": {a: attack_summary(s, membership, init, delta=bound_delta, confidence=args.confidence,
                                      seed=[args.seed, zlib.crc32(a.encode())], fair_coins=fair)
                    for a, s in scores.items()},
    }


if __name__ == "__main__":
    sys.exit(main())
