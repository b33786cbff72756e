// A published mechanism drawn: the noisy prior over the support with the bins it is cut into, the
// bins as a table, and the bin transition P(released bin | the label's bin). Both parties show a
// mechanism this way, from the same published description (the labels party's release, the
// features party's received release). The unbiased randomizer has no bins: its outputs, which reach
// beyond the label range, and each one's base probability (its weight out of 2^53) are listed instead.

import { h } from "./dom.js";
import { columns, heatmap } from "./charts.js";
import { count, num } from "./format.js";
import { facts, note, section, table } from "./ui.js";

const MAX_COLUMNS = 300; // a prior over more support points is drawn in groups of neighbours
const MAX_MATRIX = 40; // a larger transition is stated, not drawn (its cells would be specks)

/** The bins of a mechanism: index, the support range it covers, the value it releases, its mass. */
export function binsOf(mechanism) {
  const bins = mechanism.bin_values.map((value, index) => ({ index, value, lo: null, hi: null, mass: 0 }));
  mechanism.support.forEach((point, i) => {
    const b = mechanism.support_bins[i];
    if (b < 0) return;
    const bin = bins[b];
    bin.lo = bin.lo === null ? point : Math.min(bin.lo, point);
    bin.hi = bin.hi === null ? point : Math.max(bin.hi, point);
    bin.mass += mechanism.prior[i];
  });
  return bins;
}

const PUBLISHED = {
  name: "noisy prior",
  what: "How the published, differentially private prior spreads over the label support.",
};

function priorChart(mechanism, prior) {
  const k = mechanism.support.length;
  const group = Math.ceil(k / MAX_COLUMNS);
  const classes = mechanism.kind === "rr_top_k";
  const unbiased = mechanism.kind === "unbiased";
  const points = [];
  for (let start = 0; start < k; start += group) {
    const end = Math.min(k, start + group);
    let mass = 0;
    for (let i = start; i < end; i += 1) mass += mechanism.prior[i];
    const bin = unbiased ? 0 : mechanism.support_bins[start];
    points.push({
      label: group === 1 ? num(mechanism.support[start]) : `${num(mechanism.support[start])}–${num(mechanism.support[end - 1])}`,
      value: mass,
      tone: bin < 0 ? "d" : bin % 2 ? "b" : "a",
      bin,
    });
  }
  const bands = [];
  if (!classes && !unbiased) {
    points.forEach((p, i) => {
      const last = bands[bands.length - 1];
      if (last && last.bin === p.bin) last.to = i;
      else bands.push({ from: i, to: i, bin: p.bin, label: `bin ${p.bin}` });
    });
  }
  const bins = unbiased ? [] : binsOf(mechanism);
  const what = unbiased
    ? "Every label is released as one of the outputs below, at random, with the label as the mean."
    : classes
      ? `Each column is a class; the ${bins.length} reported classes alternate in colour, the unreported ones are grey.`
      : `The support is cut into ${bins.length} bins (shaded bands, columns alternating in colour); a label in a bin is released as that bin's value.`;
  return columns({
    caption: `The ${prior.name} over the ${count(k)} support points${group > 1 ? ` (drawn in groups of ${group})` : ""}`,
    description: `${prior.what} ${what}`,
    points,
    bands,
    xLabel: classes ? "class" : "label value (support point)",
    yLabel: "prior mass",
    dataHeaders: ["support point", "prior mass", "bin"],
    dataRows: mechanism.support.slice(0, 2000).map((point, i) => [
      num(point),
      num(mechanism.prior[i]),
      unbiased ? "—" : mechanism.support_bins[i] < 0 ? "not reported" : String(mechanism.support_bins[i]),
    ]),
  });
}

function transition(mechanism, keep, move) {
  const m = mechanism.bin_values.length;
  const labels = mechanism.bin_values.map((v, i) => (mechanism.kind === "rr_top_k" ? `class ${num(v)}` : `bin ${i}`));
  const stated = facts([
    ["P(released bin = the label's bin)", num(keep, 6)],
    ["P(released bin = one particular other bin)", num(move, 6)],
    ["bins (m)", count(m)],
  ]);
  if (m > MAX_MATRIX || m < 2) {
    return [
      stated,
      note(
        m < 2
          ? "One bin: every label is released as the same value (nothing to learn from it)."
          : `With ${count(m)} bins the ${count(m)} × ${count(m)} matrix is stated rather than drawn: the diagonal holds the first value, every other cell the second.`,
      ),
    ];
  }
  return [
    stated,
    heatmap({
      caption: `The bin transition: P(released bin | the label's bin), ${m} × ${m}`,
      description: `Randomized response over the bins: a label's own bin is released with probability ${num(keep, 4)} (the dark diagonal), each other bin with ${num(move, 4)}.`,
      size: m,
      value: (i, j) => (i === j ? keep : move),
      labels,
      rowLabel: "the label's bin",
      colLabel: "released bin",
      dataRows: labels.map((label, i) => [label, ...labels.map((_, j) => num(i === j ? keep : move, 4))]),
    }),
  ];
}

const TOTAL = 2 ** 53; // an unbiased randomizer's rows of integer weights each sum to this

function unbiasedView(mechanism, prior) {
  const outputs = mechanism.bin_values.map((value, index) => ({ index, value, base: mechanism.base_weights[index] / TOTAL }));
  const factor = Math.exp(mechanism.epsilon_randomize);
  return section(
    "Mechanism",
    facts([
      ["kind", "unbiased randomizer (regression: the released value's mean is the label)"],
      ["loss models train with", mechanism.loss],
      ["ε (total)", num(mechanism.epsilon)],
      ["ε₁ for the noisy prior", num(mechanism.epsilon_prior)],
      ["ε₂ for randomizing each label", num(mechanism.epsilon_randomize)],
      ["implemented ε (integer weights)", num(mechanism.implemented_epsilon)],
      ["outputs", count(outputs.length)],
      ["lowest and highest output", `${num(outputs[0].value)} … ${num(outputs[outputs.length - 1].value)}`],
      ["label range", `${num(mechanism.support[0])} … ${num(mechanism.support[mechanism.support.length - 1])}`],
    ]),
    priorChart(mechanism, prior),
    h("h3", {}, "Outputs"),
    note(`Each output is released with at least its base probability whatever the label, and at most e^ε₂ = ${num(factor, 4)} times it: a window of outputs slides with the label so that the mean is the label. Outputs beyond the label range are training targets, not plausible labels.`),
    table({
      caption: `The ${outputs.length} outputs and the probability each has under every label at least`,
      columns: [
        { label: "output", value: (o) => String(o.index) },
        { label: "released value", value: (o) => num(o.value), numeric: true },
        { label: "base probability", value: (o) => num(o.base, 4), numeric: true },
      ],
      rows: outputs.slice(0, 500),
    }),
  );
}

/**
 * The mechanism section of a release page; ``prior`` names the prior it carries when it is not the
 * published noisy one (a preview's exact histogram).
 */
export function mechanismView({ mechanism, keep_probability: keep, move_probability: move }, prior = PUBLISHED) {
  if (mechanism.kind === "unbiased") return unbiasedView(mechanism, prior);
  const bins = binsOf(mechanism);
  const user = mechanism.privacy_unit === "user";
  return section(
    "Mechanism",
    facts([
      ["kind", mechanism.kind === "rr_top_k" ? "RR-Top-k (classes)" : "RR-on-Bins (regression)"],
      ["loss optimized for", mechanism.loss],
      ["ε (total)", num(mechanism.epsilon)],
      ["ε₁ for the noisy prior", num(mechanism.epsilon_prior)],
      ["ε₂ for randomizing each label", num(mechanism.epsilon_randomize)],
      ["implemented ε (integer thresholds)", num(mechanism.implemented_epsilon)],
      ["privacy unit", mechanism.privacy_unit],
      user ? ["contribution bound τ", String(mechanism.contribution_bound)] : null,
      user ? ["most ε for one example", num(mechanism.epsilon_example)] : null,
    ]),
    priorChart(mechanism, prior),
    h("h3", {}, "Bins"),
    table({
      caption: `The ${bins.length} bins: what a label in each range is released as`,
      columns: [
        { label: "bin", value: (b) => String(b.index) },
        { label: "labels from", value: (b) => num(b.lo), numeric: true },
        { label: "labels to", value: (b) => num(b.hi), numeric: true },
        { label: "released value", value: (b) => num(b.value), numeric: true },
        { label: `${prior.name} mass`, value: (b) => num(b.mass), numeric: true },
      ],
      rows: bins.slice(0, 500),
    }),
    h("h3", {}, "Transition"),
    transition(mechanism, keep, move),
  );
}
