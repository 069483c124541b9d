#!/usr/bin/env bash
# Here: stage FAISS's GPU build for the device, in four carries of < 40 MB each (.device/faiss/1..4).
#   bash scripts/device/faiss_gpu/stage.sh
# Carries PyPI's faiss-gpu-cu12 1.9.0.0 (the newest of its builds with sm_90 kernels: 1.12.0 and
# 1.14.1.post1 ship SASS for sm_70/sm_80 only and no PTX, so the H200 cannot run them), split in
# two parts; NumPy 1.26.4 (that build's SWIG module is compiled against NumPy 1.x, and the device
# image has NumPy 2) and SciPy 1.13.1 (bm25s, which the index module imports, needs SciPy, and
# the image's is built for NumPy 2); the CUDA 12 runtime library FAISS links; and libcublas.so.12,
# built here from cublas12_on_13.c, forwarding FAISS's eight cuBLAS calls to the device's cuBLAS 13.
# Device calls, back to back: carry [".device/faiss/N"], `bash scripts/device/faiss_gpu/receive.sh N`
# for N = 1..4; the last one may go on with `&& bash scripts/device/platform_bench.sh faiss`.
set -euo pipefail
cd "$(dirname "$0")/../../.."
grep -qx '/.device/' .git/info/exclude 2>/dev/null || echo '/.device/' >> .git/info/exclude
out=.device/faiss
rm -rf "$out" && mkdir -p "$out/1" "$out/2" "$out/3/lib" "$out/4"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$work" faiss-gpu-cu12==1.9.0.0 numpy==1.26.4 scipy==1.13.1 nvidia-cuda-runtime-cu12==12.9.79 \
  2>&1 | grep -v WARNING || true
wheel=$(basename "$work"/faiss_gpu_cu12-*.whl)
(cd "$work" && sha256sum "$wheel" > "$wheel.sha256" && split -n 2 -d "$wheel" "$wheel.part-")
mv "$work/$wheel.part-00" "$work/$wheel.sha256" "$out/1/"
mv "$work/$wheel.part-01" "$out/2/"
mv "$work"/numpy-*.whl "$out/3/"
mv "$work"/scipy-*.whl "$out/4/"
unzip -q -j "$work"/nvidia_cuda_runtime_cu12-*.whl 'nvidia/cuda_runtime/lib/libcudart.so.12' -d "$out/3/lib"
printf 'libcublas.so.12 { global: cublas*; local: *; };\n' > "$work/cublas.map"
gcc -O2 -shared -fPIC -Wl,-soname,libcublas.so.12 -Wl,--version-script="$work/cublas.map" \
  -o "$out/3/lib/libcublas.so.12" scripts/device/faiss_gpu/cublas12_on_13.c -ldl
du -sh "$out"/*
