"""Where the time of a shadow run goes, on one torch thread (as in every Ray worker).

python bench/profiling.py modes [--width 128 --depth 3 --batch 256 --repeats 7]
    Seconds per noisy batch of PSG (per-example gradients of the matched weights + clipping +
    sum + noise) by every way of computing it: torch.func vmap(grad) (the earlier code),
    opacus's GradSampleModule with hooks, with force_functorch, with expanded weights ("ew"),
    opacus's ghost clipping ("ghost"; two backward passes), and `victims.dp.privacy.clipped_gradient_sum`
    (layer factors + ghost norms, what PSG uses). The variants alternate in one process; medians
    over --repeats. Each is checked against vmap (largest relative error per parameter).

python bench/profiling.py psg [--width 128 --depth 3 --members 900 --spc 10 --sigma 1.721
                             --max-grad-norm 0.1 --batch-size 256 --batches 10 --outer 10
                             --inner 50 --measure-outer 10 --per-example fast|vmap|both]
    PSG's side of the comparison with the Private-Set reference code (the defaults are its
    configuration, one restart): seconds per noisy batch, per synthetic-set step, inner epochs
    per outer iteration, per outer iteration and per restart. `PSGVictim.generate` runs as is
    with timers around `noisy_mean_gradient` and `SyntheticSet.step`; the inner epochs are the
    rest of its time. With --measure-outer M < --outer, M outer iterations are timed and the
    restart is extrapolated: T K (noisy batch + step) + (T - 1) x inner epochs of one outer
    iteration (the reference takes no inner steps after the last). `--per-example vmap` times
    the earlier torch.func path; `both` alternates the two (one restart each, repeated
    --repeats times).

python bench/profiling.py dm [--width 128 --depth 3 --members 900 --ipc 10 --batch-real 64
                            --lr-images 1 --iterations 30 --repeats 3]
    DM's side of the comparison with the DatasetCondensation reference code (the defaults are
    the configuration it was timed at: real init, DSA, one torch thread): seconds per image
    update, median over --repeats timed runs of --iterations updates after a one-iteration warm-up, and
    the split of one more run under cProfile by the torch operations that take the most time.

python bench/profiling.py dsa [--width 128 --depth 3 --members 900 --ipc 10 --batch-real 256
                             --outer 10 --inner 50 --lr-images 0.1 --lr-net 0.01 --iterations 2
                             --repeats 3]
    DSA's side of the comparison with the DatasetCondensation reference code (main.py --method
    DSA; the defaults are its configuration at ipc 10: real init, DSA, one torch thread):
    seconds per matching network (one outer x inner block, one iteration of the reference's
    Iteration loop), median over --repeats timed runs of --iterations networks after a
    warm-up network; seconds per image update from runs of the same networks with --inner 0
    (the image updates and network draws alone), alternating with the full runs; and the
    split of one more full run under cProfile.

python bench/profiling.py kip [--members 900 --ipc 10 --depth 1 --lr 0.04 --batch-size 5000
                             --reg 1e-6 --iterations 200 --repeats 3]
    KIP's side of the comparison with the KIP reference colab (google-research kip/KIP.ipynb:
    FC NTK of depth 1, W_std sqrt(2), b_std 0.1, Adam lr 0.04, support 100, target batch
    5,000 = every member on digits, reg 1e-6, float64, labels fixed, no augmentation; one
    torch thread): seconds per KIP step (one Adam step of the support), median over
    --repeats timed runs of --iterations steps after a one-step warm-up, and the split of one more
    run under cProfile.

python bench/profiling.py run --victim psg|dm|dsa|kip|cgan|...
    ONE shadow run of the victim at its defaults on digits (members: row 0 of
    `membership_matrix(pool.y, n_runs=1, master_seed=0)`, seed 0): its wall time without the
    profiler, then under cProfile the split into the victim's algorithm, the downstream
    training (`victims.train.fit`), the observation (`victims.base.observe`; for generator
    victims also the GAN-Leaks reconstruction losses, `victims.pipelines.cgan.reconstruct`), and the top
    functions by cumulative time. --repeats timed runs without the profiler come first (the
    first of them cold: imports, kernel set-up), so the profiled run is a warm one.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import pstats
import re
import statistics
import time
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from victims import get_victim, load_pool
from victims.pipelines import psg as psg_module
from victims.compiled import compiled_steps
from victims.nets import NetConfig, build_net, without_inplace
from victims.dp.privacy import clip_per_example, clipped_gradient_sum, gaussian_mean, per_example_gradients
from victims.pipelines.psg import PSGVictim, SyntheticSet
from victims.train import to_model_space


# -- modes: one noisy batch, every way ------------------------------------------------------------
def vmap_sums(net, params, x, y, max_norm):
    """The earlier path: torch.func vmap(grad) -> clip -> sum."""
    clipped = clip_per_example(per_example_gradients(net, params, x, y), max_norm)
    return [clipped[name].sum(0) for name in params]


@contextlib.contextmanager
def only_matched_trainable(net, params):
    """Per-example gradients for `params` only (as PSG): the others stop requiring gradients."""
    matched = {id(p) for p in params.values()}
    others = [p for p in net.parameters() if id(p) not in matched and p.requires_grad]
    for p in others:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in others:
            p.requires_grad_(True)


def _clean(net):
    for p in net.parameters():
        p.grad = None
        for attr in ("grad_sample", "_forward_counter", "_current_grad_sample", "_norm_sample"):
            if hasattr(p, attr):
                delattr(p, attr)
    for m in net.modules():
        for attr in ("activations", "max_batch_len"):
            if hasattr(m, attr):
                delattr(m, attr)


def opacus_sums(mode):
    """opacus GradSampleModule (hooks, functorch) or expanded weights -> grad_sample -> clip -> sum.
    opacus's hooks forbid in-place ReLU, so the net's stay out of place from here on (same values)."""
    from opacus import GradSampleModule
    from opacus.grad_sample import GradSampleModuleExpandedWeights

    def sums(net, params, x, y, max_norm):
        with only_matched_trainable(net, params):
            if mode == "ew":
                model = GradSampleModuleExpandedWeights(without_inplace(net), loss_reduction="sum")
            else:
                model = GradSampleModule(
                    without_inplace(net), loss_reduction="sum", force_functorch=mode == "functorch"
                )
            try:
                loss = F.cross_entropy(model(x), y, reduction="sum")
                if mode == "ew":
                    loss.backward()
                else:
                    torch.autograd.grad(loss, list(params.values()))
                per_example = {name: p.grad_sample for name, p in params.items()}
            finally:
                model.remove_hooks()
                _clean(net)
        clipped = clip_per_example(per_example, max_norm)
        return [clipped[name].sum(0) for name in params]

    return sums


def opacus_ghost_sums(net, params, x, y, max_norm):
    """opacus ghost clipping: backward 1 (hooks: ghost norms of linear layers, per-example
    gradients of convolutions -> norms), clipping coefficients, backward 2 on the reweighted loss."""
    from opacus.grad_sample import GradSampleModuleFastGradientClipping

    with only_matched_trainable(net, params):
        model = GradSampleModuleFastGradientClipping(without_inplace(net), loss_reduction="sum", max_grad_norm=max_norm)
        try:
            losses = F.cross_entropy(model(x), y, reduction="none")
            losses.sum().backward(retain_graph=True)
            coefficients = model.get_clipping_coef()
            model.disable_hooks()
            for p in params.values():
                p.grad = None
            sums = torch.autograd.grad((coefficients * losses).sum(), list(params.values()))
        finally:
            model.remove_hooks()
            _clean(net)
    return list(sums)


def fast_sums(net, params, x, y, max_norm):
    return clipped_gradient_sum(net, params, x, y, max_norm=max_norm)


MODES = {
    "torch.func vmap(grad)": vmap_sums,
    "opacus hooks": opacus_sums("hooks"),
    "opacus functorch": opacus_sums("functorch"),
    "opacus ew": opacus_sums("ew"),
    "opacus ghost": opacus_ghost_sums,
    "layer factors + ghost norms (psg)": fast_sums,
}


def modes(args) -> None:
    pool = load_pool("digits")
    rng = np.random.default_rng(0)
    idx = rng.choice(len(pool.y), size=args.batch, replace=False)
    x = to_model_space(pool.x[idx], mean=pool.mean, std=pool.std)
    y = torch.as_tensor(pool.y[idx])
    torch.manual_seed(0)
    net = build_net(
        NetConfig(width=args.width, depth=args.depth), image_shape=pool.image_shape, n_classes=pool.n_classes
    )
    params = {name: p for name, p in net.named_parameters() if p.ndim > 1}
    generator = torch.Generator().manual_seed(0)
    print(
        f"digits, ConvNet width {args.width} depth {net_depth(net)}, batch {args.batch}, C {args.max_grad_norm}, "
        f"one thread, {args.repeats} repeats (median, min-max)"
    )
    reference = vmap_sums(net, params, x, y, args.max_grad_norm)
    errors = {}
    times = {name: [] for name in MODES}
    with warnings.catch_warnings():  # torch: opacus's full backward hooks fire without input gradients
        warnings.simplefilter("ignore", UserWarning)
        for name, fn in MODES.items():
            out = fn(net, params, x, y, args.max_grad_norm)
            errors[name] = max(float((a - b).norm() / b.norm()) for a, b in zip(out, reference))
        for _ in range(args.repeats):
            for name, fn in MODES.items():
                start = time.perf_counter()
                sums = fn(net, params, x, y, args.max_grad_norm)
                gaussian_mean(
                    None,
                    params,
                    clipped_sum=sums,
                    max_grad_norm=args.max_grad_norm,
                    noise_multiplier=1.721,
                    expected_batch_size=args.batch,
                    generator=generator,
                )
                times[name].append(time.perf_counter() - start)
    for name, t in times.items():
        print(
            f"{name:36s} {statistics.median(t):7.3f} s  ({min(t):.3f}-{max(t):.3f})  "
            f"rel. error vs vmap {errors[name]:.1e}"
        )


def net_depth(net) -> int:
    return sum(isinstance(m, torch.nn.Conv2d) for m in net.modules())


# -- psg: the reference configuration ----------------------------------------------------------------
class Timers:
    """Wall time spent inside `noisy_mean_gradient` and `SyntheticSet.step` while installed."""

    def __init__(self):
        self.noisy, self.step = [], []

    @contextlib.contextmanager
    def installed(self, per_example: str):
        noisy, step, fast = psg_module.noisy_mean_gradient, SyntheticSet.step, psg_module.clipped_gradient_sum

        def timed_noisy(*a, **k):
            start = time.perf_counter()
            out = noisy(*a, **k)
            self.noisy.append(time.perf_counter() - start)
            return out

        def timed_step(*a, **k):
            start = time.perf_counter()
            step(*a, **k)
            self.step.append(time.perf_counter() - start)

        def vmap_path(net, params, x, y, *, max_norm):
            return vmap_sums(net, params, x, y, max_norm)

        psg_module.noisy_mean_gradient, SyntheticSet.step = timed_noisy, timed_step
        if per_example == "vmap":
            psg_module.clipped_gradient_sum = vmap_path  # the name psg.noisy_mean_gradient calls
        try:
            yield self
        finally:
            psg_module.noisy_mean_gradient, SyntheticSet.step = noisy, step
            psg_module.clipped_gradient_sum = fast


def psg_restart(args, per_example: str) -> dict:
    pool, keep = dataset_members(args.dataset, args.members)
    x = to_model_space(pool.x[keep], mean=pool.mean, std=pool.std)
    y = torch.as_tensor(pool.y[keep])
    victim = PSGVictim(
        spc=args.spc,
        restarts=1,
        outer=args.measure_outer,
        inner=args.inner,
        batches=args.batches,
        batch_size=args.batch_size,
        max_grad_norm=args.max_grad_norm,
        lr_images=args.lr_images,
        lr_net=args.lr_net,
        net=NetConfig(width=args.width, depth=args.depth),
    )
    timers = Timers()
    generator = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    with timers.installed(per_example), compiled_steps(args.compile == "on"):
        start = time.perf_counter()
        victim.generate(
            x, y, pool=pool, sigma=args.sigma, sample_rate=args.batch_size / args.members, generator=generator
        )
        total = time.perf_counter() - start
    m, k, t = args.measure_outer, args.batches, args.outer
    inner = (total - sum(timers.noisy) - sum(timers.step)) / max(1, m - 1)  # m - 1 blocks of inner epochs
    noisy, step = statistics.median(timers.noisy), statistics.median(timers.step)
    restart = t * k * (statistics.mean(timers.noisy) + statistics.mean(timers.step)) + (t - 1) * inner
    return dict(
        noisy=noisy,
        step=step,
        inner=inner,
        outer=k * (noisy + step) + inner,
        restart=restart,
        measured=total,
        measured_outer=m,
    )


def psg(args) -> None:
    if not 2 <= args.measure_outer <= args.outer:
        raise SystemExit("--measure-outer must be in [2, --outer] (one block of inner epochs at least)")
    variants = ["fast", "vmap"] if args.per_example == "both" else [args.per_example]
    print(
        f"PSG, {args.dataset}, {step_mode(args)}, "
        f"{args.members} members, ConvNet width {args.width} depth {args.depth}, spc {args.spc}, "
        f"sigma {args.sigma}, C {args.max_grad_norm}, B {args.batch_size}, K {args.batches}, T {args.outer}, "
        f"J {args.inner}, one restart, one thread"
    )
    results = {v: [] for v in variants}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for _ in range(args.repeats):
            for v in variants:
                results[v].append(psg_restart(args, v))
    for v, rows in results.items():
        med = {key: statistics.median(r[key] for r in rows) for key in rows[0]}
        how = (
            "measured"
            if args.measure_outer == args.outer
            else f"extrapolated from {args.measure_outer} of {args.outer} outer iterations"
        )
        label = "vmap(grad) (before)" if v == "vmap" else "clipped_gradient_sum (now)"
        print(f"[{label}] medians over {len(rows)} restart(s):")
        print(f"  noisy batch (per-example grads + clip + noise) {med['noisy']:.3f} s")
        print(f"  synthetic-set step                             {med['step']:.3f} s")
        print(f"  inner epochs ({args.inner}) per outer iteration           {med['inner']:.2f} s")
        print(f"  outer iteration (K={args.batches} batches + steps + inner)  {med['outer']:.2f} s")
        print(
            f"  restart                                        {med['restart']:.1f} s ({how}; "
            f"{med['measured']:.1f} s timed)"
        )


# -- run: one shadow run under cProfile ---------------------------------------------------------------
def _cumulative(stats: pstats.Stats, filename_end: str, function: str) -> float:
    """Cumulative seconds of the function `function` defined in a file ending with `filename_end`."""
    return sum(
        row[3]
        for (filename, _, name), row in stats.stats.items()
        if name == function and filename.replace("\\", "/").endswith(filename_end)
    )


def run(args) -> None:
    from shadow_runs.plan import membership_matrix

    pool = load_pool("digits")
    keep = membership_matrix(pool.y, n_runs=1, master_seed=0)[0]
    victim = get_victim(args.victim)()
    victim.check(pool)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        walls = []
        for _ in range(args.repeats):  # the first pays one-time costs (imports, kernel set-up)
            start = time.perf_counter()
            victim.run(pool, keep, 0)
            walls.append(time.perf_counter() - start)
        profiler = cProfile.Profile()
        start = time.perf_counter()
        profiler.runcall(victim.run, pool, keep, 0)
        profiled = time.perf_counter() - start
    stats = pstats.Stats(profiler)
    fit, obs = _cumulative(stats, "victims/train.py", "fit"), _cumulative(stats, "victims/base.py", "observe")
    recon = _cumulative(stats, "victims/pipelines/cgan.py", "reconstruct")  # generators: GAN-Leaks losses of the pool
    print(f"victim {args.victim} (defaults), digits, {int(keep.sum())} members, seed 0, one thread")
    if walls:
        print(
            f"wall without the profiler: {', '.join(f'{w:.2f}' for w in walls)} s (first cold); "
            f"{profiled:.2f} s under cProfile (after them)"
        )
    else:
        print(f"{profiled:.2f} s under cProfile (cold)")
    split = [
        ("victim algorithm", profiled - fit - obs - recon),
        ("downstream training (fit)", fit),
        ("observation (observe)", obs),
    ]
    if recon:
        split.append(("GAN-Leaks reconstruction", recon))
    for label, seconds in split:
        print(f"  {label:28s} {seconds:7.2f} s  {100 * seconds / profiled:5.1f}%")
    if args.top:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(args.top)
        table = out.getvalue()[out.getvalue().index("   ncalls") :].rstrip()
        print(f"top {args.top} by cumulative time:")
        repo = str(Path(__file__).resolve().parent.parent) + "/"
        print(re.sub(r"\S*site-packages/|" + re.escape(repo), "", table))


def step_mode(args) -> str:
    return "compiled" if args.compile == "on" else "eager"


def dataset_members(dataset: str, n_members: int):
    """(pool, keep): the dataset and `n_members` members drawn with numpy's default_rng(0), as every
    reference-configuration subcommand (dm, dsa, kip, psg) chooses them."""
    pool = load_pool(dataset)
    keep = np.zeros(pool.n_pool, dtype=bool)
    keep[np.random.default_rng(0).choice(pool.n_pool, size=n_members, replace=False)] = True
    return pool, keep


def profile_split(profiler: cProfile.Profile, top: int = 6) -> str:
    """The functions with the most own time under `profiler`, as shares of the total."""
    stats = pstats.Stats(profiler).sort_stats("tottime")
    total = sum(v[2] for v in stats.stats.values())
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:top]
    return "  under cProfile: " + "; ".join(f"{name} {t / total:.0%}" for (_, _, name), (_, _, t, _, _) in rows)


def time_condensation(victims: list, args) -> tuple[list[list[float]], cProfile.Profile]:
    """Seconds of whole `condense` runs from real init on `args.members` members of `args.dataset`,
    compiled with `--compile on`: one warm-up run of the first victim at one iteration (which pays
    the compilation), then `repeats` rounds in which the victims take turns
    (so a drift in the machine's speed hits them all), one list of seconds per victim; and one more
    run of the first victim under cProfile."""
    from dataclasses import replace

    from victims.base import seeded
    from victims.condensation.condense import Members, initial_set

    pool, keep = dataset_members(args.dataset, args.members)
    members = Members.of(pool, keep, device="cpu")
    with seeded(0) as generator, compiled_steps(args.compile == "on"):
        images, labels, _ = initial_set(pool, keep, members, ipc=victims[0].ipc, init="real", generator=generator)

        def condense(victim):
            return lambda: victim.condense(images, labels, members, pool=pool, generator=generator)

        condense(replace(victims[0], iterations=1))()  # warm-up: one-time costs
        seconds: list[list[float]] = [[] for _ in victims]
        for _ in range(args.repeats):
            for victim, times in zip(victims, seconds):
                start = time.perf_counter()
                condense(victim)()
                times.append(time.perf_counter() - start)
        profiler = cProfile.Profile()
        profiler.runcall(condense(victims[0]))
    return seconds, profiler


def dm(args) -> None:
    from victims.pipelines.dm import DMVictim

    victim = DMVictim(
        ipc=args.ipc,
        init="real",
        iterations=args.iterations,
        lr_images=args.lr_images,
        batch_real=args.batch_real,
        net=NetConfig(width=args.width, depth=args.depth),
    )
    (seconds,), profiler = time_condensation([victim], args)
    times = [t / args.iterations for t in seconds]
    print(
        f"DM, {args.dataset}, {step_mode(args)}, "
        f"width {args.width} depth {args.depth}, {args.members} members, ipc {args.ipc}, {args.batch_real} real "
        f"per class, image lr {args.lr_images}: {statistics.median(times):.3f} s per image update "
        f"(median of {args.repeats}; {', '.join(f'{t:.3f}' for t in times)})"
    )
    print(profile_split(profiler))


def dsa(args) -> None:
    from dataclasses import replace

    from victims.pipelines.dsa import DSAVictim

    victim = DSAVictim(
        ipc=args.ipc,
        init="real",
        iterations=args.iterations,
        outer=args.outer,
        inner=args.inner,
        lr_images=args.lr_images,
        lr_net=args.lr_net,
        momentum=0.5,
        batch_real=args.batch_real,
        dsa=True,
        net=NetConfig(width=args.width, depth=args.depth),
    )
    updates_only = replace(victim, inner=0)  # the same image updates and network draws, no network steps
    (full, updates), profiler = time_condensation([victim, updates_only], args)
    per_network = [t / args.iterations for t in full]
    per_update = [t / (args.iterations * args.outer) for t in updates]
    print(
        f"DSA, {args.dataset}, {step_mode(args)}, "
        f"width {args.width} depth {args.depth}, {args.members} members, ipc {args.ipc}, {args.batch_real} real "
        f"per class, (outer, inner) ({args.outer}, {args.inner}), image lr {args.lr_images}, net lr {args.lr_net}, "
        f"{args.iterations} networks a run:"
    )
    print(
        f"  {statistics.median(per_network):.3f} s per matching network (median of {args.repeats}; "
        f"{', '.join(f'{t:.3f}' for t in per_network)})"
    )
    print(
        f"  {statistics.median(per_update):.4f} s per image update (median of {args.repeats} runs with --inner 0; "
        f"{', '.join(f'{t:.4f}' for t in per_update)})"
    )
    print(profile_split(profiler))


def kip(args) -> None:
    from victims.pipelines.kip import KIPVictim

    victim = KIPVictim(
        ipc=args.ipc,
        init="real",
        iterations=args.iterations,
        lr=args.lr,
        batch_size=args.batch_size,
        depth=args.depth,
        reg=args.reg,
        zca=False,
        zca_reg=0.1,
        dsa=False,
    )
    (seconds,), profiler = time_condensation([victim], args)
    times = [t / args.iterations for t in seconds]
    print(
        f"KIP, {args.dataset}, {step_mode(args)}, "
        f"FC NTK depth {args.depth}, {args.members} members, support {10 * args.ipc}, target batch "
        f"{min(args.batch_size, args.members)}, Adam lr {args.lr}, reg {args.reg}: "
        f"{1000 * statistics.median(times):.2f} ms per KIP step (median of {args.repeats}; "
        f"{', '.join(f'{1000 * t:.2f}' for t in times)})"
    )
    print(profile_split(profiler))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    m = sub.add_parser("modes", help="seconds per PSG noisy batch by each per-example gradient method")
    m.add_argument("--width", type=int, default=128)
    m.add_argument("--depth", type=int, default=3)
    m.add_argument("--batch", type=int, default=256)
    m.add_argument("--max-grad-norm", type=float, default=0.1)
    m.add_argument("--repeats", type=int, default=7)
    s = sub.add_parser("psg", help="PSG at the Private-Set reference configuration")
    s.add_argument("--width", type=int, default=128)
    s.add_argument("--depth", type=int, default=3)
    s.add_argument("--members", type=int, default=900)
    s.add_argument("--spc", type=int, default=10)
    s.add_argument("--sigma", type=float, default=1.721)
    s.add_argument("--max-grad-norm", type=float, default=0.1)
    s.add_argument("--batch-size", type=int, default=256)
    s.add_argument("--batches", type=int, default=10, help="K")
    s.add_argument("--outer", type=int, default=10, help="T")
    s.add_argument("--inner", type=int, default=50, help="J")
    s.add_argument("--lr-images", type=float, default=0.1)
    s.add_argument("--lr-net", type=float, default=0.01)
    s.add_argument("--measure-outer", type=int, default=10, help="outer iterations actually run (>= 2)")
    s.add_argument("--per-example", choices=("fast", "vmap", "both"), default="fast")
    s.add_argument("--repeats", type=int, default=1)
    d = sub.add_parser("dm", help="DM at the DatasetCondensation reference configuration")
    d.add_argument("--width", type=int, default=128)
    d.add_argument("--depth", type=int, default=3)
    d.add_argument("--members", type=int, default=900)
    d.add_argument("--ipc", type=int, default=10)
    d.add_argument("--batch-real", type=int, default=64)
    d.add_argument("--lr-images", type=float, default=1.0)
    d.add_argument("--iterations", type=int, default=30)
    d.add_argument("--repeats", type=int, default=3)
    g = sub.add_parser("dsa", help="DSA at the DatasetCondensation reference configuration")
    g.add_argument("--width", type=int, default=128)
    g.add_argument("--depth", type=int, default=3)
    g.add_argument("--members", type=int, default=900)
    g.add_argument("--ipc", type=int, default=10)
    g.add_argument("--batch-real", type=int, default=256)
    g.add_argument("--outer", type=int, default=10)
    g.add_argument("--inner", type=int, default=50)
    g.add_argument("--lr-images", type=float, default=0.1)
    g.add_argument("--lr-net", type=float, default=0.01)
    g.add_argument("--iterations", type=int, default=2, help="matching networks per timed run")
    g.add_argument("--repeats", type=int, default=3)
    k = sub.add_parser("kip", help="KIP at the KIP reference colab's configuration")
    k.add_argument("--members", type=int, default=900)
    k.add_argument("--ipc", type=int, default=10)
    k.add_argument("--depth", type=int, default=1)
    k.add_argument("--lr", type=float, default=0.04)
    k.add_argument("--batch-size", type=int, default=5000)
    k.add_argument("--reg", type=float, default=1e-6)
    k.add_argument("--iterations", type=int, default=200, help="KIP steps per timed run")
    k.add_argument("--repeats", type=int, default=3)
    for reference in (s, d, g, k):
        reference.add_argument("--dataset", choices=("digits", "mnist5k"), default="digits")
        reference.add_argument(
            "--compile", choices=("on", "off"), default="off", help="the victim's compiled steps (victims.compiled)"
        )
    r = sub.add_parser("run", help="cProfile one shadow run of a victim at its defaults")
    r.add_argument("--victim", required=True)
    r.add_argument("--top", type=int, default=10)
    r.add_argument("--repeats", type=int, default=2, help="unprofiled timed runs before the profiled one")
    r.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(getattr(args, "threads", 1))
    {"modes": modes, "psg": psg, "dm": dm, "dsa": dsa, "kip": kip, "run": run}[args.what](args)


if __name__ == "__main__":
    main()
