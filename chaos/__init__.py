"""Nemeses: faults by the catalogue's names, for the simulation (simulated.py) and the real stack (native.py)."""
