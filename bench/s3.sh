#!/usr/bin/env bash
# `runws seal --to s3://…` against what a user would type to put the same
# tree in the same S3-compatible store (moto's server, as the tests use it,
# started here with ci/s3.sh unless RUNWS_TEST_S3_ENDPOINT names one):
#
#   tar --zstd -cf - TREE | boto3 upload_fileobj   (multipart, 8 MiB parts, threads)
#   tar --zstd -cf - TREE | aws s3 cp - s3://…     (when the AWS CLI is installed)
#   runws seal --to s3://…  (packs, scans every byte, hashes, stages the
#                            archive once on disk, uploads it create-only
#                            with its .sha256 and receipt)
#
#   bench/s3.sh [SIZE_MB]        (default 200: bench/gen_tree.py's tree)
#
# All commands of one repeat run side by side in one hyperfine invocation,
# each object deleted before each run; REPEATS (default 3) invocations,
# RUNS (default 5) runs each. Prints the ratios against the boto3 pipe and
# their spread. The root is on disk (under bench/.work.*).
# Needs: hyperfine, python3, zstd, GNU tar; moto via ci/s3.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=${1:-200}
REPEATS=${REPEATS:-3}
RUNS=${RUNS:-5}
RESULTS=$PWD/bench/results
mkdir -p "$RESULTS"
WORK=$(mktemp -d "$PWD/bench/.work.XXXXXX")
started=
cleanup() {
  rm -rf "$WORK"
  [ -n "$started" ] && ci/s3.sh stop >/dev/null 2>&1 || true
}
trap cleanup EXIT

. bench/lib.sh
BIN=$(built --bin runws)

if [ -z "${RUNWS_TEST_S3_ENDPOINT:-}" ]; then
  eval "$(ci/s3.sh start)"
  started=1
fi
PY=${RUNWS_TEST_S3_PYTHON:-python3}
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench-not-secret AWS_REGION=us-east-1
export AWS_ENDPOINT_URL=$RUNWS_TEST_S3_ENDPOINT
BUCKET=runws-bench-$$

echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "server: moto $("$PY" -c 'import moto; print(moto.__version__)') at $AWS_ENDPOINT_URL"

cat >"$WORK/s3.py" <<'PY'
import sys, boto3
s3 = boto3.client("s3")
op, bucket = sys.argv[1], sys.argv[2]
if op == "mb":
    s3.create_bucket(Bucket=bucket)
elif op == "up":
    s3.upload_fileobj(sys.stdin.buffer, bucket, sys.argv[3])
elif op == "rm":
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=sys.argv[3]):
        for o in page.get("Contents", []):
            s3.delete_object(Bucket=bucket, Key=o["Key"])
elif op == "size":
    print(s3.head_object(Bucket=bucket, Key=sys.argv[3])["ContentLength"])
PY
"$PY" "$WORK/s3.py" mb "$BUCKET"

r=$WORK/root
"$BIN" run --root "$r" --run-id bench-s3 --ports 0 -- true
run=$r/runs/bench-s3
python3 bench/gen_tree.py "$run/work/tree" "$SIZE" | sed 's/^/tree: /'
list="manifest.json inputs outputs work logs"
tree_bytes=$(cd "$run" && du -sb --apparent-size $(for n in $list; do [ -e "$n" ] && echo "$n"; done) | awk '{s += $1} END {print s}')
echo "tree: $tree_bytes bytes packed"
cat $(find "$run" -type f) >/dev/null

boto="sh -c 'cd $run && tar --zstd -cf - $list | $PY $WORK/s3.py up $BUCKET b/t.tar.zst'"
seal="$BIN seal --root $r bench-s3 --to s3://$BUCKET/s --max-bytes 1GiB --max-files 200000"
cmds=(--prepare "$PY $WORK/s3.py rm $BUCKET b/" "$boto" --prepare "$PY $WORK/s3.py rm $BUCKET s/" "$seal")
names='["tar --zstd | boto3", "runws seal --to s3://"'
if command -v aws >/dev/null 2>&1; then
  cli="sh -c 'cd $run && tar --zstd -cf - $list | aws s3 cp --only-show-errors - s3://$BUCKET/c/t.tar.zst'"
  cmds+=(--prepare "$PY $WORK/s3.py rm $BUCKET c/" "$cli")
  names+=', "tar --zstd | aws s3 cp"'
  echo "aws: $(aws --version 2>&1)"
fi
names+=']'

files=()
for rep in $(seq "$REPEATS"); do
  f=$RESULTS/s3-$rep.json
  hyperfine -N --warmup 1 --runs "$RUNS" --export-json "$f" "${cmds[@]}" >/dev/null 2>&1
  echo " repeat $rep:"
  ratio "$f" 0
  files+=("$f")
done
python3 - "$names" "${files[@]}" <<'PY'
import json, statistics, sys
names = json.loads(sys.argv[1])
ratios, times = {}, {}
for path in sys.argv[2:]:
    res = json.load(open(path))["results"]
    ref = statistics.median(res[0]["times"])
    for i, r in enumerate(res):
        ratios.setdefault(i, []).append(statistics.median(r["times"]) / ref)
        times.setdefault(i, []).extend(r["times"])
print(" over the repeats (ratio to the boto3 pipe: median [min, max]; time min..max):")
for i in ratios:
    t = times[i]
    print(f"  {names[i]:24s} {statistics.median(ratios[i]):5.2f} [{min(ratios[i]):.2f}, {max(ratios[i]):.2f}]"
          f"  {min(t)*1000:7.0f}..{max(t)*1000:7.0f} ms")
PY
echo "== archive bytes / $tree_bytes tree bytes"
"$BIN" seal --root "$r" bench-s3 --to "s3://$BUCKET/final" --max-bytes 1GiB --max-files 200000 2>/dev/null
for k in b/t.tar.zst final/bench-s3.tar.zst; do
  n=$("$PY" "$WORK/s3.py" size "$BUCKET" "$k" 2>/dev/null || echo 0)
  echo "  $(python3 -c "import sys; print(f'{int(sys.argv[1]) / int(sys.argv[2]):.4f}  {sys.argv[1]} bytes')" "$n" "$tree_bytes")  $k"
done
