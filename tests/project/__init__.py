"""Rules of the house a reviewer would otherwise check by hand (layers, packaging)."""
