#!/usr/bin/env bash
# The data-parallel settings in a locked reference, through the tool (one process; the settings are the same
# under mpirun, where only the rank count differs): the reference is reduced in fp32 whatever the candidates'
# reduction, so a run whose candidates send bf16 over the wire reuses the lock; a run with other micro-batches
# is refused by name with exit code 2 and the lock kept; report.html has a "Data parallel" section holding
# data_parallel.json's error table. Usage: dp_lock.sh SAFEAMP SCENARIO
set -euo pipefail
tool=$1 scenario=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
edit() {  # the scenario with these data_parallel keys, every verdict accepted (this test is about the lock)
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d["data_parallel"].update(json.loads(sys.argv[2]));
[c.update(expect="any") for c in d["candidates"]]; json.dump(d, open(sys.argv[3],"w"))' "$scenario" "$1" "$2"
}
edit '{}' "$work/fp32.json"
edit '{"reduction": "bf16-wire"}' "$work/wire.json"
edit '{"micro_batches": 2, "fault_micro_batch": 1}' "$work/k2.json"

"$tool" sim --scenario "$work/fp32.json" --out "$work/out" >"$work/1.log" 2>&1 || { cat "$work/1.log"; exit 1; }
id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["reference_id"])' "$work/out/reference/reference.json")
# The report's table holds data_parallel.json's numbers (each formatted as the report does, %.2e).
python3 - "$work/out/data_parallel.json" "$work/out/report.html" <<'PY' || exit 1
import json, sys
d = json.load(open(sys.argv[1])); html = open(sys.argv[2]).read()
at = html.find('<h2 id="data_parallel">Data parallel</h2>')
if at < 0: sys.exit("FAIL: report.html has no Data parallel section")
rows = d["reduction_error_vs_ranks"]["rows"]
missing = [r for r in rows if "<td>%.2e</td>" % r["relative_error"] not in html[at:]]
if missing or len(rows) != 132: sys.exit("FAIL: %d of %d table numbers missing from report.html" % (len(missing), len(rows)))
PY

"$tool" sim --scenario "$work/wire.json" --out "$work/out" >"$work/2.log" 2>&1 || { cat "$work/2.log"; exit 1; }
python3 - "$work/out" "$id" <<'PY' || exit 1
import json, sys
out, id = sys.argv[1], sys.argv[2]
if json.load(open(out + "/reference/reference.json"))["reference_id"] != id: sys.exit("FAIL: the lock was not reused")
runs = json.load(open(out + "/data_parallel.json"))["runs"]
if [r["reduction"] for r in runs] != ["bf16-wire"] * len(runs): sys.exit("FAIL: candidates' reductions %s" % runs)
PY

set +e
"$tool" sim --scenario "$work/k2.json" --out "$work/out" >"$work/3.log" 2>&1
code=$?
set -e
[[ $code == 2 ]] || { echo "FAIL: micro_batches 4 -> 2 exited $code, not 2"; cat "$work/3.log"; exit 1; }
grep -q "data_parallel.micro_batches: reference '4', now '2'" "$work/3.log" ||
  { echo "FAIL: the refusal does not name data_parallel.micro_batches"; cat "$work/3.log"; exit 1; }
echo "PASS: a bf16-wire run reuses the fp32 lock, other micro-batches are refused, the report has the table"
