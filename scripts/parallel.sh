# Sourced by scripts/test.sh and scripts/oclgrind-check.sh: commands run in the background,
# at most $parallel_jobs at a time (default: one a core), each with its output kept in a file.
#   in_parallel NAME COMMAND...   starts COMMAND once a slot is free
#   parallel_done [--failures]    waits for all of them, prints each one's name and output in
#                                 the order they were started (--failures: the output of the
#                                 failed ones only) and returns 1 if any failed
# For work on one thread (a compiler, a simulator): two cores then do two at a time.
parallel_jobs="${parallel_jobs:-$(nproc)}"
parallel_names=()
parallel_outputs=()

in_parallel() {
  local name="$1" output
  shift
  while [ "$(jobs -rp | wc -l)" -ge "$parallel_jobs" ]; do wait -n || true; done
  output="$(mktemp)"
  parallel_names+=("$name")
  parallel_outputs+=("$output")
  (
    status=0
    "$@" > "$output" 2>&1 || status=$?
    echo "exit $status" >> "$output"
  ) &
}

parallel_done() {
  local i failed=0 ok
  wait
  for i in "${!parallel_names[@]}"; do
    ok=0
    tail -n 1 "${parallel_outputs[i]}" | grep -qx "exit 0" && ok=1
    echo "-- ${parallel_names[i]}$([ "$ok" -eq 1 ] || echo ": failed")"
    [ "$ok" -eq 1 ] && [ "${1:-}" = --failures ] || sed '$d' "${parallel_outputs[i]}"
    [ "$ok" -eq 1 ] || failed=1
    rm -f "${parallel_outputs[i]}"
  done
  parallel_names=()
  parallel_outputs=()
  return "$failed"
}
