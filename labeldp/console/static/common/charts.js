// Small SVG charts, drawn where a person would rather look than read. Each one is a <figure>: the
// drawing (role="img", named by its caption and described in words) and, under "Show the numbers",
// a table of exactly what is drawn — so nothing is shown only as a picture, or only in colour.

import { h, s, uid } from "./dom.js";
import { num } from "./format.js";

const WIDTH = 640;

function figure({ caption, description, height, drawing, data }) {
  const captionId = uid("fig");
  const descId = uid("desc");
  const svg = s(
    "svg",
    {
      viewBox: `0 0 ${WIDTH} ${height}`,
      role: "img",
      "aria-labelledby": captionId,
      "aria-describedby": descId,
      class: "chart",
      focusable: "false",
    },
    drawing,
  );
  return h(
    "figure",
    { class: "chart-figure" },
    svg,
    h("figcaption", { id: captionId }, caption),
    h("p", { id: descId, class: "chart-description" }, description),
    data ? h("details", { class: "chart-data" }, h("summary", {}, "Show the numbers"), data) : null,
  );
}

function dataTable(caption, headers, rows) {
  return h(
    "table",
    {},
    h("caption", {}, caption),
    h("thead", {}, h("tr", {}, headers.map((label, i) => h("th", { scope: "col", class: i ? "num" : null }, label)))),
    h(
      "tbody",
      {},
      rows.map((row) => h("tr", {}, row.map((cell, i) => h(i ? "td" : "th", { scope: i ? null : "row", class: i ? "num" : null }, cell)))),
    ),
  );
}

/**
 * An axis from 0 that covers `value` in at most `most` equal steps of 1, 2 or 5 × 10ⁿ, so every tick is
 * a round number (0, 1, 2, 3 — never 1.25) and a value such as ε = 1 falls on a tick.
 */
export function niceScale(value, most = 5) {
  const target = value > 0 && Number.isFinite(value) ? value : 1;
  let power = 10 ** Math.floor(Math.log10(target / most));
  for (;;) {
    for (const unit of [1, 2, 5]) {
      const step = unit * power;
      const n = Math.max(1, Math.ceil(target / step - 1e-9));
      if (n <= most) {
        const ticks = Array.from({ length: n + 1 }, (_, i) => Number((i * step).toPrecision(12)));
        return { top: ticks[n], ticks };
      }
    }
    power *= 10;
  }
}

function yAxis(left, top, height, scale, label, format = num) {
  return [
    scale.ticks.map((t) => {
      const y = top + height - (t / scale.top) * height;
      return [
        s("line", { x1: left - 4, x2: WIDTH - 12, y1: y, y2: y, class: t ? "grid" : "axis" }),
        s("text", { x: left - 6, y: y + 4, "text-anchor": "end", class: "tick" }, format(t, 3)),
      ];
    }),
    s("text", { x: 12, y: top + height / 2, transform: `rotate(-90 12 ${top + height / 2})`, "text-anchor": "middle", class: "axis-label" }, label),
  ];
}

/**
 * Columns over an ordered axis (a prior over the support): points [{label, value, tone}], optional
 * bands [{from, to, label}] (index ranges shaded alternately: the bins).
 */
export function columns({ caption, description, points, bands = [], xLabel, yLabel, dataHeaders, dataRows }) {
  const height = 260;
  const left = 60;
  const top = 26;
  const plotW = WIDTH - left - 12;
  const plotH = height - top - 46;
  const n = points.length;
  const step = plotW / Math.max(n, 1);
  const scale = niceScale(Math.max(...points.map((p) => p.value), 0));
  const max = scale.top;
  const gap = n > 60 ? 0 : step * 0.18;
  const drawing = [
    bands.map((band, i) => {
      const x = left + band.from * step;
      const w = (band.to - band.from + 1) * step;
      return [
        s("rect", { x, y: top, width: w, height: plotH, class: `band band-${i % 2}` }),
        w >= 26 && band.label !== undefined
          ? s("text", { x: x + w / 2, y: top - 8, "text-anchor": "middle", class: "band-label" }, band.label)
          : null,
      ];
    }),
    yAxis(left, top, plotH, scale, yLabel),
    points.map((p, i) => {
      const barH = (p.value / max) * plotH;
      return s(
        "rect",
        { x: left + i * step + gap / 2, y: top + plotH - barH, width: Math.max(step - gap, 0.8), height: barH, class: `mark tone-${p.tone ?? "a"}` },
        s("title", {}, `${p.label}: ${num(p.value)}`),
      );
    }),
    labelsAlong(points.map((p) => p.label), left, step, top + plotH + 16),
    s("text", { x: left + plotW / 2, y: height - 6, "text-anchor": "middle", class: "axis-label" }, xLabel),
  ];
  return figure({
    caption,
    description,
    height,
    drawing,
    data: dataTable(caption, dataHeaders, dataRows),
  });
}

function labelsAlong(labels, left, step, y) {
  const n = labels.length;
  const every = Math.max(1, Math.ceil(n / 8));
  const out = [];
  for (let i = 0; i < n; i += every) {
    out.push(s("text", { x: left + (i + 0.5) * step, y, "text-anchor": "middle", class: "tick" }, labels[i]));
  }
  return out;
}

/** An m × m matrix of probabilities (the bin transition), darker for larger. */
export function heatmap({ caption, description, size, value, labels, rowLabel, colLabel, dataRows }) {
  const cell = Math.min(56, Math.floor(420 / size));
  const left = 96;
  const top = 34;
  const height = top + size * cell + 44;
  const max = Math.max(...Array.from({ length: size }, (_, i) => value(i, i)), 1e-12);
  const drawing = [
    s("text", { x: left + (size * cell) / 2, y: 14, "text-anchor": "middle", class: "axis-label" }, colLabel),
    s("text", { x: 14, y: top + (size * cell) / 2, transform: `rotate(-90 14 ${top + (size * cell) / 2})`, "text-anchor": "middle", class: "axis-label" }, rowLabel),
  ];
  for (let i = 0; i < size; i += 1) {
    for (let j = 0; j < size; j += 1) {
      const p = value(i, j);
      const shade = Math.min(8, Math.floor((p / max) * 8.999));
      drawing.push(
        s(
          "rect",
          { x: left + j * cell, y: top + i * cell, width: cell - 1, height: cell - 1, class: `heat heat-${shade}` },
          s("title", {}, `true ${labels[i]} → released ${labels[j]}: ${num(p)}`),
        ),
      );
    }
    if (cell >= 12 || i % Math.ceil(12 / cell) === 0) {
      drawing.push(s("text", { x: left - 6, y: top + i * cell + cell / 2 + 4, "text-anchor": "end", class: "tick" }, labels[i]));
    }
  }
  for (let j = 0; j < size; j += Math.max(1, Math.ceil(24 / cell))) {
    drawing.push(
      s("text", { x: left + j * cell + cell / 2, y: top + size * cell + 14, "text-anchor": "middle", class: "tick" }, labels[j]),
    );
  }
  return figure({
    caption,
    description,
    height,
    drawing,
    data: dataTable(caption, ["true bin", ...labels.map((l) => `→ ${l}`)], dataRows),
  });
}

/**
 * Counts over an ε axis (a spend distribution): buckets [{from, to, count}], with vertical marks
 * [{at, label}] (the budget, the most one may have spent to take one more release).
 */
export function spread({ caption, description, buckets, marks, xLabel, yLabel }) {
  const height = 240;
  const left = 60;
  const top = 30;
  const plotW = WIDTH - left - 24;
  const plotH = height - top - 46;
  const xScale = niceScale(Math.max(...buckets.map((b) => b.to), ...marks.map((m) => m.at), 1e-9) * 1.04, 6);
  const xmax = xScale.top;
  const yScale = niceScale(Math.max(...buckets.map((b) => b.count), 0));
  const max = yScale.top;
  const x = (value) => left + (value / xmax) * plotW;
  const drawing = [
    yAxis(left, top, plotH, yScale, yLabel, (v) => num(v, 3)),
    buckets.map((b) => {
      const barH = (b.count / max) * plotH;
      // a bucket narrower than 6 px (all at one value: every example spent ε = 1) is drawn 6 px wide,
      // centred on its value, so the bar sits on that value's tick
      const w = Math.max(x(b.to) - x(b.from), 6);
      const middle = (x(b.from) + x(b.to)) / 2;
      return s(
        "rect",
        { x: middle - w / 2, y: top + plotH - barH, width: w, height: barH, class: "mark tone-a" },
        s("title", {}, b.from === b.to ? `${num(b.from)}: ${num(b.count)}` : `${num(b.from)}–${num(b.to)}: ${num(b.count)}`),
      );
    }),
    marks.map((m, i) => [
      s("line", { x1: x(m.at), x2: x(m.at), y1: top - 4, y2: top + plotH, class: `limit limit-${i}` }),
      s("text", { x: x(m.at), y: top - 10, "text-anchor": i ? "end" : "start", class: "limit-label", dx: i ? -4 : 4 }, m.label),
    ]),
    s("g", { class: "x-ticks" }, xScale.ticks.map((t) => [
      s("line", { x1: x(t), x2: x(t), y1: top + plotH, y2: top + plotH + 4, class: "axis" }),
      s("text", { x: x(t), y: top + plotH + 16, "text-anchor": "middle", class: "tick" }, num(t, 3)),
    ])),
    s("text", { x: left + plotW / 2, y: height - 6, "text-anchor": "middle", class: "axis-label" }, xLabel),
  ];
  return figure({
    caption,
    description,
    height,
    drawing,
    data: dataTable(
      caption,
      ["spent from", "spent to", yLabel],
      buckets.map((b) => [num(b.from), num(b.to), num(b.count)]),
    ),
  });
}

/** Entries along a time axis: stems as tall as their ε, a shape per kind. */
export function timeline({ caption, description, entries }) {
  const height = 220;
  const left = 60;
  const top = 24;
  const plotW = WIDTH - left - 24;
  const plotH = height - top - 50;
  const times = entries.map((e) => e.t.getTime());
  const t0 = Math.min(...times);
  const t1 = Math.max(...times);
  const span = t1 - t0 || 1;
  const scale = niceScale(Math.max(...entries.map((e) => e.value), 0));
  const max = scale.top;
  const x = (t) => (t1 === t0 ? left + plotW / 2 : left + ((t - t0) / span) * plotW);
  const drawing = [
    yAxis(left, top, plotH, scale, "ε"),
    entries.map((e, i) => {
      const cx = x(e.t.getTime()) + (t1 === t0 ? (i - (entries.length - 1) / 2) * 14 : 0);
      const cy = top + plotH - (e.value / max) * plotH;
      const marker =
        e.kind === "charge"
          ? s("circle", { cx, cy, r: 5, class: "mark tone-a" })
          : s("rect", { x: cx - 5, y: cy - 5, width: 10, height: 10, class: "mark tone-b" });
      return s(
        "g",
        {},
        s("line", { x1: cx, x2: cx, y1: top + plotH, y2: cy, class: "stem" }),
        marker,
        s("title", {}, `${e.label}: ε ${num(e.value)}`),
      );
    }),
    s("text", { x: left, y: top + plotH + 16, "text-anchor": "start", class: "tick" }, new Date(t0).toISOString().slice(0, 19).replace("T", " ")),
    t1 !== t0
      ? s("text", { x: left + plotW, y: top + plotH + 16, "text-anchor": "end", class: "tick" }, new Date(t1).toISOString().slice(0, 19).replace("T", " "))
      : null,
    s("circle", { cx: left + 8, cy: height - 12, r: 5, class: "mark tone-a" }),
    s("text", { x: left + 18, y: height - 8, class: "tick" }, "charge"),
    s("rect", { x: left + 84, y: height - 17, width: 10, height: 10, class: "mark tone-b" }),
    s("text", { x: left + 100, y: height - 8, class: "tick" }, "budget set (the new budget)"),
  ];
  return figure({ caption, description, height, drawing });
}

/** Values on one number line (ε: a lower bound, the implemented ε, ε₂, ε): markers with labels. */
export function ladder({ caption, description, marks }) {
  const height = 70 + marks.length * 22;
  const left = 24;
  const plotW = WIDTH - left - 24;
  const axisY = 40;
  const scale = niceScale(Math.max(...marks.map((m) => m.value), 1e-9));
  const xmax = scale.top;
  const x = (v) => left + (v / xmax) * plotW;
  const drawing = [
    s("line", { x1: left, x2: left + plotW, y1: axisY, y2: axisY, class: "axis" }),
    scale.ticks.map((t) => [
      s("line", { x1: x(t), x2: x(t), y1: axisY - 4, y2: axisY + 4, class: "axis" }),
      s("text", { x: x(t), y: axisY - 10, "text-anchor": "middle", class: "tick" }, num(t, 3)),
    ]),
    marks.map((m, i) => {
      const y = axisY + 24 + i * 22;
      const anchor = x(m.value) > left + plotW * 0.6 ? "end" : "start";
      return [
        s("line", { x1: x(m.value), x2: x(m.value), y1: axisY, y2: y - 4, class: "stem" }),
        s("circle", { cx: x(m.value), cy: axisY, r: 5, class: `mark tone-${m.tone ?? "a"}` }),
        s("text", { x: x(m.value), y, "text-anchor": anchor, dx: anchor === "end" ? -2 : 2, class: "mark-label" }, `${m.label}: ${num(m.value)}`),
      ];
    }),
  ];
  return figure({
    caption,
    description,
    height,
    drawing,
    data: dataTable(caption, ["value", "ε"], marks.map((m) => [m.label, num(m.value)])),
  });
}

/** Parts of a whole as one horizontal bar with a legend (match rates, budget). */
export function stack({ caption, description, parts, format = num }) {
  const height = 96 + Math.ceil(parts.length / 2) * 20;
  const left = 12;
  const plotW = WIDTH - 24;
  const total = parts.reduce((sum, p) => sum + Math.max(p.value, 0), 0) || 1;
  let at = left;
  const drawing = [];
  parts.forEach((p, i) => {
    const w = (Math.max(p.value, 0) / total) * plotW;
    drawing.push(s("rect", { x: at, y: 16, width: w, height: 34, class: `mark tone-${p.tone ?? "abcde"[i]}` }, s("title", {}, `${p.label}: ${format(p.value)}`)));
    at += w;
  });
  parts.forEach((p, i) => {
    const lx = left + (i % 2) * (plotW / 2);
    const ly = 74 + Math.floor(i / 2) * 20;
    drawing.push(s("rect", { x: lx, y: ly - 10, width: 12, height: 12, class: `mark tone-${p.tone ?? "abcde"[i]}` }));
    drawing.push(s("text", { x: lx + 18, y: ly, class: "mark-label" }, `${p.label}: ${format(p.value)}`));
  });
  return figure({
    caption,
    description,
    height,
    drawing,
    data: dataTable(caption, ["part", "value"], parts.map((p) => [p.label, format(p.value)])),
  });
}

/** Labelled horizontal bars on one scale (advantages, losses): each label above its bar. */
export function bars({ caption, description, items, max, format = num }) {
  const rowH = 46;
  const left = 12;
  const plotW = WIDTH - left - 110;
  const height = 10 + items.length * rowH;
  const top = Math.max(max ?? 0, ...items.map((i) => i.value), 1e-12);
  const drawing = items.map((item, i) => {
    const y = 6 + i * rowH;
    const w = (Math.max(item.value, 0) / top) * plotW;
    return [
      s("text", { x: left, y: y + 12, class: "mark-label" }, item.label),
      s("rect", { x: left, y: y + 18, width: Math.max(w, 1), height: 18, class: `mark tone-${item.tone ?? "a"}` }),
      s("text", { x: left + w + 6, y: y + 32, class: "mark-label" }, format(item.value)),
    ];
  });
  return figure({
    caption,
    description,
    height,
    drawing,
    data: dataTable(caption, ["", "value"], items.map((i) => [i.label, format(i.value)])),
  });
}
