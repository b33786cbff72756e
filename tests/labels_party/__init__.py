"""The labels party through its real interfaces (HTTP, the ledger on SQLite and PostgreSQL, processes)."""
