"""``python -m labeldp.cli``: what the demo and the tests start as child processes."""

from labeldp.cli.main import app

app()
