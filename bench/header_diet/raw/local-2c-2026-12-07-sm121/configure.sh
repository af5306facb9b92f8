#!/bin/bash
# configure v8 at 12.1a with the tool's build, stop at first compile (.ninja_log)
cd /work/main && source /tmp/ov/env.sh
before=$(ls /work/.bench-hd/cache/build)
setsid bash -c 'echo 19 > /proc/self/autogroup; exec nice -n 10 python -m build_kernel --offline build --recipe /tmp/ov/v8.toml --arch 12.1a -j 1' > /tmp/sm121/configure.log 2>&1 &
pid=$!
echo "pid $pid" 
while kill -0 $pid 2>/dev/null; do
  for d in /work/.bench-hd/cache/build/*/; do
    if [ -f $d/cmake/.ninja_log ] && ! echo "$before" | grep -q "$(basename $d)"; then
      echo "found $d"; kill -KILL -- -$pid; wait $pid; echo killed; exit 0
    fi
  done
  sleep 1
done
echo "ended before compile"
