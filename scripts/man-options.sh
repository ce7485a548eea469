#!/usr/bin/env bash
# Splices `f2fuse options --troff` (the option tables' own description) into man/f2fuse.8
# between its GENERATED markers, so the manual's option summary cannot drift from the code.
# tests/integration/test_manpage fails when the committed page is not what this would write.
set -euo pipefail
bin=${1:?usage: scripts/man-options.sh F2FUSE_BINARY [MANPAGE]}
page=${2:-man/f2fuse.8}
begin='.\" BEGIN GENERATED OPTIONS'
end='.\" END GENERATED OPTIONS'
grep -qxF "$begin" "$page" && grep -qxF "$end" "$page" || {
    echo "man-options: $page lacks the GENERATED OPTIONS markers" >&2
    exit 1
}
summary=$(mktemp)
trap 'rm -f "$summary" "$summary.page"' EXIT
"$bin" options --troff >"$summary"
# ENVIRON, not -v: awk would read the backslash of the markers as an escape.
BEGIN_MARK=$begin END_MARK=$end SUMMARY=$summary awk '
    $0 == ENVIRON["BEGIN_MARK"] {
        print
        while ((getline line < ENVIRON["SUMMARY"]) > 0) print line
        skip = 1
        next
    }
    $0 == ENVIRON["END_MARK"] { skip = 0 }
    !skip { print }' "$page" >"$summary.page"
cat "$summary.page" >"$page"
