// Feature tables (GET /v1/feature-tables): the publisher's uploads, each with its inferred schema.

import { all } from "../common/api.js";
import { h } from "../common/dom.js";
import { count, plural, when } from "../common/format.js";
import { note, table, title } from "../common/ui.js";

export async function tablesPage({ signal }) {
  const tables = await all("/v1/feature-tables", {}, { signal });
  return [
    title("Feature tables"),
    note("Uploaded with PUT /v1/feature-tables/{name} (labeldp features upload); each upload replaces the table as its next version."),
    table({
      caption: plural(tables.length, "feature table"),
      columns: [
        { label: "name", value: (t) => t.name },
        { label: "version", value: (t) => String(t.version), numeric: true },
        { label: "rows", value: (t) => count(t.rows), numeric: true },
        {
          label: "columns (type)",
          value: (t) => h("ul", { class: "plain" }, Object.entries(t.schema).map(([c, kind]) => h("li", {}, h("code", {}, c), ` ${kind}`))),
        },
        { label: "non-sensitive (exportable)", value: (t) => (t.non_sensitive.length ? t.non_sensitive.join(", ") : "none") },
        { label: "updated", value: (t) => when(t.updated_at) },
      ],
      rows: tables,
      empty: "No feature tables yet.",
    }),
  ];
}
