"""The ``labeldp`` command line: the app layer's entry point (``labeldp = labeldp.cli:app``)."""

from labeldp.cli.main import app

__all__ = ["app"]
