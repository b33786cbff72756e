// Joins (POST /v1/joins): how a received release and a feature table match by example ID.

import { all, call } from "../common/api.js";
import { h, replace } from "../common/dom.js";
import { stack } from "../common/charts.js";
import { count, pct, short } from "../common/format.js";
import { facts, field, note, refused, section, title, unmarkFields } from "../common/ui.js";

export function joinView(join) {
  return section(
    "Match",
    facts([
      ["released examples", count(join.release_examples)],
      ["feature rows", count(join.feature_rows)],
      ["in both", count(join.in_both)],
      ["release match rate", pct(join.release_match_rate)],
      ["feature match rate", pct(join.feature_match_rate)],
    ]),
    stack({
      caption: `${join.feature_table} joined to release ${short(join.release_id)} by example ID`,
      description: `${pct(join.release_match_rate)} of the released examples have a feature row; ${count(join.only_in_release)} have none, and ${count(join.only_in_features)} feature rows have no released label.`,
      format: count,
      parts: [
        { label: "in both (trainable)", value: join.in_both, tone: "c" },
        { label: "only in the release", value: join.only_in_release, tone: "b" },
        { label: "only in the features", value: join.only_in_features, tone: "d" },
      ],
    }),
  );
}

export async function joinsPage({ query, signal }) {
  const [releases, tables] = await Promise.all([all("/v1/releases", {}, { signal }), all("/v1/feature-tables", {}, { signal })]);
  if (!releases.length || !tables.length) {
    return [title("Joins"), note("A join needs a received release and a feature table.")];
  }
  const form = h(
    "form",
    { novalidate: true },
    h(
      "div",
      { class: "fields" },
      field({
        label: "received release",
        name: "release_id",
        value: query.get("release") ?? releases[releases.length - 1].release_id,
        options: releases.map((r) => [r.release_id, `${short(r.release_id)} from ${r.sender_id} (${count(r.example_count)} examples)`]),
      }),
      field({ label: "feature table", name: "feature_table", value: tables[tables.length - 1].name, options: tables.map((t) => [t.name, `${t.name} (${count(t.rows)} rows)`]) }),
    ),
    h("button", { type: "submit" }, "Join"),
  );
  const result = h("div", { "aria-live": "polite" });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    unmarkFields(form);
    replace(result, h("p", { class: "loading" }, "Joining…"));
    try {
      const join = await call("POST", "/v1/joins", {
        body: { release_id: form.elements.release_id.value, feature_table: form.elements.feature_table.value },
      });
      replace(result, joinView(join));
    } catch (error) {
      replace(result, refused(form, error));
    }
  });
  return [title("Joins"), note("A join report reads both sides by example ID; nothing is stored."), form, result];
}
