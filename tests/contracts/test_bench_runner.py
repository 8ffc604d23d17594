"""`python -m bench`, the benchmarks' one runner: it lists every benchmark of bench/ (each with the
first line of its docstring), runs one by name with its flags as `python bench/NAME.py` would, and
refuses an unknown name with exit status 2 and one line. bench/timing.py, the scripts' one runner of
audit commands: the only script that builds an audit's command line or reads summary.json, and what
it returns is the `AuditResult` the command wrote."""

import ast
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from audit.result import AuditResult

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
    # one start of the script checks the three: the script ran (its own usage), its flags reached its
    # parser (which refuses --workers z), its status passed on; and, as costs.py imports `timing` from
    # its own folder and timing the suite, that the runner puts both on its path. costs.py, not dp_bugs.py,
    # whose start also imports the catalogue (torch): `/usr/bin/time python -m bench dp_bugs --rows z`
    # 7.4 CPU-s, `... costs --workers z` 2.3 CPU-s, here
    refused = bench("costs", "--workers", "z")
    assert refused.returncode == 2 and refused.stdout == "", refused.stderr
    assert refused.stderr.startswith("usage: costs.py") and "--n-shadow" in refused.stderr
    assert "costs.py: error: argument --workers: invalid int value: 'z'" in refused.stderr


def test_an_unknown_benchmark_exits_2_with_one_line():
    for name, named in (("dp_bug", "unknown benchmark 'dp_bug' (did you mean 'dp_bugs'?)"), ("zzz", "(known: ")):
        refused = bench(name, "--help")
        assert refused.returncode == 2 and refused.stdout == ""
        assert refused.stderr.startswith("python -m bench: error: ") and named in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr


def from_bench(name: str):
    """bench/NAME.py as a module (the scripts import each other from their own folder)."""
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCH))


def test_the_gpu_bench_estimates_a_pack_from_a_measured_pack():
    pack_seconds = from_bench("gpu").pack_seconds
    # one run 8.2 s, a pack of 4 at 2.2 s a run (8.8 s): each run adds (8.8 - 8.2) / 3 = 0.2 s, so a
    # pack of 64 takes 8.8 + 60 x 0.2 = 20.8 s, 26.0 with the 1.25 margin; from the run alone, 64 x 8.2
    assert abs(pack_seconds({1: 8.2, 4: 2.2}, 64) - 26.0) < 1e-9
    assert abs(pack_seconds({1: 8.2}, 64) - 524.8) < 1e-9
    # packs no faster per run than alone: the line is K times the run, 1.25 over
    assert abs(pack_seconds({1: 2.0, 4: 2.0}, 8) - 1.25 * 16) < 1e-9


def test_the_runner_returns_the_result_the_audit_wrote(tmp_path):
    timing = from_bench("timing")
    tiny = [
        "--victim",
        "real",
        "--n-shadow",
        "4",
        "--train-steps",
        "10",
        "--train-net-width",
        "8",
        "--executor",
        "inline",
    ]
    done = timing.audit_into(tmp_path, [*tiny, "--claimed-epsilon", "3"], show=False)
    (store,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    written = json.loads((store / "audit" / "summary.json").read_text())
    assert done.store == store
    assert done.result == AuditResult.from_json(written) and done.result.to_json() == written
    assert done.result.claim.epsilon == 3.0 and done.result.verdict.kind == written["verdict"]["kind"]
    walls = tuple(json.loads(p.read_text())["wall_s"] for p in sorted((store / "runs").glob("*.json")))
    assert len(done.run_seconds) == 4 and done.run_seconds == walls
    assert done.argv == ("-m", "audit.lira", *tiny, "--claimed-epsilon", "3", "--runs-dir", str(tmp_path), "--quiet")
    bound = written["verdict"]
    word = {"epsilon_violated": "violated", "epsilon_consistent": "consistent", "epsilon_not_testable": "not testable"}
    assert timing.verdict_cells(done.result) == (
        f"{bound['eps_lower']:.2f} ({bound['attack']}, {bound['rule']})",
        f"{bound['eps_ceiling']:.2f}",
        word[bound["kind"]],
    )
    assert timing.audited_stores(tmp_path) == [(store, done.result)]


def test_the_runner_refuses_a_command_it_does_not_run():
    timing = from_bench("timing")
    with pytest.raises(ValueError, match="command must be one of lira, loss, ganleak, release, compare, got 'lira2'"):
        timing.command_line("lira2", [])
    with pytest.raises(ValueError, match="an audit's command must be one of lira, loss, ganleak, release"):
        timing.audit_into("unused", [], command="compare")  # refused before anything runs


def audit_command_strings(source: str) -> list[str]:
    """What in `source` only bench/timing.py may hold, sorted: the string constants (docstrings
    aside) that build an audit's command line (`"-m"`, a module `"audit.<name>"`, or its start
    `"audit."` in an f-string) or name summary.json, and the names of `summary_verdict`, which reads
    summary.json's dict."""
    tree = ast.parse(source)
    bodies = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, bodies) and node.body and isinstance(node.body[0], ast.Expr)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if node.value == "-m" or re.fullmatch(r"audit\.\w*", node.value) or "summary.json" in node.value:
                found.append(node.value)
        elif isinstance(node, (ast.Name, ast.alias, ast.Attribute)):
            name = {ast.Name: "id", ast.alias: "name", ast.Attribute: "attr"}[type(node)]
            if getattr(node, name) == "summary_verdict":
                found.append("summary_verdict")
    return sorted(found)


def test_the_scan_finds_an_audit_command_line_and_a_summary_read():
    built = (
        "import sys\nfrom audit.reporting.verdict import summary_verdict\n"
        'command = [sys.executable, "-m", "audit.lira"]\nother = f"audit.{name}"\n'
        'path = next(where.glob("*/audit/summary.json"))\n'
    )
    assert audit_command_strings(built) == [
        "*/audit/summary.json",
        "-m",
        "audit.",
        "audit.lira",
        "summary_verdict",
    ]
    told = (
        '"""Reads summary.json\'s `verdict`."""\n\n\n'
        'def f():\n    """python -m audit.lira"""\n    print(f"python -m audit.lira {n}")\n'
    )
    assert audit_command_strings(told) == []  # docstrings and a command shown in words build nothing


def test_no_bench_script_but_the_runner_builds_an_audit_command_or_reads_summary_json():
    for script in sorted(BENCH.glob("*.py")):
        if script.name != "timing.py":
            assert audit_command_strings(script.read_text()) == [], script.name
