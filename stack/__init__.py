"""Dependency providers for the real stack: embedded, native (started by the project on loopback),
containers and external (DESIGN.md §2)."""
