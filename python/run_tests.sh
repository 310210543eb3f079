#!/bin/sh
# The Python package's tests, as TAP lines for tests/run.sh: a venv (build/pyenv) with numpy
# and pytest, the package installed the way users install it (pip install .: the engine built
# from source), then pytest. The install is redone only when a source file changed.
set -u
cd "$(dirname "$0")/.."
V=${KVPROBE_PYENV:-build/pyenv}
log=build/pyenv.log
mkdir -p build
if [ ! -x "$V/bin/python" ] && ! python3 -m venv "$V" > "$log" 2>&1; then
    echo "not ok - python: cannot create a venv in $V (Debian: apt-get install python3-venv)"; exit 1
fi
if ! "$V/bin/python" -c "import numpy, pytest, pandas" 2>/dev/null &&
    ! "$V/bin/pip" install -q --disable-pip-version-check numpy pytest pandas >> "$log" 2>&1; then
    echo "not ok - python: cannot install numpy, pytest and pandas (see $log)"; exit 1
fi
stamp=$V/.kvprobe-installed
if [ ! -f "$stamp" ] || [ -n "$(find src include python setup.py pyproject.toml -newer "$stamp" -type f 2>/dev/null | head -1)" ]; then
    if ! "$V/bin/pip" install -q --disable-pip-version-check . >> "$log" 2>&1; then
        echo "not ok - python: pip install . failed (see $log)"; tail -20 "$log" | sed 's/^/#   /'; exit 1
    fi
    touch "$stamp"
fi
echo "ok - python: pip install . builds and installs kvprobe $("$V/bin/python" -c 'import kvprobe; print(kvprobe.__version__)')"
out=$("$V/bin/python" -m pytest -q -rA -p no:cacheprovider python/tests 2>&1)
status=$?
printf '%s\n' "$out" | sed 's/^/# /'
printf '%s\n' "$out" | sed -n 's/^PASSED \(.*\)/ok - python \1/p; s/^FAILED \(.*\)/not ok - python \1/p; s/^ERROR \(.*\)/not ok - python \1/p'
[ "$status" -eq 0 ] || [ "$status" -eq 5 ]
