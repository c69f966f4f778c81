#!/usr/bin/env bash
# cache-lock.sh DIR COMMAND...: runs COMMAND holding DIR's install lock (DIR/.install.lock), and
# exits with its status. scripts/install-deps.sh runs under it: two runs at once on one cache
# (two CI jobs on a machine, the demo beside the tests) would otherwise build into the same
# temporary names (QEMU's install tree, the Debian VM's root) and one could rename the other's
# half-made tree into place. The second waits, says so once, then finds the first's fixtures.
# The lock is this shell's: COMMAND and what it starts get no descriptor of it, so a daemon a
# package's install starts cannot keep it past the end.
set -euo pipefail
[ "$#" -ge 2 ] || { echo "usage: $0 DIR COMMAND..." >&2; exit 2; }
dir=$1
shift
mkdir -p "$dir"
exec 9>>"$dir/.install.lock"
if ! flock -n 9; then
    echo "install-deps: another install is filling $dir: waiting for it to end" \
        "(a cache of this run's own: QEMU_UFTRACE_CACHE=DIR)" >&2
    flock 9
fi
status=0
"$@" 9>&- || status=$?
exit "$status"
