#!/usr/bin/env bash
# Here: stage FAISS's GPU build for one device call (.device/faiss, about 50 MB with the tree).
#   bash scripts/device/faiss_gpu/stage.sh
# Carries PyPI's faiss-gpu-cu12 wheel, the CUDA 12 runtime library it links, and two small
# libraries built here from cublas12_on_13.c: libcublas.so.12 forwarding FAISS's eight cuBLAS
# calls to the device's cuBLAS 13, and an empty libcublasLt.so.12 (linked, no symbol used).
# The device side: `bash scripts/device/platform_bench.sh faiss`.
set -euo pipefail
cd "$(dirname "$0")/../../.."
grep -qx '/.device/' .git/info/exclude 2>/dev/null || echo '/.device/' >> .git/info/exclude
out=.device/faiss
rm -rf "$out" && mkdir -p "$out/lib"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$work" faiss-gpu-cu12==1.14.1.post1 nvidia-cuda-runtime-cu12==12.9.79 2>&1 | grep -v WARNING || true
mv "$work"/faiss_gpu_cu12-*.whl "$out/"
unzip -q -j "$work"/nvidia_cuda_runtime_cu12-*.whl 'nvidia/cuda_runtime/lib/libcudart.so.12' -d "$out/lib"
here=scripts/device/faiss_gpu
printf 'libcublas.so.12 { global: cublas*; local: *; };\n' > "$work/cublas.map"
gcc -O2 -shared -fPIC -Wl,-soname,libcublas.so.12 -Wl,--version-script="$work/cublas.map" \
  -o "$out/lib/libcublas.so.12" "$here/cublas12_on_13.c" -ldl
printf 'libcublasLt.so.12 { local: *; };\n' > "$work/lt.map"
echo '' > "$work/empty.c"
gcc -shared -fPIC -Wl,-soname,libcublasLt.so.12 -Wl,--version-script="$work/lt.map" \
  -o "$out/lib/libcublasLt.so.12" "$work/empty.c"
du -sh "$out"
echo 'device call: carry [".device/faiss"], command: bash scripts/device/platform_bench.sh faiss'
