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

// Frame with axes, ticks and a title; returns the scale functions and the svg.
function chartFrame(title, xs, ys, size) {
  const W = size?.w || 420, H = size?.h || 230, L = 52, R = 12, T = size?.t || 22, B = 30;
  const svg = svgEl("svg", { width: W, height: H, class: "chart" });
  let [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  let [y0, y1] = [Math.min(...ys), Math.max(...ys)];
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  if (y0 === y1) { y0 -= y0 === 0 ? 1 : Math.abs(y0) * 0.1; y1 += y1 === 0 ? 1 : Math.abs(y1) * 0.1; }
  const sx = x => L + (x - x0) / (x1 - x0) * (W - L - R);
  const sy = y => H - B - (y - y0) / (y1 - y0) * (H - T - B);
  svgEl("text", { x: L, y: 14, class: "title" }, svg).textContent = title;
  for (let i = 0; i <= 4; i++) {
    const y = y0 + (y1 - y0) * i / 4;
    svgEl("line", { x1: L, x2: W - R, y1: sy(y), y2: sy(y), class: "grid" }, svg);
    svgEl("text", { x: L - 4, y: sy(y) + 4, "text-anchor": "end" }, svg).textContent = fmtNum(y);
  }
  const xticks = Math.min(6, Math.floor(x1 - x0) || 1);
  for (let i = 0; i <= xticks; i++) {
    const x = Math.round(x0 + (x1 - x0) * i / xticks);
    if (x >= x0 && x <= x1) svgEl("text", { x: sx(x), y: H - B + 14, "text-anchor": "middle" }, svg).textContent = x;
  }
  svgEl("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, class: "axis" }, svg);
  svgEl("line", { x1: L, x2: L, y1: T, y2: H - B, class: "axis" }, svg);
  svgEl("text", { x: W - R, y: H - 4, "text-anchor": "end" }, svg).textContent = "step";
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
  const f = chartFrame(title, [0, Math.max(...ends)], [0, 1], { w: 760, h: H, t: 40 });
  f.svg.querySelectorAll("text[text-anchor=end]").forEach(t => { if (t.getAttribute("x") < f.L) t.remove(); });
  f.svg.lastChild.textContent = "seconds";
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
