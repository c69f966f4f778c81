# Reads `cargo test`'s output and prints one line per test binary, slowest first: its name (the
# file under target/*/deps without the hash), its tests passed and failed, and the seconds the
# binary reported ("finished in"). A binary that printed no result line (it crashed, or was
# killed) is listed as such, so a regression or a lost binary shows in the next CI log.
#   awk -f scripts/test-timing.awk cargo-test.log
# Then "binaries: N" (for scripts/test.sh to compare with the binaries cargo built) and
# "tests: N passed, N failed".
/^ *Running / && match($0, /\(([^()]*\/)?deps\/[^()]*\)/) {
    path = substr($0, RSTART + 1, RLENGTH - 2)
    sub(/.*\//, "", path)
    sub(/-[0-9a-f]+$/, "", path)
    name = path
    order[++n] = name
    result[name] = "no result line (crashed or killed)"
    secs[name] = -1
    next
}
/^ *Doc-tests / {
    name = "doc:" $2
    order[++n] = name
    result[name] = "no result line (crashed or killed)"
    secs[name] = -1
    next
}
/^test result: / && n > 0 {
    passed = failed = 0
    if (match($0, /[0-9]+ passed/)) passed = substr($0, RSTART, RLENGTH - 7)
    if (match($0, /[0-9]+ failed/)) failed = substr($0, RSTART, RLENGTH - 7)
    result[name] = sprintf("%5d passed %3d failed", passed, failed)
    all_passed += passed
    all_failed += failed
    if (match($0, /finished in [0-9.]+s/)) secs[name] = substr($0, RSTART + 12, RLENGTH - 13) + 0
}
END {
    # Slowest first: a plain selection sort, as POSIX awk has no sort.
    for (i = 1; i <= n; i++) idx[i] = i
    for (i = 1; i <= n; i++)
        for (j = i + 1; j <= n; j++)
            if (secs[order[idx[j]]] > secs[order[idx[i]]]) { t = idx[i]; idx[i] = idx[j]; idx[j] = t }
    total = 0
    for (i = 1; i <= n; i++) {
        b = order[idx[i]]
        if (secs[b] >= 0) { shown = sprintf("%8.1f s", secs[b]); total += secs[b] }
        else shown = "       - s"
        printf "  %-34s %s  %s\n", b, shown, result[b]
    }
    printf "  %-34s %8.1f s\n", "all test binaries", total
    printf "binaries: %d\n", n
    printf "tests: %d passed, %d failed\n", all_passed, all_failed
}
