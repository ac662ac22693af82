"""The example system with a defect planted in its API (a 500 for an increment over 8): `sortie fuzz` must fail on it
(tests/core/test_fuzz.py)."""

from dataclasses import replace

from tests.example_system import SYSTEM as EXAMPLE
from tests.example_system.api import fuzz_spec

SYSTEM = replace(EXAMPLE, name=__name__, fuzz=fuzz_spec("server-error"))
