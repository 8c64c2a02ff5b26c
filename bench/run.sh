#!/usr/bin/env bash
# One command for the cellserver benchmark: checks the tools, then runs
#   go run ./bench/cmd/compare "$@"
# from the repository root. Examples:
#   bench/run.sh                               # full comparison, 3 rounds
#   bench/run.sh --rounds 2 --quick            # shorter (1M live keys instead of 10M)
#   bench/run.sh --server-args "--fsync always"
#   bench/run.sh --memory --keys 1000000,10000000
# It installs nothing; see bench/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
for t in go redis-server redis-benchmark; do
  command -v "$t" >/dev/null 2>&1 || missing+=("$t")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "bench/run.sh: missing: ${missing[*]}" >&2
  for t in "${missing[@]}"; do
    case "$t" in
      go) echo "  install Go 1.26+ (see go.mod)" >&2 ;;
      redis-*) echo "  sudo apt-get update && sudo apt-get install -y redis-server   # redis-server + redis-benchmark" >&2 ;;
    esac
  done
  exit 1
fi
exec go run ./bench/cmd/compare "$@"
