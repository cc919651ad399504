#!/usr/bin/env bash
# Runs the data-parallel scenario under mpirun with 1, 2 and 4 ranks (oversubscribed: CI has 2 cores) and
# checks that every run's weights hash is the same for every rank count, that the injected overflow (in the
# last micro-batch, i.e. on one rank) is a skipped step of the run for every N, and that a rank dying mid-run
# fails the job with no summary.json. Usage: mpirun_hashes.sh MPIRUN SAFEAMP SCENARIO
set -euo pipefail
mpirun=$1 tool=$2 scenario=$3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
hashes() {  # label=hash:skipped for every run of data_parallel.json
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["ranks"], " ".join(r["label"].replace(" ","_")+"="+r["weights_hash"]+":"+str(r["skipped_steps"]) for r in d["runs"]))' "$1"
}
for n in 1 2 4; do
  "$mpirun" --oversubscribe -np "$n" "$tool" sim --scenario "$scenario" --out "$work/np$n" >"$work/np$n.log" 2>&1 ||
    { echo "mpirun -np $n failed:"; cat "$work/np$n.log"; exit 1; }
  hashes "$work/np$n/data_parallel.json" | tee "$work/np$n.hashes"
done
for n in 2 4; do
  [[ "$(cut -d' ' -f2- "$work/np1.hashes")" == "$(cut -d' ' -f2- "$work/np$n.hashes")" ]] ||
    { echo "FAIL: weights hashes differ between -np 1 and -np $n"; exit 1; }
  [[ "$(cut -d' ' -f1 "$work/np$n.hashes")" == "$n" ]] || { echo "FAIL: data_parallel.json does not say $n ranks"; exit 1; }
done
# The scenario's overflow candidate skips its two faulted steps plus what the scaler's backoff costs: never 0.
grep -q 'injected_overflow=[0-9a-f]*:[1-9]' "$work/np4.hashes" || { echo "FAIL: no skipped step with 4 ranks"; exit 1; }
# The overflow candidate's injected faults (steps 5 and 17, micro-batch 3) came from the last rank alone (its
# fp16 run also overflows by itself at step 4, at the initial scale 2^16, on whichever ranks it does).
for n in 2 4; do
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); o={e["step"]: e["ranks"] for e in [r for r in d["runs"] if "overflow" in r["label"]][0]["overflow_ranks"]}; last=[int(sys.argv[2]) - 1]; sys.exit(0 if o.get(5) == last and o.get(17) == last else 1)' \
    "$work/np$n/data_parallel.json" "$n" || { echo "FAIL: overflow_ranks with $n ranks is not the last rank at steps 5 and 17"; exit 1; }
done
# Rank 1 of 2 ends abruptly at step 3 of the first run: mpirun fails, and no summary.json is written.
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d["data_parallel"].update(exit_rank=1, exit_step=3); json.dump(d, open(sys.argv[2],"w"))' \
  "$scenario" "$work/dies.json"
if "$mpirun" --oversubscribe -np 2 "$tool" sim --scenario "$work/dies.json" --out "$work/dies" >"$work/dies.log" 2>&1; then
  echo "FAIL: the job succeeded although rank 1 died"; exit 1
fi
grep -q "rank 1 ends abruptly at step 3" "$work/dies.log" || { echo "FAIL: the dying rank did not run"; cat "$work/dies.log"; exit 1; }
[[ ! -e "$work/dies/summary.json" && ! -e "$work/dies/data_parallel.json" ]] ||
  { echo "FAIL: a failed job left a summary"; exit 1; }
echo "PASS: -np 1, 2, 4 give the same weights hashes; a dead rank fails the job with no summary"
