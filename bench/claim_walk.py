"""The claim walk (issue 55's measure of how the claimed ε travels): one tiny audit run in this process
with `--claimed-epsilon`, profiled, then

* the package files whose functions hold the claim (the `Claim`, the claimed float itself, or the
  verdict made from it on its way to the printed line) as an argument or a local, with those
  functions (comprehensions apart: a loop over every flag is no step);
* the returns that hand a claim back to a caller that gave it (the same object passed in and handed
  back up: a pass-through), apart from those that make a new claim or verdict from its parts (the
  flag's type, `Claim.given`, `checked_claim`, the verdict's makers), which are listed as makers;
* how many times the verdict is made (`audit.reporting.verdict.audit_verdict`).

    python bench/claim_walk.py [--victim subset] [--claimed-epsilon 4.321]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def walk(victim: str, claimed: float) -> tuple[dict[str, set[str]], list[tuple[str, str]], list[tuple[str, str]], int]:
    """(file -> functions holding the claim, pass-through returns, makers' returns, verdicts made)."""
    from audit import lira

    visits: dict[str, set[str]] = {}
    passed, made, entered = [], [], {}
    verdicts = 0

    def holds(value) -> bool:
        if isinstance(value, float):
            return value == claimed
        if type(value).__name__ == "Verdict":  # the decision made from it, on its way to the printed line
            return f"ε = {claimed:.4g}" in str(getattr(value, "checked", ""))
        return type(value).__name__ == "Claim" and getattr(value, "epsilon", None) == claimed

    def profile(frame, event, arg):
        nonlocal verdicts
        path = frame.f_code.co_filename
        if not path.startswith(str(ROOT)) or "/tests/" in path or "/.venv/" in path or path == __file__:
            return
        if frame.f_code.co_name.startswith("<"):  # a comprehension: its function's loop over every flag, say
            return
        where = (os.path.relpath(path, ROOT), frame.f_code.co_name)
        held = [v for v in frame.f_locals.values() if holds(v)]
        if event == "call":
            entered[id(frame)] = {id(v) for v in held}
            verdicts += where == ("audit/reporting/verdict.py", "audit_verdict")
        elif event == "return":
            given = entered.pop(id(frame), set())
            if holds(arg):
                (passed if id(arg) in given else made).append(where)
                held.append(arg)
        if held:
            visits.setdefault(where[0], set()).add(where[1])

    with tempfile.TemporaryDirectory() as runs_dir:
        argv = ["--runs-dir", runs_dir, "--victim", victim, "--n-shadow", "4", "--train-steps", "10"]
        argv += ["--train-net-width", "8", "--executor", "inline", "--quiet", "--claimed-epsilon", str(claimed)]
        sys.setprofile(profile)
        try:
            lira.main(argv)
        finally:
            sys.setprofile(None)
    return visits, passed, made, verdicts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--victim", default="subset")
    parser.add_argument("--claimed-epsilon", type=float, default=4.321, help="a value no other number equals")
    args = parser.parse_args()
    visits, passed, made, verdicts = walk(args.victim, args.claimed_epsilon)
    print(f"{len(visits)} files hold the claim:")
    for path, functions in sorted(visits.items()):
        print(f"  {path}: {', '.join(sorted(functions))}")
    print(f"{len(passed)} pass-through returns" + "".join(f"\n  {p}: {f}" for p, f in passed))
    makers = ", ".join(sorted({f"{p}:{f}" for p, f in made}))
    print(f"{len(made)} returns of a claim or verdict made from its parts: {makers}")
    print(f"the verdict made {verdicts} time(s)")


if __name__ == "__main__":
    main()
