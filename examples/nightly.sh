#!/bin/sh
# A nightly report job, written the way runws expects: read inputs from the
# run's inputs/, write outputs through the guard, never trust a file that
# merely exists.
set -eu

# A retry inside the same run may skip finished work, but only work this run
# recorded itself: a report left over from another run does not count.
if runws has report.json; then
  echo "report.json already written by run $RUN_ID"
  exit 0
fi

data="$RUNWS_DIR/inputs/orders.csv"
total=$(awk -F, 'NR > 1 { sum += $3 } END { printf "%.2f", sum }' "$data")
rows=$(awk 'END { print NR - 1 }' "$data")

# Tools that write to $HOME, $TMPDIR or the git config land in this run.
git config --global user.name "nightly report" 2>/dev/null || true
scratch=$(mktemp)
printf '{"run":"%s","rows":%s,"total":%s}\n' "$RUN_ID" "$rows" "$total" > "$scratch"

runws put report.json "$scratch"
echo "wrote report.json for run $RUN_ID: $(runws get report.json)"
