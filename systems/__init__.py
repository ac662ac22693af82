"""Systems under test, each with what the harness needs of it beyond the shared core (docs/adding-a-system.md):
its reference lives in its own package (reference/ for the Copilot, jobs/ for the job table), its shell-side parts
here."""
