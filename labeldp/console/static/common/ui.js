// The console's building blocks: sections, definition lists, tables, forms and messages, each with
// the semantics assistive technology needs (captions, header scopes, labels, alerts).

import { h, uid } from "./dom.js";
import { short } from "./format.js";

/** The page's one h1 (focused after each navigation, so a screen reader starts there). */
export function title(text, ...after) {
  return h("div", { class: "page-head" }, h("h1", { tabindex: "-1" }, text), ...after);
}

/** A titled section of a page. */
export function section(heading, ...children) {
  const id = uid("section");
  return h("section", { "aria-labelledby": id }, h("h2", { id }, heading), ...children);
}

/** Pairs as a definition list: [["Examples", "43,152"], …]. */
export function facts(pairs) {
  return h(
    "dl",
    { class: "facts" },
    pairs
      .filter((pair) => pair)
      .map(([term, value]) => h("div", { class: "fact" }, h("dt", {}, term), h("dd", {}, value))),
  );
}

/**
 * A data table. columns: [{label, value: row => text|Node, numeric?}]; the first column heads its row.
 */
export function table({ caption, columns, rows, empty = "Nothing yet." }) {
  if (!rows.length) return h("p", { class: "empty" }, empty);
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      {},
      h("caption", {}, caption),
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          columns.map((c) => h("th", { scope: "col", class: c.numeric ? "num" : null }, c.label)),
        ),
      ),
      h(
        "tbody",
        {},
        rows.map((row) =>
          h(
            "tr",
            {},
            columns.map((c, i) =>
              h(i === 0 ? "th" : "td", { scope: i === 0 ? "row" : null, class: c.numeric ? "num" : null }, c.value(row)),
            ),
          ),
        ),
      ),
    ),
  );
}

/** A status as a word in a badge (the word carries the meaning; the colour only repeats it). */
export function badge(status) {
  const tone =
    { complete: "good", succeeded: "good", delivered: "good", failed: "bad", refused: "bad" }[status] ?? "neutral";
  return h("span", { class: `badge badge-${tone}` }, status ?? "—");
}

/** A link inside the console. */
export function link(href, text) {
  return h("a", { href }, text);
}

/** An ID shortened for a table, the whole of it in its title. */
export function idLink(href, id) {
  return h("a", { href, title: id }, h("code", {}, short(id)));
}

/** A code-formatted value (IDs, digests) that wraps instead of overflowing. */
export function code(text) {
  return h("code", { class: "wrap" }, text ?? "—");
}

/** An error message that screen readers announce. */
export function problem(error) {
  const where = error.status ? ` (${error.status} ${error.code})` : "";
  const detail = error.detail ?? error.message ?? String(error);
  return h("div", { class: "problem", role: "alert" }, h("strong", {}, "Refused: "), `${detail}${where}`);
}

/** A short note. */
export function note(...children) {
  return h("p", { class: "note" }, ...children);
}

/** A labelled form control: input, select or textarea. */
export function field({ label, name, type = "text", value, help, options, required, attrs = {} }) {
  const id = uid(name);
  const helpId = help ? `${id}-help` : null;
  const common = { id, name, required: required || null, "aria-describedby": helpId, ...attrs };
  let control;
  if (options) {
    control = h(
      "select",
      common,
      options.map(([optionValue, text]) =>
        h("option", { value: optionValue, selected: String(optionValue) === String(value) || null }, text),
      ),
    );
  } else if (type === "textarea") {
    control = h("textarea", common, value ?? "");
  } else {
    control = h("input", { type, value: value ?? null, ...common });
  }
  return h(
    "div",
    { class: "field" },
    h("label", { for: id }, label),
    control,
    help ? h("p", { class: "help", id: helpId }, help) : null,
  );
}

/** A group of radio buttons in a fieldset with its legend. */
export function choice({ legend, name, options, value }) {
  return h(
    "fieldset",
    { class: "choice" },
    h("legend", {}, legend),
    options.map(([optionValue, text]) => {
      const id = uid(name);
      return h(
        "div",
        { class: "radio" },
        h("input", { type: "radio", id, name, value: optionValue, checked: optionValue === value || null }),
        h("label", { for: id }, text),
      );
    }),
  );
}

/** A button that runs an async action, disabled while it runs. */
export function action(text, run, attrs = {}) {
  const button = h("button", { type: "button", ...attrs }, text);
  button.addEventListener("click", async () => {
    button.disabled = true;
    try {
      await run(button);
    } finally {
      button.disabled = false;
    }
  });
  return button;
}
