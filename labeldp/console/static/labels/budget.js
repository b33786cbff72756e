// A dataset's budget (GET /v1/datasets/{id}/budget?epsilon=&epsilon_user=): per-example and per-user
// spend distributions, what is left, and what one more release at ε would leave.

import { declaredBounds, get, path } from "../common/api.js";
import { h, replace } from "../common/dom.js";
import { spread, stack } from "../common/charts.js";
import { count, num } from "../common/format.js";
import { facts, field, note, refused, section, unmarkFields } from "../common/ui.js";

/** What one more release at ε leaves: the numbers and a bar of spent / this release / left. */
export function afterRelease(budget, epsilon) {
  const left = budget.per_example_budget - budget.max_spent;
  const after = left - epsilon;
  const lacking = budget.examples - budget.can_take;
  return [
    facts([
      ["per-example budget", num(budget.per_example_budget)],
      ["spent by the most-spent example", num(budget.max_spent)],
      ["left for it now", num(left)],
      [`left for it after one more release at ε = ${num(epsilon)}`, after >= 0 ? num(after) : "— (it cannot take it)"],
      ["examples that could take it", `${count(budget.can_take)} of ${count(budget.examples)}`],
      lacking > 0 ? ["examples that could not", count(lacking)] : null,
    ]),
    stack({
      caption: `The most-spent example's budget, with one more release at ε = ${num(epsilon)}`,
      description:
        after >= 0
          ? `Of its budget of ${num(budget.per_example_budget)}, ${num(budget.max_spent)} is spent, the release would take ${num(epsilon)} and ${num(after)} would be left.`
          : `Of its budget of ${num(budget.per_example_budget)}, ${num(budget.max_spent)} is spent: another ${num(epsilon)} would overspend it, so such a release would be refused (409 budget-exhausted) with nothing charged.`,
      parts:
        after >= 0
          ? [
              { label: "spent", value: budget.max_spent, tone: "d" },
              { label: "this release", value: epsilon, tone: "b" },
              { label: "left after", value: after, tone: "c" },
            ]
          : [
              { label: "spent", value: budget.max_spent, tone: "d" },
              { label: "left now (less than ε)", value: Math.max(left, 0), tone: "c" },
            ],
    }),
  ];
}

function distributions(budget, epsilon, epsilonUser) {
  const out = [
    spread({
      caption: `Per-example spend over the ${count(budget.examples)} examples a release would cover`,
      description: `How many examples have spent how much ε. Examples left of the orange line could take one more release at ε = ${num(epsilon)}; none may pass the black line (the budget).`,
      buckets: budget.spend_distribution.map((b) => ({ from: b.spent_from, to: b.spent_to, count: b.count })),
      marks: [
        { at: budget.per_example_budget, label: `budget ${num(budget.per_example_budget)}` },
        { at: Math.max(budget.per_example_budget - epsilon, 0), label: `can take ε = ${num(epsilon)}` },
      ],
      xLabel: "ε spent per example",
      yLabel: "examples",
    }),
  ];
  const users = budget.users;
  if (users.users) {
    const marks = users.per_user_budget === null ? [] : [
      { at: users.per_user_budget, label: `budget ${num(users.per_user_budget)}` },
      { at: Math.max(users.per_user_budget - epsilonUser, 0), label: `can take ε = ${num(epsilonUser)}` },
    ];
    out.push(
      spread({
        caption: `Per-user spend over the ${count(users.users)} users of these examples`,
        description:
          "How many users have spent how much ε (an example-level release charges a user ε for each of its examples: group privacy)." +
          (users.per_user_budget === null ? " This tenant's per-user spend is recorded, not limited." : ""),
        buckets: users.spend_distribution.map((b) => ({ from: b.spent_from, to: b.spent_to, count: b.count })),
        marks,
        xLabel: "ε spent per user",
        yLabel: "users",
      }),
    );
  }
  return out;
}

/** The budget section of a dataset page, with a form to ask about another ε. */
export async function budgetView(ds, signal) {
  const url = path("datasets", ds.id, "budget");
  const [first, epsilonBounds, userBounds] = await Promise.all([
    get(url, { epsilon: 1, epsilon_user: 1 }, signal),
    declaredBounds({ operation: "get_budget", parameter: "epsilon" }),
    declaredBounds({ operation: "get_budget", parameter: "epsilon_user" }),
  ]);
  let budget = first;
  const body = h("div", {});
  const render = (epsilon, epsilonUser) => {
    const u = budget.users;
    replace(
      body,
      afterRelease(budget, epsilon),
      facts([
        ["users", count(u.users)],
        ["per-user budget", u.per_user_budget === null ? "not limited" : num(u.per_user_budget)],
        ["per-user spend p50 / p90 / p99 / max", ["p50", "p90", "p99", "max"].map((q) => num(u.spent[q] ?? 0)).join(" / ")],
        u.can_take === null ? null : [`users that could take ε = ${num(epsilonUser)}`, count(u.can_take)],
        ["δ spent of the tenant's δ budget", `${num(budget.delta_spent)} of ${num(budget.delta_budget)}`],
      ]),
      distributions(budget, epsilon, epsilonUser),
    );
  };
  const form = h(
    "form",
    { class: "inline-form", novalidate: true },
    h(
      "div",
      { class: "fields" },
      field({ label: "ε of one more release", name: "epsilon", type: "number", value: "1", attrs: { ...epsilonBounds, step: "any" } }),
      field({ label: "ε per user of one more user-level release", name: "epsilon_user", type: "number", value: "1", attrs: { ...userBounds, step: "any" } }),
    ),
    h("button", { type: "submit", class: "secondary" }, "Show what it would leave"),
  );
  const message = h("div", {});
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const epsilon = Number(form.elements.epsilon.value);
    const epsilonUser = Number(form.elements.epsilon_user.value);
    unmarkFields(form);
    try {
      budget = await get(url, { epsilon, epsilon_user: epsilonUser });
      replace(message);
      render(epsilon, epsilonUser);
    } catch (error) {
      replace(message, refused(form, error));
    }
  });
  render(1, 1);
  return section(
    "Budget",
    note("Spend is read from the ledger over the examples (and users) a release of this dataset would cover. The answer is aggregate: never one user's spend or label."),
    form,
    message,
    body,
  );
}
