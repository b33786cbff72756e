"""The features party's REST API (FastAPI): identity, pinned senders, received releases."""
