// Small SVG charts for the viewer: a line chart (one polyline and one dot per point per run)
// and a stacked bar chart. No library: the page must work offline and in an exported file.
"use strict";
const SVG_NS = "http://www.w3.org/2000/svg";
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

function svgEl(tag, attrs, parent) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  if (parent) parent.appendChild(el);
  return el;
}

function fmtNum(v) {
  if (!isFinite(v)) return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(2);
  return String(+v.toPrecision(3));
}

// Ticks a reader can use: every `step` apart, the step 1, 2 or 5 times a power of ten, about
// `intervals` of them over [lo, hi]. `integer` keeps the step whole (training steps); `extend`
// widens the range out to the ticks around it (a value axis), otherwise the ticks are the
// multiples of the step inside it. A flat range (one value, or one point) is widened first.
// Returns {lo, hi, ticks}, the ticks rounded to the step's decimals (0.6, not 0.6000000000000001).
function niceTicks(lo, hi, intervals, { integer = false, extend = false } = {}) {
  if (!(hi > lo)) { const pad = lo === 0 ? 1 : Math.abs(lo) * 0.1; lo -= pad; hi += pad; }
  const raw = (hi - lo) / intervals, magnitude = 10 ** Math.floor(Math.log10(raw));
  let step = [1, 2, 5, 10].map(m => m * magnitude).find(s => s >= raw * (1 - 1e-9));
  if (integer) step = Math.max(1, step);
  const decimals = Math.min(100, Math.max(0, -Math.floor(Math.log10(step)))), slack = 1e-9;
  const at = k => +(k * step).toFixed(decimals);
  const first = extend ? Math.floor(lo / step + slack) : Math.ceil(lo / step - slack);
  const last = extend ? Math.ceil(hi / step - slack) : Math.floor(hi / step + slack);
  const ticks = [];
  for (let k = first; k <= last; k++) ticks.push(at(k));
  return extend ? { lo: at(first), hi: at(last), ticks } : { lo, hi, ticks };
}

// Frame with axes, ticks and a title; returns the scale functions and the svg. The y axis runs
// between round ticks; the x axis is the training step (whole ticks) unless `opts.xLabel` says
// otherwise (`opts.wholeX: false` for a continuous one); `opts.yTicks: false` leaves y unmarked.
function chartFrame(title, xs, ys, opts) {
  const W = opts?.w || 420, H = opts?.h || 230, L = 52, R = 12, T = opts?.t || 22, B = 30;
  const svg = svgEl("svg", { width: W, height: H, class: "chart" });
  const xAxis = niceTicks(Math.min(...xs), Math.max(...xs), 6, { integer: opts?.wholeX !== false });
  const yAxis = niceTicks(Math.min(...ys), Math.max(...ys), 4, { extend: true });
  const [x0, x1, y0, y1] = [xAxis.lo, xAxis.hi, yAxis.lo, yAxis.hi];
  const sx = x => L + (x - x0) / (x1 - x0) * (W - L - R);
  const sy = y => H - B - (y - y0) / (y1 - y0) * (H - T - B);
  svgEl("text", { x: L, y: 14, class: "title" }, svg).textContent = title;
  if (opts?.yTicks !== false) {
    for (const y of yAxis.ticks) {
      svgEl("line", { x1: L, x2: W - R, y1: sy(y), y2: sy(y), class: "grid" }, svg);
      svgEl("text", { x: L - 4, y: sy(y) + 4, "text-anchor": "end", class: "ytick" }, svg).textContent = fmtNum(y);
    }
  }
  for (const x of xAxis.ticks) {
    svgEl("text", { x: sx(x), y: H - B + 14, "text-anchor": "middle", class: "xtick" }, svg).textContent = fmtNum(x);
  }
  svgEl("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, class: "axis" }, svg);
  svgEl("line", { x1: L, x2: L, y1: T, y2: H - B, class: "axis" }, svg);
  svgEl("text", { x: W - R, y: H - 4, "text-anchor": "end" }, svg).textContent = opts?.xLabel || "step";
  return { svg, sx, sy, W, H, L, R, T, B };
}

// series: [{label, color, points: [[step, value], ...]}]
function lineChart(title, series) {
  const xs = series.flatMap(s => s.points.map(p => p[0]));
  const ys = series.flatMap(s => s.points.map(p => p[1]));
  if (!xs.length) return null;
  const f = chartFrame(title, xs, ys);
  f.svg.setAttribute("data-metric", title);
  series.forEach((s, k) => {
    svgEl("polyline", { points: s.points.map(p => `${f.sx(p[0])},${f.sy(p[1])}`).join(" "),
                        fill: "none", stroke: s.color, "stroke-width": 1.5 }, f.svg);
    for (const [x, y] of s.points) {
      const dot = svgEl("circle", { cx: f.sx(x), cy: f.sy(y), r: 2.5, fill: s.color, class: "pt",
                                    "data-run": s.label, "data-step": x }, f.svg);
      svgEl("title", {}, dot).textContent = `${s.label} step ${x}: ${fmtNum(y)}`;
    }
    if (series.length > 1) {
      svgEl("text", { x: f.W - f.R, y: 14 + 12 * (k + 1), "text-anchor": "end", fill: s.color }, f.svg).textContent = s.label;
    }
  });
  return f.svg;
}

// steps: [n, ...]; layers: [{label, color, values: [seconds per step]}], stacked bottom-up.
function stackedBars(title, steps, layers) {
  if (!steps.length) return null;
  const totals = steps.map((_, i) => layers.reduce((a, l) => a + (l.values[i] || 0), 0));
  const f = chartFrame(title, [steps[0] - 0.5, steps[steps.length - 1] + 0.5], [0, Math.max(...totals)], { w: 560, h: 260, t: 40 });
  const bw = Math.max(1, (f.sx(steps[0] + 1) - f.sx(steps[0])) * 0.8);
  steps.forEach((step, i) => {
    let base = 0;
    for (const l of layers) {
      const v = l.values[i] || 0;
      if (v <= 0) continue;
      const r = svgEl("rect", { x: f.sx(step) - bw / 2, y: f.sy(base + v), width: bw,
                                height: Math.max(0.5, f.sy(base) - f.sy(base + v)), fill: l.color, class: "seg" }, f.svg);
      svgEl("title", {}, r).textContent = `step ${step} ${l.label}: ${fmtNum(v)} s`;
      base += v;
    }
  });
  layers.forEach((l, k) => {
    const x = f.L + 8 + k * 88;
    svgEl("rect", { x, y: 24, width: 9, height: 9, fill: l.color }, f.svg);
    svgEl("text", { x: x + 12, y: 32 }, f.svg).textContent = l.label;
  });
  return f.svg;
}

// lanes: [{label, spans: [[start, end, color, what], ...]}]; one row per lane on a shared time axis.
function laneChart(title, lanes, legend) {
  const ends = lanes.flatMap(l => l.spans.map(s => s[1]));
  if (!ends.length) return null;
  const rowH = 12, H = 60 + rowH * lanes.length;
  const f = chartFrame(title, [0, Math.max(...ends)], [0, 1],
                       { w: 760, h: H, t: 40, xLabel: "seconds", wholeX: false, yTicks: false });
  lanes.forEach((lane, i) => {
    const y = 40 + i * rowH;
    svgEl("text", { x: f.L - 4, y: y + rowH - 3, "text-anchor": "end" }, f.svg).textContent = lane.label;
    for (const [start, end, color, what] of lane.spans) {
      const r = svgEl("rect", { x: f.sx(start), y: y + 1, width: Math.max(1, f.sx(end) - f.sx(start)), height: rowH - 2,
                                fill: color, class: "span" }, f.svg);
      svgEl("title", {}, r).textContent = `${lane.label} ${what}: ${fmtNum(start)}–${fmtNum(end)} s`;
    }
  });
  legend.forEach(([label, color], k) => {
    const x = f.L + 8 + k * 150;
    svgEl("rect", { x, y: 24, width: 9, height: 9, fill: color }, f.svg);
    svgEl("text", { x: x + 12, y: 32 }, f.svg).textContent = label;
  });
  return f.svg;
}
