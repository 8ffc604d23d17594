"""Packed shadow runs against one run per task: seconds per run of a victim's `run` (one run at a
time) and of its `run_packed` (K runs in one stacked training), one torch thread, warm.

    python bench/packing.py [--victims real subset] [--packs 2 4 8] [--repeats 2] [--device cpu]
    python bench/packing.py --memory [--victims real subset] [--packs 1 4 8] [--device cpu]
    python bench/packing.py --layouts [--packs 1 4 8 16] [--repeats 40] [--width 64] [--device cpu]

Prints, per victim and K, seconds per run unpacked and packed, their ratio (packed throughput over
unpacked), the largest logit difference between a packed run and the same run unpacked and, for
scale, between an unpacked run on one torch thread and the same run on two (another summation
order that nobody calls a different result). With --memory, instead: the peak memory one task
adds while it trains K runs packed (K = 1: one run alone), in a fresh process per cell, divided
by K (CPU: the peak resident set above the one after loading; GPU: torch's peak allocation).
With --layouts, instead: milliseconds per SGD step of K digits ConvNets (batch 64) laid out three
ways: one after the other, stacked under torch.func `stack_module_state` + `vmap`, and as one
network of grouped layers (`victims.packed.GroupedNets`, what packed runs use: K*width channels
in K groups, a batched linear head), after checking that the grouped network's logits equal the
K networks' own; the three alternate step by step, medians over --repeats.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F

from shadow_runs.plan import membership_matrix, run_seed
from victims import get_victim, load_pool


def seconds_per_run(fn, n_runs: int, repeats: int) -> tuple[float, list]:
    """Median over `repeats` of fn()'s wall time divided by `n_runs`, and fn()'s last result."""
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / n_runs)
    return statistics.median(times), result


MEMORY_PROBE = """
import resource, sys, numpy as np, torch
from shadow_runs.plan import membership_matrix, run_seed
from victims import get_victim, load_pool
torch.set_num_threads(1)
name, k, device = sys.argv[1], int(sys.argv[2]), sys.argv[3]
pool = load_pool("digits")
keeps = membership_matrix(pool.y, n_runs=k, master_seed=0)
seeds = [run_seed(master_seed=0, run=r) for r in range(k)]
victim = get_victim(name)()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
if k == 1:
    victim.run(pool, keeps[0], seeds[0], device=device)
else:
    victim.run_packed(pool, keeps, seeds, device=device)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
gpu = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else 0.0
print((after - before) / 1024, gpu)
"""


def memory(victims: list[str], packs: list[int], device: str) -> None:
    import subprocess
    import sys

    print("| victim | K | peak MiB added per run (CPU resident) | peak MiB per run (GPU allocated) |")
    print("|---|---|---|---|")
    for name in victims:
        for k in packs:
            out = subprocess.run(
                [sys.executable, "-c", MEMORY_PROBE, name, str(k), device], capture_output=True, text=True, check=True
            ).stdout.split()
            cpu, gpu = float(out[0]), float(out[1])
            print(f"| {name} | {k} | {cpu / k:.1f} | {gpu / k:.1f} |", flush=True)


def step_layouts(packs: list[int], repeats: int, width: int, device: str) -> None:
    """ms per SGD step of K ConvNets: sequential, vmap, grouped convolutions (see the docstring)."""
    from victims.nets import NetConfig, build_net
    from victims.packed import GroupedNets

    pool = load_pool("digits")
    shape, classes, batch = pool.image_shape, pool.n_classes, 64
    print(
        "| K | sequential ms/step | vmap ms/step | grouped ms/step | sequential / grouped | vmap / grouped "
        "| max logit diff grouped |"
    )
    print("|---|---|---|---|---|---|---|")
    for k in packs:
        torch.manual_seed(0)
        nets = [build_net(NetConfig(width=width), image_shape=shape, n_classes=classes).to(device) for _ in range(k)]
        x = torch.randn(k, batch, *shape, device=device)
        y = torch.randint(0, classes, (k, batch), device=device)
        grouped = GroupedNets(nets)
        with torch.no_grad():
            own = torch.stack([net(x[i]) for i, net in enumerate(nets)])
            diff = float((grouped(x) - own).abs().max())

        sequential_opts = [torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9) for net in nets]

        def sequential():
            for i, (net, opt) in enumerate(zip(nets, sequential_opts)):
                loss = F.cross_entropy(net(x[i]), y[i])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()

        params, buffers = torch.func.stack_module_state(nets)
        skeleton = copy.deepcopy(nets[0]).to("meta")
        vmap_opt = torch.optim.SGD(params.values(), lr=0.01, momentum=0.9)

        def vmapped():
            out = torch.func.vmap(lambda p, b, xb: torch.func.functional_call(skeleton, (p, b), (xb,)))(
                params, buffers, x
            )
            loss = F.cross_entropy(out.flatten(0, 1), y.flatten(), reduction="none").view(k, batch).mean(1).sum()
            vmap_opt.zero_grad(set_to_none=True)
            loss.backward()
            vmap_opt.step()

        grouped_opt = torch.optim.SGD(grouped.parameters(), lr=0.01, momentum=0.9)

        def grouped_step():
            out = grouped(x)  # [K, B, classes]
            loss = F.cross_entropy(out.flatten(0, 1), y.flatten(), reduction="none").view(k, batch).mean(1).sum()
            grouped_opt.zero_grad(set_to_none=True)
            loss.backward()
            grouped_opt.step()

        layouts = {"sequential": sequential, "vmap": vmapped, "grouped": grouped_step}
        samples: dict[str, list[float]] = {name: [] for name in layouts}
        for fn in layouts.values():
            fn()  # warm-up
        for _ in range(repeats):  # the layouts alternate step by step, so a drift in speed hits all three
            for name, fn in layouts.items():
                samples[name].append(seconds_per_run(fn, 1, 1)[0])
        times = {name: statistics.median(values) for name, values in samples.items()}
        print(
            f"| {k} | {1e3 * times['sequential']:.1f} | {1e3 * times['vmap']:.1f} | {1e3 * times['grouped']:.1f} | "
            f"{times['sequential'] / times['grouped']:.2f}x | {times['vmap'] / times['grouped']:.2f}x | {diff:.1e} |",
            flush=True,
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--victims", nargs="+", default=["real", "subset"])
    p.add_argument("--packs", nargs="+", type=int, default=[2, 4, 8])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--device", default="cpu")
    p.add_argument("--memory", action="store_true", help="peak memory per run instead of time")
    p.add_argument("--layouts", action="store_true", help="ms per SGD step: sequential, vmap, grouped convolutions")
    p.add_argument("--width", type=int, default=64, help="ConvNet width for --layouts (the downstream net's)")
    args = p.parse_args()
    if args.memory:
        memory(args.victims, args.packs, args.device)
        return
    torch.set_num_threads(1)
    if args.layouts:
        step_layouts(args.packs, args.repeats, args.width, args.device)
        return
    pool = load_pool("digits")
    print(
        "| victim | K | s/run unpacked | s/run packed | packed/unpacked throughput | max logit diff packed "
        "| max logit diff 2 threads |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in args.victims:
        victim = get_victim(name)()
        for k in args.packs:
            keeps = membership_matrix(pool.y, n_runs=k, master_seed=0)
            seeds = [run_seed(master_seed=0, run=r) for r in range(k)]
            victim.run(pool, keeps[0], seeds[0], device=args.device)  # warm-up
            single, alone = seconds_per_run(
                lambda: [victim.run(pool, keep, seed, device=args.device) for keep, seed in zip(keeps, seeds)],
                k,
                args.repeats,
            )
            packed, together = seconds_per_run(
                lambda: victim.run_packed(pool, keeps, seeds, device=args.device), k, args.repeats
            )
            diff = max(float(np.abs(a.logits - b.logits).max()) for a, b in zip(alone, together))
            torch.set_num_threads(2)
            two = victim.run(pool, keeps[0], seeds[0], device=args.device)
            torch.set_num_threads(1)
            threads = float(np.abs(two.logits - alone[0].logits).max())
            print(
                f"| {name} | {k} | {single:.2f} | {packed:.2f} | {single / packed:.2f}x | {diff:.1e} | {threads:.1e} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
