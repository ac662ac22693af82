"""The simulation shell: simpy virtual time, SQLite, an at-least-once broker model, the platform model."""
