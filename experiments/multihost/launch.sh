#!/usr/bin/env bash
# The RL update on several hosts: every host runs the SAME command; jax.distributed joins them,
# each host rolls out its own groups, the update is one global SPMD step, process 0 writes metrics,
# every host takes part in checkpoint saves (workdir must be shared storage on a real pod).
#
# On a TPU pod slice or a SLURM/GPU cluster (JAX detects the coordinator and the process ids):
#   python -m arenarl_jax.main --config=configs/quickstart.py --workdir=$WORKDIR --mode=train \
#     --config.distributed.initialize=True --config.mesh.data=-1 --config.mesh.fsdp=4
#
# This script runs the same thing as K local CPU processes (a stand-in for K hosts):
#   bash experiments/multihost/launch.sh [K=2] [WORKDIR=runs/multihost]
set -euo pipefail
K=${1:-2}
WORKDIR=${2:-runs/multihost}
PORT=${PORT:-12355}
cd "$(dirname "$0")/../.."
pids=()
for ((i = 0; i < K; i++)); do
  XLA_FLAGS=--xla_force_host_platform_device_count=2 .venv/bin/python -m arenarl_jax.main \
    --config=configs/quickstart.py --workdir="$WORKDIR" --mode=train \
    --config.rl.steps=4 --config.rl.fake_prompts=8 --config.rl.minibatches_per_rollout=2 \
    --config.rl.bucket=32 --config.sampling.max_new_tokens=16 --config.checkpoint.every=2 \
    --config.mesh.data=-1 --config.mesh.fsdp=2 \
    --config.distributed.initialize=True --config.distributed.coordinator_address=127.0.0.1:$PORT \
    --config.distributed.num_processes="$K" --config.distributed.process_id="$i" \
    --config.distributed.cpu_collectives=gloo &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
echo "metrics: $WORKDIR/metrics.jsonl (process 0); checkpoints: $WORKDIR/checkpoints"
