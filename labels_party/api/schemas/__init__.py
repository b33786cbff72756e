"""Request and response bodies of the labels-party API, one module per resource (as ``routes/``), and
how rows become responses."""
