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
# It also copies the app log's "failure sorts and report: ready (...); N s after start" there as
# `sorts_ready_s N` (the shipped eval outputs installed, or a stored run found); STOP_AFTER=job stops
# then too. BROWSER=1 also runs bench/first_start_browser.py: Debian's Chromium opens the page and
# notes when the tiles and "failure sorts and report: ready" showed (browser_*_s, seconds since the
# app's start), and saves screenshots of the ready page, a failure sort and the Report into OUT_DIR.
# Run bench/bench_app_latency.py with CIR_DEMO_DATA=OUT_DIR/data beside it to measure query views
# while the background run works.
set -u
OUT=${1:-/tmp/cir-first-start}; shift || true
PORT=${PORT:-7921}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# OUT is emptied first, so only a new or empty folder, or one this script wrote before (its events.txt), is accepted
if [ -e "$OUT" ] && { [ ! -d "$OUT" ] || { [ -n "$(ls -A "$OUT")" ] && [ ! -f "$OUT/events.txt" ]; }; }; then
  echo "error: $OUT is neither a new or empty folder nor an earlier output of this script (its events.txt); nothing deleted, name another folder" >&2
  exit 2
fi
rm -rf "$OUT"; mkdir -p "$OUT/data"
export CIR_DEMO_DATA="$OUT/data" HF_HUB_OFFLINE=1
cd "$ROOT"
: > "$OUT/events.txt"; : > "$OUT/samples.tsv"
T0=$(date +%s.%N)
python app.py --port "$PORT" "$@" > "$OUT/app.log" 2>&1 &
APP=$!
echo $APP > "$OUT/app.pid"
if [ "${BROWSER:-0}" = 1 ]; then
  python bench/first_start_browser.py "http://127.0.0.1:$PORT/" "$T0" "$OUT" > "$OUT/browser.log" 2>&1 &
  BROWSER_PID=$!
fi
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
  if ! grep -q sorts_ready "$OUT/events.txt"; then
    sorts=$(sed -n 's/.*failure sorts and report: ready.*; \([0-9.]*\) s after start.*/\1/p' "$OUT/app.log" | head -1)
    if [ -n "$sorts" ]; then
      echo "sorts_ready_s $sorts (app log: $(grep -o 'ready ([^)]*)' "$OUT/app.log" | head -1); load average $(cut -d' ' -f1-3 /proc/loadavg))" >> "$OUT/events.txt"
      if [ "${STOP_AFTER:-}" = job ]; then
        [ -n "${BROWSER_PID:-}" ] && wait "$BROWSER_PID"
        kill $APP
      fi
    fi
  fi
  if ls "$OUT"/data/runs/*-app/metrics.csv >/dev/null 2>&1 && ! grep -q job_done "$OUT/events.txt"; then
    echo "job_done_at_s $el (load average $(cut -d' ' -f1-3 /proc/loadavg))" >> "$OUT/events.txt"
    if [ "${STOP_AFTER:-}" = job ]; then
      [ -n "${BROWSER_PID:-}" ] && wait "$BROWSER_PID"
      kill $APP
    fi
  fi
  sleep 1
done
cat "$OUT/events.txt"
