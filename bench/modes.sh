#!/usr/bin/env bash
# Throughput of CL.THROTTLE under each persistence mode, side by side in one
# run: --in-memory, --fsync no, --fsync everysec (default), --fsync always,
# alternated over ROUNDS rounds, 50 clients, 100k random keys, at pipeline
# depth 1 and 16. Loopback only. Usage: bench/modes.sh [ROUNDS] [REQUESTS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
n=${2:-500000}
command -v redis-benchmark >/dev/null || { echo "needs redis-benchmark: apt-get install -y redis-server"; exit 1; }
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
CGO_ENABLED=0 go build -o "$tmp/cellserver" ./cmd/cellserver
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
declare -A res
modes=("--in-memory" "--fsync no" "--fsync everysec" "--fsync always")
for r in $(seq 1 "$rounds"); do
  for m in "${modes[@]}"; do
    for p in 1 16; do
      rm -rf "$tmp/data"
      # shellcheck disable=SC2086
      "$tmp/cellserver" --addr 127.0.0.1:$port --data-dir "$tmp/data" $m 2>/dev/null &
      pid=$!
      for _ in $(seq 50); do redis-cli -p $port PING >/dev/null 2>&1 && break; sleep 0.1; done
      reqs=$n; [ "$p" = 1 ] && reqs=$((n / 5))
      rps=$(redis-benchmark -p $port -c 50 -n $reqs -r 100000 -P $p --csv CL.THROTTLE key:__rand_int__ 100 10 1 2>/dev/null | tail -1 | cut -d, -f2 | tr -d '"')
      kill $pid; wait $pid 2>/dev/null || true
      res["$m|$p"]+="$rps "
      echo "round $r  $m  depth $p: $rps rps" >&2
    done
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo
echo "| mode | depth 1 rps (median of $rounds) | depth 16 rps | depth 16 vs --in-memory |"
echo "|---|---:|---:|---:|"
base=$(echo "${res["--in-memory|16"]}" | median)
for m in "${modes[@]}"; do
  d1=$(echo "${res["$m|1"]}" | median); d16=$(echo "${res["$m|16"]}" | median)
  printf "| \`%s\` | %.0f | %.0f | %.2fx |\n" "$m" "$d1" "$d16" "$(echo "$d16 / $base" | bc -l)"
done
