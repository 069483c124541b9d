#!/usr/bin/env bash
# On the device: keep the FAISS GPU carry N (of 4, staged by stage.sh) in /root/stage/faiss, where
# `platform_bench.sh faiss` finds it (a carried path does not outlive the next call's carry).
set -euo pipefail
cd "$(dirname "$0")/../../.."
dest=/root/stage/faiss
mkdir -p "$dest"
cp -r .device/faiss/"${1:?carry number}"/. "$dest/"
ls -la "$dest"
