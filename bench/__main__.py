"""The benchmarks' runner: `python -m bench` lists every benchmark of bench/ with the first line
of its docstring; `python -m bench NAME [flags]` runs bench/NAME.py with those flags, as
`python bench/NAME.py [flags]` would (its own folder first on its path, for `from timing import
...`), importing the suite from this checkout (the repository root is put first on PYTHONPATH), and
exits with its status. An unknown NAME exits 2 with one line.

A benchmark is a script of bench/ with a docstring and a main guard (`if __name__ == "__main__":`);
a file without the guard (timing.py) is a helper the scripts share, and is not listed.
"""

from __future__ import annotations

import ast
import difflib
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
PROG = "python -m bench"


def benchmarks() -> dict[str, str]:
    """name -> the first line of its docstring, for every benchmark script of bench/, by name."""
    found = {}
    for script in sorted(BENCH.glob("*.py")):
        tree = ast.parse(script.read_text(), filename=str(script))
        guarded = any(isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) for node in tree.body)
        if script.name != "__main__.py" and guarded:
            found[script.stem] = (ast.get_docstring(tree) or "").strip().splitlines()[0]
    return found


def main(argv: list[str]) -> int:
    found = benchmarks()
    if not argv or argv[0] in ("-h", "--help"):
        print(f"usage: {PROG} [NAME [flags]]   (NAME --help: a benchmark's flags)\n")
        width = max(map(len, found))
        print("\n".join(f"  {name:{width}}  {line}" for name, line in found.items()))
        return 0
    name, flags = argv[0], argv[1:]
    if name not in found:
        close = difflib.get_close_matches(name, found, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(found)}"
        print(f"{PROG}: error: unknown benchmark {name!r} ({hint})", file=sys.stderr)
        return 2
    root = str(BENCH.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run([sys.executable, str(BENCH / f"{name}.py"), *flags], env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
