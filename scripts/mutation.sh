#!/usr/bin/env bash
# Mutation testing of the reference against the simulation catalogue, with cosmic-ray: each mutant is one small
# change to a file of reference/ (a negated condition, a flipped comparison or boolean operator, a changed number, a
# broken except), and it is *killed* when `sortie simulate --all` at SEED goes red. A survivor is a defect no
# scenario, invariant or expectation sees: the list to triage. Slow (the whole catalogue per mutant, 13-25 s on
# this 2-core machine): run it by hand, not in CI.
#
#   bash scripts/mutation.sh [--seed N] [--out DIR] FILE...   (default FILE: reference/copilot/services/dispatch.py)
#
# It mutates a copy of HEAD (git archive), never the working tree, and leaves DIR/session.sqlite (resumable:
# run the same command again to finish an interrupted session), DIR/survivors.txt (each survivor's diff) and
# DIR/summary.txt. Only the operators that make plausible defects run (see MUTATION_OPERATORS_EXCLUDED): cosmic-ray's
# full set makes ~330 mutants per file of the reference, most of them Eq -> Is or BitOr -> Pow.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

SEED=1
OUT=out/mutation
FILES=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seed) SEED=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n 2,13p "$0"; exit 0 ;;
    *) FILES+=("$1"); shift ;;
  esac
done
[ ${#FILES[@]} -gt 0 ] || FILES=(reference/copilot/services/dispatch.py)
for f in "${FILES[@]}"; do
  case "$f" in reference/*.py) [ -f "$f" ] || { echo "no such file: $f" >&2; exit 2; } ;;
    *) echo "$f: give a Python file under reference/" >&2; exit 2 ;; esac
done

source scripts/env.sh  # the project's .venv, current
# cosmic-ray in its own venv: a tool, not a dependency of the project (its pins must not move the project's).
MVENV=.venv-mutation
if [ ! -x "$MVENV/bin/cosmic-ray" ]; then
  python3 -m venv "$MVENV"
  "$MVENV/bin/pip" install -q "cosmic-ray>=8.4"
fi

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
COPY="$OUT/tree"
if [ ! -d "$COPY" ]; then  # a resumed session keeps the copy it began with
  mkdir -p "$COPY"
  git archive HEAD | tar -x -C "$COPY"
  git rev-parse HEAD > "$OUT/commit"
fi

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
modules=$(for f in "${FILES[@]}"; do printf '"%s/%s", ' "$COPY" "$f"; done | sed 's/, $//')
excluded=$(printf '%s\n' "$MUTATION_OPERATORS_EXCLUDED" | sed '/^$/d; s/.*/"&", /' | tr -d '\n' | sed 's/, $//')
cat > "$OUT/cosmic-ray.toml" <<EOF
[cosmic-ray]
module-path = [$modules]
timeout = 600.0
excluded-modules = []
# Red anywhere (an invariant violated, an expectation not met, a fault that did not fire, a harness error) kills.
test-command = "env PYTHONPATH=$COPY $ROOT/.venv/bin/python -m sortie.cli simulate --all --seed $SEED --no-report --fail-fast --out $OUT/run"

[cosmic-ray.distributor]
name = "local"

[cosmic-ray.filters.operators-filter]
exclude-operators = [$excluded]
EOF

SESSION="$OUT/session.sqlite"
cd "$COPY"
if [ ! -f "$SESSION" ]; then
  "$ROOT/$MVENV/bin/cosmic-ray" init "$OUT/cosmic-ray.toml" "$SESSION"
  "$ROOT/$MVENV/bin/cr-filter-operators" "$SESSION" "$OUT/cosmic-ray.toml"
  # The unmutated copy must be green, or every mutant would count as killed.
  env PYTHONPATH="$COPY" "$ROOT/.venv/bin/python" -m sortie.cli simulate --all --seed "$SEED" --out "$OUT/baseline" \
    > "$OUT/baseline.log" 2>&1 || { echo "the unmutated catalogue is red at seed $SEED: see $OUT/baseline.log" >&2
                                    rm -f "$SESSION"; exit 1; }
fi
"$ROOT/$MVENV/bin/cosmic-ray" exec "$OUT/cosmic-ray.toml" "$SESSION"
"$ROOT/$MVENV/bin/cr-report" --show-pending "$SESSION" > "$OUT/report.txt" || true
"$ROOT/$MVENV/bin/python" "$ROOT/scripts/mutation_summary.py" "$SESSION" "$OUT" "$COPY"
