#!/usr/bin/env bash
# Runs benchmarks/bench_trainer_gpu.py on a lent GPU machine (the device tool's `run`), whose image has
# torch, transformers, pyarrow and rich but not the few pure-Python packages swarmrl's config and rollout
# modules import. Fetch them once on the development machine, into an ignored folder that travels:
#
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#     -d .whl pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
#     cryptography==50.0.2 cffi==2.1.1 pycparser==3.12 zstandard==0.25.0
#
# then: run(command="bash benchmarks/run_trainer_gpu.sh", carry=[".whl"], timeout_s=600)
set -euo pipefail
cd "$(dirname "$0")/.."
site=/tmp/swarmrl-site
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl
  export PYTHONPATH="$site:$PWD/src"
else
  export PYTHONPATH="$PWD/src"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
PYTHONUNBUFFERED=1 python3 benchmarks/bench_trainer_gpu.py --out "${OUT:-.}/trainer_gpu.json" "$@"
