#!/usr/bin/env bash
# A/B of the cheat catalog's main session with and without the sandbox jail: does the jail change any verdict?
# Alternates [sandbox].isolation = "preferred" / "off" in protocol.toml (restored at the end), REPS times each.
#   bash benchmarks/harness/jail_ab_catalog.sh [REPS]
set -u
cd "$(dirname "$0")/../.."
reps=${1:-3}
backup=$(mktemp)
cp protocol.toml "$backup"
trap 'cp "$backup" protocol.toml; rm -f "$backup"' EXIT
for rep in $(seq "$reps"); do for mode in preferred off; do
  sed "s/^isolation = \".*\"/isolation = \"$mode\"/" "$backup" > protocol.toml
  r=$(python -m pytest tests/test_cheat_catalog.py -q -p no:cacheprovider -k main 2>&1 \
      | grep -E "^FAILED|passed|failed|^E .*reason:" | tr '\n' ' ')
  echo "$mode rep$rep load $(cut -d' ' -f1 /proc/loadavg): $r"
done; done
