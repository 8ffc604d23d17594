#!/usr/bin/env bash
# Build one virtual environment per third-party pipeline: thirdparty/envs/<name>/.
#
#   bash thirdparty/build_envs.sh            # every environment named in thirdparty/requirements/
#   bash thirdparty/build_envs.sh dpmm       # one
#
# Each environment installs thirdparty/requirements/<name>.lock (every package pinned, from the
# registries) where it exists, else <name>.in (the top-level pins), and then writes the lock with
# `pip freeze`. The lock is what the pipeline TOMLs hash (`requirements`), so a rebuilt environment
# that resolved other versions is refused by an existing store as changed code is. The suite's
# own code never runs in these environments: only thirdparty/adapters/<library>.py does, which
# imports nothing of ours.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-python3.11}"
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
    for f in "$here"/requirements/*.in; do names+=("$(basename "$f" .in)"); done
fi
for name in "${names[@]}"; do
    spec="$here/requirements/$name.in"
    lock="$here/requirements/$name.lock"
    if [ ! -f "$spec" ]; then
        echo "build_envs.sh: error: no requirements for '$name' ($spec)" >&2
        exit 2
    fi
    env="$here/envs/$name"
    start=$(date +%s)
    "$python" -m venv "$env"
    "$env/bin/python" -m pip install --quiet --upgrade pip
    if [ -f "$lock" ]; then
        # torch first, alone: the lock pins the CPU build on disk (see <name>.in)
        if grep -q '^torch==' "$lock"; then
            "$env/bin/python" -m pip install --quiet "$(grep '^torch==' "$lock")"
        fi
        "$env/bin/python" -m pip install --quiet -r "$lock"
    else
        if grep -q '^torch==' "$spec"; then
            "$env/bin/python" -m pip install --quiet "$(grep '^torch==' "$spec")"
        fi
        "$env/bin/python" -m pip install --quiet -r "$spec"
        "$env/bin/python" -m pip freeze --exclude-editable > "$lock"
    fi
    echo "$name: $(( $(date +%s) - start )) s, $(du -sh "$env" | cut -f1) in $env"
done
