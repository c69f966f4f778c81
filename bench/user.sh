#!/usr/bin/env bash
# User mode: real CPU-bound programs under qemu-user, per guest architecture, measured in the
# same run (interleaved, median of RUNS):
#   plain     qemu-<arch> PROGRAM … (QEMU 10.2.2, built by the install script)
#   ours      qemu-uftrace record -- the same command
#   contrib   the same command with QEMU's own uftrace plugin (contrib/plugins, same source;
#             aarch64 and x86_64 only)
# The programs are Debian's source packages, built by scripts/install-deps.sh as dynamic PIEs
# with frame pointers (QEMU's plugin walks them; ours does not need them) for each target
# (x86_64: the host's glibc; the others: -L /usr/<arch>-linux-gnu):
#   bzip2     bzip2 -9 over 3 MB of generated text: few calls (its hot loops are inlined)
#   sqlite    the sqlite3 shell running generated SQL on an in-memory database (inserts,
#             indexes, group by, a join): ~15 M calls per second of plain QEMU
# Prints wall times, both ratios, peak RSS, trace sizes, events, and our plugin's call/return
# counts (every call and return recorded: no unmatched return, no resync, nothing lost); then
# the CPU time of each (user + system, every thread, record's own included) and its ratio;
# the range of each; and the verdict: the median and range of each interleaved pair's ratio,
# of wall and of CPU time, and the ratio of the fastest runs (bench/common.sh's ratio_line).
# Usage: [RUNS=5] [ARCHES="aarch64 x86_64 riscv64"] [CONTRIB=0] [PLUGINS="NAME=X.so ..."]
#        [RECORD_OPTS="-F _int_malloc"] bench/user.sh [bzip2] [sqlite]   (no workload named: both)
# RECORD_OPTS: options every `record` of ours takes (aiming it: -F, -N, -t, -A …).
# PLUGINS: ours is each of these builds, all in the same run, interleaved (each run's order
# rotates), a line each: X a plugin (.so, given to `record --plugin`) or a qemu-uftrace
# binary (its own plugin); to compare builds side by side.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
runs=${RUNS:-5}
. "$root/bench/common.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

bench_recorder
q102="$cache/qemu-10.2.2"
contrib="$q102/plugins/libuftrace.so"

# Text-like data: words drawn by a 32-bit LCG (exact in awk's doubles), a line break now
# and then. bzip2's block sort and Huffman coding make millions of calls over it.
awk -v bytes=3000000 'BEGIN {
    n = split("the of and to in a is that for it as was with be by on not he this are or " \
        "his from at which but have an they you were her she there one all we their its has " \
        "more if will would about into than them only other new some could time these two " \
        "may then do first any my now such like our over man me even most made after also " \
        "did many before must through back years where much your way well down should " \
        "because each just those people how too little state good very make world still " \
        "own see men work long get here between both life being under never day same " \
        "another know while last might us great old year off come since against go came " \
        "right used take three", w, " ")
    s = 12345
    for (len = 0; len < bytes; ) {
        s = (s * 69069 + 1) % 4294967296
        word = w[int(s / 65536) % n + 1]
        sep = (s % 11 == 0) ? "\n" : ((s % 7 == 0) ? ", " : " ")
        printf "%s%s", word, sep
        len += length(word) + length(sep)
    }
}' >"$work/data.txt"

# sqlite's input: a table of 60,000 generated rows, two indexes, and queries over them.
cat >"$work/work.sql" <<'SQL'
CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, name TEXT);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 60000)
INSERT INTO t SELECT x, (x * 2654435761) % 1000003, printf('name-%d', (x * 40503) % 7919) FROM c;
CREATE INDEX t_k ON t(k);
CREATE INDEX t_name ON t(name);
SELECT count(*), sum(k) FROM t WHERE k BETWEEN 1000 AND 500000;
SELECT name, count(*), max(k) FROM t GROUP BY name ORDER BY 2 DESC, 1 LIMIT 5;
SELECT count(*) FROM t a JOIN t b ON a.name = b.name WHERE a.id < 6000;
SELECT substr(group_concat(name, ','), 1, 40) FROM (SELECT name FROM t ORDER BY k LIMIT 3000);
SQL

# The qemu-user command of WORKLOAD for ARCH, into `argv`.
user_argv() {
    local arch=$1 workload=$2 prog
    case "$workload" in
        bzip2) prog=("$cache/bzip2/$arch/bzip2" -9 -c "$work/data.txt") ;;
        sqlite) prog=("$cache/sqlite3/$arch/sqlite3" :memory: ".read $work/work.sql") ;;
        *) echo "bench/user.sh: unknown workload $workload (bzip2, sqlite)" >&2; exit 2 ;;
    esac
    case "$arch" in
        x86_64) argv=("$q102/bin/qemu-x86_64" "${prog[@]}") ;;
        aarch64 | riscv64) argv=("$q102/bin/qemu-$arch" -L "/usr/$arch-linux-gnu" "${prog[@]}") ;;
        *) echo "bench/user.sh: unknown architecture $arch (aarch64, x86_64, riscv64)" >&2; exit 2 ;;
    esac
}

# One timed run in DIR (QEMU's plugin writes ./uftrace.data): prints "seconds max_rss_kb
# cpu_seconds" (user + system, all threads: the figure a shared machine disturbs least).
timed_in() {
    local dir=$1
    shift
    warm_memory
    (cd "$dir" && timed_into "%e %M %U %S" "$work/time" "$@")
    awk '{ printf "%s %s %.2f\n", $1, $2, $3 + $4 }' "$work/time"
}

# "min-max" of the first column of a file of timings.
spread() { cut -d' ' -f1 "$1" | sort -n | sed -n '1p;$p' | paste -sd-; }

stat_of() { sed -n "s/^$1=//p" "$work/ours/trace/plugin.stats" 2>/dev/null | head -n1; }

# The builds of ours, NAME=PLUGIN ("ours=" : the one built into qemu-uftrace).
variants=(ours=)
if [ -n "${PLUGINS:-}" ]; then read -r -a variants <<<"$PLUGINS"; fi
# The `record` command of build NAME, into the array `popt`.
plugin_opt() {
    local v x
    popt=("$qu" record)
    for v in "${variants[@]}"; do
        x=${v#*=}
        [ "${v%%=*}" = "$1" ] && [ -n "$x" ] || continue
        case "$x" in
            *.so) popt=("$qu" record --plugin "$x") ;;
            *) popt=("$x" record) ;;
        esac
    done
}

# Keeps build NAME's trace figures (its last run's) before the trace goes.
stats_of() {
    du -sb "$work/ours/trace" | cut -f1 >"$work/$1.bytes"
    stat_of events >"$work/$1.events"
    grep -E '^(calls|returns|unmatched_returns|resyncs|lost_records|lost_marks)=' "$work/ours/trace/plugin.stats" |
        tr '\n' ' ' >"$work/$1.stats"
}

# Prints build NAME's lines (measure's locals: arch, workload, with_contrib).
report() {
    local n=$1 p o pm om c cm bytes events label=$arch
    [ "$n" = ours ] || label="$arch/$n"
    p=$(cut -d' ' -f1 "$work/plain.t" | median)
    o=$(cut -d' ' -f1 "$work/$n.t" | median)
    pm=$(cut -d' ' -f2 "$work/plain.t" | median)
    om=$(cut -d' ' -f2 "$work/$n.t" | median)
    c=0 cm=0
    if [ "$with_contrib" = 1 ]; then
        c=$(cut -d' ' -f1 "$work/contrib.t" | median)
        cm=$(cut -d' ' -f2 "$work/contrib.t" | median)
    fi
    bytes=$(cat "$work/$n.bytes")
    events=$(cat "$work/$n.events")
    awk -v a="$label" -v w="$workload" -v p="$p" -v o="$o" -v c="$c" -v pm="$pm" -v om="$om" -v cm="$cm" \
        -v b="$bytes" -v e="${events:-0}" 'BEGIN {
        cs = c > 0 ? sprintf("%8.2f", c) : sprintf("%8s", "n/a")
        cr = c > 0 ? sprintf("%6.2fx", c / p) : sprintf("%7s", "n/a")
        cmb = c > 0 ? sprintf("%8.0f", cm / 1024) : sprintf("%8s", "n/a")
        printf "%-8s %-8s %8.2f %8.2f %s %6.2fx %s %8.0f %8.0f %s %9.0f %11d\n",
            a, w, p, o, cs, o / p, cr, pm / 1024, om / 1024, cmb, b / 1048576, e }'
    sed 's/^/                  /' "$work/$n.stats" | tr -d '\n'
    if [ "$with_contrib" = 1 ]; then
        printf 'contrib trace %s MB' "$(du -sm "$work/contrib/uftrace.data" | cut -f1)"
    fi
    echo
    cpu() { cut -d' ' -f3 "$work/$1.t" | median; }
    awk -v p="$(cpu plain)" -v o="$(cpu "$n")" -v c="$( [ "$with_contrib" = 1 ] && cpu contrib || echo 0)" 'BEGIN {
        printf "                  cpu: plain %.2f s, ours %.2f s (%.2fx)", p, o, o / p
        if (c > 0) printf ", contrib %.2f s (%.2fx)", c, c / p
        printf "\n" }'
    printf '                  range: plain %s s, ours %s s' "$(spread "$work/plain.t")" "$(spread "$work/$n.t")"
    [ "$with_contrib" = 0 ] || printf ', contrib %s s' "$(spread "$work/contrib.t")"
    echo
    # The verdict: each pair's ratio, median and range (steadier than the medians' ratio).
    printf '                  pairs: ours %s' "$(ratio_line "$work/plain.t" "$work/$n.t")"
    [ "$with_contrib" = 0 ] || printf '; contrib %s' "$(ratio_line "$work/plain.t" "$work/contrib.t")"
    echo
}

# Runs WORKLOAD on ARCH plain, with our plugin and with QEMU's, and prints their line.
measure() {
    local arch=$1 workload=$2 with_contrib=1 i v
    user_argv "$arch" "$workload"
    [ "$arch" != riscv64 ] || with_contrib=0
    # CONTRIB=0: ours against plain only (QEMU's plugin runs 10-19x longer).
    [ "${CONTRIB:-1}" = 1 ] || with_contrib=0
    mkdir -p "$work/plain" "$work/ours" "$work/contrib"
    : >"$work/plain.t"; : >"$work/contrib.t"
    local names=() n k order popt ropts
    for v in "${variants[@]}"; do names+=("${v%%=*}"); : >"$work/${v%%=*}.t"; done
    for i in $(seq "$runs"); do
        # Plain and each build of ours take turns at going first (a cost that falls on
        # whichever runs second, the first one's page cache or freed memory, falls on all).
        order=(plain "${names[@]}")
        k=$(( (i - 1) % ${#order[@]} ))
        order=("${order[@]:k}" "${order[@]:0:k}")
        for n in "${order[@]}"; do
            if [ "$n" = plain ]; then
                timed_in "$work/plain" "${argv[@]}" >>"$work/plain.t"
            else
                rm -rf "$work/ours/trace" "$work/ours/trace.old"
                plugin_opt "$n"
                read -r -a ropts <<<"${RECORD_OPTS:-}"
                timed_in "$work/ours" "${popt[@]}" "${ropts[@]}" -o "$work/ours/trace" -- "${argv[@]}" >>"$work/$n.t"
                stats_of "$n"
            fi
        done
        if [ "$with_contrib" = 1 ]; then
            timed_in "$work/contrib" "${argv[0]}" -plugin "$contrib" "${argv[@]:1}" >>"$work/contrib.t"
        fi
        # A trace left in the page cache would slow the next run (see run.sh).
        rm -rf "$work/ours/trace" "$work/ours/trace.old"
        if [ "$i" -lt "$runs" ]; then rm -rf "$work/contrib/uftrace.data"; fi
    done
    for n in "${names[@]}"; do report "$n"; done
    rm -rf "$work/plain" "$work/ours" "$work/contrib"
}

printf '%-8s %-8s %8s %8s %8s %7s %7s %8s %8s %8s %9s %11s\n' arch workload plain_s ours_s \
    contrib_s ours contrib plain_MB ours_MB contr_MB trace_MB events
workloads=("$@")
[ "${#workloads[@]}" -gt 0 ] || workloads=(bzip2 sqlite)
for arch in ${ARCHES:-aarch64 x86_64 riscv64}; do
    for workload in "${workloads[@]}"; do measure "$arch" "$workload"; done
done
