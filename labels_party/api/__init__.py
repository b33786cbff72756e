"""The labels party's REST API (FastAPI): routers, schemas, bearer-key auth, problem+json errors."""
