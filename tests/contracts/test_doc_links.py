"""Every relative link in README.md, bench/README.md and docs/ resolves: the file exists, and a #anchor names a
heading of that file (GitHub's rule: lower case, punctuation but hyphens dropped, spaces to '-')."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def anchors(path: Path) -> set[str]:
    headings = re.findall(r"^#+ (.*)$", path.read_text(), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def relative_links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)  # code blocks hold no links
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+:", t)]


def test_every_relative_link_and_anchor_resolves():
    pages = [ROOT / "README.md", ROOT / "bench" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    assert len(pages) >= 9  # README, bench's index, contracts, performance and the results pages
    broken = []
    for page in pages:
        for target in relative_links(page):
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, broken


def test_the_checker_catches_a_broken_anchor(tmp_path):
    page = tmp_path / "a.md"
    page.write_text("# The verdict's bound\n\n[ok](#the-verdicts-bound) [bad](#no-such)\n")
    assert anchors(page) == {"the-verdicts-bound"}
    assert relative_links(page) == ["#the-verdicts-bound", "#no-such"]


def test_the_readme_stays_a_short_front_door():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 300


def test_bench_readme_indexes_every_script_and_each_has_a_usage_line():
    """bench/ is a part: each script is a row of bench/README.md's index, starts with a docstring
    holding its usage line, runs behind a main guard, and imports the suite from the install
    (no sys.path edits)."""
    bench = ROOT / "bench"
    index = (bench / "README.md").read_text()
    scripts = sorted(p for p in bench.iterdir() if p.suffix in (".py", ".sh"))
    assert len(scripts) >= 20
    for script in scripts:
        assert f"| `{script.name}` |" in index, f"{script.name} is not in bench/README.md's index"
        text = script.read_text()
        assert "sys.path" not in text, script.name
        if script.name in ("timing.py", "__main__.py") or script.suffix == ".sh":
            continue  # the shared helper; the runner (python -m bench); the shell script: its second comment line
        assert text.startswith('"""') and f"python bench/{script.name}" in text.split('"""')[1], script.name
        assert 'if __name__ == "__main__":' in text, script.name
