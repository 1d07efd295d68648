#!/usr/bin/env bash
# Fails when git tracks a built binary (an ELF file): binaries are built,
# never committed (.gitignore names where builds write them).
set -euo pipefail
cd "$(dirname "$0")/.."
bad=0
while IFS= read -r -d '' f; do
	[ -f "$f" ] || continue
	if [ "$(head -c 4 "$f" | od -An -c | tr -d ' \n')" = '177ELF' ]; then
		echo "tracked binary: $f (remove it with git rm --cached and rebuild it instead)"
		bad=1
	fi
done < <(git ls-files -z)
exit $bad
