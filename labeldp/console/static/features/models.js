// Models (GET /v1/models, GET /v1/models/{id}): validation metrics, where the model came from, its
// artifact (GET /v1/models/{id}/artifact) and predictions for a few IDs (POST …/predictions).

import { all, call, download, get, path } from "../common/api.js";
import { h, replace } from "../common/dom.js";
import { bars } from "../common/charts.js";
import { bytes, count, num, plural, short, when } from "../common/format.js";
import { action, badge, code, facts, field, idLink, note, problem, refused, section, table, title, unmarkFields } from "../common/ui.js";

const MAX_IDS = 1000; // a console request; larger sets are a batch job for the API

export async function modelsPage({ signal }) {
  const models = await all("/v1/models", {}, { signal });
  return [
    title("Models"),
    table({
      caption: plural(models.length, "model"),
      columns: [
        { label: "model", value: (m) => idLink(`#/models/${encodeURIComponent(m.id)}`, m.id) },
        { label: "status", value: (m) => badge(m.status) },
        { label: "kind", value: (m) => m.model },
        { label: "loss", value: (m) => m.loss },
        { label: "debiasing", value: (m) => m.debias },
        { label: "release", value: (m) => h("code", { title: m.provenance.release_id }, short(m.provenance.release_id)) },
        { label: "feature table", value: (m) => m.provenance.feature_table ?? "—" },
        { label: "created", value: (m) => when(m.created_at) },
      ],
      rows: models,
      empty: "No models yet: start a training job.",
    }),
  ];
}

const METRIC_NAMES = {
  train_examples: "training examples",
  validation_examples: "validation examples",
  examples_capped: "examples over the contribution bound (left out)",
  validation_loss_vs_noisy_labels: "validation loss against the noisy labels",
  validation_loss_vs_binned_true_labels_unbiased: "validation loss against the binned true labels (unbiased estimate)",
  validation_loss_vs_binned_true_labels_unbiased_se: "standard error of that estimate",
  validation_error_vs_noisy_labels: "validation error against the noisy labels",
  validation_error_vs_true_labels_unbiased: "validation error against the true labels (unbiased estimate)",
  release_binning_loss_under_noisy_prior: "loss of binning the labels (under the noisy prior)",
};

function metricsView(model) {
  const entries = Object.entries(model.metrics ?? {});
  const losses = entries.filter(([k, v]) => typeof v === "number" && /loss|error/.test(k));
  return [
    facts(entries.map(([k, v]) => [METRIC_NAMES[k] ?? k.replaceAll("_", " "), typeof v === "number" ? (Number.isInteger(v) ? count(v) : num(v)) : String(v)])),
    losses.length
      ? bars({
          caption: `Validation metrics of model ${short(model.id)} (${model.loss} loss)`,
          description:
            "The loss against the noisy labels is what the model saw; the unbiased estimate against the true labels (binned) corrects it with the release's known noise; the binning loss is the part no model trained on bins can remove.",
          items: losses.map(([k, v], i) => ({ label: METRIC_NAMES[k] ?? k, value: v, tone: "abcde"[i % 5] })),
        })
      : null,
  ];
}

function predictView(model) {
  const form = h(
    "form",
    { novalidate: true },
    field({
      label: "example IDs (one per line)",
      name: "example_ids",
      type: "textarea",
      help: `rows of the feature table ${model.provenance.feature_table}; at most ${count(MAX_IDS)} here`,
    }),
    h("button", { type: "submit" }, "Predict"),
  );
  const result = h("div", { "aria-live": "polite" });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const ids = form.elements.example_ids.value.split(/\s+/).filter(Boolean);
    unmarkFields(form);
    if (!ids.length || ids.length > MAX_IDS) {
      replace(result, problem({ detail: `give between 1 and ${count(MAX_IDS)} example IDs` }));
      return;
    }
    try {
      const answer = await call("POST", `${path("models", model.id)}/predictions`, { body: { example_ids: ids } });
      const classes = answer.classes;
      replace(
        result,
        table({
          caption: plural(ids.length, "prediction"),
          columns: [
            { label: "example ID", value: (row) => row.id },
            { label: classes ? "most likely class" : "prediction", value: (row) => num(row.prediction, 6), numeric: true },
            classes ? { label: "its probability", value: (row) => num(Math.max(...row.probabilities)), numeric: true } : null,
          ].filter(Boolean),
          rows: ids.map((id, i) => ({ id, prediction: answer.predictions[i], probabilities: classes ? answer.probabilities[i] : null })),
        }),
      );
    } catch (error) {
      replace(result, refused(form, error));
    }
  });
  return section("Predictions", note("Debiased predictions for rows of the model's feature table (POST /v1/models/{id}/predictions)."), form, result);
}

export async function modelPage({ params: [id], signal }) {
  const model = await get(path("models", id), undefined, signal);
  const p = model.provenance;
  const saved = h("div", { "aria-live": "polite" });
  const ready = model.status === "succeeded";
  return [
    title(`Model ${short(model.id)}`, badge(model.status)),
    facts([
      ["model ID", code(model.id)],
      ["kind", model.model],
      ["loss", model.loss],
      ["debiasing", model.debias],
      ["trained on release", code(p.release_id)],
      ["from sender", p.sender_id ?? "—"],
      ["ε of that release", num(p.epsilon_total)],
      ["feature table", `${p.feature_table} (version ${p.feature_table_version})`],
      ["labeldp version", p.code_version ?? "—"],
      ["created", when(model.created_at)],
      model.error ? ["error", model.error] : null,
    ]),
    section("Validation metrics", ready ? metricsView(model) : note("Metrics appear once the job succeeds.")),
    section(
      "Artifact",
      note("One scikit-learn Pipeline saved with skops: raw feature columns in, debiased predictions out (load it with skops.io.load)."),
      ready
        ? h(
            "div",
            { class: "actions" },
            action("Download the model (.skops)", async () => {
              try {
                const size = await download(`${path("models", id)}/artifact`, `model-${id}.skops`);
                replace(saved, h("p", { class: "success" }, `Downloaded ${bytes(size)}.`));
              } catch (error) {
                replace(saved, problem(error));
              }
            }),
            saved,
          )
        : null,
    ),
    ready ? predictView(model) : null,
  ];
}
