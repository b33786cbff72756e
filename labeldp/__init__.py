"""labeldp: two-party, feature-oblivious label differential privacy."""

__version__ = "0.1.0"
