#!/usr/bin/env bash
# Checks that every test binary `cargo test` builds for the workspace ran in LOG (the output of
# `cargo test`): scripts/test.sh runs it after the tests, so that no binary is silently left
# out of a run. Extra cargo arguments select what "built" means (default: the workspace).
#   scripts/test-binaries-ran.sh LOG [CARGO_TEST_ARGS...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
log=$1
shift
[ "$#" -gt 0 ] || set -- --workspace
# One JSON line per built unit: a test binary is a unit built with the test profile whose
# executable is under deps/ (the crates' own programs, which integration tests run, can come
# with the test profile too, at target/<profile>/NAME).
built=$(cargo test "$@" --no-run --message-format=json 2>/dev/null |
    grep '"test":true' | grep -c '"executable":"[^"]*/deps/[^"/]*"' || true)
# Doc-tests run without a binary of their own: not counted.
ran=$(awk -f "$here/test-timing.awk" "$log" | grep -v '^  doc:' | awk '/^binaries: / { print $2 }')
doc=$(grep -c '^ *Doc-tests ' "$log" || true)
ran=$((ran - doc))
if [ "$built" -ne "$ran" ]; then
    echo "test-binaries-ran.sh: cargo builds $built test binaries but $ran ran: see which are missing from the time per test binary" >&2
    exit 1
fi
echo "test-binaries-ran.sh: all $ran test binaries ran"
