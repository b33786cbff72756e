// Datasets: the list (GET /v1/datasets), and one dataset's public spec, uploads and versions, universe,
// budget (GET /v1/datasets/{id}/budget), releases (GET /v1/datasets/{id}/releases) and the priors a
// features party signed for its examples (GET /v1/datasets/{id}/priors).

import { all, get, path } from "../common/api.js";
import { h } from "../common/dom.js";
import { count, num, plural, when } from "../common/format.js";
import { badge, facts, idLink, link, note, section, table, title } from "../common/ui.js";
import { budgetView } from "./budget.js";

function support(spec, k) {
  const grid = spec.support ? `${spec.support.kind}${spec.support.k ? `, k = ${count(spec.support.k)}` : ""}` : "integers";
  return `${count(k)} points (${grid})`;
}

export async function datasetsPage({ signal }) {
  const datasets = await all("/v1/datasets", {}, { signal });
  return [
    title("Datasets"),
    note("Each dataset's public parameters were declared before any label was uploaded."),
    table({
      caption: `${plural(datasets.length, "dataset")} of this tenant, oldest first`,
      columns: [
        { label: "name", value: (d) => link(`#/datasets/${encodeURIComponent(d.id)}`, d.name) },
        { label: "label type", value: (d) => d.spec.label_type },
        { label: "bounds", value: (d) => `${num(d.spec.lo)} – ${num(d.spec.hi)}` },
        { label: "support points", value: (d) => count(d.support_size), numeric: true },
        { label: "labels", value: (d) => count(d.label_count), numeric: true },
        { label: "universe", value: (d) => (d.universe_count === null ? "none" : count(d.universe_count)), numeric: true },
        { label: "labels version", value: (d) => String(d.labels_version), numeric: true },
        { label: "created", value: (d) => when(d.created_at) },
      ],
      rows: datasets,
      empty: "No datasets yet: create one with POST /v1/datasets (labeldp labels dataset create).",
    }),
  ];
}

export async function datasetPage({ params: [id], signal }) {
  const [ds, releases, priors] = await Promise.all([
    get(path("datasets", id), undefined, signal),
    all(path("datasets", id, "releases"), {}, { signal }),
    all(path("datasets", id, "priors"), {}, { signal }),
  ]);
  const spec = ds.spec;
  const universe =
    ds.universe_count === null
      ? ["universe", "none declared: a release lists the labelled examples only"]
      : ["universe", `${count(ds.universe_count)} example IDs of ${count(ds.universe_users)} users (version ${ds.universe_version})`];
  return [
    title(ds.name, h("a", { href: `#/datasets/${encodeURIComponent(ds.id)}/plan`, class: "button-link" }, "Plan a release")),
    facts([
      ["dataset ID", h("code", {}, ds.id)],
      ["label type", spec.label_type],
      ["bounds", `${num(spec.lo)} – ${num(spec.hi)}`],
      ["support", support(spec, ds.support_size)],
      ["default label", spec.default_label === undefined || spec.default_label === null ? "none" : num(spec.default_label)],
      ["created", when(ds.created_at)],
    ]),
    section(
      "Uploads and versions",
      facts([
        ["labels", `${count(ds.label_count)} examples (version ${ds.labels_version})`],
        universe,
        ["non-sensitive rows", ds.non_sensitive_version ? `version ${ds.non_sensitive_version}` : "none uploaded"],
      ]),
      note("Every upload is validated completely, then published as the next version; a failed upload changes nothing."),
      h("details", {}, h("summary", {}, "The public spec as declared"), h("pre", {}, h("code", {}, JSON.stringify(spec, null, 2)))),
    ),
    await budgetView(ds, signal),
    section(
      "Releases",
      table({
        caption: `${plural(releases.length, "release")} of ${ds.name}`,
        columns: [
          { label: "release", value: (r) => idLink(`#/releases/${encodeURIComponent(r.id)}`, r.id) },
          { label: "status", value: (r) => badge(r.status) },
          { label: "unit", value: (r) => r.privacy_unit },
          { label: "ε", value: (r) => num(r.privacy_unit === "user" ? r.epsilon_user : r.epsilon), numeric: true },
          { label: "examples", value: (r) => count(r.examples), numeric: true },
          { label: "bins", value: (r) => (r.bins ? count(r.bins.length) : "—"), numeric: true },
          { label: "created", value: (r) => when(r.created_at) },
        ],
        rows: releases,
        empty: "Nothing released from this dataset yet.",
      }),
    ),
    section(
      "Priors from the features party",
      note(
        "Each example's group and each group's prior, signed by a pinned features party from its model's " +
          "predictions (no label left this party), for a feature-aware release.",
      ),
      table({
        caption: `${plural(priors.length, "set")} of priors for ${ds.name}`,
        columns: [
          { label: "priors", value: (p) => h("code", {}, p.id) },
          { label: "groups", value: (p) => count(p.groups), numeric: true },
          { label: "examples priced", value: (p) => `${count(p.examples_priced)} of ${count(p.examples_requested)}`, numeric: true },
          { label: "model", value: (p) => h("code", {}, p.model_id) },
          { label: "rule", value: (p) => p.rule },
          { label: "created", value: (p) => when(p.created_at) },
        ],
        rows: priors,
        empty: "No priors yet: POST /v1/datasets/{id}/priors (labeldp labels priors fetch).",
      }),
    ),
  ];
}
