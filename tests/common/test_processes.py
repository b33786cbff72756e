"""``labeldp.processes.port_is_free``: what the demo checks before it starts a service on a port."""

from __future__ import annotations

import socket

from labeldp.processes import port_is_free


def _listener(port: int = 0) -> socket.socket:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn and grpc bind
    server.bind(("127.0.0.1", port))
    server.listen()
    return server


def test_a_port_someone_listens_on_is_not_free() -> None:
    with _listener() as server:
        assert not port_is_free(server.getsockname()[1])


def test_a_port_left_in_time_wait_by_a_finished_service_is_free() -> None:
    """The server side closes first, so its end of the connection stays in TIME_WAIT: a service
    (binding with SO_REUSEADDR) could listen there again at once, and the check must say so."""
    server = _listener()
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = server.accept()
    accepted.close()  # the active close: TIME_WAIT on the server's port
    server.close()
    client.close()
    assert port_is_free(port)
    with _listener(port) as again:  # and a service can indeed listen there now
        assert again.getsockname()[1] == port
