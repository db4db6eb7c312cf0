#!/usr/bin/env bash
# The training pipeline on several hosts: every host runs the SAME command; jax.distributed joins
# them. SFT feeds each host's share of every global batch; in RL each host samples, runs the tools
# of and judges its own groups (a group never spans hosts; the sampler's draws, the tournament's
# pairings and the judge's noise follow the global group index, so K hosts produce what one
# process running every group does); every update is one global SPMD step over all hosts' rows;
# every host evaluates the same test tasks; process 0 writes metrics, evaluations and the RESULT
# line; every host takes part in checkpoint saves (the workdir must be shared storage on a pod).
#
# On a TPU pod slice or a SLURM/GPU cluster (JAX detects the coordinator and the process ids):
#   python -m arenarl_jax.main --config=configs/quickstart.py --workdir=$WORKDIR \
#     --config.distributed.initialize=True
#
# This script runs the same thing as K local CPU processes (a stand-in for K hosts) with D fake
# devices each, on the quickstart's smoke settings unless CONFIG says otherwise:
#   bash experiments/multihost/launch.sh [K=2] [WORKDIR=runs/multihost] [extra --config.* flags]
#   CONFIG=configs/quickstart.py D=1 bash experiments/multihost/launch.sh 2 runs/multihost_full
set -euo pipefail
K=${1:-2}
WORKDIR=${2:-runs/multihost}
shift $(( $# < 2 ? $# : 2 ))
CONFIG=${CONFIG:-configs/quickstart.py:smoke}
D=${D:-1}
PORT=${PORT:-12355}
cd "$(dirname "$0")/../.."
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
for ((i = 0; i < K; i++)); do
  XLA_FLAGS=--xla_force_host_platform_device_count=$D .venv/bin/python -m arenarl_jax.main \
    --config="$CONFIG" --workdir="$WORKDIR" \
    --config.distributed.initialize=True --config.distributed.coordinator_address=127.0.0.1:$PORT \
    --config.distributed.num_processes="$K" --config.distributed.process_id="$i" \
    --config.distributed.cpu_collectives=gloo "$@" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
pids=()
echo "metrics: $WORKDIR/metrics.jsonl, evaluations: $WORKDIR/eval (process 0); checkpoints: $WORKDIR/checkpoints"
exit $status
