#!/bin/bash
# A/B of two cellserver binaries (OLD and NEW, default /tmp/cs-old and /tmp/cs-new):
# CL.THROTTLE at depth 1 and 16, alternating rounds, server CPU per request
# from /proc (user+system), which other load on the machine disturbs least.
OLD=${OLD:-/tmp/cs-old}; NEW=${NEW:-/tmp/cs-new}
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
for round in 1 2 3; do
 for b in old new; do
  d=$(mktemp -d); $([ $b = old ] && echo $OLD || echo $NEW) --addr 127.0.0.1:7301 --data-dir $d/data >/dev/null 2>&1 & pid=$!
  sleep 0.7
  for P in 1 16; do
   n=$((P==1 ? 100000 : 400000))
   c0=$(cpu $pid)
   r=$(redis-benchmark -p 7301 -c 50 -n $n -r 100000 -P $P -q CL.THROTTLE key:__rand_int__ 100 10 1 2>/dev/null | tr '\r' '\n' | grep "requests per second" | tail -1 | awk "{print \$(NF-5)}")
   c1=$(cpu $pid)
   echo "round $round $b P=$P rps=$r cpu_us_per_op=$(echo "($c1-$c0)*10000/$n" | bc -l | cut -c1-5)"
  done
  kill $pid; wait $pid 2>/dev/null; rm -rf $d
 done
done
