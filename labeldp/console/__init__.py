"""The web console each party serves under ``/console`` (docs/console.md).

Static files only: a page shell and ES modules that call the party's public REST API with the
tenant's API key from the browser's session storage. The Python side mounts the files and answers
them with a strict Content-Security-Policy; it knows nothing of either party.
"""
