#!/usr/bin/env bash
# with-cpu.sh FILE COMMAND...: runs COMMAND, writes into FILE the CPU seconds (user + system)
# that COMMAND and every process under it used (each one its parent waited for), and exits
# with COMMAND's status. scripts/test.sh prints it beside each step's wall time: on a 2-core
# machine the suite is CPU-bound, so a step's CPU is what it takes from the steps beside it.
out=$1
shift
"$@"
status=$?
# `times`' second line: this shell's waited-for children, "XmY.YYYs XmY.YYYs" (user, system).
# Into the file first: in a pipe, `times` would run in a subshell, which has no children.
times >"$out"
awk 'function secs(f, p) { sub(/s$/, "", f); split(f, p, "m"); return p[1] * 60 + p[2] }
  NR == 2 { printf "%d\n", secs($1) + secs($2) + 0.5 }' "$out" >"$out.new" && mv "$out.new" "$out"
exit $status
