#!/bin/bash
# A true first start of the explorer, background precompute included, measured from outside:
#
#     bench/bench_first_start.sh [OUT_DIR] [app.py flags ...]
#     bench/bench_first_start.sh /tmp/first-start                        # the default world
#     bench/bench_first_start.sh /tmp/first-start --world-size tiny --limit 2
#
# Starts `python app.py` on an empty data folder (OUT_DIR/data, via CIR_DEMO_DATA), and every second
# records the seconds since start, the resident memory (KB) of the app and of its children (the
# background eval run), the 1-minute load average and the child pids (OUT_DIR/samples.tsv). It
# notes when the page first answers HTTP 200, and when the background run's folder is published
# (OUT_DIR/events.txt), and copies the app log's "explorer ready N s after start" there as
# `explorer_ready_s N` with the load average of that moment. Stop it with
# `kill $(cat OUT_DIR/app.pid)` once you have what you need (then the script ends), or set
# STOP_AFTER=ready (stop once the explorer is usable) or STOP_AFTER=job (once the background run is
# published); the script then prints events.txt.
# Run bench/bench_app_latency.py with CIR_DEMO_DATA=OUT_DIR/data beside it to measure query views
# while the background run works.
set -u
OUT=${1:-/tmp/cir-first-start}; shift || true
PORT=${PORT:-7921}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$OUT"; mkdir -p "$OUT/data"
export CIR_DEMO_DATA="$OUT/data" HF_HUB_OFFLINE=1
cd "$ROOT"
T0=$(date +%s.%N)
python app.py --port "$PORT" "$@" > "$OUT/app.log" 2>&1 &
APP=$!
echo $APP > "$OUT/app.pid"
: > "$OUT/events.txt"; : > "$OUT/samples.tsv"
page_done=0
while kill -0 $APP 2>/dev/null; do
  el=$(echo "$(date +%s.%N) - $T0" | bc)
  if [ $page_done = 0 ]; then
    code=$(curl -s -o /dev/null -w "%{http_code} %{time_total}" --max-time 5 "http://127.0.0.1:$PORT/" || true)
    case "$code" in 200*) echo "page_http_200_at_s $el ($code)" >> "$OUT/events.txt"; page_done=1;; esac
  fi
  kids=$(pgrep -P $APP | tr '\n' ' ')
  rss_app=$(ps -o rss= -p $APP 2>/dev/null | tr -d ' ')
  rss_kids=0; for k in $kids; do r=$(ps -o rss= -p "$k" 2>/dev/null | tr -d ' '); rss_kids=$((rss_kids + ${r:-0})); done
  echo -e "$el\t${rss_app:-0}\t$rss_kids\t$(cut -d' ' -f1 /proc/loadavg)\t$kids" >> "$OUT/samples.tsv"
  if ! grep -q explorer_ready "$OUT/events.txt"; then
    ready=$(sed -n 's/.*explorer ready \([0-9.]*\) s after start.*/\1/p' "$OUT/app.log" | head -1)
    if [ -n "$ready" ]; then
      echo "explorer_ready_s $ready (app log; load average $(cut -d' ' -f1-3 /proc/loadavg))" >> "$OUT/events.txt"
      [ "${STOP_AFTER:-}" = ready ] && kill $APP
    fi
  fi
  if ls "$OUT"/data/runs/*-app/metrics.csv >/dev/null 2>&1 && ! grep -q job_done "$OUT/events.txt"; then
    echo "job_done_at_s $el (load average $(cut -d' ' -f1-3 /proc/loadavg))" >> "$OUT/events.txt"
    [ "${STOP_AFTER:-}" = job ] && kill $APP
  fi
  sleep 1
done
cat "$OUT/events.txt"
