#!/usr/bin/env bash
# test-failures.sh LOG — from the output of `go test -v` in LOG, each failed test with the last
# lines it logged (a failure's own message is among them: testify's whole, other lines cut short),
# and any panic (a test binary's timeout names the tests it was running). `make test` prints this
# last, so that the end of its output, which is what a CI page keeps, says which test failed and why.
set -euo pipefail
log=${1:?usage: test-failures.sh LOG}
awk -v keep=6 -v width=400 '
function top(name) { sub(/\/.*/, "", name); return name }
function cut(line) { return length(line) > width ? substr(line, 1, width) " ..." : line }
function add(line) { lines[cur, e] = lines[cur, e] "\n" cut(line) }
/^=== (RUN|CONT|NAME|PAUSE) / { cur = top($3); if ($2 == "RUN" && cur == $3) n[cur] = 0; next }
# a logged line opens an entry; the lines indented deeper go on with it
/^    [^ ]+\.go:[0-9]+: / && cur != "" { e = n[cur]++ % keep; lines[cur, e] = cut($0); more = 2; trace = 0; next }
/^        / && cur != "" && n[cur] > 0 {
	if ($0 ~ /^ *\tError Trace:/) { more = 1000; trace = 1; next }   # testify: all but its stack
	if (trace && $0 ~ /^ *\t(Error|Messages):/) trace = 0
	if (trace || $0 ~ /^ *\tTest:/) next
	if (more-- > 0 && $0 !~ /^ *$/) add($0)
	next
}
/^ +--- FAIL: / { sub_fail[cur] = sub_fail[cur] "\n" $0; next }
/^--- FAIL: / {
	name = $3; found++
	print $0 sub_fail[name]
	for (i = (n[name] > keep ? n[name] - keep : 0); i < n[name]; i++) print lines[name, i % keep]
	next
}
/^panic: / { found++; panicking = 12 }
panicking > 0 { print cut($0); panicking--; next }
END { if (!found) print "no failed test or panic in " FILENAME "; its last lines tell why it failed" }
' "$log"
