"""The gRPC server around the receiver: mTLS whenever certificates are configured, health checking
and server reflection on, plaintext only when explicitly allowed (and then said loudly).

It runs on an asyncio event loop of its own (a thread), so a stream that waits for its sender holds
no thread: 32 streams that sent nothing used to hold all 32 worker threads, and every delivery to
every tenant was refused for as long as they stayed (60 s, renewable at once). Frames are read as they
arrive, within a deadline — the signed header within ``stream_header_seconds``, each later frame
within ``stream_idle_seconds`` (DEADLINE_EXCEEDED) — and who may hold how many streams is bounded per
peer and per tenant (``admission.py``); the work on what arrived (verifying, spooling, decoding,
storing: ``service.py``) runs on ``grpc_workers`` threads.

``DeliverRelease`` is registered with no request deserializer: frames reach the receiver as bytes and
are parsed there, so a malformed frame is answered INVALID_ARGUMENT like every other bad message.
``DeliverModel`` is a unary call on the wire, read here as a stream of its one message, so that the
per-peer limit and the deadline apply before the message is read. ``PriceExamples`` (priors for a
feature-aware release) is a bidirectional stream under the same limits and deadlines: its request is
verified before any ID chunk is read, and its answer is sent once every chunk has arrived; the work is
the pricing service's (``features_party/pricing``, handed in: it sits above this layer).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NoReturn, Protocol, TypeAlias, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from features_party.config import FeaturesSettings
from features_party.receiver.admission import Admission, BusyError, peer_of
from features_party.receiver.service import Receiver
from labeldp.common.blake2b_batch import compiled
from labeldp.common.errors import DomainError
from labeldp.common.wire.format import MAX_MESSAGE_BYTES, PUSHBACK_METADATA, WireError
from labeldp.v1 import delivery_pb2 as pb

log = logging.getLogger("labeldp.features.receiver")
SERVICE = pb.DESCRIPTOR.services_by_name["FeaturesParty"].full_name
T = TypeVar("T")
Context: TypeAlias = grpc.aio.ServicerContext[bytes, Any]


class PricingStream(Protocol):
    """One pricing request being answered: its verified request's tenant, then its ID chunks."""

    @property
    def tenant(self) -> str: ...

    @property
    def examples(self) -> int: ...

    def add(self, data: bytes) -> None: ...

    def finish(self) -> list[bytes]: ...

    def close(self) -> None: ...


class PricingWork(Protocol):
    """Opens a pricing stream from its first frame (verified before any chunk is read), and counts how
    each ended (``answered`` with its examples, or the refusal's code)."""

    def open(self, first: bytes) -> PricingStream: ...

    def on_outcome(self, outcome: str, examples: int) -> None: ...


class ReceiverServer:
    """The receiver's gRPC server, started on its own event loop; ``port`` is where it listens."""

    def __init__(
        self, receiver: Receiver, settings: FeaturesSettings, pricing: PricingWork | None = None
    ) -> None:
        self.receiver, self.settings, self.pricing = receiver, settings, pricing
        self.admission = Admission(settings.grpc_streams_per_peer, settings.grpc_streams_per_tenant)
        self.workers = ThreadPoolExecutor(settings.grpc_workers, thread_name_prefix="grpc")
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self._run, name="grpc-receiver", daemon=True).start()
        try:
            self.server, self.port = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result()
        except BaseException:
            self._close()
            raise

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def _close(self) -> None:
        self.workers.shutdown(wait=False, cancel_futures=True)
        self.loop.call_soon_threadsafe(self.loop.stop)

    def stop(self, grace: float | None) -> threading.Event:
        """Stop serving (streams in flight get ``grace`` seconds); the event is set once stopped."""
        done = threading.Event()

        def stopped(_: object) -> None:
            self._close()
            done.set()

        asyncio.run_coroutine_threadsafe(self.server.stop(grace), self.loop).add_done_callback(stopped)
        return done

    async def _start(self) -> tuple[grpc.aio.Server, int]:
        settings = self.settings
        limit = MAX_MESSAGE_BYTES + 2**20
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", limit),
                ("grpc.max_send_message_length", limit),
                # several workers share the port (the kernel spreads connections over them); one process
                # alone refuses a port another process holds rather than silently sharing its deliveries
                ("grpc.so_reuseport", int(settings.workers > 1)),
            ],
            maximum_concurrent_rpcs=settings.grpc_max_streams,  # more are refused, not queued
        )
        handler = grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "DeliverRelease": grpc.stream_unary_rpc_method_handler(
                    self.deliver_release, response_serializer=pb.DeliveryReceipt.SerializeToString
                ),
                "DeliverModel": grpc.stream_unary_rpc_method_handler(
                    self.deliver_model, response_serializer=pb.ModelReceipt.SerializeToString
                ),
                "PriceExamples": grpc.stream_stream_rpc_method_handler(self.price_examples),
            },
        )
        server.add_generic_rpc_handlers((handler,))
        health_servicer = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        await health_servicer.set(SERVICE, health_pb2.HealthCheckResponse.SERVING)
        await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
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
                "gRPC receiver listening WITHOUT TLS (LABELDP_FEATURES_ALLOW_PLAINTEXT): local development "
                "only",
                extra={"path": f"{settings.grpc_host}:{port}"},
            )
        else:
            raise ValueError(
                "configure LABELDP_FEATURES_TLS_CERT, _TLS_KEY and _TLS_CA (see `labeldp keys dev-ca`), "
                "or set LABELDP_FEATURES_ALLOW_PLAINTEXT=true for local development"
            )
        await server.start()
        return server, port

    # -- the two calls --------------------------------------------------------------------------------
    async def deliver_release(self, frames: AsyncIterator[bytes], context: Context) -> pb.DeliveryReceipt:
        # Counted before the answer leaves: `context.abort` sends the status at once, so a count in a
        # `finally` would land after the sender (and a scrape of /metrics) has seen the refusal.
        counted = False

        def count(outcome: str, examples: int = 0) -> None:
            nonlocal counted
            counted = True
            self.receiver.on_outcome(outcome, examples)

        try:
            receipt, outcome = await self._release(frames, context)
            count(outcome, receipt.example_count)
            return receipt
        except DomainError as exc:
            count("idle_timeout" if exc.code == "deadline_exceeded" else exc.code)
            await self._refuse(context, exc, "release")
        except Exception:
            count("internal")
            await self._failed(context, "release")
        finally:
            if not counted:  # the sender went away (the task was cancelled)
                self.receiver.on_outcome("cancelled", 0)

    async def _release(
        self, frames: AsyncIterator[bytes], context: Context
    ) -> tuple[pb.DeliveryReceipt, str]:
        with self.admission.before_header(peer_of(context)):
            first = await self._next(frames, self.settings.stream_header_seconds, "the signed header")
            if first is None:
                raise WireError("invalid_argument", "empty stream")
            opened = await self._work(self.receiver.open, first)
        if isinstance(opened, pb.DeliveryReceipt):
            return opened, "replayed"
        with self.admission.of_tenant(opened.tenant):
            spool = await self._work(self.receiver.spool, opened)
            try:
                while (
                    data := await self._next(frames, self.settings.stream_idle_seconds, "a frame")
                ) is not None:
                    await self._work(spool.add, data)
                return await self._work(spool.finish)
            finally:  # before the answer leaves; after any step of it still running (its lock)
                await asyncio.shield(self._work(spool.close))

    async def deliver_model(self, requests: AsyncIterator[bytes], context: Context) -> pb.ModelReceipt:
        try:
            with self.admission.before_header(peer_of(context)):
                data = await self._next(requests, self.settings.stream_header_seconds, "the model message")
                if data is None:
                    raise WireError("invalid_argument", "the call carries no model message")
                return await self._work(self.receiver.deliver_model, data)
        except DomainError as exc:
            await self._refuse(context, exc, "model")
        except Exception:
            await self._failed(context, "model")

    async def price_examples(self, frames: AsyncIterator[bytes], context: Context) -> AsyncIterator[bytes]:
        """The signed request, then its ID chunks; answers the signed priors and the group chunks."""
        outcome, examples = "cancelled", 0
        try:
            answer, examples = await self._pricing(frames, context)
            outcome = "answered"
        except DomainError as exc:
            outcome = "idle_timeout" if exc.code == "deadline_exceeded" else exc.code
            await self._refuse(context, exc, "pricing")
        except Exception:
            outcome = "internal"
            await self._failed(context, "pricing")
        finally:
            if self.pricing is not None:
                self.pricing.on_outcome(outcome, examples)
        for frame in answer:
            yield frame

    async def _pricing(self, frames: AsyncIterator[bytes], context: Context) -> tuple[list[bytes], int]:
        if self.pricing is None:
            raise WireError("unimplemented", "this receiver prices no examples")
        with self.admission.before_header(peer_of(context)):
            first = await self._next(frames, self.settings.stream_header_seconds, "the signed request")
            if first is None:
                raise WireError("invalid_argument", "empty stream")
            stream = await self._work(self.pricing.open, first)
        try:
            with self.admission.of_tenant(stream.tenant):
                while (
                    data := await self._next(frames, self.settings.stream_idle_seconds, "a frame")
                ) is not None:
                    await self._work(stream.add, data)
                return await self._work(stream.finish), stream.examples
        finally:
            await asyncio.shield(self._work(stream.close))

    # -- helpers --------------------------------------------------------------------------------------
    async def _next(self, frames: AsyncIterator[bytes], seconds: float, what: str) -> bytes | None:
        """The next frame (None at the end of the stream), or DEADLINE_EXCEEDED after ``seconds``."""
        try:
            return await asyncio.wait_for(anext(frames), seconds)
        except StopAsyncIteration:
            return None
        except TimeoutError as exc:
            raise WireError("deadline_exceeded", f"{what} did not arrive within {seconds:g} s") from exc

    async def _work(self, work: Callable[..., T], *args: object) -> T:
        return await self.loop.run_in_executor(self.workers, work, *args)

    async def _refuse(self, context: Context, exc: DomainError, what: str) -> NoReturn:
        log.info("%s refused", what, extra={"status": exc.code})
        if isinstance(exc, BusyError):
            context.set_trailing_metadata(((PUSHBACK_METADATA, str(exc.retry_after_ms)),))
        await context.abort(grpc.StatusCode[exc.grpc_code], exc.detail)
        raise AssertionError("abort raises")  # pragma: no cover

    async def _failed(self, context: Context, what: str) -> NoReturn:
        log.exception("the receiver failed on a %s", what)
        await context.abort(
            grpc.StatusCode.INTERNAL, "the receiver failed; its operator's log has the detail"
        )
        raise AssertionError("abort raises")  # pragma: no cover


def build_server(
    receiver: Receiver, settings: FeaturesSettings, pricing: PricingWork | None = None
) -> tuple[ReceiverServer, int]:
    """A started gRPC server and the port it listens on (``grpc_port`` 0 picks a free one)."""
    server = ReceiverServer(receiver, settings, pricing)
    # load (from numba's disk cache, or compile once) the ID hash kernel now, not in the first delivery
    threading.Thread(target=compiled, name="warm-id-hash", daemon=True).start()
    return server, server.port
