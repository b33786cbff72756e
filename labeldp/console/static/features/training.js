// Training: start a job (POST /v1/models), list the jobs (GET /v1/models) and watch one run
// (GET /v1/jobs/{id}, polled until it succeeds or fails).

import { all, call, get, path } from "../common/api.js";
import { h, replace } from "../common/dom.js";
import { count, plural, seconds, short, when } from "../common/format.js";
import { badge, facts, field, idLink, link, note, problem, refused, section, title, unmarkFields } from "../common/ui.js";

const POLL_MS = 500;
const DONE = new Set(["succeeded", "failed"]);

function jobsTable(models) {
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      {},
      h("caption", {}, plural(models.length, "training job")),
      h(
        "thead",
        {},
        h("tr", {}, ["job", "status", "model", "debiasing", "release", "feature table", "started"].map((c) => h("th", { scope: "col" }, c))),
      ),
      h(
        "tbody",
        {},
        models.map((m) =>
          h(
            "tr",
            {},
            h("th", { scope: "row" }, idLink(m.status === "succeeded" ? `#/models/${encodeURIComponent(m.id)}` : `#/jobs/${encodeURIComponent(m.id)}`, m.id)),
            h("td", {}, badge(m.status)),
            h("td", {}, m.model),
            h("td", {}, m.debias),
            h("td", {}, h("code", { title: m.provenance.release_id }, short(m.provenance.release_id))),
            h("td", {}, m.provenance.feature_table ?? "—"),
            h("td", {}, when(m.created_at)),
          ),
        ),
      ),
    ),
  );
}

export async function trainingPage({ query, signal }) {
  const [releases, tables, models] = await Promise.all([
    all("/v1/releases", {}, { signal }),
    all("/v1/feature-tables", {}, { signal }),
    all("/v1/models", {}, { signal }),
  ]);
  const start = [];
  if (releases.length && tables.length) {
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
          options: releases.map((r) => [r.release_id, `${short(r.release_id)} from ${r.sender_id} (${r.mechanism.kind})`]),
        }),
        field({ label: "feature table", name: "feature_table", value: tables[tables.length - 1].name, options: tables.map((t) => [t.name, t.name]) }),
        field({
          label: "model",
          name: "model",
          value: "hgb",
          options: [["hgb", "gradient boosting (hgb)"], ["linear", "linear (ridge, Poisson or logistic)"], ["lightgbm", "LightGBM on the Dask cluster"]],
        }),
        field({
          label: "debiasing",
          name: "debias",
          value: "affine",
          options: [["affine", "affine"], ["unbiased", "unbiased loss"], ["none", "none"]],
          help: "undoes the release's known noise (from its published mechanism)",
        }),
        field({ label: "validation fraction", name: "validation_fraction", type: "number", value: "0.2", attrs: { min: "0.01", max: "0.99", step: "0.01" } }),
      ),
      h("button", { type: "submit" }, "Start training"),
    );
    const message = h("div", {});
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const e = form.elements;
      unmarkFields(form);
      try {
        const job = await call("POST", "/v1/models", {
          body: {
            release_id: e.release_id.value,
            feature_table: e.feature_table.value,
            model: e.model.value,
            debias: e.debias.value,
            validation_fraction: Number(e.validation_fraction.value),
          },
        });
        window.location.hash = `#/jobs/${encodeURIComponent(job.id)}`;
      } catch (error) {
        replace(message, refused(form, error));
      }
    });
    start.push(section("Start a job", note("The model and its debiasing follow the release's published mechanism."), form, message));
  } else {
    start.push(note("Training needs a received release and a feature table."));
  }
  return [title("Training"), ...start, section("Jobs", jobsTable(models))];
}

function progressView(job) {
  const p = job.progress ?? {};
  const total = p.iterations_total ?? null;
  const done = p.iterations ?? (job.status === "succeeded" ? total : 0);
  const bar =
    total && job.status !== "failed"
      ? h("progress", { max: String(total), value: String(done ?? 0), "aria-label": "Boosting iterations done" }, `${count(done)} of ${count(total)}`)
      : job.status === "succeeded"
        ? h("progress", { max: "1", value: "1", "aria-label": "Training progress" }, "done")
        : h("progress", { "aria-label": "Training progress" }, "working");
  return [
    bar,
    facts([
      ["status", badge(job.status)],
      ["stage", p.stage ?? "queued"],
      total ? ["iterations", `${count(done)} of ${count(total)}`] : null,
      p.release_examples !== undefined ? ["examples in the release", count(p.release_examples)] : null,
      p.training_examples !== undefined ? ["examples the model fits on", count(p.training_examples)] : null,
      ["elapsed", seconds(p.elapsed_s ?? 0)],
      p.eta_s !== undefined && !DONE.has(job.status) ? ["time left (estimated)", seconds(p.eta_s)] : null,
      ["started", when(job.created_at)],
      job.finished_at ? ["finished", when(job.finished_at)] : null,
    ]),
    job.error ? problem({ detail: job.error }) : null,
    job.status === "succeeded" ? h("p", { class: "success" }, "Trained. ", link(`#/models/${encodeURIComponent(job.id)}`, "See the model, its metrics and its artifact")) : null,
  ];
}

export async function jobPage({ params: [id], signal, announce }) {
  let job = await get(path("jobs", id), undefined, signal);
  const live = h("div", { class: "job-progress" }, progressView(job));
  const poll = async () => {
    while (!DONE.has(job.status) && !signal.aborted) {
      await new Promise((resolve) => window.setTimeout(resolve, POLL_MS));
      if (signal.aborted) return;
      try {
        job = await get(path("jobs", id), undefined, signal);
      } catch {
        return; // navigated away, or the key was refused (the app signs out)
      }
      replace(live, progressView(job));
      if (DONE.has(job.status)) announce(`Training ${job.status}`);
    }
  };
  poll();
  return [
    title(`Training job ${short(id)}`),
    note("This page follows the job until it succeeds or fails (GET /v1/jobs/{id})."),
    section("Progress", live),
  ];
}
