#!/usr/bin/env bash
# Run one matrix row's tiers on a GPU host that has no network and already has the row's torch/triton
# (e.g. a lab box or a lent cloud GPU), from a bundle prepared on a connected machine:
#
#   BUNDLE/wheels/*.whl   the row's remaining wheels: `nox -s "wheelhouse(ROW)" -- --without-host-provided` writes
#                         them to wheelhouse/ROW/; copy that folder's *.whl here
#   BUNDLE/dist/*.whl     the plugin wheel, one (`uv build --wheel -o BUNDLE/dist`), built from this checkout
#   BUNDLE/site.tgz.N     optional, instead of wheels/: the row's packages already installed for the host's
#                         Python, in parts (`python -m caovan.matrix.site_bundle`, from a wheel set made with
#                         `-- --without-host-provided --python-version X.Y`), with BUNDLE/site.tgz.sha256 from
#                         its part-0/. The parts are joined, checked against the digest and unpacked as a fresh
#                         CAOVAN_SITE. A host that takes a limited upload per call gets one part folder per call,
#                         copied into one folder (e.g. /tmp/parts) that later serves as BUNDLE.
#
# For the lent H200 (Python 3.12, no FlashInfer; torch 2.11 and Triton 3.6 installed), from a connected machine:
#   uvx nox -s "wheelhouse(vllm-0.21.0)" -- --without-host-provided --python-version 3.12 \
#       --exclude 'flashinfer*' --exclude 'tokenspeed*' --exclude 'nvidia-cutlass-dsl*' --exclude tilelang \
#       --exclude z3-solver --exclude cuda-tile --exclude quack-kernels --exclude fastsafetensors \
#       --exclude sentry-sdk --exclude numba --exclude llvmlite --exclude opencv-python-headless \
#       --exclude sympy --exclude mpmath --exclude networkx
#   PYTHONPATH=src python3 -m caovan.matrix.site_bundle wheelhouse/vllm-0.21.0-py3.12 .bundle/site \
#       --python-version 3.12 --drop vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so --part-mib 50
# (PYTHONPATH=src: the checkout's caovan, with nothing installed; it needs pyyaml, tabulate and packaging, which
# `uvx --with pyyaml --with tabulate --with packaging python3 ...` brings where they are missing. --part-mib
# counts MiB, 2**20 bytes: 50 makes parts of at most 52,428,800 bytes.)
# (numba and OpenCV serve vLLM's n-gram drafter and video inputs, which the tiers do not use; sympy, mpmath and
# networkx come with the host's torch.) vLLM's Python files alone are not enough for any tier: importing
# vllm.model_executor loads vllm._C (vLLM 0.21.0).
#
# Usage (from the repository root): tools/run-gpu-row-offline.sh BUNDLE ROW RUNNER OUT [run-here options]
# (options: --tiers a,b --redo --strict; default: --tiers discovery,numerics,kernel --redo). Writes
# matrix/results/RUNNER/ROW.json through `python -m caovan.matrix run-here` (install mode
# "current-environment" is recorded in the file) and copies it to OUT. CAOVAN_SITE (default
# /tmp/caovan-site) is the `pip install --target` folder put on PYTHONPATH; it may already hold the row's
# packages (unpacked earlier), in which case BUNDLE needs only dist/; parts whose digest made the site there
# already are not unpacked again.
#
# Tiers run in several calls (e.g. --tiers discovery,kernel, then --tiers serve) build on the result file in
# matrix/results/RUNNER/: on a host whose checkout is reset between calls (a lent machine that gets a fresh copy
# of the working tree each time), copy OUT/ROW.json back to matrix/results/RUNNER/ before the next call, or the
# earlier tiers are recorded as not run.
#
# Every argument is checked before anything is created or installed; exit 2 on a bad one.
set -euo pipefail
usage="usage: tools/run-gpu-row-offline.sh BUNDLE ROW RUNNER OUT [--tiers a,b] [--redo] [--strict]"
prog="run-gpu-row-offline"
# shellcheck source=tools/offline-bundle.sh
. "$(dirname "$0")/offline-bundle.sh"
if [ $# -lt 4 ]; then
    echo "$usage" >&2
    exit 2
fi
bundle=$1 row=$2 runner=$3 out=$4
shift 4
[ $# -gt 0 ] || set -- --tiers discovery,numerics,kernel --redo

# The run-here options this script passes on (--runner is its own argument; --wheelhouse has no use here).
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
    case ${args[i]} in
    --redo | --strict) ;;
    --tiers | --tiers=*)
        if [ "${args[i]}" = --tiers ]; then
            i=$((i + 1))
            [ $i -lt ${#args[@]} ] || die "--tiers needs a value (discovery, numerics, kernel, serve, comma-separated)"
            tiers=${args[i]}
        else
            tiers=${args[i]#--tiers=}
        fi
        [ -n "$tiers" ] || die "--tiers needs a value (discovery, numerics, kernel, serve, comma-separated)"
        IFS=, read -r -a tier_list <<<"$tiers"
        for tier in "${tier_list[@]}"; do
            case $tier in
            discovery | numerics | kernel | serve) ;;
            *) die "--tiers: unknown tier '$tier' (known: discovery, numerics, kernel, serve)" ;;
            esac
        done
        ;;
    *) die "unknown option '${args[i]}' (known: --tiers a,b --redo --strict)" ;;
    esac
done

[ -f pyproject.toml ] && [ -d src/caovan ] && [ -d matrix ] || die "run it from the repository root (no pyproject.toml, src/caovan/ or matrix/ here)"
[[ $runner =~ ^[a-z0-9][a-z0-9._-]{0,63}$ ]] || die "runner name '$runner' must be a slug (lowercase letters, digits, '.', '_', '-')"
[[ $row =~ ^[a-z0-9][a-z0-9._-]{0,63}$ ]] || die "'$row' is not a row id (lowercase letters, digits, '.', '_', '-')"
# A plain text match of `- id: ROW` (quoted or not): this needs nothing but grep, and
# `python -m caovan.matrix run-here` validates the whole matrix once the packages are installed.
row_pattern="^[[:space:]]*(-[[:space:]]+)?id:[[:space:]]*[\"']?${row//./\\.}[\"']?[[:space:]]*(#.*)?$"
shopt -s nullglob
matrix_files=(matrix/*.yaml matrix/*.yml)
[ ${#matrix_files[@]} -gt 0 ] && grep -Eq "$row_pattern" "${matrix_files[@]}" || die "row '$row' is not in matrix/*.yaml"
[ ! -e "$out" ] || [ -d "$out" ] || die "OUT '$out' is not a folder"
bundle_check "$bundle"

mkdir -p "$out"
bundle_install
# The result comes back with OUT whatever run-here's status (--strict exits 1 on a failed tier): on a lent
# host nothing else is brought back.
status=0
python3 -m caovan.matrix run-here "$row" --runner "$runner" "$@" || status=$?
if [ -f "matrix/results/$runner/$row.json" ]; then cp "matrix/results/$runner/$row.json" "$out/"; fi
exit $status
