#!/usr/bin/env bash
# The sealed test of new compositions (docs/world_models.md, "The sealed test: fold 1"), run once:
# world-CLIP, world-CIR and the world judge trained with the shipped recipe (world seed 0, data seed 0,
# every config at its default, the judge's ranking key chosen by the shipped rule on its own
# validation splits) on fold 1's train split, then the record on fresh fold-1 worlds.
#
#   bench/sealed_test_fold1.sh DIR      # DIR: a new folder; ~2 h on 2 quiet CPU cores
#
# It trains in a copy of this commit under DIR (its own assets/, cache/ and runs/), so the shipped
# models stay as they are; a rerun resumes (a trained model is kept, record resumes by seed). What
# ships: DIR/runs/record-fold1/record.csv as docs/results/record-fold1.csv and the three manifests
# (weights' sha256, training time, the ranking key chosen) under docs/results/fold1/; then
# `python -m cir_demo docs tables`.
set -euo pipefail
DIR=${1:?usage: bench/sealed_test_fold1.sh DIR}
SEEDS=${SEEDS:-101 103 107 109 113}
PY=${PYTHON:-python}
REPO=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
if [ ! -d "$DIR/cir_demo" ]; then
    if [ -e "$DIR" ] && [ -n "$(ls -A "$DIR")" ]; then
        echo "error: $DIR holds files that are not a sealed-test copy; choose a new folder" >&2
        exit 2
    fi
    mkdir -p "$DIR"
    git -C "$REPO" archive HEAD | tar -x -C "$DIR"
    rm -rf "$DIR/assets/world-clip" "$DIR/assets/world-cir" "$DIR/assets/world-verifier"
fi
cd "$DIR"
stamp() { echo "[$(date -u +%FT%TZ)] $* (load $(cut -d' ' -f1-3 /proc/loadavg))"; }
for model in world-clip world-cir world-verifier; do
    if [ -f "assets/$model/manifest.json" ]; then
        stamp "$model: trained already"
        continue
    fi
    stamp "train $model"
    $PY -m cir_demo train "$model" --world-size default-fold1 --seed 0 --data-seed 0 --no-eval --quiet
done
stamp record
# shellcheck disable=SC2086
$PY -m cir_demo record --world-size default-fold1 --seeds $SEEDS --out runs/record-fold1 --eval-arg=--no-plots
mkdir -p "$REPO/docs/results/fold1"
cp runs/record-fold1/record.csv "$REPO/docs/results/record-fold1.csv"
for model in world-clip world-cir world-verifier; do
    cp "assets/$model/manifest.json" "$REPO/docs/results/fold1/$model.manifest.json"
done
stamp done
