#!/bin/sh
# pre_run for nightly-report: the last 24 hours of git history in the job's workdir.
# Its stdout becomes {{ pre_run.stdout }} in the prompt template.
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    echo "(the working directory is not a git repository)"
    exit 0
fi
git log --since="24 hours ago" --stat --no-color --date=iso -n 200 || true
