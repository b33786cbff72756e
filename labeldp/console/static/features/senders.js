// This party's identity (GET /v1/identity) and the senders it pinned (GET /v1/senders): only
// messages signed with a pinned key are accepted.

import { all, get } from "../common/api.js";
import { h } from "../common/dom.js";
import { plural, when } from "../common/format.js";
import { code, facts, note, section, table, title } from "../common/ui.js";

export async function sendersPage({ signal }) {
  const [identity, senders] = await Promise.all([get("/v1/identity", undefined, signal), all("/v1/senders", {}, { signal })]);
  return [
    title("Senders"),
    section(
      "This party",
      facts([
        ["party ID", identity.party_id],
        ["key fingerprint", code(identity.key_id)],
        ["gRPC receiver port", String(identity.grpc_port)],
      ]),
      h("details", {}, h("summary", {}, "Public key (PEM)"), h("pre", {}, h("code", {}, identity.public_key_pem))),
    ),
    section(
      "Pinned senders",
      note("A labels party is pinned with its public key (POST /v1/senders); a release it signs with any other key is refused before anything is stored."),
      table({
        caption: plural(senders.length, "pinned sender"),
        columns: [
          { label: "sender", value: (x) => x.id },
          { label: "key fingerprint", value: (x) => code(x.key_id) },
          { label: "pinned", value: (x) => when(x.created_at) },
        ],
        rows: senders,
        empty: "No senders pinned yet.",
      }),
    ),
  ];
}
