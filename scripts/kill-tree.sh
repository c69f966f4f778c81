#!/usr/bin/env bash
# Kills each PID and everything it started, children first (a background build's configure,
# ninja and compilers; cargo's rustc, Miri, the fuzzers): what scripts/test.sh and
# scripts/install-deps.sh leave running when they fail or are interrupted. PIDs already
# gone are skipped.
#   scripts/kill-tree.sh PID...
kill_tree() {
    local child
    for child in $(pgrep -P "$1" 2>/dev/null); do kill_tree "$child"; done
    kill "$1" 2>/dev/null
}
for pid in "$@"; do kill_tree "$pid"; done
exit 0
