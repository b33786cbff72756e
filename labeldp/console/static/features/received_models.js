// Received models (GET /v1/semi-sensitive-models, …/{id}, …/{id}/artifact): models trained with
// semi-sensitive features at the labels party, verified like releases, with their signed guarantee.

import { all, download, get, path } from "../common/api.js";
import { h, replace } from "../common/dom.js";
import { bytes, num, plural, short, when } from "../common/format.js";
import { action, code, facts, idLink, note, problem, section, table, title } from "../common/ui.js";

function value(v) {
  if (typeof v === "number") return num(v);
  if (v === null || v === undefined) return "—";
  return typeof v === "object" ? JSON.stringify(v) : String(v);
}

export async function receivedModelsPage({ signal }) {
  const models = await all("/v1/semi-sensitive-models", {}, { signal });
  return [
    title("Received models"),
    note("Models trained with semi-sensitive features (label DP, then DP-SGD at the labels party), each stored only after its signature verified against the sender's pinned key."),
    table({
      caption: plural(models.length, "received model"),
      columns: [
        { label: "model", value: (m) => idLink(`#/semi-sensitive-models/${encodeURIComponent(m.model_id)}`, m.model_id) },
        { label: "sender", value: (m) => m.sender_id },
        { label: "verified with key", value: (m) => h("code", { title: m.sender_key_id }, short(m.sender_key_id, 20)) },
        { label: "label release", value: (m) => h("code", { title: m.label_release_id }, short(m.label_release_id)) },
        { label: "received", value: (m) => when(m.received_at) },
      ],
      rows: models,
      empty: "No models received.",
    }),
  ];
}

export async function receivedModelPage({ params: [id], signal }) {
  const m = await get(path("semi-sensitive-models", id), undefined, signal);
  const saved = h("div", { "aria-live": "polite" });
  return [
    title(`Received model ${short(m.model_id)}`),
    h("p", { class: "success" }, `Signature verified: signed by ${m.sender_id} with its pinned key ${m.sender_key_id}.`),
    facts([
      ["model ID", code(m.model_id)],
      ["label release", code(m.label_release_id)],
      ["message SHA-256", code(m.message_sha256)],
      ["received", when(m.received_at)],
    ]),
    section("Signed guarantee", facts(Object.entries(m.guarantee).map(([k, v]) => [k.replaceAll("_", " "), value(v)]))),
    section("Columns it reads", facts(Object.entries(m.columns).map(([k, v]) => [k.replaceAll("_", " "), value(v)]))),
    section(
      "Artifact",
      note("The signed message exactly as received: verifiable again by anyone who pins the sender's key."),
      h(
        "div",
        { class: "actions" },
        action("Download the signed message (JSON)", async () => {
          try {
            const size = await download(`${path("semi-sensitive-models", id)}/artifact`, `model-${id}.json`);
            replace(saved, h("p", { class: "success" }, `Downloaded ${bytes(size)}.`));
          } catch (error) {
            replace(saved, problem(error));
          }
        }),
        saved,
      ),
    ),
  ];
}
