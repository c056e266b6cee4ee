#!/bin/sh
# A stand-in for a coding agent, as examples/github-actions.yml and
# examples/gitlab-ci.yml run it: it starts in the worktree `--worktree` gave
# the run (its own branch, runws/<run id>), changes a file, commits on that
# branch, and hands the change back through the guard as change.patch.
set -eu

printf 'Notes of run %s\n' "$RUN_ID" > AGENT_NOTES.md
git add AGENT_NOTES.md
GIT_AUTHOR_NAME=agent GIT_AUTHOR_EMAIL=agent@example.invalid \
GIT_COMMITTER_NAME=agent GIT_COMMITTER_EMAIL=agent@example.invalid \
  git commit -q -m "agent: notes of run $RUN_ID"

patch=$(mktemp)
git format-patch -1 --stdout > "$patch"
runws put change.patch "$patch"
echo "committed on $(git rev-parse --abbrev-ref HEAD); the change is the run's output change.patch"
