#!/bin/sh
# Packs what the CUDA checks need on a GPU machine that has the CUDA
# libraries but none of memfit's build dependencies (the lent GPU machines:
# ../shared/gpu.md): test_cuda and step_bench from BUILD (default build), and
# every shared library they load except the C and C++ runtimes, the GPU
# driver and the CUDA libraries themselves (cuBLAS, cuDNN: found there; a
# newer libstdc++ serves an older build), into .gpu/
# (ignored by git: add "/.gpu/" to .git/info/exclude). scripts/cuda_check.sh
# runs them there.
set -eu
cd "$(dirname "$0")/.."
BUILD=${1:-build}
rm -rf .gpu && mkdir -p .gpu/stage
cp "$BUILD/tests/test_cuda" "$BUILD/bench/step_bench" "$BUILD/memfit" .gpu/
strip .gpu/test_cuda .gpu/step_bench .gpu/memfit
ldd .gpu/test_cuda .gpu/step_bench .gpu/memfit | awk '/=> \// {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libstdc\+\+|libgcc_s|libcuda|libcublas|libcublasLt|libcudnn[^/]*)\.so' |
  while read -r lib; do cp -L "$lib" .gpu/stage/; done
tar -C .gpu/stage -cJf .gpu/libs.tar.xz .
rm -rf .gpu/stage
# The tests find their fixtures at the source path compiled into them.
grep -ao '/[^"]*/tests' "$BUILD/CMakeFiles/../tests/CMakeFiles/test_cuda.dir/flags.make" | head -1 > .gpu/test_data_dir
du -sh .gpu
