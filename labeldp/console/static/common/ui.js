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

const LOCATIONS = new Set(["body", "query", "path", "header"]); // where a field was: not its name

/**
 * Each reason a problem gives about a request field, as [{field, message}]: an invalid request's
 * errors (pydantic's loc without its location: "epsilon", "example_ids.3"), a domain error's
 * parameter ("epsilon_prior"), the example IDs a request named that do not exist.
 */
export function reasons(error) {
  const body = error?.body ?? {};
  const out = [];
  for (const e of Array.isArray(body.errors) ? body.errors : []) {
    const loc = Array.isArray(e.loc) ? e.loc.map(String) : [];
    out.push({ field: (LOCATIONS.has(loc[0]) ? loc.slice(1) : loc).join("."), message: String(e.msg ?? "") });
  }
  if (typeof body.parameter === "string" && body.parameter) out.push({ field: body.parameter, message: error.detail });
  if (body.type === "unknown-example-ids" && Array.isArray(body.example_ids)) {
    const more = (Number.isInteger(body.unknown) ? body.unknown : 0) - body.example_ids.length;
    out.push({ field: "example_ids", message: `not found: ${body.example_ids.join(", ")}${more > 0 ? ` and ${more} more` : ""}` });
  }
  return out;
}

/** An error message that screen readers announce, with each reason on its own line. */
export function problem(error, listed = reasons(error).map((r) => (r.field ? `${r.field}: ${r.message}` : r.message))) {
  const where = error.status ? ` (${error.status} ${error.code})` : "";
  const detail = error.detail ?? error.message ?? String(error);
  return h(
    "div",
    { class: "problem", role: "alert" },
    h("strong", {}, "Refused: "),
    `${detail}${where}`,
    listed.length ? h("ul", { class: "reasons" }, listed.map((line) => h("li", {}, line))) : null,
  );
}

/** The visible control of a form that sends ``field`` ("example_ids.3": the example_ids control). */
function controlFor(form, field) {
  const parts = field.split(".");
  for (let n = parts.length; n > 0; n -= 1) {
    let control = form.elements.namedItem(parts.slice(0, n).join("."));
    if (control instanceof RadioNodeList) control = control[0] ?? null;
    if (control && !control.closest("[hidden]")) return control;
  }
  return null;
}

function unmark(control) {
  const errorId = control.dataset.errorId;
  if (!errorId) return;
  document.getElementById(errorId)?.remove();
  const rest = (control.getAttribute("aria-describedby") ?? "").split(" ").filter((id) => id && id !== errorId);
  if (rest.length) control.setAttribute("aria-describedby", rest.join(" "));
  else control.removeAttribute("aria-describedby");
  control.removeAttribute("aria-invalid");
  delete control.dataset.errorId;
}

/** Clear what an earlier refusal marked on the form's fields. */
export function unmarkFields(form) {
  for (const control of form.querySelectorAll("[data-error-id]")) unmark(control);
}

function mark(control, message) {
  const wrapper = control.closest(".field, fieldset") ?? control.parentElement;
  let note = control.dataset.errorId ? document.getElementById(control.dataset.errorId) : null;
  if (note) return; // the first reason about an input is shown beside it; the alert lists them all
  note = h("p", { class: "field-error", id: uid("error") }, message);
  wrapper.append(note);
  control.dataset.errorId = note.id;
  control.setAttribute("aria-invalid", "true");
  control.setAttribute("aria-describedby", [control.getAttribute("aria-describedby"), note.id].filter(Boolean).join(" "));
  control.addEventListener("input", () => unmark(control), { once: true });
}

/**
 * A form's request refused: each reason about a field the form has is shown next to its input (the
 * API's words; the input marked aria-invalid and described by them), and the returned alert lists
 * every reason, by the field's label where the form has one.
 */
export function refused(form, error, { rename = {} } = {}) {
  unmarkFields(form);
  const listed = reasons(error).map((r) => {
    // `rename` maps an API field to the input that holds it where the two differ (τ as a number)
    const [head, ...rest] = r.field.split(".");
    const field = head in rename ? [rename[head], ...rest].join(".") : r.field;
    const control = field ? controlFor(form, field) : null;
    if (!control) return r.field ? `${r.field}: ${r.message}` : r.message;
    mark(control, r.message);
    const label = control.labels?.[0]?.textContent ?? r.field;
    return `${label}: ${r.message}`;
  });
  return problem(error, listed);
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
