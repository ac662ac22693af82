"""Load profiles (and, later, Locust users and the capacity model)."""
