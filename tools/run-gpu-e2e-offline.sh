#!/usr/bin/env bash
# Make `caovan bench e2e` records (docs/performance/) on a GPU host with no network that already has the row's
# torch and Triton, from the same bundle as tools/run-gpu-row-offline.sh (its header says how to make one).
#
# Usage (from the repository root):
#   tools/run-gpu-e2e-offline.sh BUNDLE RECORDS PACK [--model-folder ARCH] [--time-limit S] -- MODEL [e2e options]
#
# Installs the bundle, makes MODEL with `caovan bench model-folder ARCH MODEL` where --model-folder is given and
# MODEL does not exist yet, and runs `caovan bench e2e MODEL --out RECORDS [e2e options]`. Whatever that run's
# status, RECORDS (without the profiler's raw traces, the *-trace/ folders) is then packed into PACK (a .tgz): a lent
# host brings back a few files, not a folder tree. --time-limit S stops the run with SIGINT after S seconds, as
# Ctrl-C would (the servers are stopped, and what is finished stays in RECORDS), well before a host's own limit
# kills everything, its packing too. A host with a limit per command runs one server per call (`--only baseline`,
# then `--only caovan`, keeping RECORDS between calls); the second call writes e2e.json. On the lent H200/H100:
#
#   tools/run-gpu-e2e-offline.sh /tmp/parts /tmp/perf "$OUT/perf.tgz" --model-folder qwen3.6-27b --time-limit 540 \
#       -- /tmp/qwen3.6-27b --cudagraph-mode PIECEWISE --only baseline --concurrency 1,4,8 --repeats 3 \
#       --max-tokens 128 --profile --additional-config '{"gdn_prefill_backend": "triton"}' \
#       --serve-args '--load-format dummy --dtype half --max-model-len 4096 --max-num-seqs 8 --language-model-only'
#
# Every argument is checked before anything is created or installed; exit 2 on a bad one.
set -euo pipefail
usage="usage: tools/run-gpu-e2e-offline.sh BUNDLE RECORDS PACK [--model-folder ARCH] [--time-limit S] -- MODEL [e2e options]"
prog="run-gpu-e2e-offline"
# shellcheck source=tools/offline-bundle.sh
. "$(dirname "$0")/offline-bundle.sh"
if [ $# -lt 3 ]; then
    echo "$usage" >&2
    exit 2
fi
bundle=$1 records=$2 pack=$3
shift 3
architecture="" time_limit=""
while [ $# -gt 0 ] && [ "$1" != -- ]; do
    case $1 in
    --model-folder)
        [ $# -ge 2 ] && [ -n "$2" ] && [ "$2" != -- ] || die "--model-folder needs an architecture (caovan bench model-folder --help lists them)"
        architecture=$2
        shift 2
        ;;
    --time-limit)
        [ $# -ge 2 ] && [[ $2 =~ ^[1-9][0-9]*$ ]] || die "--time-limit needs a whole number of seconds, got '${2:-}'"
        time_limit=$2
        shift 2
        ;;
    *) die "unknown option '$1' before -- (known: --model-folder ARCH, --time-limit S; caovan bench e2e's options go after --)" ;;
    esac
done
[ $# -ge 2 ] && [ "$1" = -- ] || die "expected -- MODEL [caovan bench e2e options] after the script's own arguments"
shift
model=$1

[ -f pyproject.toml ] && [ -d src/caovan ] || die "run it from the repository root (no pyproject.toml or src/caovan/ here)"
case $pack in
*.tgz) ;;
*) die "PACK '$pack' must name a .tgz file" ;;
esac
[ -d "$(dirname "$pack")" ] || die "PACK's folder '$(dirname "$pack")' does not exist"
[ ! -e "$records" ] || [ -d "$records" ] || die "RECORDS '$records' is not a folder"
for arg in "$@"; do
    [ "$arg" != --out ] && [[ $arg != --out=* ]] || die "give the records folder as RECORDS, not as --out"
done
[ -e "$model" ] || [ -n "$architecture" ] || die "MODEL '$model' does not exist (--model-folder ARCH makes it)"
command -v timeout >/dev/null || [ -z "$time_limit" ] || die "--time-limit needs coreutils' timeout on PATH"
bundle_check "$bundle"

bundle_install
if [ ! -e "$model" ]; then
    python3 -m caovan bench model-folder "$architecture" "$model"
fi
mkdir -p "$records"
run=(python3 -m caovan bench e2e "$model" --out "$records" "${@:2}")
[ -z "$time_limit" ] || run=(timeout -s INT -k 60 "$time_limit" "${run[@]}")
status=0
"${run[@]}" || status=$?
# The records come back whatever the run's status: a run cut short is finished later with --resume or --only.
tar czf "$pack.partial" --exclude='*-trace' -C "$records" .
mv "$pack.partial" "$pack"
exit $status
