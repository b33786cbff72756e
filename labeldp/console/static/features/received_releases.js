// Received releases (GET /v1/releases, GET /v1/releases/{id}): each one stored only after its
// signature verified against the sender's pinned key, with its sizes and the mechanism it states.

import { all, download, get, path } from "../common/api.js";
import { h, replace } from "../common/dom.js";
import { count, num, plural, short, when } from "../common/format.js";
import { mechanismView } from "../common/mechanism.js";
import { code, facts, field, idLink, note, refused, section, table, title, unmarkFields } from "../common/ui.js";

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

// Download the release's training set (joined to a feature table) or its released values alone, as
// Parquet with the release's description in its metadata: to train in one's own stack (labeldp_model).
function exportSection(r, tables) {
  const form = h(
    "form",
    { novalidate: true },
    h(
      "div",
      { class: "fields" },
      field({
        label: "feature table",
        name: "feature_table",
        value: "",
        options: [["", "none: the released values alone"], ...tables.map((t) => [t.name, `${t.name} (${count(t.rows)} rows)`])],
      }),
    ),
    h("button", { type: "submit" }, "Download training set (Parquet)"),
  );
  const result = h("div", { "aria-live": "polite" });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const table = form.elements.feature_table.value;
    const url = table
      ? `${path("releases", r.release_id, "training-set")}?feature_table=${encodeURIComponent(table)}`
      : path("releases", r.release_id, "released-values");
    unmarkFields(form);
    replace(result, h("p", { class: "loading" }, "Exporting…"));
    try {
      const size = await download(url, `${table ? "training-set" : "released-values"}-${r.release_id}.parquet`);
      replace(result, h("p", { class: "success" }, `Downloaded ${count(size)} bytes. The release's description (mechanism and correction) is in the file's metadata: labeldp_model.Release.from_metadata reads it.`));
    } catch (error) {
      replace(result, refused(form, error));
    }
  });
  return section(
    "Train in your own stack",
    note("The feature table's rows that have a released label, with released_bin and released_value beside the features (or the released values alone). Correct for the noise with labeldp_model: see the publisher's guide."),
    form,
    result,
  );
}

export async function receivedReleasePage({ params: [id], signal }) {
  const [r, tables] = await Promise.all([get(path("releases", id), undefined, signal), all("/v1/feature-tables", {}, { signal })]);
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
    exportSection(r, tables),
    h("details", {}, h("summary", {}, "The signed header's fields"), h("pre", {}, h("code", {}, JSON.stringify(header, null, 2)))),
  ];
}
