#!/bin/bash
# A fixed set of small audits (loss, LiRA, RMIA, DCR, GAN-Leaks, canaries, DP-SGD, PSG, DM and
# its subset baseline, a table audit, a command victim: bench/marginals_command.toml, audit.compare)
# into RUNS_DIR, then the sha256 of every summary.json.
# A change that must not change behaviour gives the same hashes before and after it:
#     git checkout OLD && bash bench/summaries.sh /tmp/old > old.txt
#     git checkout NEW && bash bench/summaries.sh /tmp/new > new.txt
#     diff <(sed 's| /tmp/old/| |' old.txt) <(sed 's| /tmp/new/| |' new.txt)
# About 2 minutes on 2 cores.
set -e
R=${1:?usage: bash bench/summaries.sh RUNS_DIR}
exec 3>&1 1>/dev/null  # the audits' terminal lines (--quiet keeps the verdict) out of the hash list
T="--executor inline --quiet --runs-dir $R"
python -m audit.lira --victim real --train-steps 30 --n-shadow 8 $T
python -m audit.loss --victim real --train-steps 30 --n-shadow 8 $T
python -m audit.lira --victim dpsgd --epsilon 4 --n-shadow 8 --epochs 1 --net-width 8 $T
python -m audit.lira --victim real --train-steps 30 --n-shadow 8 --canaries 32 --canary-kind outlier $T
python -m audit.lira --victim real --train-steps 30 --n-shadow 8 --canaries 16 --canary-kind duplicate --canary-copies 2 $T
python -m audit.lira --victim dm --train-steps 30 --init real --ipc 1 --iterations 3 --n-shadow 4 $T
python -m audit.lira --victim subset --train-steps 30 --ipc 1 --n-shadow 4 $T
python -m audit.lira --victim psg --train-steps 30 --epsilon 10 --spc 1 --outer 2 --inner 1 --n-shadow 4 $T
python -m audit.ganleak --victim cgan --train-steps 30 --n-shadow 4 --steps 5 $T
python -m audit.lira --victim marginals --dataset fair --epsilon 1 --rows 300 --classifier-iterations 10 --n-shadow 4 $T
python -m audit.lira --victim command --pipeline bench/marginals_command.toml --dataset fair --classifier-iterations 10 --n-shadow 4 $T
python -m audit.compare $R/dm-* --baseline $R/subset-* --out $R/compare.json > /dev/null
for f in $(find $R -name summary.json | sort); do sha256sum $f >&3; done
