# Reads the log of the external commands the tests waited for (tests/src/passes.rs: a line
# "SECONDS BINARY COMMAND…" each) and prints, per test binary, the seconds spent in
# `record` and in uftrace's passes (slowest binary first), then the slowest commands, so a
# slower suite's next CI log shows which recording or which pass grew.
#   awk -f scripts/test-passes.awk passes.log
{
    secs = $1 + 0
    bin = $2
    cmd = $0
    sub(/^[^ ]+ [^ ]+ /, "", cmd)
    # `qemu-uftrace record …` (or a bare `record …`) is a recording; uftrace itself is any
    # program named uftrace (the system's, or a cached version's path).
    if ($3 == "record" || ($3 ~ /(^|\/)qemu-uftrace$/ && $4 == "record")) kind = "record"
    else if ($3 ~ /(^|\/)uftrace$/) kind = "uftrace"
    else kind = "other"
    if (!(bin in seen)) { seen[bin] = 1; bins[++nb] = bin }
    by[bin, kind] += secs
    count[bin, kind]++
    all[bin] += secs
    total[kind] += secs
    n++
    line_secs[n] = secs
    line_text[n] = sprintf("%-28s %s", bin, cmd)
}
END {
    if (n == 0) exit
    for (i = 1; i <= nb; i++) idx[i] = i
    for (i = 1; i <= nb; i++)
        for (j = i + 1; j <= nb; j++)
            if (all[bins[idx[j]]] > all[bins[idx[i]]]) { t = idx[i]; idx[i] = idx[j]; idx[j] = t }
    printf "  %-34s %16s %16s %12s\n", "binary", "record (runs)", "uftrace (passes)", "other"
    for (i = 1; i <= nb; i++) {
        b = bins[idx[i]]
        printf "  %-34s %8.1f s %5s %8.1f s %5s %10.1f s\n", b, by[b, "record"], "(" count[b, "record"] + 0 ")",
            by[b, "uftrace"], "(" count[b, "uftrace"] + 0 ")", by[b, "other"]
    }
    printf "  %-34s %8.1f s       %8.1f s       %10.1f s\n", "all", total["record"], total["uftrace"], total["other"]
    # The slowest commands: a selection of the top 15.
    top = n < 15 ? n : 15
    for (i = 1; i <= n; i++) order[i] = i
    print "test.sh: the slowest commands the tests waited for"
    for (i = 1; i <= top; i++) {
        for (j = i + 1; j <= n; j++)
            if (line_secs[order[j]] > line_secs[order[i]]) { t = order[i]; order[i] = order[j]; order[j] = t }
        printf "  %7.1f s  %s\n", line_secs[order[i]], substr(line_text[order[i]], 1, 160)
    }
}
