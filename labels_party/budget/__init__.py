"""The privacy-budget ledger: exact integer micro-ε, atomic check-and-charge per (tenant, example)."""
