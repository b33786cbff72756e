// Plan a release: choose ε (or the user-level parameters), see the free preview — bins, expected
// error, attack bounds, the budget it would leave — and only then create it, with an Idempotency-Key
// (POST /v1/datasets/{id}/releases:preview, GET …/budget, GET /v1/recipients, POST …/releases).
// Changing any parameter withdraws the preview: what is created is what was previewed.

import { all, call, declaredBounds, get, idempotencyKey, path } from "../common/api.js";
import { h, replace } from "../common/dom.js";
import { count, num } from "../common/format.js";
import { mechanismView } from "../common/mechanism.js";
import { choice, facts, field, note, problem, refused, section, title, unmarkFields } from "../common/ui.js";
import { afterRelease } from "./budget.js";

const LOSSES = {
  real: ["squared", "absolute", "poisson"],
  count: ["squared", "absolute", "poisson"],
  binary: ["squared", "zero_one"],
  categorical: ["zero_one"],
};

function request(form) {
  const e = form.elements;
  const unit = e.privacy_unit.value;
  const body = { privacy_unit: unit, recipient: e.recipient.value, loss: e.loss.value };
  if (unit === "example") {
    body.epsilon = Number(e.epsilon.value);
  } else {
    body.epsilon_user = Number(e.epsilon_user.value);
    const bound = e.contribution_bound.value;
    body.contribution_bound = bound === "number" ? Number(e.tau.value) : bound;
  }
  if (e.epsilon_prior.value.trim() !== "") body.epsilon_prior = Number(e.epsilon_prior.value);
  if (e.mechanism.value !== "default") body.mechanism = e.mechanism.value;
  if (e.prior?.value) body.prior = { from: "features-party", priors_id: e.prior.value };
  return body;
}

function expectedError(preview) {
  const loss = preview.mechanism.loss;
  if (preview.mechanism.kind === "unbiased") return [["expected variance (squared error)", num(preview.expected_loss)], ["its root", num(Math.sqrt(preview.expected_loss))]];
  if (loss === "squared") return [["expected squared error", num(preview.expected_loss)], ["its root (RMSE)", num(Math.sqrt(preview.expected_loss))]];
  if (loss === "zero_one") return [["expected share released as another class", num(preview.expected_loss)]];
  return [[`expected ${loss} loss`, num(preview.expected_loss)]];
}

function previewView(ds, body, preview, budget) {
  const epsilon = body.privacy_unit === "user" ? body.epsilon_user : body.epsilon;
  return [
    section(
      "Preview",
      note("Free: spends nothing and draws no noise. It uses the exact label histogram, so it is for this tenant's eyes only; the release itself will use a noisy prior."),
      facts([
        ["examples", count(preview.examples)],
        ["ε", num(preview.epsilon)],
        ["ε₁ for the noisy prior", num(preview.epsilon_prior)],
        ["ε₂ for randomizing", num(preview.mechanism.epsilon_randomize)],
        [preview.mechanism.kind === "unbiased" ? "outputs" : "bins", count(preview.m)],
        ...expectedError(preview),
        ...(preview.unbiased_expected_variance != null
          ? [
              [`side by side: RR-on-Bins's expected ${preview.mechanism.loss} loss`, num(preview.rr_on_bins_expected_loss)],
              ["side by side: the unbiased randomizer's expected variance", num(preview.unbiased_expected_variance)],
            ]
          : []),
        ["worst-case additive advantage", num(preview.worst_case_additive_advantage)],
        ["max multiplicative advantage (implemented ε)", num(preview.max_multiplicative_advantage)],
      ]),
    ),
    preview.groups == null
      ? null
      : section(
          "With the publisher's priors",
          note("Each example with a group is randomized by the mechanism optimal for its group's prior, at the whole ε (no ε₁); the others by the mechanism below, on their own noisy prior."),
          facts([
            ["groups", count(preview.groups)],
            ["examples with a group", `${count(preview.examples_with_group)} of ${count(preview.examples)}`],
            [`expected ${preview.mechanism.loss} loss with the priors`, num(preview.expected_loss)],
            ["… without them (one release, same ε)", num(preview.expected_loss_without_priors)],
            ...(preview.priors_verdict == null
              ? []
              : [
                  ["a model's expected error with the priors", num(preview.priors_verdict.with_priors)],
                  [`… without them (${preview.priors_verdict.mechanism_without.replaceAll("_", "-")})`, num(preview.priors_verdict.without_priors)],
                  ["the public rule says", preview.priors_verdict.pays ? "release on the priors" : "they do not pay: release without them"],
                ]),
          ]),
        ),
    section(
      "Budget after it",
      body.privacy_unit === "user"
        ? note(`A user-level release charges each user at most ε = ${num(epsilon)} and each example at most ${num(preview.mechanism.epsilon_example ?? epsilon)}.`)
        : null,
      afterRelease(budget, body.privacy_unit === "user" ? preview.mechanism.epsilon_example ?? epsilon : epsilon),
      body.privacy_unit === "user" && budget.users.can_take !== null
        ? facts([[`users that could take ε = ${num(epsilon)}`, `${count(budget.users.can_take)} of ${count(budget.users.users)}`]])
        : null,
    ),
    mechanismView(preview, {
      name: "exact label histogram",
      what: "The preview optimizes the bins for the labels' exact histogram (the release will use a noisy one, so its bins may differ a little).",
    }),
  ];
}

export async function planPage({ params: [id], signal }) {
  const bounds = (property) => declaredBounds({ schema: "ReleaseIn", property });
  const [ds, recipients, priors, epsilon, epsilonUser, tau, epsilonPrior] = await Promise.all([
    get(path("datasets", id), undefined, signal),
    all("/v1/recipients", {}, { signal }),
    all(`${path("datasets", id)}/priors`, {}, { signal }),
    ...["epsilon", "epsilon_user", "contribution_bound", "epsilon_prior"].map(bounds),
  ]);
  const losses = LOSSES[ds.spec.label_type] ?? ["squared"];
  // the inputs carry the API's bounds; the form still sends what is typed (novalidate), so that a
  // refusal is the API's, shown next to the field it is about
  const form = h(
    "form",
    { class: "plan", novalidate: true },
    choice({ legend: "Privacy unit", name: "privacy_unit", value: "example", options: [["example", "each example"], ["user", "each user (all of a user's examples)"]] }),
    h(
      "div",
      { class: "fields" },
      field({ label: "ε per example", name: "epsilon", type: "number", value: "1", help: "charged to every example in the release", attrs: { ...epsilon, step: "any", "data-unit": "example" } }),
      field({ label: "ε per user", name: "epsilon_user", type: "number", value: "2", help: "user-level: charged to every user", attrs: { ...epsilonUser, step: "any", "data-unit": "user" } }),
      field({
        label: "contribution bound τ",
        name: "contribution_bound",
        value: "auto",
        options: [["auto", "auto (from the noisy prior)"], ["private", "private (an ε-DP quantile)"], ["number", "a number of examples"]],
        help: "user-level: the most examples per user that carry label information",
        attrs: { "data-unit": "user" },
      }),
      field({ label: "τ (when a number)", name: "tau", type: "number", value: "3", attrs: { ...tau, step: "1", "data-unit": "user" } }),
      field({ label: "loss", name: "loss", value: losses[0], options: losses.map((l) => [l, l]), help: "the mechanism is optimized for it" }),
      field({
        label: "mechanism",
        name: "mechanism",
        value: "default",
        options: [["default", "the service's rule"], ["rr_on_bins", "RR-on-Bins"], ["unbiased", "unbiased (squared, poisson)"], ["rr_top_k", "RR-Top-k (classes)"]],
        help: "unbiased: released values whose mean is the label; they reach beyond the label range",
      }),
      field({ label: "ε₁ for the prior (optional)", name: "epsilon_prior", type: "number", value: "", help: "default: min(ε/2, √(k/n))", attrs: { ...epsilonPrior, step: "any" } }),
      field({
        label: "recipient",
        name: "recipient",
        value: recipients[0]?.name,
        options: recipients.map((r) => [r.name, r.name]),
        help: "a registered features party",
        required: true,
      }),
      field({
        label: "prior",
        name: "prior",
        value: "",
        options: [["", "the release's own noisy prior"], ...priors.map((p) => [p.id, `priors ${p.id.slice(0, 8)}: ${p.groups} groups, ${count(p.examples_priced)} priced`])],
        help: "feature-aware: priors a features party signed for these examples",
      }),
    ),
    h("button", { type: "submit" }, "Preview (free)"),
  );
  const output = h("div", {});
  const createArea = h("div", { "aria-live": "polite" });
  const showUnit = () => {
    const unit = form.elements.privacy_unit.value;
    for (const control of form.querySelectorAll("[data-unit]")) {
      const wrapper = control.closest(".field");
      wrapper.hidden = control.dataset.unit !== unit;
    }
  };
  let planned = null; // the request previewed, and the key its release will be created with
  const withdraw = () => {
    if (planned) {
      planned = null;
      replace(createArea, note("The parameters changed: preview again before creating the release."));
    }
  };
  form.addEventListener("change", () => {
    showUnit();
    withdraw();
  });
  form.addEventListener("input", withdraw);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = request(form);
    unmarkFields(form);
    replace(output, h("p", { class: "loading" }, "Previewing…"));
    replace(createArea);
    try {
      const preview = await call("POST", `${path("datasets", id)}/releases:preview`, { body });
      const asked = body.privacy_unit === "user" ? preview.mechanism.epsilon_example ?? body.epsilon_user : body.epsilon;
      const budget = await get(path("datasets", id, "budget"), { epsilon: asked, epsilon_user: body.epsilon_user ?? 1 });
      planned = { body, key: idempotencyKey("console") };
      replace(output, previewView(ds, body, preview, budget));
      replace(createArea, createView(id, planned, form));
      output.querySelector("h2")?.focus?.();
    } catch (error) {
      replace(output, refused(form, error, { rename: tauInput(form) }));
    }
  });
  showUnit();
  if (!recipients.length) {
    return [title(`Plan a release of ${ds.name}`), problem({ detail: "register a recipient first (POST /v1/recipients)" })];
  }
  return [
    title(`Plan a release of ${ds.name}`),
    note("Nothing is charged until you create the release below, after its preview."),
    form,
    output,
    createArea,
  ];
}

/** The API names τ `contribution_bound`; when it is a number, the number's input holds it. */
function tauInput(form) {
  return form.elements.namedItem("contribution_bound")?.value === "number" ? { contribution_bound: "tau" } : {};
}

function createView(datasetId, planned, form) {
  const message = h("div", {});
  const button = h("button", { type: "button" }, "Create the release (charges the budget)");
  button.addEventListener("click", async () => {
    button.disabled = true;
    try {
      const release = await call("POST", path("datasets", datasetId, "releases"), {
        body: planned.body,
        headers: { "Idempotency-Key": planned.key },
      });
      window.location.hash = `#/releases/${encodeURIComponent(release.id)}`;
    } catch (error) {
      replace(message, refused(form, error, { rename: tauInput(form) }));
      button.disabled = false;
    }
  });
  return section(
    "Create",
    facts([["Idempotency-Key", h("code", {}, planned.key)]]),
    note("Creating again with this key (a retry after a lost answer) returns the same release and charges nothing twice."),
    message,
    h("div", { class: "actions" }, button),
  );
}
