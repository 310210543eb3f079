#!/bin/sh
# Run test binaries, print their output, and total the "ok"/"not ok" lines.
# Ends with the line "N passed, N failed"; exits non-zero on any failure.
passed=0
failed=0
for t in "$@"; do
    echo "== $t"
    start=$(date +%s)
    out=$("$t" 2>&1)
    status=$?
    printf '%s\n' "$out"
    echo "# $t: $(( $(date +%s) - start )) s"
    p=$(printf '%s\n' "$out" | grep -c '^ok ')
    f=$(printf '%s\n' "$out" | grep -c '^not ok ')
    if [ "$status" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "not ok - $t exited with status $status"
        f=1
    fi
    passed=$((passed + p))
    failed=$((failed + f))
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
