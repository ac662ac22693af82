"""Dependency providers for the real stack: embedded, native (started by the project on loopback),
containers and external (docs/native-stack.md)."""
