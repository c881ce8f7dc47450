#!/usr/bin/env bash
# ctest entry: installs python/ with pip into a fresh virtual environment (as the README says) and
# runs its pytest suite from outside the source tree, so the installed package must find the
# library by itself. Exit 77 (ctest: skipped) when no Python with pytest and venv is present.
# Args: SOURCE_DIR LIBRARY
set -euo pipefail
src="$1"
# The package finds <source>/build by itself; another build directory is named explicitly.
case "$2" in "$src"/build/*) ;; *) export NSAJIT_LIBRARY="$2" ;; esac
python=""
for candidate in "${NSAJIT_PYTHON:-}" python3 /usr/bin/python3; do
  [ -n "$candidate" ] || continue
  if "$candidate" -c "import pytest, venv" >/dev/null 2>&1; then python="$candidate"; break; fi
done
if [ -z "$python" ]; then
  echo "skipped: no python3 with pytest (apt-get install python3-pytest python3-venv)"
  exit 77
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$python" -m venv --system-site-packages "$work/venv"
# --no-build-isolation: setuptools comes from the system, so no network is needed.
"$work/venv/bin/python" -m pip install -q --no-build-isolation --no-deps "$src/python"
cd "$work"
set +e
"$work/venv/bin/python" -m pytest -q -rs -p no:cacheprovider "$src/python/tests"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then echo "pytest collected no tests"; exit 1; fi
exit "$rc"
