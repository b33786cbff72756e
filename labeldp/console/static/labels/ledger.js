// The ledger as a timeline (GET /v1/ledger): every charge and budget change of the tenant, append-only.
// A charge names its release; the release's dataset is shown by name (GET /v1/releases, GET /v1/datasets),
// its ID in the link's tooltip.

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

/** "— release 9286ce9b of demo-prices" for a charge; its note unless it only names that dataset's ID. */
function origin(entry, releases, names) {
  const release = entry.release_id ? releases.get(entry.release_id) : undefined;
  const dataset = release?.dataset_id;
  const named = dataset !== undefined && names.has(dataset);
  return [
    entry.release_id ? [" — release ", idLink(`#/releases/${encodeURIComponent(entry.release_id)}`, entry.release_id)] : null,
    named
      ? [" of dataset ", h("a", { href: `#/datasets/${encodeURIComponent(dataset)}`, title: `dataset ${dataset}` }, names.get(dataset))]
      : null,
    entry.note && !(named && entry.note === `dataset ${dataset}`) ? h("span", { class: "note" }, ` (${entry.note})`) : null,
  ];
}

export async function ledgerPage({ signal }) {
  const [entries, releaseList, datasets] = await Promise.all([
    all("/v1/ledger", {}, { signal }),
    all("/v1/releases", {}, { signal }),
    all("/v1/datasets", {}, { signal }),
  ]);
  const releases = new Map(releaseList.map((r) => [r.id, r]));
  const names = new Map(datasets.map((d) => [d.id, d.name]));
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
                origin(e, releases, names),
              ),
            ),
          )
        : h("p", { class: "empty" }, "No entries."),
    ),
  ];
}
