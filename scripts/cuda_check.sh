#!/bin/bash
# The CUDA checks on a GPU machine, from what scripts/cuda_pack.sh put in
# .gpu/: test_cuda (every CUDA kernel against the double reference, the
# ConvNet golden, determinism, no allocation in a step, the plan against
# cudaMemGetInfo), then the ConvNet's training step timed by step_bench
# --device cuda beside PyTorch's (bench/torch_step.py --device cuda, fp32
# with TF32 off as memfit computes, and with TF32 as PyTorch's convolutions
# default), each on the same GPU in the same run. Logs and results go to
# $OUT (default /tmp/cuda_check).
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-/tmp/cuda_check}
mkdir -p "$OUT" .gpu/lib
tar -C .gpu/lib -xJf .gpu/libs.tar.xz
# test_cuda runs the command at the path compiled into it (BUILD/memfit).
mkdir -p build && cp .gpu/memfit build/memfit
DATA=$(cat .gpu/test_data_dir)
if [ "$DATA" != "$ROOT/tests" ] && [ ! -e "$DATA" ]; then
  mkdir -p "$(dirname "$(dirname "$DATA")")" && ln -sfn "$ROOT" "$(dirname "$DATA")"
fi
CUDA_DIRS=$(find /opt /usr/local /usr/lib -name 'libcudnn.so.9' -o -name 'libcublas.so.13' -o -name 'libcublasLt.so.13' 2>/dev/null |
  xargs -r -n1 dirname | sort -u | tr '\n' ':')
# For memfit's binaries only (PyTorch keeps its own libraries).
MF_LD="$ROOT/.gpu/lib:$CUDA_DIRS${LD_LIBRARY_PATH:-}"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  echo "memfit's LD_LIBRARY_PATH=$MF_LD"
  python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda, torch.backends.cudnn.version())'
} > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
echo "== test_cuda"
LD_LIBRARY_PATH=$MF_LD timeout 300 .gpu/test_cuda --gtest_output=json:"$OUT/test_cuda.json" > "$OUT/test_cuda.log" 2>&1
echo "test_cuda rc=$?" | tee -a "$OUT/test_cuda.log"
grep -E '^\[  (FAILED|PASSED|  OK) |Failure|plan:|error|skipped' "$OUT/test_cuda.log" | head -60
echo "== ConvNet steps"
for m in convnet resnet18; do for b in 64 256; do
  LD_LIBRARY_PATH=$MF_LD timeout 120 .gpu/step_bench --device cuda --model $m --batch $b --steps 50 --warmup 5 >> "$OUT/bench.jsonl" 2>> "$OUT/bench.err"
  timeout 120 python3 bench/torch_step.py --device cuda --model $m --batch $b --steps 50 --warmup 5 >> "$OUT/bench.jsonl" 2>> "$OUT/bench.err"
  timeout 120 python3 bench/torch_step.py --device cuda --tf32 --model $m --batch $b --steps 50 --warmup 5 >> "$OUT/bench.jsonl" 2>> "$OUT/bench.err"
done; done
python3 - "$OUT/bench.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    who = "memfit" if "torch" not in r else ("pytorch tf32" if r.get("tf32") else "pytorch")
    mem = r.get("arena_bytes") or r.get("max_memory_reserved") or 0
    print(f"{who:13s} b{r['batch']:<4d} median {r['median_step_s']*1e3:8.3f} ms  {r['images_per_s']:10.0f} img/s  "
          f"device memory {mem/2**20:8.1f} MiB  loss {r['loss']:.4f}")
PY
echo "== ResNet-18 b256 on the GPU, kernel by kernel (each timed to its end)"
LD_LIBRARY_PATH=$MF_LD timeout 120 .gpu/step_bench --device cuda --model resnet18 --batch 256 --steps 5 --warmup 2 --profile 2>&1 >/dev/null |
  sed -n '/each node/,$p' | head -40
tail -5 "$OUT/bench.err" 2>/dev/null
