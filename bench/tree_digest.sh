#!/bin/bash
# One digest of the verifier's code and the GPU tier's tests as they are on disk (sha256 of every file's sha256, in
# path order): printed by bench/gpu_check.sh on the device machine, where the copy's git metadata may name an older
# commit than the tree that was sent; run here at a commit to see whether it is the one a device call ran.
cd "$(dirname "$0")/.." && find verifier tests/gpu kernelmill/settings.py -type f \( -name '*.py' -o -name '*.c' -o -name '*.h' -o -name '*.cpp' -o -name '*.cu' \) \
  -not -path '*/__pycache__/*' | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16
