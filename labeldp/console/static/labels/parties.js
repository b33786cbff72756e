// This party's signing identity (GET /v1/identity) and the recipients its releases may be addressed to
// (GET /v1/recipients).

import { all, get } from "../common/api.js";
import { h } from "../common/dom.js";
import { plural, when } from "../common/format.js";
import { code, facts, note, section, table, title } from "../common/ui.js";

export async function partiesPage({ signal }) {
  const [identity, recipients] = await Promise.all([get("/v1/identity", undefined, signal), all("/v1/recipients", {}, { signal })]);
  return [
    title("Identity and recipients"),
    section(
      "This party's signing key",
      note("Recipients pin this key: they accept only messages it signed."),
      facts([
        ["party ID", identity.party_id],
        ["key fingerprint", code(identity.key_id)],
      ]),
      h("details", {}, h("summary", {}, "Public key (PEM)"), h("pre", {}, h("code", {}, identity.public_key_pem))),
    ),
    section(
      "Recipients",
      table({
        caption: `${plural(recipients.length, "registered features party", "registered features parties")}`,
        columns: [
          { label: "name", value: (r) => r.name },
          { label: "gRPC address", value: (r) => r.grpc_address ?? "—" },
          { label: "TLS", value: (r) => (r.tls ? "mutual TLS" : "no CA given") },
          { label: "pinned fingerprint", value: (r) => code(r.fingerprint) },
          { label: "registered", value: (r) => when(r.created_at) },
        ],
        rows: recipients,
        empty: "No recipients yet (POST /v1/recipients).",
      }),
    ),
  ];
}
