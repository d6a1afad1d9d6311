#!/usr/bin/env bash
# Run one matrix row's tiers on a GPU host that has no network and already has the row's torch/triton
# (e.g. a lab box or a lent cloud GPU), from a bundle prepared on a connected machine:
#
#   BUNDLE/wheels/*.whl   the row's remaining wheels (`nox -s "wheelhouse(ROW)" -- --without-host-provided`)
#   BUNDLE/dist/*.whl     the plugin wheel (`uv build --wheel -o BUNDLE/dist`)
#   BUNDLE/vllm-py.tgz    optional: vLLM's Python files alone (no compiled .so), for hosts where only vLLM's
#                         Triton kernels are exercised (discovery + kernel tiers; not the serve tier)
#
# Usage (from the repository root): tools/run-gpu-row-offline.sh BUNDLE ROW RUNNER OUT [run-here options]
# (default options: --tiers discovery,kernel --redo). Writes matrix/results/RUNNER/ROW.json through
# `python -m caovan.matrix run-here` (install mode "current-environment" is recorded in the file) and copies
# it to OUT. CAOVAN_SITE (default /tmp/caovan-site) is the `pip install --target` folder put on PYTHONPATH;
# it may already hold the row's packages (unpacked earlier), in which case BUNDLE needs only dist/.
set -euo pipefail
bundle=$1 row=$2 runner=$3 out=$4
shift 4
[ $# -gt 0 ] || set -- --tiers discovery,kernel --redo
site=${CAOVAN_SITE:-/tmp/caovan-site}
mkdir -p "$site" "$out"
if [ -f "$bundle/vllm-py.tgz" ]; then tar xzf "$bundle/vllm-py.tgz" -C "$site"; fi
wheels=("$bundle"/dist/*.whl)
if [ -d "$bundle/wheels" ]; then wheels+=("$bundle"/wheels/*.whl); fi
python3 -m pip install --quiet --no-index --no-deps --no-compile --upgrade --target "$site" "${wheels[@]}"
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
# No FlashInfer on such hosts: vLLM's FlashInfer sampler would fail to import.
export VLLM_USE_FLASHINFER_SAMPLER=${VLLM_USE_FLASHINFER_SAMPLER:-0}
python3 -m caovan.matrix run-here "$row" --runner "$runner" "$@"
cp "matrix/results/$runner/$row.json" "$out/"
