"""Sortie: the console entry point."""
