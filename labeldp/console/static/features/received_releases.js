// Received releases (GET /v1/releases, GET /v1/releases/{id}): each one stored only after its
// signature verified against the sender's pinned key, with its sizes and the mechanism it states.

import { all, get, path } from "../common/api.js";
import { h } from "../common/dom.js";
import { count, num, plural, short, when } from "../common/format.js";
import { mechanismView } from "../common/mechanism.js";
import { code, facts, idLink, note, section, table, title } from "../common/ui.js";

function fromMillis(value) {
  const ms = Number(value);
  return ms ? new Date(ms).toISOString() : null;
}

export async function receivedReleasesPage({ signal }) {
  const releases = await all("/v1/releases", {}, { signal });
  return [
    title("Received releases"),
    note("Every release here arrived over gRPC and was stored only after its header's signature verified against the sender's pinned key and its chunks matched the signed digest."),
    table({
      caption: plural(releases.length, "received release"),
      columns: [
        { label: "release", value: (r) => idLink(`#/releases/${encodeURIComponent(r.release_id)}`, r.release_id) },
        { label: "sender", value: (r) => r.sender_id },
        { label: "verified with key", value: (r) => h("code", { title: r.sender_key_id }, short(r.sender_key_id, 20)) },
        { label: "examples", value: (r) => count(r.example_count), numeric: true },
        { label: "chunks", value: (r) => count(r.chunk_count), numeric: true },
        { label: "mechanism", value: (r) => `${r.mechanism.kind}, ${r.mechanism.bin_values.length} bins` },
        { label: "ε", value: (r) => num(r.mechanism.epsilon), numeric: true },
        { label: "received", value: (r) => when(r.received_at) },
      ],
      rows: releases,
      empty: "Nothing received yet: a labels party delivers releases to this party's gRPC receiver.",
    }),
  ];
}

export async function receivedReleasePage({ params: [id], signal }) {
  const r = await get(path("releases", id), undefined, signal);
  const header = r.header;
  const q = `?release=${encodeURIComponent(r.release_id)}`;
  return [
    title(`Received release ${short(r.release_id)}`),
    h(
      "div",
      { class: "actions" },
      h("a", { href: `#/joins${q}`, class: "button-link" }, "Join it to a feature table"),
      h("a", { href: `#/training${q}`, class: "button-link" }, "Train a model on it"),
    ),
    section(
      "Signature and sizes",
      h("p", { class: "success" }, `Signature verified: signed by ${r.sender_id} with its pinned key ${r.sender_key_id}.`),
      facts([
        ["release ID", code(r.release_id)],
        ["sender", r.sender_id],
        ["sender's key fingerprint", code(r.sender_key_id)],
        ["addressed to", header.recipient_id ?? "—"],
        ["examples", count(r.example_count)],
        ["chunks", count(r.chunk_count)],
        ["payload SHA-256 (signed)", code(r.payload_sha256)],
        ["label type", header.label_type ?? "—"],
        ["signed at", when(fromMillis(header.created_at_unix_ms))],
        ["expires (for delivery)", when(fromMillis(header.expires_at_unix_ms))],
        ["received", when(r.received_at)],
      ]),
    ),
    section(
      "What an attacker could learn from it",
      note("Data-independent: stated by the mechanism itself, whatever the labels."),
      facts([
        ["worst-case additive advantage", num(r.worst_case_additive_advantage)],
        ["max multiplicative advantage (implemented ε)", num(r.max_multiplicative_advantage)],
      ]),
    ),
    mechanismView(r),
    h("details", {}, h("summary", {}, "The signed header's fields"), h("pre", {}, h("code", {}, JSON.stringify(header, null, 2)))),
  ];
}
