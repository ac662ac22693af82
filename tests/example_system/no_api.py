"""The example system without an API document: `sortie fuzz` refuses it (tests/core/test_fuzz.py)."""

from dataclasses import replace

from tests.example_system import SYSTEM as EXAMPLE

SYSTEM = replace(EXAMPLE, name=__name__, fuzz=None)
