"""Nemeses: the fault registry each system registers its faults in (faults.py), applied by name in the simulation
(simulated.py) and on the real stack (native.py)."""
