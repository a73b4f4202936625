# Helpers the clattn program's test scripts share (sourced, with $work set to a scratch folder).
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# expect STATUS TEXT -- COMMAND...: the command exits with STATUS and stderr is one line that
# mentions TEXT (SPEC section 5: every failure prints one clear line).
expect() {
  local want="$1" text="$2"
  shift 3
  "$@" > "$work/stdout" 2> "$work/stderr"
  local got=$?
  [ "$got" -eq "$want" ] || fail "'$*' exited $got, expected $want: $(cat "$work/stderr")"
  grep -qF -- "$text" "$work/stderr" || fail "'$*': stderr lacks '$text': $(cat "$work/stderr")"
  [ "$(wc -l < "$work/stderr")" -eq 1 ] || fail "'$*': not one line on stderr: $(cat "$work/stderr")"
}
