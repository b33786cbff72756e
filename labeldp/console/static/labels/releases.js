// Releases: every release of the tenant (GET /v1/releases); one release with its mechanism drawn
// (GET /v1/releases/{id}), its deliveries (GET/POST /v1/releases/{id}/deliveries), its output
// (GET …/noisy-labels) and its free, tenant-only audit (GET /v1/releases/{id}/audit).

import { all, call, download, get, path } from "../common/api.js";
import { h, replace } from "../common/dom.js";
import { bars, ladder } from "../common/charts.js";
import { bytes, count, num, pct, plural, short, when } from "../common/format.js";
import { mechanismView } from "../common/mechanism.js";
import { action, badge, code, facts, idLink, link, note, problem, section, table, title } from "../common/ui.js";

export async function releasesPage({ signal }) {
  const [releases, datasets] = await Promise.all([
    all("/v1/releases", {}, { signal }),
    all("/v1/datasets", {}, { signal }),
  ]);
  const names = new Map(datasets.map((d) => [d.id, d.name]));
  return [
    title("Releases"),
    note("Every privatized release of this tenant, oldest first. Each was charged to the ledger before any noise was drawn."),
    table({
      caption: plural(releases.length, "release"),
      columns: [
        { label: "release", value: (r) => idLink(`#/releases/${encodeURIComponent(r.id)}`, r.id) },
        { label: "dataset", value: (r) => link(`#/datasets/${encodeURIComponent(r.dataset_id)}`, names.get(r.dataset_id) ?? short(r.dataset_id)) },
        { label: "status", value: (r) => badge(r.status) },
        { label: "unit", value: (r) => r.privacy_unit },
        { label: "ε", value: (r) => num(r.privacy_unit === "user" ? r.epsilon_user : r.epsilon), numeric: true },
        { label: "examples", value: (r) => count(r.examples), numeric: true },
        { label: "worst-case additive advantage", value: (r) => num(r.worst_case_additive_advantage), numeric: true },
        { label: "created", value: (r) => when(r.created_at) },
      ],
      rows: releases,
      empty: "No releases yet: plan one from a dataset's page.",
    }),
  ];
}

function deliveriesView(release, recipientName) {
  const url = path("releases", release.id, "deliveries");
  const holder = h("div", {});
  const message = h("div", { "aria-live": "polite" });
  const load = async () => {
    const deliveries = await all(url);
    replace(
      holder,
      table({
        caption: `${plural(deliveries.length, "delivery", "deliveries")} of this release (each one the same signed bytes)`,
        columns: [
          { label: "delivery", value: (d) => h("code", { title: d.id }, short(d.id)) },
          { label: "outcome", value: (d) => badge(d.outcome) },
          { label: "attempts", value: (d) => String(d.attempts), numeric: true },
          { label: "gRPC status", value: (d) => d.status },
          { label: "bytes", value: (d) => bytes(d.wire_bytes), numeric: true },
          { label: "receipt SHA-256", value: (d) => (d.receipt_sha256 ? h("code", { title: d.receipt_sha256 }, short(d.receipt_sha256, 16)) : "—") },
          { label: "started", value: (d) => when(d.started_at) },
        ],
        rows: deliveries,
        empty: "Not delivered yet.",
      }),
    );
  };
  const deliver = action(`Deliver to ${recipientName}`, async () => {
    try {
      const delivered = await call("POST", url);
      replace(message, h("p", { class: "success" }, `Delivered: ${bytes(delivered.wire_bytes)} in ${delivered.attempts} attempt(s); the recipient's receipt matched.`));
    } catch (error) {
      replace(message, problem(error));
    }
    await load();
  });
  return {
    loaded: load(),
    view: section(
      "Deliveries",
      note("A delivery streams the stored signed message over gRPC to the recipient. Delivering again sends the same bytes and spends nothing."),
      release.status === "complete" ? h("div", { class: "actions" }, deliver) : null,
      message,
      holder,
    ),
  };
}

function auditView(release, audit) {
  const mech = release.mechanism;
  const t = audit.true_distribution;
  const r = audit.realized;
  const bound = audit.epsilon_lower_bound;
  const epsilons = [
    bound ? { label: "ε lower bound (canary check, measured)", value: bound.epsilon_low, tone: "c" } : null,
    { label: "implemented ε (max multiplicative advantage)", value: audit.max_multiplicative_advantage, tone: "a" },
    { label: "ε₂ (randomizing)", value: mech.epsilon_randomize, tone: "e" },
    mech.privacy_unit === "user" ? { label: "most ε for one example", value: mech.epsilon_example, tone: "d" } : null,
    { label: "ε charged", value: mech.epsilon, tone: "b" },
  ].filter(Boolean);
  return [
    facts([
      ["examples audited", count(audit.examples)],
      ["worst-case additive advantage (any prior)", num(audit.worst_case_additive_advantage)],
      ["max multiplicative advantage (implemented ε)", num(audit.max_multiplicative_advantage)],
      ["distribution attacker's accuracy without the release (knows the label distribution, no features)", pct(r.accuracy_without_release)],
      ["distribution attacker's accuracy with it", pct(r.accuracy_with_release)],
      ["trusting the released bin is its best guess for", pct(t.share_trusting_noisy_label)],
      t.mse_reduction_share === undefined ? null : ["share of the squared error the release removes", pct(t.mse_reduction_share)],
      bound
        ? ["ε lower bound", `${num(bound.epsilon_low)} (α = ${num(bound.alpha)}, ${count(bound.examples)} examples)`]
        : ["ε lower bound", "not stated: the labels fall in fewer than two bins"],
    ]),
    bars({
      caption: "Additive advantage per example: how much more often the best attacker guesses a label's bin",
      description:
        "The worst case holds for any attacker, whatever it believes; the exact numbers are for the distribution attacker, who knows the true label distribution of these examples but no features (stronger than the recipient, who has the noisy prior); the realized one is its gain on this release's actual outputs. The demo's features attacker, which learns each example's prior from its features, is another attacker: docs/concepts/audits.md.",
      items: [
        { label: "worst case over every prior", value: audit.worst_case_additive_advantage, tone: "b" },
        { label: "knowing the true distribution: max", value: t.additive_max, tone: "a" },
        { label: "knowing the true distribution: mean", value: t.additive_mean, tone: "a" },
        { label: "realized on this release", value: r.additive_advantage, tone: "c" },
      ],
    }),
    ladder({
      caption: "ε, from what was measured to what was charged",
      description: bound
        ? `The canary check's lower bound (${num(bound.epsilon_low)}, measured from these examples' labels and released bins) must not exceed the implemented ε (${num(audit.max_multiplicative_advantage)}); a bound above it would mean the sampler randomizes too little.`
        : "The implemented ε of the integer sampler, ε₂ and the ε charged.",
      marks: epsilons,
    }),
  ];
}

export async function releasePage({ params: [id], signal }) {
  const release = await get(path("releases", id), undefined, signal);
  const [dataset, recipients] = await Promise.all([
    get(path("datasets", release.dataset_id), undefined, signal),
    all("/v1/recipients", {}, { signal }),
  ]);
  const recipient = recipients.find((x) => x.id === release.recipient_id);
  const user = release.privacy_unit === "user";
  const complete = release.status === "complete";
  const deliveries = deliveriesView(release, recipient ? recipient.name : "the recipient");
  const auditHolder = h("div", {}, h("p", { class: "loading" }, "Auditing…"));
  const audit = complete
    ? get(path("releases", id, "audit"), undefined, signal).then(
        (a) => replace(auditHolder, auditView(release, a)),
        (error) => replace(auditHolder, problem(error)),
      )
    : Promise.resolve(replace(auditHolder, note("The audit needs a complete release.")));
  await Promise.all([deliveries.loaded, audit]);
  return [
    title(`Release ${short(release.id)}`, badge(release.status)),
    facts([
      ["release ID", code(release.id)],
      ["dataset", link(`#/datasets/${encodeURIComponent(dataset.id)}`, dataset.name)],
      ["recipient", recipient ? recipient.name : short(release.recipient_id)],
      ["privacy unit", release.privacy_unit],
      user ? ["ε per user", num(release.epsilon_user)] : null,
      user ? ["contribution bound (asked)", release.contribution_bound] : null,
      user ? ["users", count(release.users)] : null,
      ["ε charged per example", num(release.epsilon)],
      ["ε₁ for the prior", num(release.epsilon_prior)],
      release.priors_id ? ["feature-aware: priors", code(release.priors_id)] : null,
      ["examples", count(release.examples)],
      ["examples given the default label", count(release.examples_defaulted)],
      user && release.examples_capped !== null ? ["examples over the bound", count(release.examples_capped)] : null,
      ["universe declared", release.universe_declared ? "yes" : "no"],
      ["loss", release.loss],
      ["expected loss under the noisy prior", num(release.expected_loss_under_noisy_prior)],
      ["worst-case additive advantage", num(release.worst_case_additive_advantage)],
      ["max multiplicative advantage", num(release.max_multiplicative_advantage)],
      ["created", when(release.created_at)],
      ["completed", when(release.completed_at)],
      release.error ? ["error", release.error] : null,
    ]),
    complete
      ? h(
          "div",
          { class: "actions" },
          action("Download the released bins (Parquet)", () => download(path("releases", id, "noisy-labels"), `${id}.parquet`), { class: "secondary" }),
        )
      : null,
    complete ? mechanismView(release) : null,
    deliveries.view,
    section(
      "Audit",
      note("Free and for this tenant only: what the best attacker learns from this release, computed with the labels the dataset holds now. It spends nothing and is never logged."),
      auditHolder,
    ),
  ];
}
