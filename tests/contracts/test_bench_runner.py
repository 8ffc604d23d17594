"""`python -m bench`, the benchmarks' one runner: it lists every benchmark of bench/ (each with the
first line of its docstring), runs one by name with its flags as `python bench/NAME.py` would, and
refuses an unknown name with exit status 2 and one line."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=ROOT, capture_output=True, text=True)


def test_it_lists_every_benchmark_with_the_first_line_of_its_docstring():
    listed = bench()
    assert listed.returncode == 0, listed.stderr
    lines = {line.split()[0]: line.split(None, 1)[1] for line in listed.stdout.splitlines() if line.startswith("  ")}
    helpers = {"timing.py", "__main__.py"}  # the scripts' shared helper; the runner
    scripts = sorted(p for p in BENCH.glob("*.py") if p.name not in helpers)
    assert list(lines) == [p.stem for p in scripts]
    for script in scripts:
        assert lines[script.stem] == ast.get_docstring(ast.parse(script.read_text())).splitlines()[0].strip()


def test_it_runs_a_benchmark_with_its_flags():
    shown = bench("dp_bugs", "--help")  # imports the suite and the catalogue, runs nothing
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("usage: dp_bugs.py") and "--n-shadow" in shown.stdout
    assert bench("dp_bugs", "--rows", "z").returncode == 2  # the script's own refusal, its status passed on


def test_an_unknown_benchmark_exits_2_with_one_line():
    for name, named in (("dp_bug", "unknown benchmark 'dp_bug' (did you mean 'dp_bugs'?)"), ("zzz", "(known: ")):
        refused = bench(name, "--help")
        assert refused.returncode == 2 and refused.stdout == ""
        assert refused.stderr.startswith("python -m bench: error: ") and named in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr


def test_the_gpu_bench_estimates_a_pack_from_a_measured_pack():
    sys.path.insert(0, str(BENCH))
    try:
        from gpu import pack_seconds
    finally:
        sys.path.remove(str(BENCH))
    # one run 8.2 s, a pack of 4 at 2.2 s a run (8.8 s): each run adds (8.8 - 8.2) / 3 = 0.2 s, so a
    # pack of 64 takes 8.8 + 60 x 0.2 = 20.8 s, 26.0 with the 1.25 margin; from the run alone, 64 x 8.2
    assert abs(pack_seconds({1: 8.2, 4: 2.2}, 64) - 26.0) < 1e-9
    assert abs(pack_seconds({1: 8.2}, 64) - 524.8) < 1e-9
    # packs no faster per run than alone: the line is K times the run, 1.25 over
    assert abs(pack_seconds({1: 2.0, 4: 2.0}, 8) - 1.25 * 16) < 1e-9
