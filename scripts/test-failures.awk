# Reads `cargo test`'s output and prints what each failed test printed (its
# "---- NAME stdout ----" block: the panic message and the test's own lines), the last
# LINES lines of each (default 40), each line cut to 300 characters, at most MAX tests
# (default 8). scripts/test.sh prints it at the end of its summary, where a CI page that
# shows only the log's tail still shows why a test failed (2026-12-02: it showed a failed
# record_switch test's count and nothing else). Nothing at all when no test failed.
#   awk -f scripts/test-failures.awk [-v LINES=40] [-v MAX=8] cargo-test.log
function flush() {
    if (name == "") return
    # Blank lines and Rust's backtrace hint at its end say nothing.
    while (kept > 0 && (body[kept] ~ /^[[:space:]]*$/ || body[kept] ~ /^note: run with `RUST_BACKTRACE=1`/)) kept--
    shown++
    if (shown == 1) print "test.sh: what the failed tests printed (their last lines)"
    if (shown <= max) {
        printf "---- %s: %s\n", binary, name
        from = kept > lines ? kept - lines + 1 : 1
        if (from > 1) printf "  [%d lines above left out]\n", from - 1
        for (i = from; i <= kept; i++) printf "  %s\n", body[i]
    }
    name = ""
    kept = 0
}
BEGIN {
    lines = LINES ? LINES : 40
    max = MAX ? MAX : 8
}
/^---- .* stdout ----$/ {
    flush()
    name = $0
    sub(/^---- /, "", name)
    sub(/ stdout ----$/, "", name)
    next
}
/^ *Running / && match($0, /deps\/[^()]*\)/) {
    flush()
    binary = substr($0, RSTART + 5, RLENGTH - 6)
    sub(/-[0-9a-f]+$/, "", binary)
    next
}
/^(failures:|test result: )/ { flush(); next }
# A backtrace (RUST_BACKTRACE set) would push the message out of the last lines: left out.
name != "" && /^stack backtrace:$/ { tracing = 1; next }
tracing && /^ +([0-9]+: |at )/ { next }
{ tracing = 0 }
name != "" && /^note: Some details are omitted/ { next }
name != "" { body[++kept] = length($0) > 300 ? substr($0, 1, 300) "…" : $0 }
END {
    flush()
    if (shown > max) printf "(%d more failed tests: their output is above in the log)\n", shown - max
}
