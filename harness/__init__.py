"""What every shell of the harness shares and the system under test never sees: the history of a run
(``harness.history``). It sits below chaos, scenarios and reports (which record and read it) and imports
nothing of the project (pyproject.toml [tool.importlinter])."""
