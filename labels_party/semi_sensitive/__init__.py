"""Training with semi-sensitive features at the labels party (docs/semi-sensitive.md)."""
