"""The drone-platform simulator: a clock-driven model (``simulator.model``) and a Flask app around it
(``simulator.app``)."""
