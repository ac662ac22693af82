# Sourced by the other scripts: a project virtualenv in .venv with Sortie installed (editable).
# Idempotent: a second run only checks that the install is current.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
EXTRAS="${SORTIE_EXTRAS:-}"
if [ ! -x "$ROOT/.venv/bin/python" ]; then
  "$PY" -m venv "$ROOT/.venv"
fi
# Reinstall only when pyproject.toml changed since the last install (or the extras differ).
stamp="$ROOT/.venv/.sortie-installed"
want="$(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1) $EXTRAS"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  "$ROOT/.venv/bin/python" -m pip install -q --upgrade pip
  "$ROOT/.venv/bin/python" -m pip install -q -e "$ROOT${EXTRAS:+[$EXTRAS]}"
  echo "$want" > "$stamp"
fi
export PATH="$ROOT/.venv/bin:$PATH"
