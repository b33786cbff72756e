// The ledger as a timeline (GET /v1/ledger): every charge and budget change of the tenant, append-only.

import { all } from "../common/api.js";
import { h } from "../common/dom.js";
import { timeline } from "../common/charts.js";
import { count, num, plural, when } from "../common/format.js";
import { idLink, note, section, title } from "../common/ui.js";

function describe(entry) {
  if (entry.kind === "charge") {
    const users = entry.users ? `, ${count(entry.users)} users (the most any paid: ${num(entry.user_epsilon)})` : "";
    const delta = entry.delta ? `, δ ${num(entry.delta)}` : "";
    return `charged ε ${num(entry.epsilon)} to ${count(entry.examples)} examples${users}${delta}`;
  }
  if (entry.kind.endsWith("budget_set")) {
    const what = entry.kind === "budget_set" ? "per-example ε budget" : entry.kind.replace(/_set$/, "").replaceAll("_", " ");
    return `${what} set to ${num(entry.kind === "delta_budget_set" ? entry.delta : entry.epsilon)}`;
  }
  return `${entry.kind.replaceAll("_", " ")}: ε ${num(entry.epsilon)}`;
}

export async function ledgerPage({ signal }) {
  const entries = await all("/v1/ledger", {}, { signal });
  const charges = entries.filter((e) => e.kind === "charge");
  return [
    title("Ledger"),
    note("Append-only: every charge is written before any noise is drawn; nothing here is ever changed or removed."),
    entries.length
      ? timeline({
          caption: "The ledger over time",
          description: `${plural(entries.length, "entry", "entries")}: ${plural(charges.length, "charge")} (circles, as tall as the ε charged to each example) and ${plural(entries.length - charges.length, "budget change")} (squares, as tall as the new budget).`,
          entries: entries.map((e) => ({
            t: new Date(e.created_at),
            value: e.kind === "delta_budget_set" ? 0 : e.epsilon,
            kind: e.kind === "charge" ? "charge" : "budget",
            label: describe(e),
          })),
        })
      : null,
    section(
      "Entries",
      entries.length
        ? h(
            "ol",
            { class: "timeline" },
            entries.map((e) =>
              h(
                "li",
                { class: e.kind === "charge" ? "kind-charge" : "kind-budget" },
                h("time", { datetime: e.created_at }, when(e.created_at)),
                h("span", {}, describe(e)),
                e.release_id ? [" — release ", idLink(`#/releases/${encodeURIComponent(e.release_id)}`, e.release_id)] : null,
                e.note ? h("span", { class: "note" }, ` (${e.note})`) : null,
              ),
            ),
          )
        : h("p", { class: "empty" }, "No entries."),
    ),
  ];
}
