# The nightly ledger, sourced by scripts/nightly.sh (and by its test): `step CMD...` runs one step and appends its
# result to $LEDGER as one line "commit<TAB>command<TAB>status<TAB>seconds" (status passed, failed or interrupted).
# With RESUME=1 a step whose command already passed at $COMMIT is skipped, so a nightly at one commit can run across
# sessions in a clone kept at that commit. A step that failed, or was stopped before it wrote its line, runs again.
# Needs COMMIT, LEDGER and RESUME; sets status=1 when a step fails; exits 130 when a step is interrupted (Ctrl-C).
passed_at_commit() {  # passed_at_commit COMMAND: the ledger has a passed line for it at $COMMIT
  [[ -f "$LEDGER" ]] && awk -F'\t' -v commit="$COMMIT" -v command="$1" \
    '$1 == commit && $2 == command && $3 == "passed" { found = 1 } END { exit !found }' "$LEDGER"
}

step() {
  local command="$*" t0=$SECONDS rc=0 result
  if (( RESUME )) && passed_at_commit "$command"; then echo "== skipped, passed at ${COMMIT:0:12}: $command"; return 0; fi
  echo "== $command"
  "$@" || rc=$?
  local seconds=$(( SECONDS - t0 ))
  case "$rc" in 0) result=passed ;; 130) result=interrupted ;; *) result=failed ;; esac
  printf '%s\t%s\t%s\t%s\n' "$COMMIT" "$command" "$result" "$seconds" >> "$LEDGER"
  if (( rc == 0 )); then echo "== $seconds s"; return 0; fi
  echo "!! $result (exit $rc, $seconds s): $command"
  status=1
  if (( rc == 130 )); then exit 130; fi  # Ctrl-C ends the run, not only the step
}
