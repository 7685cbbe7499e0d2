#!/usr/bin/env bash
# The self-check on a GPU machine for each GPU preset, plus the CUDA-marked tests: one table and one JSON per
# preset under OUT (default bench/home-gpu/out). Run from the checkout's root:
#   bash bench/home-gpu/gpu_selfcheck.sh [PRESET[:--set k=v] ...]
# With no arguments: tiny-cpu, the three LoRA presets, qwen3-1.7b-lora in fp16 (a card without bf16), and
# the full-training qwen3-1.7b-math-gepo.
set -uo pipefail
out=${OUT:-bench/home-gpu/out}
mkdir -p "$out"
cells=("$@")
[ ${#cells[@]} -gt 0 ] || cells=(tiny-cpu qwen3-0.6b-lora qwen3-1.7b-lora qwen3-4b-lora
                                 "qwen3-1.7b-lora:model.dtype=float16" qwen3-1.7b-math-gepo)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
timeout 300 python3 -m pytest -q -m cuda -p no:cacheprovider tests/test_cuda.py 2>&1 | tail -5 | tee "$out/cuda_tests.txt"
for cell in "${cells[@]}"; do
    preset=${cell%%:*}; name=$preset; sets=()
    if [ "$cell" != "$preset" ]; then sets=(--set "${cell#*:}"); name="$preset-${cell#*:}"; name=${name//[^A-Za-z0-9._-]/_}; fi
    echo "== $cell"
    timeout 240 python3 -m swarmnode hardware --measure --device cuda --config "$preset" "${sets[@]}" --json \
        > "$out/$name.json" 2> "$out/$name.err" || echo "exit $? (see $name.err)"
    python3 -c "import json,sys; from swarmnode.node.selfcheck import format_selfcheck; print(format_selfcheck(json.load(open(sys.argv[1]))))" "$out/$name.json" | tee -a "$out/tables.txt"
done
