# shellcheck shell=bash
# Sourced by tools/run-gpu-row-offline.sh and tools/run-gpu-e2e-offline.sh: check a bundle for a GPU host with no
# network, then install it. The bundle's layout and how to make it: tools/run-gpu-row-offline.sh's header.
#
#   die MESSAGE           "$prog: error: MESSAGE" on stderr, exit 2 (the caller sets prog, its name)
#   bundle_check BUNDLE   every check, before anything is created; a bad bundle is one `die`
#   bundle_install        unpacks the site parts as CAOVAN_SITE (default /tmp/caovan-site), installs the wheels,
#                         checks that the plugin is this checkout's source, exports PYTHONPATH

die() {
    # shellcheck disable=SC2154  # prog: the name of the script that sources this file, which sets it
    echo "$prog: error: $*" >&2
    exit 2
}

bundle_check() {
    bundle=$1
    command -v python3 >/dev/null || die "python3 is not on PATH"
    [ -d "$bundle" ] || die "bundle folder '$bundle' does not exist"
    shopt -s nullglob
    plugin_wheels=("$bundle"/dist/*.whl)
    [ ${#plugin_wheels[@]} -eq 1 ] || die "'$bundle/dist/' must hold one plugin wheel (uv build --wheel -o $bundle/dist), found ${#plugin_wheels[@]}"
    case $(basename "${plugin_wheels[0]}") in
    caovan_vllm_sm75_turbo3-*.whl) ;;
    *) die "'${plugin_wheels[0]}' is not caovan's wheel (caovan_vllm_sm75_turbo3-*.whl)" ;;
    esac
    wheels=("${plugin_wheels[@]}")
    if [ -d "$bundle/wheels" ]; then
        local row_wheels wheel
        row_wheels=("$bundle"/wheels/*.whl)
        [ ${#row_wheels[@]} -gt 0 ] || die "'$bundle/wheels/' holds no *.whl (nox -s \"wheelhouse(ROW)\" -- --without-host-provided)"
        for wheel in "${row_wheels[@]}"; do
            # `nox -s wheelhouse` puts a plugin wheel in the wheelhouse too: the one that runs is dist/'s.
            case $(basename "$wheel") in
            caovan_vllm_sm75_turbo3-*.whl) ;;
            *) wheels+=("$wheel") ;;
            esac
        done
    fi
    shopt -u nullglob
    [ ! -e "$bundle/vllm-py.tgz" ] || die "'$bundle/vllm-py.tgz': vLLM's Python files alone cannot run the tiers (vllm.model_executor loads vllm._C); pack the row's packages with PYTHONPATH=src python3 -m caovan.matrix.site_bundle"
    site_parts=()
    if compgen -G "$bundle/site.tgz.[0-9]*" >/dev/null; then
        local site_sha n i actual
        [ -f "$bundle/site.tgz.sha256" ] || die "'$bundle/' has site.tgz parts but no site.tgz.sha256 (it is in the bundle's part-0/)"
        read -r site_sha _ <"$bundle/site.tgz.sha256" || true
        [[ ${site_sha:-} =~ ^[0-9a-f]{64}$ ]] || die "'$bundle/site.tgz.sha256' does not hold a sha256 digest"
        n=$(compgen -G "$bundle/site.tgz.[0-9]*" | wc -l)
        for ((i = 0; i < n; i++)); do
            [ -f "$bundle/site.tgz.$i" ] || die "'$bundle/' has $n site.tgz parts but not site.tgz.$i: copy every part folder's file there"
            site_parts+=("$bundle/site.tgz.$i")
        done
        actual=$(cat "${site_parts[@]}" | sha256sum | cut -d' ' -f1)
        [ "$actual" = "$site_sha" ] || die "the $n site.tgz parts in '$bundle/' do not make the archive site.tgz.sha256 names (a part is missing, stale or cut short)"
    fi
    python3 -m pip --version >/dev/null 2>&1 || die "python3 ($(command -v python3)) has no pip, which installs the bundle"
}

bundle_install() {
    site=${CAOVAN_SITE:-/tmp/caovan-site}
    # The archive's digest is kept beside the site it made: a later call with the same parts (a lent host runs one
    # tier or one server per call) keeps that site instead of unpacking it again.
    if [ ${#site_parts[@]} -gt 0 ] && ! cmp -s "$bundle/site.tgz.sha256" "$site.sha256"; then
        # Unpacked beside the site folder and swapped in whole: an interrupted unpack leaves the old one as it was.
        rm -rf "$site.unpacking" "$site.sha256"
        mkdir -p "$site.unpacking"
        cat "${site_parts[@]}" | tar xzf - -C "$site.unpacking"
        rm -rf "$site"
        mv "$site.unpacking" "$site"
        cp "$bundle/site.tgz.sha256" "$site.sha256"
    fi
    mkdir -p "$site"
    # A caovan left in a reused site folder by an earlier run must not stand in for this bundle's wheel.
    rm -rf "$site/caovan"
    python3 -m pip install --quiet --no-index --no-deps --no-compile --upgrade --target "$site" "${wheels[@]}"
    # The plugin that runs is the wheel's, but results record this checkout's source fingerprint: they must be the
    # same source, or a result would vouch for code that did not run.
    diff -rq --exclude=__pycache__ "$site/caovan" src/caovan >/dev/null 2>&1 ||
        die "the bundle's wheel ${plugin_wheels[0]} was built from other source than this checkout's src/caovan;" \
            "rebuild it with uv build --wheel -o $bundle/dist"
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
    # No FlashInfer on such hosts: vLLM's FlashInfer sampler would fail to import.
    export VLLM_USE_FLASHINFER_SAMPLER=${VLLM_USE_FLASHINFER_SAMPLER:-0}
}
