"""The victim protocol, what a victim run returns, and the victim registry.

A victim is a frozen dataclass of its configuration with a `run(pool, keep, seed, *, device,
inclusion_rate)` method. `keep` is one row of the membership plan (`shadow_runs.plan`), each
example a member with probability q independently: a DP victim's accounting covers add/remove of
one record under Poisson sampling at a fixed rate, so whatever it calibrates must come from the
public q * n_pool (`expected_members`), never the run's actual count."""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import inspect
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np
import torch

from extensions import entry_points, load_entry_point, load_path
from victims.compiled import maybe_compiled
from victims.pool import Pool
from victims.train import accuracy, predict_queries, to_model_space


class RunError(ValueError):
    """Bad input a run meets as it runs (a command that fails or times out, a release that does not fit
    the pool): one line naming it. The audit stops with exit status 2, keeping the runs stored before."""


@dataclass(frozen=True, eq=False)
class Observations:
    """What one run of a victim leaves for the attacks (docs/contracts.md, "The run store")."""

    logits: np.ndarray  # float32 [n_pool, n_queries, n_classes]; query 0 is the image itself
    test_accuracy: float  # of the downstream model on the held-out split
    init_idx: np.ndarray = field(
        default_factory=lambda: np.zeros(0, dtype=np.int64)
    )  # pool indices of real images in / behind the release
    formal_epsilon: float | None = None  # the accountant's epsilon for the steps actually taken
    delta: float | None = None
    recon_loss: dict[str, np.ndarray] | None = (
        None  # generators only: GAN-Leaks kind ('fbb', 'pbb', 'wb') -> float32 [n_pool], NaN where not reconstructed
    )
    # float32 [k, c, h, w] pixel scale, or [k, d] records of a table's features: the released synthetic set, if any
    release_x: np.ndarray | None = None
    release_y: np.ndarray | None = None  # int64 [k]: its labels
    # white-box runs only: float32 [steps, canaries], each canary's projection of each noisy release
    # (victims.dp.whitebox_canaries)
    whitebox: np.ndarray | None = None
    whitebox_mechanism: dict | None = None  # with `whitebox`: the mechanism's public noise_multiplier and sample_rate
    # the mechanism the accountant composed, when it is T Poisson-subsampled Gaussian steps at one (sigma, q):
    # {"noise_multiplier", "sample_rate", "steps"}; the audit tests its own curve (audit.stats.mechanism)
    mechanism: dict | None = None
    #: tables: more of the downstream model's utility (test AUROC, the marginals' distance to the test split,
    #: `victims.tabular.release.utility`), name -> float
    utility: dict | None = None
    #: more JSON-able facts of the run, stored as they are in runs/<r>.json, a key of its own each (the command
    #: victim's `command`: its log's ends and its own claim, `victims.pipelines.command`)
    record: dict | None = None

    def __post_init__(self) -> None:
        if self.logits.ndim != 3:
            raise ValueError(f"logits must be [n_pool, n_queries, n_classes], got shape {self.logits.shape}")
        object.__setattr__(self, "logits", np.asarray(self.logits, dtype=np.float32))
        object.__setattr__(self, "init_idx", np.asarray(self.init_idx, dtype=np.int64))
        if self.recon_loss is not None:
            recon = {kind: np.asarray(loss, dtype=np.float32) for kind, loss in self.recon_loss.items()}
            for kind, loss in recon.items():
                if loss.shape != self.logits.shape[:1]:
                    raise ValueError(
                        f"recon_loss[{kind!r}] must be [n_pool] = {self.logits.shape[:1]}, got shape {loss.shape}"
                    )
            object.__setattr__(self, "recon_loss", recon)
        if (self.release_x is None) != (self.release_y is None):
            raise ValueError("release_x and release_y come together")
        if self.release_x is not None:
            object.__setattr__(self, "release_x", np.asarray(self.release_x, dtype=np.float32))
            object.__setattr__(self, "release_y", np.asarray(self.release_y, dtype=np.int64))
            if self.release_x.ndim not in (2, 4) or self.release_y.shape != self.release_x.shape[:1]:
                raise ValueError(
                    f"release_x must be [k, c, h, w] images or [k, d] records, with k labels, "
                    f"got {self.release_x.shape} and {self.release_y.shape}"
                )
        if (self.whitebox is None) != (self.whitebox_mechanism is None):
            raise ValueError("whitebox and whitebox_mechanism come together")
        if self.mechanism is not None and set(self.mechanism) != {"noise_multiplier", "sample_rate", "steps"}:
            raise ValueError(
                f"mechanism must hold noise_multiplier, sample_rate and steps, got {sorted(self.mechanism)}"
            )
        if self.whitebox is not None:
            object.__setattr__(self, "whitebox", np.asarray(self.whitebox, dtype=np.float32))
            if self.whitebox.ndim != 2:
                raise ValueError(f"whitebox must be [steps, canaries], got shape {self.whitebox.shape}")

    def to_store(self, meta: Mapping[str, Any] | None = None) -> tuple[dict[str, np.ndarray], dict]:
        """What the run store keeps of this run (`shadow_runs.store.RunStore.write_run`): the arrays of its
        .npz and the metadata of its .json, `meta` followed by the privacy and utility fields set, then
        the keys of `record` (docs/contracts.md, "The run store")."""
        arrays = {"logits": self.logits, "init_idx": self.init_idx}
        for kind, loss in (self.recon_loss or {}).items():
            arrays[f"recon_loss_{kind}"] = np.asarray(loss, dtype=np.float32)
        if self.release_x is not None:
            arrays["release_x"], arrays["release_y"] = self.release_x, self.release_y
        extra = {}
        if self.whitebox is not None:
            arrays["whitebox"] = self.whitebox
            extra["whitebox_mechanism"] = dict(self.whitebox_mechanism)
        if self.mechanism is not None:
            extra["mechanism"] = dict(self.mechanism)
        if self.utility is not None:
            extra["utility"] = {name: float(value) for name, value in self.utility.items()}
        stored = {
            **(meta or {}),
            "formal_epsilon": self.formal_epsilon,
            "delta": self.delta,
            "test_accuracy": self.test_accuracy,
            **extra,
        }
        if taken := sorted(set(self.record or {}) & set(stored)):
            raise ValueError(f"Observations.record may not hold {taken[0]!r}, a key the run store sets")
        return arrays, {**stored, **(self.record or {})}


DEFAULT_INCLUSION_RATE = 0.5  # as shadow_runs.plan.DEFAULT_INCLUSION_RATE (victims do not import the plan)


def expected_members(pool: Pool, inclusion_rate: float = DEFAULT_INCLUSION_RATE) -> float:
    """q * n_pool: the expected member count of a run of the plan, the only member count a DP
    victim may calibrate to (it is public; a run's actual count is data)."""
    if not 0.0 < inclusion_rate < 1.0:
        raise ValueError(f"inclusion_rate must lie strictly between 0 and 1, got {inclusion_rate}")
    return inclusion_rate * pool.n_pool


def expected_class_members(pool: Pool, inclusion_rate: float = DEFAULT_INCLUSION_RATE) -> np.ndarray:
    """float [n_classes]: q * (class size), the expected members of each class in a run."""
    expected_members(pool, inclusion_rate)  # validates the rate
    return inclusion_rate * np.bincount(pool.y, minlength=pool.n_classes).astype(np.float64)


class Victim(Protocol):
    name: ClassVar[str]
    #: a tabular victim releases records of a table and runs on a tabular pool (`Pool.schema`) only; absent means
    #: False: it releases images, and runs on images only (`check_pool_kind`); None: either, as its configuration
    #: says (`command`), and its `check` refuses the other kind
    tabular: ClassVar[bool | None] = False
    #: a generator victim's runs store `Observations.recon_loss` (the GAN-Leaks reconstruction losses):
    #: `audit.ganleak` audits the victims whose class sets it True (`generator_victim_names`); absent means False
    stores_recon_loss: ClassVar[bool] = False

    def run(
        self,
        pool: Pool,
        keep: np.ndarray,
        seed: int,
        *,
        device: str = "cpu",
        inclusion_rate: float = DEFAULT_INCLUSION_RATE,
    ) -> Observations:
        """One run on the members `keep` (bool [n_pool]) with `seed`. `inclusion_rate` is the plan's public
        q; DP victims calibrate to `expected_members(pool, inclusion_rate)`, other victims may ignore it."""

    def check(self, pool: Pool, *, inclusion_rate: float = DEFAULT_INCLUSION_RATE) -> None:
        """Raise ValueError naming the bad value if this configuration cannot run on `pool` under
        a plan with this `inclusion_rate` (callable with `pool` alone: the plan's default rate)."""


def check_pool_kind(victim: Any, pool: Pool) -> None:
    """ValueError naming both if `victim` releases tables and `pool` holds images, or the other way round."""
    tabular = getattr(type(victim), "tabular", False)
    if tabular is None:  # either kind, by its configuration (`command`: its pipeline file's kind): its `check` says
        return
    if tabular and not pool.tabular:
        raise ValueError(
            f"--victim {victim.name} releases a table, and --dataset {pool.name} holds images "
            "(tables: fair, randhie, or a .json schema file)"
        )
    if pool.tabular and not tabular:
        tables = ", ".join(n for n in victim_names() if getattr(_VICTIMS.get(n), "tabular", False))
        raise ValueError(f"--victim {victim.name} releases images, and --dataset {pool.name} is a table ({tables})")


_VICTIMS: dict[str, type] = {}


def register_victim(name: str, *, force: bool = False):
    """Class decorator: register a victim dataclass under `name` (a duplicate raises unless force)."""

    def decorate(cls: type) -> type:
        if name in _VICTIMS and not force:
            raise ValueError(f"victim {name!r} is already registered ({_VICTIMS[name].__name__})")
        if not dataclasses.is_dataclass(cls):
            raise TypeError(f"victim {name!r} must be a dataclass, got {cls!r}")
        cls.name = name
        _VICTIMS[name] = cls
        return cls

    return decorate


#: entry-point group of installed victim plugins: `name = "package.module:Class"` in a package's
#: metadata makes `--victim name` audit that class (README, "Audit your own pipeline")
PLUGIN_GROUP = "membership_audit.victims"


def victim_names() -> tuple[str, ...]:
    """The built-in victims and the installed plugins (entry points of PLUGIN_GROUP)."""
    return tuple(sorted(set(_VICTIMS) | set(entry_points(PLUGIN_GROUP))))


def generator_victim_names() -> tuple[str, ...]:
    """The victims (built-in, and installed plugins that load) whose class sets `stores_recon_loss`:
    their runs store the GAN-Leaks reconstruction losses, and `audit.ganleak` audits them."""
    found = []
    for name in victim_names():
        try:
            cls = get_victim(name)
        except ValueError:
            continue  # a plugin that does not load is refused with its own line where it is named
        if getattr(cls, "stores_recon_loss", False):
            found.append(name)
    return tuple(found)


def get_victim(name: str) -> type:
    """The victim class for `name`: built-in, an installed plugin (PLUGIN_GROUP), or a `module:Class`
    path. ValueError (one line) for an unknown name, a path that does not import, or a broken class."""
    if name in _VICTIMS:
        return _VICTIMS[name]
    plugins = entry_points(PLUGIN_GROUP)
    if name in plugins:
        return check_victim_class(load_entry_point(plugins[name], label="--victim"), label=name)
    if ":" in name:
        form = "a victim path is module:Class, e.g. my_package.pipelines:MyVictim"
        return check_victim_class(load_path(name, label="--victim", form=form), label=name)
    names = victim_names()
    close = difflib.get_close_matches(name, names, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(names)}; or a module:Class path"
    raise ValueError(f"unknown victim {name!r} ({hint})")


def check_victim_class(cls: Any, *, label: str) -> type:
    """`cls` if it follows the victim protocol (a dataclass with a str `name` that no other victim
    has, `run(pool, keep, seed, *, device, inclusion_rate)` and `check(pool, *, inclusion_rate)`);
    else ValueError naming what breaks it."""

    def broken(why: str) -> ValueError:
        return ValueError(
            f"--victim {label}: {getattr(cls, '__qualname__', cls)!s} does not follow the victim protocol: {why}"
        )

    if not isinstance(cls, type) or not dataclasses.is_dataclass(cls):
        raise broken("not a dataclass (its fields are the victim's flags)")
    if not isinstance(getattr(cls, "name", None), str) or not cls.name:
        raise broken("no `name` class attribute (a str: the experiment directory's prefix)")
    if _VICTIMS.get(cls.name, cls) is not cls:
        raise broken(f"its name {cls.name!r} is a built-in victim's")
    for method, call in (
        ("run", "(pool, keep, seed, device='cpu', inclusion_rate=0.5)"),
        ("check", "(pool, inclusion_rate=0.5)"),
    ):
        function = getattr(cls, method, None)
        if not callable(function):
            raise broken(f"no `{method}` method")
        try:
            if method == "run":
                inspect.signature(function).bind(None, None, None, None, device="cpu", inclusion_rate=0.5)
            else:
                inspect.signature(function).bind(None, None, inclusion_rate=0.5)
        except TypeError:
            raise broken(f"`{method}` cannot be called as {method}{call}") from None
    return cls


def victim_config(victim: Any) -> dict:
    """The victim's configuration as plain JSON-able data; a field marked `omit_at_default` is left out
    at its default, so adding one keeps old stores' identity."""
    config = dataclasses.asdict(victim)
    for f in dataclasses.fields(victim):
        if f.metadata.get("omit_at_default") and getattr(victim, f.name) == f.default:
            del config[f.name]
    return config


def _flag_name(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def require_at_least(config: Any, minimums: dict[str, int | float]) -> None:
    """ValueError naming the first field of `config` below its minimum: '--flag must be >= low, got v'."""
    for name, low in minimums.items():
        if getattr(config, name) < low:
            raise ValueError(f"{_flag_name(name)} must be >= {low}, got {getattr(config, name)}")


def require_positive(config: Any, names: tuple[str, ...]) -> None:
    """ValueError naming the first field of `config` that is not a finite number > 0."""
    for name in names:
        value = getattr(config, name)
        if not (value > 0 and math.isfinite(value)):
            raise ValueError(f"{_flag_name(name)} must be > 0, got {value}")


def require_momentum(config: Any) -> None:
    if not 0 <= config.momentum < 1:
        raise ValueError(f"--momentum must be in [0, 1), got {config.momentum}")


def resolve_device(device: str) -> str:
    """'auto' -> 'cuda' when a GPU is visible, else 'cpu'."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


@contextlib.contextmanager
def seeded(seed: int, device: str = "cpu") -> Iterator[torch.Generator]:
    """Fix torch's global RNG to `seed` (parameter init) without leaking it to the caller, and yield a
    generator on `device` for everything else. On a GPU, cuDNN is held deterministic for the block
    (grid_sample's backward stays nondeterministic)."""
    with _forked_rng(device):
        torch.manual_seed(seed)
        yield torch.Generator(device=device).manual_seed(seed + 1)


@contextlib.contextmanager
def _forked_rng(device: str) -> Iterator[None]:
    """torch's global RNG (and a GPU's) restored after the block, cuDNN deterministic in it."""
    cuda = [torch.device(device).index or 0] if torch.device(device).type == "cuda" else []
    cudnn = torch.backends.cudnn
    with (
        torch.random.fork_rng(devices=cuda),
        cudnn.flags(enabled=cudnn.enabled, benchmark=False, deterministic=True, allow_tf32=cudnn.allow_tf32),
    ):
        yield


class SeededRuns:
    """K runs' `seeded` states at once (`seeded_runs`): run k's generator, and its own stream of
    torch's global RNG (parameter init), switched in by `global_rng(k)`."""

    def __init__(self, seeds: list[int], device: str) -> None:
        self.generators, self._states = [], []
        for seed in seeds:
            torch.manual_seed(seed)
            self._states.append(torch.get_rng_state())
            self.generators.append(torch.Generator(device=device).manual_seed(seed + 1))

    @contextlib.contextmanager
    def global_rng(self, k: int) -> Iterator[None]:
        """torch's global RNG where run k left it: `build_net` in the block draws what run k alone would."""
        torch.set_rng_state(self._states[k])
        try:
            yield
        finally:
            self._states[k] = torch.get_rng_state()


@contextlib.contextmanager
def seeded_runs(seeds: list[int], device: str = "cpu") -> Iterator[SeededRuns]:
    """`seeded` for K runs that advance together (`victims.packed`): each run's generator and global-RNG
    stream are those `seeded(seed)` gives it alone; the caller's state is restored after. Parameter
    init on the CPU; a CUDA global RNG is forked but not seeded per run."""
    with _forked_rng(device):
        yield SeededRuns(list(seeds), device)


def observe(model: torch.nn.Module, pool: Pool, *, device: str, **extra: Any) -> Observations:
    """Observations of a downstream model: logits on every pool query view and test accuracy (its
    forward pass compiled under `--compile`, `victims.compiled`)."""
    x = to_model_space(pool.x, mean=pool.mean, std=pool.std, device=device)
    x_test = to_model_space(pool.x_test, mean=pool.mean, std=pool.std, device=device)
    y_test = torch.tensor(pool.y_test, device=device)
    forward = maybe_compiled(model.eval())
    return Observations(
        logits=predict_queries(forward, x, flip_ok=pool.flip_ok),
        test_accuracy=accuracy(forward, x_test, y_test),
        **extra,
    )
