"""Feature tables: uploads with inferred (overridable) schemas, stored as versioned Parquet."""
