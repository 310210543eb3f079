#!/bin/sh
# Install kvprobe's build dependencies (Debian/Ubuntu) when they are missing.
# Idempotent: with everything present it only checks. Needs root (or sudo) to install.
set -eu
need=""
have_header() { printf '#define PCRE2_CODE_UNIT_WIDTH 8\n#include <%s>\n' "$1" | cc -E -x c - >/dev/null 2>&1; }
command -v cc >/dev/null 2>&1 || need="$need build-essential"
command -v make >/dev/null 2>&1 || need="$need make"
have_header pcre2.h || need="$need libpcre2-dev"
have_header utf8proc.h || need="$need libutf8proc-dev"
have_header cjson/cJSON.h || need="$need libcjson-dev"
have_header zlib.h || need="$need zlib1g-dev"
have_header openssl/evp.h || need="$need libssl-dev"
command -v python3 >/dev/null 2>&1 || need="$need python3"
python3 -m pip --version >/dev/null 2>&1 || need="$need python3-pip"
# the Python package's tests run in a venv (Debian splits venv/ensurepip into python3-venv)
python3 -c "import ensurepip, venv" >/dev/null 2>&1 || need="$need python3-venv"
if [ "${KVPROBE_WITH_CLANG:-0}" = 1 ]; then
    command -v clang >/dev/null 2>&1 || need="$need clang"
    # libFuzzer's runtime ships with clang's compiler-rt package on Debian.
    ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 || need="$need libclang-rt-dev"
fi
[ -z "$need" ] && exit 0
echo "kvprobe setup: installing$need"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $need
