#!/usr/bin/env bash
# Wheels that lerobot 0.6.1's SmolVLA and PI0 / PI05 benchmarks (tools/golden/bench_smolvla.py,
# bench_pi0.py) need on the lent GPU machine, beyond what its image already has (Python 3.12,
# torch 2.11, numpy, safetensors, huggingface-hub, pyyaml, typing-inspect, ...; the list is in
# /work/.library/device/KINDS.md). Run here, from anywhere inside the checkout, with network:
#
#     tools/golden/device_wheels.sh
#
# It empties and refills .whl/ at the repo root (ignored through .git/info/exclude: add `/.whl/`
# there), prints each wheel's size and the total, and fails if the total is over 35 MiB (a device
# call carries at most 64 MiB, binaries included). On the device (tools/golden/DEVICE.md):
#
#     python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#         --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
#
# The versions are those of /work/venv-lerobot061. The list was found by running both benchmarks
# there with every distribution the image lacks made unimportable, then putting back one at a
# time what the import chain stopped on. It is short because lerobot only imports its
# `lerobot.datasets` (and with it datasets, av, dill, multiprocess, pandas) when `datasets` is
# installed, and the image has no `datasets`.
set -euo pipefail

LIMIT_MIB=35
ROOT=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
DEST="$ROOT/.whl"
PY=${PYTHON:-python3}

# name==version (pinned to /work/venv-lerobot061), and who imports it:
#   lerobot               the policies (pure Python; declares Python >= 3.12, as the image has)
#   draccus, mergedeep    lerobot.configs / lerobot.utils.import_utils (draccus imports mergedeep)
#   gymnasium             lerobot.envs.configs <- lerobot.configs.train <- lerobot.policies.pretrained
#                         (its farama-notifications is imported in a try block and left out)
#   num2words             transformers' SmolVLMProcessor, which SmolVLA builds (PI05 does not); not
#                         in venv-lerobot061, so lerobot[smolvla]'s own pin (>= 0.5.14, < 0.6)
#   transformers, tokenizers
#                         the image has transformers 5.17 / tokenizers 0.23.2; lerobot 0.6.1 wants
#                         transformers >= 5.4, < 5.6, and under 5.17 PI05 fails (its pi_gemma
#                         passes `cache_position` to create_causal_mask, and the SigLIP keys moved:
#                         ...vision_tower.vision_model.* no longer load). transformers 5.5.4 checks
#                         tokenizers <= 0.23.0 at import, hence tokenizers 0.22.2 too.
WHEELS=(
  lerobot==0.6.1
  draccus==0.11.6
  mergedeep==1.3.4
  gymnasium==1.4.0
  num2words==0.5.14
  transformers==5.5.4
  tokenizers==0.22.2
)

rm -rf "$DEST"
mkdir -p "$DEST"
# tokenizers is the one compiled wheel (cp39-abi3 manylinux); the rest are pure Python.
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform any --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  -d "$DEST" "${WHEELS[@]}"

n=$(ls "$DEST"/*.whl | wc -l)
if [ "$n" -ne ${#WHEELS[@]} ]; then
  echo "device_wheels.sh: expected ${#WHEELS[@]} wheels in $DEST, found $n" >&2
  exit 1
fi
total=0
for w in "$DEST"/*.whl; do
  s=$(stat -c %s "$w")
  total=$(( total + s ))
  printf '%10d  %s\n' "$s" "$(basename "$w")"
done
printf 'total %d bytes (%s MiB) in %s\n' "$total" "$(awk "BEGIN { printf \"%.2f\", $total / 1048576 }")" "$DEST"
if [ "$total" -gt $(( LIMIT_MIB * 1048576 )) ]; then
  echo "device_wheels.sh: over the ${LIMIT_MIB} MiB budget for carried wheels" >&2
  exit 1
fi
