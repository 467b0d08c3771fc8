#!/usr/bin/env bash
# Check that every C file of the tree is formatted with the committed
# .clang-format (clang-format 14, Debian 12's clang-format package): runs
# `clang-format --dry-run -Werror` on `git ls-files '*.c' '*.h'`.
# Exits 0 when all are, 1 with the list of files that are not (fix them with
# `make format`), 2 when clang-format is missing (scripts/deps.sh installs it).
set -euo pipefail

cd "$(dirname "$0")/.."

cf=
for c in clang-format-14 clang-format; do
  if command -v "$c" >/dev/null 2>&1; then
    cf=$c
    break
  fi
done
if [ -z "$cf" ]; then
  echo "format: clang-format not found (Debian: apt-get install clang-format)" >&2
  exit 2
fi
version=$("$cf" --version | grep -o 'version [0-9]*' | grep -o '[0-9]*$' || true)

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.c' '*.h' | while read -r f; do [ ! -f "$f" ] || echo "$f"; done)
else # an unpacked tarball: the same files, less what a build made
  mapfile -t files < <(find . -path './build*' -prune -o -type f \( -name '*.c' -o -name '*.h' \) \
                         -print | sed 's|^\./||' | sort)
fi

out=$("$cf" --dry-run -Werror "${files[@]}" 2>&1) && exit_code=0 || exit_code=$?
if [ "$exit_code" -eq 0 ]; then
  echo "format: ${#files[@]} files formatted (clang-format $version)"
  exit 0
fi

mapfile -t bad < <(printf '%s\n' "$out" |
                     sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' |
                     sort -u)
if [ ${#bad[@]} -eq 0 ]; then # clang-format failed otherwise: say how
  printf '%s\n' "$out" | head -20 >&2
  echo "format: $cf failed (exit $exit_code)" >&2
  exit 1
fi
echo "format: ${#bad[@]} of ${#files[@]} files are not formatted with .clang-format:" >&2
printf '  %s\n' "${bad[@]}" >&2
[ "$version" = 14 ] ||
  echo "format: note: this is clang-format $version; the tree is formatted with 14" >&2
echo "format: run 'make format' (clang-format -i) and commit the result" >&2
exit 1
