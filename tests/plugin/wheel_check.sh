#!/usr/bin/env bash
# The pytest plugin as a user gets it: build llmsim's wheel, install it with openai and pytest
# into a fresh virtual environment, and run the README's example test
# (tests/plugin/example/test_example.py) there, from a directory outside the checkout.
# Usage: bash tests/plugin/wheel_check.sh   (PYTHON=python3.11 to choose the interpreter,
# DIST=DIR to use the wheel in DIR instead of building one)
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
python="${PYTHON:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export PIP_DISABLE_PIP_VERSION_CHECK=1

dist="${DIST:-}"          # a folder holding an already built wheel (.ci/run passes its own)
if [ -z "$dist" ]; then
  "$python" -m venv "$work/build"
  "$work/build/bin/pip" install -q build
  "$work/build/bin/python" -m build --wheel --outdir "$work/dist" "$repo" >/dev/null
  dist="$work/dist"
fi

"$python" -m venv "$work/venv"
"$work/venv/bin/pip" install -q "$dist"/llmsim-*.whl openai pytest

mkdir "$work/project"
cp "$repo/tests/plugin/example/test_example.py" "$work/project/"
cd "$work/project"
"$work/venv/bin/python" -m pytest -p no:cacheprovider -v test_example.py
