#!/usr/bin/env bash
# schemathesis against a live llmsim started as the README says (`llmsim serve --profile instant`):
# every operation of our OpenAPI documents (openapi/openapi.yaml on /v1 and /openai/v1,
# openapi/anthropic.yaml on /anthropic/v1 and /v1, openapi/gemini.yaml on /v1beta (its routes under /v1: tests/providers/test_gemini_wire.py), then
# openapi/admin.yaml on /llmsim), all checks, zero failures allowed. Prints how many test cases
# schemathesis generated. Run from anywhere, after `pip install -e .`:
#
#     tests/schemathesis_live.sh            # MAX_EXAMPLES=50 SEED=1 by default
#     SERVER=plain tests/schemathesis_live.sh   # `llmsim serve --server plain` (default: tuned):
#                                               # OpenAI's /v1 and admin only (EVERY_DOCUMENT=1: all)
#
# The admin document runs last: its POST /llmsim/faults schedules faults that would fail the
# API operations' checks if they ran afterwards on the same server. tests/schemathesis_hooks.py
# makes generated valid bodies obey the few rules between fields a schema cannot state.
# Every phase runs, the stateful one too: it follows the document's `links` (create a response
# -> retrieve / input_items / cancel / delete it; create a conversation -> its items ...) and
# prints how many scenarios (sequences of calls) it ran.
# One schemathesis worker: CPython 3.11 can fail compiling in concurrent threads.
set -euo pipefail
cd "$(dirname "$0")/.."
MAX_EXAMPLES=${MAX_EXAMPLES:-50}
SEED=${SEED:-1}
SERVER=${SERVER:-tuned}
PORT=${PORT:-$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
WORK=$(mktemp -d)
llmsim serve --profile instant --server "$SERVER" --port "$PORT" --log-level warning >"$WORK/server.log" 2>&1 &
PID=$!
trap 'kill "$PID" 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
  kill -0 "$PID" 2>/dev/null || { cat "$WORK/server.log"; exit 1; }
  sleep 0.2
done

total=0
run() {  # run DOCUMENT BASE_PATH [schemathesis options, e.g. -H 'header: value']
  local out="$WORK/run.txt" doc="$1" base="$2"
  shift 2
  echo "== schemathesis: $doc at $base $* (--server $SERVER)"
  if ! (cd "$WORK" && SCHEMATHESIS_HOOKS="$OLDPWD/tests/schemathesis_hooks.py" schemathesis --no-color run "$OLDPWD/$doc" --url "http://127.0.0.1:$PORT$base" --checks all \
          --max-examples "$MAX_EXAMPLES" --seed "$SEED" --workers 1 "$@") >"$out" 2>&1; then
    cat "$out"; grep -B2 -A40 Traceback "$WORK/server.log" | tail -60
    echo "schemathesis found failures in $doc at $base"; exit 1
  fi
  grep -E "generated|passed|Selected|Tested|Scenarios|API Links" "$out" | sed 's/^/   /'
  total=$((total + $(grep -oE '[0-9]+ generated' "$out" | grep -oE '[0-9]+' | head -1)))
}
run openapi/openapi.yaml /v1
# The rest run on the tuned server only: the other mount of the same document
# (tests/api/test_base_paths.py shows both mounts answer alike), and the other providers'
# documents, which both servers serve through connexion, the same code (no fast lane).
if [ "$SERVER" = tuned ] || [ -n "${EVERY_DOCUMENT:-}" ]; then
  run openapi/openapi.yaml /openai/v1
  run openapi/anthropic.yaml /anthropic/v1
  run openapi/anthropic.yaml /v1 -H "anthropic-version: 2023-06-01"     # the SDK's header claims /v1
  run openapi/gemini.yaml /v1beta
fi
run openapi/admin.yaml /llmsim
if grep -q "Traceback" "$WORK/server.log"; then
  cat "$WORK/server.log"; echo "the server logged a traceback"; exit 1
fi
echo "schemathesis (--server $SERVER): $total test cases generated, 0 failures"
