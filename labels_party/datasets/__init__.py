"""Datasets of the labels party: public specs, label and universe uploads, versioned Parquet storage."""
