"""Hostile priors: a features party the labels party pinned may still answer wrongly. A proxy in front of
the real features party changes its answer — re-signing it with the publisher's own key where the change
should be caught by what the answer states, not by its signature — and every such answer is refused with
502 ``priors-refused`` naming the reason, and nothing is stored."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field

import grpc
import httpx
import pytest
from cryptography.hazmat.primitives import serialization

from labeldp.common.identity import Identity
from labeldp.common.wire.pricing import NO_GROUP_CODE
from labeldp.v1 import priors_pb2 as ppb
from labels_party.priors.exchange import METHOD
from tests.support.labels_api import problem
from tests.support.priors import Parties, two_parties

Frames = list[bytes]
Mutation = Callable[[Frames], Frames]


@dataclass
class Proxy:
    """A gRPC server that forwards a pricing stream to the real features party and answers what
    ``mutate`` makes of its answer; ``answers`` keeps every real answer it saw."""

    upstream: grpc.Channel
    mutate: Mutation = lambda frames: frames
    answers: list[Frames] = field(default_factory=list)

    def handle(self, frames: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
        sent = list(frames)
        answer = list(self.upstream.stream_stream(METHOD)(iter(sent), timeout=60))
        self.answers.append(answer)
        yield from self.mutate(answer)


def split(frames: Frames) -> tuple[ppb.PriorsHeader, list[ppb.GroupChunk]]:
    head = ppb.PriorsFrame.FromString(frames[0]).header
    return ppb.PriorsHeader.FromString(head.header), [ppb.PriorsFrame.FromString(f).chunk for f in frames[1:]]


def signed(header: ppb.PriorsHeader, chunks: list[ppb.GroupChunk], identity: Identity) -> Frames:
    """An answer as a hostile holder of ``identity`` would send it: digest recomputed, key set, signed."""
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk.SerializeToString(deterministic=True))
    header.payload_sha256 = digest.digest()
    header.sender_key_id = identity.key_id
    header.sender_public_key = identity.public_key.public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    data = header.SerializeToString(deterministic=True)
    first = ppb.PriorsFrame(header=ppb.SignedPriors(header=data, signature=identity.sign(data)))
    return [first.SerializeToString(), *(ppb.PriorsFrame(chunk=c).SerializeToString() for c in chunks)]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Parties, Proxy, httpx.Client, str]]:
    with two_parties(tmp_path_factory.mktemp("hostile-priors")) as parties:
        assert parties.grant().status_code == 200
        certs = parties.certs
        credentials = grpc.ssl_channel_credentials(
            root_certificates=certs.ca.read_bytes(),
            private_key=certs.client_key.read_bytes(),
            certificate_chain=certs.client_cert.read_bytes(),
        )
        upstream = grpc.secure_channel(
            f"localhost:{parties.grpc_port}",
            credentials,
            options=[("grpc.max_receive_message_length", 64 * 2**20)],
        )
        proxy = Proxy(upstream)
        server = grpc.server(
            futures.ThreadPoolExecutor(4), options=[("grpc.max_send_message_length", 64 * 2**20)]
        )
        server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    "labeldp.v1.FeaturesParty",
                    {"PriceExamples": grpc.stream_stream_rpc_method_handler(proxy.handle)},
                ),
            )
        )
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        client = parties.labels_tenant("hostile")
        recipient = parties.recipient(grpc_address=f"127.0.0.1:{port}", tls_ca_pem=None)
        assert client.post("/v1/recipients", json=recipient).status_code == 201
        ds = client.post("/v1/datasets", json={"name": "w", "label_type": "count", "lo": 0, "hi": 52}).json()[
            "id"
        ]
        body = "example_id,label\n" + "".join(f"w{i},{i % 53}\n" for i in range(300))
        client.put(f"/v1/datasets/{ds}/labels", content=body, headers={"Content-Type": "text/csv"})
        try:
            yield parties, proxy, client, ds
        finally:
            server.stop(None)
            upstream.close()


def ask(client: httpx.Client, ds: str, max_groups: int = 8) -> httpx.Response:
    return client.post(f"/v1/datasets/{ds}/priors", json={"recipient": "publisher", "max_groups": max_groups})


def priors_files(parties: Parties) -> int:
    folder = parties.labels_settings.data_dir / "priors"
    return len(list(folder.iterdir())) if folder.exists() else 0


def test_the_proxy_passes_an_honest_answer(setup: tuple[Parties, Proxy, httpx.Client, str]) -> None:
    parties, proxy, client, ds = setup
    proxy.mutate = lambda frames: frames
    r = ask(client, ds)
    assert r.status_code == 201, r.text
    assert r.json()["examples_priced"] == 300
    resigned = ask_with(setup, lambda f: signed(*split(f), parties.features_identity_key()))
    assert resigned.status_code == 201, resigned.text  # re-signing by the pinned key alone changes nothing


def ask_with(setup: tuple[Parties, Proxy, httpx.Client, str], mutate: Mutation) -> httpx.Response:
    _, proxy, client, ds = setup
    proxy.mutate = mutate
    try:
        return ask(client, ds)
    finally:
        proxy.mutate = lambda frames: frames


def _flip_last_byte(frames: Frames) -> Frames:
    head = ppb.PriorsFrame.FromString(frames[0]).header
    tampered = head.header[:-1] + bytes([head.header[-1] ^ 1])
    first = ppb.PriorsFrame(header=ppb.SignedPriors(header=tampered, signature=head.signature))
    return [first.SerializeToString(), *frames[1:]]


def _unsigned(frames: Frames) -> Frames:
    head = ppb.PriorsFrame.FromString(frames[0]).header
    return [ppb.PriorsFrame(header=ppb.SignedPriors(header=head.header)).SerializeToString(), *frames[1:]]


def _tampered_chunk(frames: Frames) -> Frames:
    chunk = ppb.PriorsFrame.FromString(frames[1]).chunk
    chunk.groups = bytes([chunk.groups[0] ^ 1]) + chunk.groups[1:]
    return [frames[0], ppb.PriorsFrame(chunk=chunk).SerializeToString(), *frames[2:]]


def changed(
    change: Callable[[ppb.PriorsHeader, list[ppb.GroupChunk]], None],
) -> Callable[[Parties], Mutation]:
    """A mutation that changes the header or chunks, then re-signs with the publisher's pinned key."""

    def with_key(parties: Parties) -> Mutation:
        def mutate(frames: Frames) -> Frames:
            header, chunks = split(frames)
            change(header, chunks)
            return signed(header, chunks, parties.features_identity_key())

        return mutate

    return with_key


def _other_support(h: ppb.PriorsHeader, c: list[ppb.GroupChunk]) -> None:
    del h.support[-1]
    for g in h.groups:
        del g.masses[-1]


def _more_groups(h: ppb.PriorsHeader, c: list[ppb.GroupChunk]) -> None:
    while len(h.groups) <= 8:
        h.groups.append(ppb.GroupPrior(masses=list(h.groups[0].masses)))


def _mass(value: float) -> Callable[[ppb.PriorsHeader, list[ppb.GroupChunk]], None]:
    def change(h: ppb.PriorsHeader, c: list[ppb.GroupChunk]) -> None:
        h.groups[0].masses[3] = value

    return change


def _group_code(h: ppb.PriorsHeader, c: list[ppb.GroupChunk]) -> None:
    c[0].groups = len(h.groups).to_bytes(2, "little") + c[0].groups[2:]


def _fewer(h: ppb.PriorsHeader, c: list[ppb.GroupChunk]) -> None:
    c[0].groups = c[0].groups[:-2]


def _more(h: ppb.PriorsHeader, c: list[ppb.GroupChunk]) -> None:
    c[0].groups = c[0].groups + NO_GROUP_CODE.to_bytes(2, "little")


def _fewer_counted(h: ppb.PriorsHeader, c: list[ppb.GroupChunk]) -> None:
    c[0].groups, c[0].examples = c[0].groups[:-2], c[0].examples - 1
    h.example_count -= 1


def _no_chunks(h: ppb.PriorsHeader, c: list[ppb.GroupChunk]) -> None:
    c.clear()


def _oversize(h: ppb.PriorsHeader, c: list[ppb.GroupChunk]) -> None:
    row = list(h.groups[0].masses)
    del h.groups[:]
    h.groups.extend(ppb.GroupPrior(masses=row) for _ in range(10_000))  # 4.3 MB of masses


def _other_request(h: ppb.PriorsHeader, c: list[ppb.GroupChunk]) -> None:
    h.request_id = "00000000-0000-4000-8000-000000000000"


def _expired(h: ppb.PriorsHeader, c: list[ppb.GroupChunk]) -> None:
    h.expires_at_unix_ms = h.created_at_unix_ms - 1


def _other_recipient(h: ppb.PriorsHeader, c: list[ppb.GroupChunk]) -> None:
    h.recipient_id = "someone-else"


HOSTILE: dict[str, tuple[Callable[[Parties], Mutation], str]] = {
    "a tampered header byte": (lambda p: _flip_last_byte, "signature does not verify"),
    "no signature": (lambda p: _unsigned, "signature does not verify"),
    "a tampered group chunk": (lambda p: _tampered_chunk, "do not match the signed digest"),
    "another key": (lambda p: lambda f: signed(*split(f), Identity.generate()), "another key than"),
    "another support": (changed(_other_support), "support is not the dataset's"),
    "more groups than asked": (changed(_more_groups), "9 groups; between 1 and 8"),
    "a NaN mass": (changed(_mass(math.nan)), "finite"),
    "a negative mass": (changed(_mass(-0.25)), "≥ 0"),
    "an infinite mass": (changed(_mass(math.inf)), "finite"),
    "a group index ≥ G": (changed(_group_code), "names a group ≥ G"),
    "too few entries": (changed(_fewer), "must hold the 300 groups"),
    "too many entries": (changed(_more), "must hold the 300 groups"),
    "too few entries, counts changed to match": (changed(_fewer_counted), "counts are not the request's"),
    "no group chunks": (changed(_no_chunks), "ended after 0 of 1"),
    "an oversize header": (changed(_oversize), "exceeds 4194304 bytes"),
    "an answer to another request": (changed(_other_request), "another request"),
    "an expired answer": (changed(_expired), "expired"),
    "an answer for another party": (changed(_other_recipient), "addressed to another"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_answer_is_refused_and_nothing_is_stored(
    setup: tuple[Parties, Proxy, httpx.Client, str], case: str
) -> None:
    parties, _, client, _ = setup
    mutation, reason = HOSTILE[case]
    before, files = client.get("/v1/priors").json()["items"], priors_files(parties)
    r = ask_with(setup, mutation(parties))
    body = problem(r, 502, "priors-refused")
    assert reason in body["reason"], body
    assert body["grpc_status"] is None  # the recipient answered; its answer failed a check here
    assert client.get("/v1/priors").json()["items"] == before and priors_files(parties) == files


def test_a_replayed_answer_of_an_earlier_request_is_refused(
    setup: tuple[Parties, Proxy, httpx.Client, str],
) -> None:
    parties, proxy, client, _ = setup
    assert ask_with(setup, lambda f: f).status_code == 201
    earlier = proxy.answers[-1]
    before, files = client.get("/v1/priors").json()["items"], priors_files(parties)
    body = problem(ask_with(setup, lambda f: earlier), 502, "priors-refused")
    assert "another request" in body["reason"]
    assert client.get("/v1/priors").json()["items"] == before and priors_files(parties) == files
