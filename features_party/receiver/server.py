"""The gRPC server around the receiver: mTLS whenever certificates are configured, health checking
and server reflection on, plaintext only when explicitly allowed (and then said loudly).

``DeliverRelease`` is registered with no request deserializer: frames reach the receiver as bytes and
are parsed there, so a malformed frame is answered INVALID_ARGUMENT like every other bad message.
"""

from __future__ import annotations

import logging
import threading
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from features_party.config import FeaturesSettings
from features_party.receiver.service import Receiver
from labeldp.common.blake2b_batch import compiled
from labeldp.common.wire.format import MAX_MESSAGE_BYTES
from labeldp.v1 import delivery_pb2 as pb

log = logging.getLogger("labeldp.features.receiver")
SERVICE = pb.DESCRIPTOR.services_by_name["FeaturesParty"].full_name


def build_server(receiver: Receiver, settings: FeaturesSettings) -> tuple[grpc.Server, int]:
    """A started gRPC server and the port it listens on (``grpc_port`` 0 picks a free one)."""
    limit = MAX_MESSAGE_BYTES + 2**20
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=settings.grpc_workers, thread_name_prefix="grpc"),
        options=[
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", limit),
            # several workers share the port (the kernel spreads connections over them); one process
            # alone refuses a port another process holds rather than silently sharing its deliveries
            ("grpc.so_reuseport", int(settings.workers > 1)),
        ],
        maximum_concurrent_rpcs=settings.grpc_workers,  # more are refused (RESOURCE_EXHAUSTED), not queued
    )
    handler = grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "DeliverRelease": grpc.stream_unary_rpc_method_handler(
                receiver.DeliverRelease, response_serializer=pb.DeliveryReceipt.SerializeToString
            ),
            "DeliverModel": grpc.unary_unary_rpc_method_handler(
                receiver.DeliverModel, response_serializer=pb.ModelReceipt.SerializeToString
            ),
        },
    )
    server.add_generic_rpc_handlers((handler,))
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    health_servicer.set(SERVICE, health_pb2.HealthCheckResponse.SERVING)
    health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    reflection.enable_server_reflection((SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    address = f"{settings.grpc_host}:{settings.grpc_port}"
    if settings.tls_cert and settings.tls_key and settings.tls_ca:
        credentials = grpc.ssl_server_credentials(
            [(settings.tls_key.read_bytes(), settings.tls_cert.read_bytes())],
            root_certificates=settings.tls_ca.read_bytes(),
            require_client_auth=True,
        )
        port = server.add_secure_port(address, credentials)
        log.info("gRPC receiver listening with mTLS", extra={"path": f"{settings.grpc_host}:{port}"})
    elif settings.allow_plaintext:
        port = server.add_insecure_port(address)
        log.warning(
            "gRPC receiver listening WITHOUT TLS (LABELDP_FEATURES_ALLOW_PLAINTEXT): local development only",
            extra={"path": f"{settings.grpc_host}:{port}"},
        )
    else:
        raise ValueError(
            "configure LABELDP_FEATURES_TLS_CERT, _TLS_KEY and _TLS_CA (see `labeldp keys dev-ca`), "
            "or set LABELDP_FEATURES_ALLOW_PLAINTEXT=true for local development"
        )
    server.start()
    # load (from numba's disk cache, or compile once) the ID hash kernel now, not in the first delivery
    threading.Thread(target=compiled, name="warm-id-hash", daemon=True).start()
    return server, port
