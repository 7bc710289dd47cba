#!/usr/bin/env bash
# GPU measurements on a GPU node without internet access, in stages that each stop at their own time limit, so
# that a batch job fits your cluster's per-job limit. Every result is written under $OUT (default outputs/gpu)
# as soon as it is measured: a stage stopped by its limit keeps what it finished.
#
# First, on a machine with internet access (your login node, say), with the project installed:
#   python scripts/offline_wheels.py --out .whl --skip-present present.txt   # present.txt: the node's pip freeze
#   modula-prepare-data shakespeare
# then copy the repository with .whl/ and data/shakespeare/ to the node. There, from the repository root, name
# the stages to run; several may share one job:
#   bash scripts/gpu_session.sh plan             # 15 minutes of GPU time: the step-time tables, most wanted first
#   bash scripts/gpu_session.sh tests            # the full test suite, then the bfloat16 accuracy table
#   bash scripts/gpu_session.sh bench            # scripts/bench.py --gpu
#   bash scripts/gpu_session.sh sweep-normed     # the width sweep, configs/experiment/gpu/gpt_width.yaml
#   bash scripts/gpu_session.sh sweep-unnormed   #   (its run folders are also packed into a tarball)
# `plan` runs scripts/bench.py --gpu one table per process, each under its own limit and into its own file, in
# this order: the eager mode-overhead table (unnormed, normed, dualized, manifold; both variants; GPT widths 768
# and 2048, bfloat16) MODES_SECONDS (120); tokens/s and MFU, eager MFU_SECONDS (75); packed vs separate runs,
# eager PACK_SECONDS (40); torch.compile last COMPILE_SECONDS (90), the model step only unless COMPILE_UPDATE=1
# (compiling the update crashed Inductor on torch 2.11 on an H100). About 6 minutes with the install, so that a
# machine lent for 15 minutes, start-up included, has time to rerun a table: PLAN_TABLES="compile" picks some.
# setup.txt (the machine, the install, each stage's and table's seconds) and the bench files are appended to.
# Each stage's limit, in seconds: TESTS_SECONDS (420, plus 45 for rerunning the failures alone and 60 for the
# accuracy table), BENCH_SECONDS (270), SWEEP_SECONDS (270 per mode). Set them so that the stages of one job,
# plus a minute for setup and tarballs, stay within the job's limit; the defaults fit a 600 s job running
# `tests` alone, or `bench` and one sweep stage. A sweep goes on where it stopped when it runs again with
# outputs/sweeps/gpu_gpt_width in place (untarred from the last tarball if the node does not keep its disk;
# the tarballs leave checkpoints out): finished runs are skipped.
# Extra arguments (a rehearsal on a CPU at toy sizes, say): PYTEST_ARGS (default -n 8), BENCH_ARGS,
# PRECISION_ARGS, SWEEP_OVERRIDES (Hydra overrides after the experiment's).
# Afterwards, on your own machine: untar the sweep tarballs into outputs/sweeps/ and run modula-sweep-report
# on the sweep folder.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/gpu}
PY=${PYTHON:-python3}
[ $# -gt 0 ] || { echo "usage: gpu_session.sh plan|tests|bench|sweep-normed|sweep-unnormed ..." >&2; exit 2; }
declare -A GRID=(
  [normed]="0.03125,0.0625,0.125,0.25,0.5,1.0"                                               # 2^-5 … 2^0
  [unnormed]="0.00048828125,0.0009765625,0.001953125,0.00390625,0.0078125,0.015625,0.03125"  # 2^-11 … 2^-5
)
for stage in "$@"; do
  case "$stage" in plan|tests|bench|sweep-normed|sweep-unnormed) ;;
    *) echo "unknown stage $stage; allowed: plan, tests, bench, sweep-normed, sweep-unnormed" >&2; exit 2 ;;
  esac
done
read -ra PLAN <<< "${PLAN_TABLES:-modes mfu pack compile}"  # words, never globbed
for table in "${PLAN[@]}"; do
  case "$table" in modes|mfu|pack|compile) ;;
    *) echo "unknown PLAN_TABLES entry $table; allowed: modes, mfu, pack, compile" >&2; exit 2 ;;
  esac
done

mkdir -p "$OUT"  # only now: bad input leaves nothing behind
{
  echo "== gpu_session.sh $*, $(date '+%F %T')"  # appended: a rerun keeps the earlier call's lines
  # Resolve against what the machine has; if that fails (an old package there), install the folder as is.
  if ! $PY -m pip install -q --no-index --find-links .whl -e . --no-build-isolation; then
    $PY -m pip install -q --no-index --no-deps .whl/*.whl && $PY -m pip install -q --no-deps --no-build-isolation -e .
  fi
  $PY -m pip check
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  $PY -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
} >> "$OUT/setup.txt" 2>&1

for stage in "$@"; do
  start=$(date +%s)
  case "$stage" in
    plan)
      # one process per table: a table that overruns its limit (or crashes the compiler) costs only itself
      for table in "${PLAN[@]}"; do
        case "$table" in
          modes) limit=${MODES_SECONDS:-120}; flags="--tables modes --gpt-widths 768 2048" ;;
          mfu) limit=${MFU_SECONDS:-75}; flags="--tables throughput --gpt-widths 768 2048 --no-compile" ;;
          pack) limit=${PACK_SECONDS:-40}; flags="--tables pack" ;;
          compile) limit=${COMPILE_SECONDS:-90}
            flags="--tables compile --gpt-widths 768 $([ "${COMPILE_UPDATE:-0}" = 1 ] || echo --no-compile-update)" ;;
        esac
        table_start=$(date +%s)
        echo "== plan $table, $(date '+%F %T')" >> "$OUT/bench_stderr.txt"
        # SIGTERM at the limit, SIGKILL 10 s later: a stuck compiler cannot eat the next table's time
        timeout -k 10 "$limit" $PY scripts/bench.py --gpu $flags ${BENCH_ARGS:-} --out "$OUT/bench_$table.txt" \
          > /dev/null 2>> "$OUT/bench_stderr.txt"
        echo "plan $table: exit $?, $(( $(date +%s) - table_start )) s of $limit" >> "$OUT/setup.txt"
      done
      ;;
    tests)
      # one worker per core; what fails in parallel is rerun alone, so a clash of workers is told apart
      timeout "${TESTS_SECONDS:-420}" $PY -m pytest -q ${PYTEST_ARGS:--n 8} -o cache_dir=/tmp/pytest_cache > "$OUT/pytest.txt" 2>&1
      timeout 45 $PY -m pytest -q --lf --lfnf=none -o cache_dir=/tmp/pytest_cache >> "$OUT/pytest.txt" 2>&1
      timeout 60 $PY docs/results/ortho_precision/ortho_precision.py ${PRECISION_ARGS:-} --out "$OUT/ortho_precision_gpu.csv" > "$OUT/ortho_precision_gpu.txt" 2>&1
      ;;
    bench)
      # compile last: torch 2.11's Inductor failed compiling the update on an H100, which ended the script
      timeout "${BENCH_SECONDS:-270}" $PY scripts/bench.py --gpu --tables modes,ortho,throughput,pack,compile \
        ${BENCH_ARGS:-} --out "$OUT/bench_gpu.txt" > /dev/null 2>> "$OUT/bench_stderr.txt"
      ;;
    sweep-*)
      mode=${stage#sweep-}
      # SIGTERM at the stage's limit: finished widths stay finished, the one in flight checkpoints
      timeout --signal=TERM "${SWEEP_SECONDS:-270}" $PY -m modula_cli.train experiment=gpu/gpt_width optim.mode="$mode" \
        optim.lr="${GRID[$mode]}" ${SWEEP_OVERRIDES:-} > "$OUT/sweep_$mode.txt" 2>&1
      tar czf "$OUT/sweep_$mode.tar.gz" --exclude='*.pt' -C outputs/sweeps gpu_gpt_width
      ;;
  esac
  echo "$stage: $(( $(date +%s) - start )) s" >> "$OUT/setup.txt"
done
ls -la "$OUT"
