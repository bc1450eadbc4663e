#!/usr/bin/env bash
# The LangGraph peer of `mesh-bench chain` (langgraph_chain.py): makes its own virtualenv
# with langgraph and langgraph-checkpoint-sqlite from PyPI on first use, then runs the
# 10-step chain with the SQLite checkpointer. Arguments go to the script (--runs N,
# --json FILE). Not part of CI: it needs PyPI.
#
#   workflow-node/src/bin/mesh_bench/peers/langgraph_chain.sh --json /tmp/langgraph.json
#
# MESH_BENCH_VENV picks the virtualenv's directory (default: ~/.cache/mesh-bench/langgraph).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${MESH_BENCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/mesh-bench/langgraph}"
python="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
    echo "making a virtualenv in $venv (langgraph, langgraph-checkpoint-sqlite)" >&2
    "$python" -m venv "$venv"
    "$venv/bin/pip" install --quiet --upgrade pip
    "$venv/bin/pip" install --quiet langgraph langgraph-checkpoint-sqlite
fi
exec "$venv/bin/python" "$here/langgraph_chain.py" "$@"
