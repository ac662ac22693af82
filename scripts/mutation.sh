#!/usr/bin/env bash
# Mutation testing of a system's reference against its simulation catalogue, with cosmic-ray: each mutant is one
# small change to a module of reference/SYSTEM/ (a negated condition, a flipped comparison or boolean operator, a
# changed number, a broken except), and it is *killed* when `sortie simulate --system SYSTEM --fail-fast` of the
# scenarios that execute its line (fastest first) goes red at SEED or runs past its timeout. Coverage-guided: the
# clean catalogue runs once under coverage.py, each scenario in its own context (scripts/mutation_coverage.py); a
# mutant of a line no scenario executes survives at no cost ("not reached"); a line run at import (a constant, a
# default) is judged by the whole catalogue. A module may have an extra judge (systems/SYSTEM/mutation.yaml
# judges:, e.g. the HTTP layer's in-process tests), run after its scenarios. A survivor is a defect no scenario,
# invariant or expectation sees: the list to triage (a new checker or scenario, or an entry in
# systems/SYSTEM/mutation.yaml with the reason it is equivalent). By hand or nightly (scripts/nightly.sh), not CI.
#
#   bash scripts/mutation.sh --system NAME --sample N [--module PATH ...] [--seed N] [--workers N] [--out DIR]
#                            [--first PATH ...] [--rejudge] [--trust-triage] [--publish]
#
# --sample N: a deterministic sample (seeded by --seed and the module's path) of N mutants per module, all where a
#   module has fewer. --module: only these modules (default: every module of reference/NAME/ but __init__.py,
#   migrations and the pure data modules systems/NAME/mutation.yaml names, each listed with its reason).
# --workers N (default: the CPU count): mutants run side by side, each worker in its own copy of the tree, taking
#   the next mutant of the one cosmic-ray session when it is free (scripts/mutation_session.py run: cosmic-ray's
#   mutate_and_test over a thread pool). Simpler than a Dask cluster (cosmic-ray lives in its own venv, and each
#   task needs a copy of the tree of its own anyway) or cosmic-ray's HTTP distributor (a server per worker).
# --publish: also write the table to docs/systems/NAME-mutation.md and .json.
# --first PATH (repeatable; a module or a folder/): run these modules' mutants first, in that order (a long run
#   stopped early then has the modules that matter most; the rest stay pending and a rerun resumes them).
# --trust-triage: a mutant systems/NAME/mutation.yaml records as equivalent is not judged again (only its diff is
#   made): a rerun on a loaded machine, when each such mutant costs a whole catalogue; its table cannot see a triage
#   go stale (a judge grown to kill it), which a run without the flag reports.
# --rejudge (with the command of a session in DIR): its survivors judged again by HEAD's checkers and scenarios (the
#   reference must be unchanged since the session began); the table then names both commits.
# SORTIE_VENV=DIR: the project's virtualenv to use as it is (default: .venv, made current by scripts/env.sh).
#
# It mutates a copy of HEAD (git archive), never the working tree, and leaves in DIR (default out/mutation/NAME):
# table.md and table.json (per module: mutants, killed, survived, equivalent, timed out, score), survivors.md (each
# survivor's change), and the session (resumable: the same command finishes an interrupted run; a finished one
# or another command starts afresh in DIR). Only the operators that make plausible defects run
# (MUTATION_OPERATORS_EXCLUDED): cosmic-ray's full set makes ~330 mutants per module, most Eq -> Is or BitOr -> Pow.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

SYSTEM=""
SAMPLE=""
SEED=1
WORKERS=$(nproc)
OUT=""
PUBLISH=0
MODULES=()
FIRST=()
REJUDGE=0
TRUST=0
while [ $# -gt 0 ]; do
  case "$1" in
    --system) SYSTEM=$2; shift 2 ;;
    --sample) SAMPLE=$2; shift 2 ;;
    --module) MODULES+=("$2"); shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --workers) WORKERS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --publish) PUBLISH=1; shift ;;
    --first) FIRST+=(--first "$2"); shift 2 ;;
    --rejudge) REJUDGE=1; shift ;;
    --trust-triage) FIRST+=(--trust-triage); TRUST=1; shift ;;
    -h|--help) sed -n 2,37p "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$SYSTEM" ] && [ -n "$SAMPLE" ] || { echo "give --system NAME and --sample N (see --help)" >&2; exit 2; }
[ "$WORKERS" -ge 1 ] || { echo "--workers must be at least 1" >&2; exit 2; }
OUT=${OUT:-out/mutation/$SYSTEM}
COMMAND="bash scripts/mutation.sh --system $SYSTEM --sample $SAMPLE --seed $SEED"
for module in "${MODULES[@]}"; do COMMAND+=" --module $module"; done

if [ -n "${SORTIE_VENV:-}" ]; then VENV=$SORTIE_VENV; else source scripts/env.sh; VENV=$ROOT/.venv; fi
"$VENV/bin/python" -c 'import coverage' 2>/dev/null || {
  echo "coverage.py is missing from $VENV (pip install -e '.[test]')" >&2; exit 2; }
# cosmic-ray in its own venv: a tool, not a dependency of the project (its pins must not move the project's).
MVENV=$ROOT/.venv-mutation
if [ ! -x "$MVENV/bin/cosmic-ray" ]; then
  python3 -m venv "$MVENV"
  "$MVENV/bin/pip" install -q "cosmic-ray>=8.4"
fi

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
TREE="$OUT/tree"  # pristine: the workers copy it; cosmic-ray never mutates it
# The scenarios each mutant's catalogue runs at once: the cores left to each worker (results do not depend on it).
JOBS=$(( $(nproc) / WORKERS )); [ "$JOBS" -ge 1 ] || JOBS=1
simulate() {  # simulate TREE OUTDIR: the catalogue against the reference in TREE (run in TREE: `python -m` puts the
  # current directory first on the path, so anywhere else the working tree's reference would run, not the mutant)
  echo "env -C $1 PYTHONPATH=$1 $VENV/bin/python -m sortie.cli simulate --system $SYSTEM --all --fail-fast" \
       "--no-report --seed $SEED --jobs $JOBS --out $2"
}
in_tree() { env -C "$TREE" PYTHONPATH="$TREE" "$VENV/bin/python" "$@"; }

# Operators kept: negation added or removed, == <-> !=, is <-> is not, in <-> not in, the boundary pairs
# (< <-> <=, > <-> >=), and <-> or, + <-> -, numbers, except clauses, loops that never iterate, break/continue.
MUTATION_OPERATORS_EXCLUDED='
core/ReplaceComparisonOperator_(?!(Eq_NotEq|NotEq_Eq|Is_IsNot|IsNot_Is|In_NotIn|NotIn_In|Lt_LtE|LtE_Lt|Gt_GtE|GtE_Gt)$)
core/ReplaceBinaryOperator_(?!(Add_Sub|Sub_Add)$)
core/ReplaceUnaryOperator_(?!Delete_Not$)
core/RemoveDecorator
core/VariableReplacer
core/VariableInserter
'
config() {  # config TIMEOUT MODULE...: the session's cosmic-ray config (module paths relative to the tree)
  local timeout=$1; shift
  local modules excluded
  modules=$(printf '"%s", ' "$@" | sed 's/, $//')
  excluded=$(printf '%s\n' "$MUTATION_OPERATORS_EXCLUDED" | sed '/^$/d; s/.*/"&", /' | tr -d '\n' | sed 's/, $//')
  cat <<EOF
[cosmic-ray]
module-path = [$modules]
timeout = $timeout
excluded-modules = []
# Each worker's is simulate's (mutation_session.py run): red anywhere (an invariant violated, an expectation not
# met, a fault that did not fire, a harness error) kills.
test-command = "unused"

[cosmic-ray.distributor]
name = "local"

[cosmic-ray.filters.operators-filter]
exclude-operators = [$excluded]
EOF
}

clean_run_and_coverage() {  # the copy in TREE green, its timeout (TIMEOUT), and which scenario runs which line
  # The unmutated copy must be green, and must be what runs (not the working tree), or every verdict is wrong.
  local where start
  where=$(in_tree -c 'import reference; print(reference.__file__)')
  [ "$where" = "$TREE/reference/__init__.py" ] || {
    echo "the copy's reference is not the one imported: $where" >&2; exit 1; }
  start=$SECONDS
  $(simulate "$TREE" "$OUT/baseline") > "$OUT/baseline.log" 2>&1 || {
    echo "the unmutated catalogue of $SYSTEM is red at seed $SEED: see $OUT/baseline.log" >&2; exit 1; }
  # A mutant that loops or waits forever is killed at 5x the clean run's time: a shared machine's load varies
  # (the Copilot's catalogue took 39 s, then 210 s, within twenty minutes on 2 cores shared by 7 people).
  TIMEOUT=$(( 5 * (SECONDS - start) + 120 ))
  echo "baseline green in $((SECONDS - start)) s; a mutant times out after at most $TIMEOUT s"
  # Which scenarios execute which lines: each mutant is then judged by those only (scripts/mutation_coverage.py).
  start=$SECONDS
  rm -rf "$OUT/coverage"
  in_tree "$ROOT/scripts/mutation_coverage.py" record "$OUT" "$SYSTEM" "$SEED" "$JOBS" > "$OUT/coverage.log" 2>&1 || {
    echo "the catalogue under coverage failed: see $OUT/coverage.log" >&2; exit 1; }
  echo "coverage recorded per scenario in $((SECONDS - start)) s"
  echo "$((SECONDS - start))" > "$OUT/coverage-seconds"
}

# --rejudge: the survivors of the session in DIR judged again by HEAD's harness (a checker or scenario added to kill
# them); the reference itself must not have changed, so every mutant is the same change and the killed stay killed.
if [ "$REJUDGE" -eq 1 ]; then
  [ -f "$OUT/plan.json" ] || { echo "--rejudge: no session in $OUT" >&2; exit 2; }
  began_at=$("$VENV/bin/python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["meta"]["commit"])' \
             "$OUT/plan.json")
  git diff --quiet "$began_at" HEAD -- "reference/$SYSTEM" || {
    echo "--rejudge: reference/$SYSTEM changed since $began_at: run afresh" >&2; exit 2; }
  rm -rf "$TREE" "$OUT/finished"
  mkdir -p "$TREE"
  git archive HEAD | tar -x -C "$TREE"
  clean_run_and_coverage
  "$MVENV/bin/python" scripts/mutation_session.py rejudge "$OUT" --commit "$(git rev-parse --short=12 HEAD)" \
    --date "$(date -u +%F)"
  in_tree "$ROOT/scripts/mutation_coverage.py" judges "$OUT" "$TREE" "$SYSTEM" "$SEED" "$JOBS" "$VENV/bin/python"
fi

# An interrupted run of the same command resumes (keeping its copy of HEAD, sample and timeout: the table is of the
# commit it began on); a finished one, or another command, starts afresh.
RUN_ID="$COMMAND --workers $WORKERS"
if [ ! -f "$OUT/plan.json" ] || [ -f "$OUT/finished" ] || [ "$(cat "$OUT/run-id" 2>/dev/null)" != "$RUN_ID" ]; then
  rm -rf "$TREE" "$OUT"/worker-* "$OUT"/session.sqlite "$OUT"/plan.json "$OUT"/results.json "$OUT"/finished \
         "$OUT"/exec-seconds "$OUT"/coverage "$OUT"/judges.json "$OUT"/seconds.jsonl
  echo "$RUN_ID" > "$OUT/run-id"
  mkdir -p "$TREE"
  git archive HEAD | tar -x -C "$TREE"
  COMMIT=$(git rev-parse --short=12 HEAD)
  mapfile -t SELECTED < <("$VENV/bin/python" scripts/mutation_table.py modules "$TREE" "$SYSTEM" "$OUT" \
                            "${MODULES[@]}")
  [ ${#SELECTED[@]} -gt 0 ] || { echo "no module to mutate" >&2; exit 2; }

  clean_run_and_coverage
  config "$TIMEOUT" "${SELECTED[@]}" > "$OUT/cosmic-ray.toml"
  (cd "$TREE" && "$MVENV/bin/cosmic-ray" init "$OUT/cosmic-ray.toml" "$OUT/session.sqlite" \
     && "$MVENV/bin/cr-filter-operators" "$OUT/session.sqlite" "$OUT/cosmic-ray.toml")
  ASKED=(); [ ${#MODULES[@]} -eq 0 ] || ASKED=(--modules-asked)
  "$MVENV/bin/python" scripts/mutation_session.py sample "$OUT" --sample "$SAMPLE" --seed "$SEED" \
    --workers "$WORKERS" --timeout "$TIMEOUT" --commit "$COMMIT" --date "$(date -u +%F)" --command "$COMMAND" \
    "${ASKED[@]}"
  in_tree "$ROOT/scripts/mutation_coverage.py" judges "$OUT" "$TREE" "$SYSTEM" "$SEED" "$JOBS" "$VENV/bin/python"
fi
# Each worker's copy afresh: a run stopped mid-mutant leaves that mutant in its worker's copy.
for k in $(seq 0 $((WORKERS - 1))); do
  rm -rf "$OUT/worker-$k"
  mkdir -p "$OUT/worker-$k"
  cp -a "$TREE" "$OUT/worker-$k/tree"
done

[ "$TRUST" -eq 0 ] || "$VENV/bin/python" scripts/mutation_table.py equivalents "$SYSTEM" "$OUT"
start=$SECONDS
status=0
"$MVENV/bin/python" scripts/mutation_session.py run "$OUT" --workers "$WORKERS" "${FIRST[@]}" || status=1
spent=$(( $(cat "$OUT/exec-seconds" 2>/dev/null || echo 0) + SECONDS - start ))  # over every resumed part
echo "$spent" > "$OUT/exec-seconds"
"$MVENV/bin/python" scripts/mutation_session.py export "$OUT" --exec-seconds "$spent" \
  --coverage-seconds "$(cat "$OUT/coverage-seconds")"
PUBLISH_ARGS=(); [ "$PUBLISH" -eq 0 ] || PUBLISH_ARGS=(--publish "$ROOT/docs/systems")
"$VENV/bin/python" scripts/mutation_table.py table "$OUT" "${PUBLISH_ARGS[@]}"
[ "$status" -ne 0 ] || touch "$OUT/finished"
exit "$status"
