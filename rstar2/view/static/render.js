// Rendering of one trajectory (reasoning, tool calls with highlighted code, the sandbox's
// output, the answer), per-token log-prob shading, and markdown tables: plain DOM, no library.
"use strict";

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) node.append(c instanceof Node ? c : String(c));
  return node;
}

const PY_TOKEN = /(#[^\n]*)|("""[\s\S]*?"""|'''[\s\S]*?'''|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')|\b(\d+(?:\.\d+)?(?:e[+-]?\d+)?)\b|\b(and|as|assert|break|class|continue|def|del|elif|else|except|False|finally|for|from|global|if|import|in|is|lambda|None|nonlocal|not|or|pass|raise|return|True|try|while|with|yield)\b|\b(print|range|len|int|float|str|sum|min|max|abs|list|dict|set|sorted|round|pow|math|sympy)\b/g;
const PY_CLASS = [null, "com", "str", "num", "kw", "bi"];

// Python source as spans classed by token kind (comments, strings, numbers, keywords, builtins).
function highlightPython(code) {
  const out = el("code");
  let last = 0;
  for (const m of code.matchAll(PY_TOKEN)) {
    out.append(code.slice(last, m.index));
    const kind = m.findIndex((g, i) => i > 0 && g !== undefined);
    out.append(el("span", { class: PY_CLASS[kind] }, m[0]));
    last = m.index + m[0].length;
  }
  out.append(code.slice(last));
  return out;
}

const SEGMENT = /(<tool_call>[\s\S]*?(?:<\/tool_call>|$))|(<tool_response>\n?[\s\S]*?\n?(?:<\/tool_response>|$))|(<answer>[\s\S]*?(?:<\/answer>|$))/g;
// The code of a call's JSON ({"name": ..., "arguments": {"code": ...}}), or its raw text.
function callCode(raw) {
  try {
    const code = JSON.parse(raw).arguments.code;
    if (typeof code === "string") return code;
  } catch (err) { /* a malformed call: show what the model wrote */ }
  return raw.trim();
}

const LOOKS_FAILED = /Traceback|Error\b|timed out|TimeoutError/;

// The response as the model saw it. `calls` (training rollouts) gives each call's status, so a
// failed call's output is red; without it (eval samples) the output's own text decides.
function renderTranscript(text, calls) {
  const box = el("div", { class: "transcript" });
  let last = 0, nCall = 0, nOut = 0;
  for (const m of text.matchAll(SEGMENT)) {
    box.append(text.slice(last, m.index));
    if (m[1] !== undefined) {
      const call = calls ? calls[nCall] : null;
      const code = call && call.code != null ? call.code : callCode(m[1].replace(/^<tool_call>|<\/tool_call>$/g, ""));
      const head = call ? `tool call ${nCall + 1} · ${call.status}` + (call.duration_s ? ` · ${call.duration_s.toFixed(2)} s` : "")
                        : `tool call ${nCall + 1}`;
      box.append(el("span", { class: "call" }, el("span", { class: "head" }, head), "\n", highlightPython(code)));
      nCall++;
    } else if (m[2] !== undefined) {
      const call = calls ? calls[nOut] : null;
      const body = m[2].replace(/^<tool_response>\n?|\n?<\/tool_response>$/g, "");
      const failed = call ? call.status !== "ok" : LOOKS_FAILED.test(body);
      box.append(el("span", { class: "tool-out" + (failed ? " failed" : "") },
                    el("span", { class: "head" }, `sandbox output ${nOut + 1}` + (call ? ` · ${call.status}` : "")), "\n", body));
      nOut++;
    } else {
      box.append(el("span", { class: "answer-box" }, m[3]));
    }
    last = m.index + m[0].length;
  }
  box.append(text.slice(last));
  return box;
}

// Each response token shaded by its sampled log-prob: white at p = 1, red as p falls;
// tokens the model did not sample (tool output, template) are grey.
function renderTokens(tokens) {
  const box = el("div", { class: "transcript tokens" });
  for (const [piece, lp] of tokens) {
    if (lp === null) { box.append(el("span", { class: "tok forced", title: "not sampled (tool output or template)" }, piece)); continue; }
    const alpha = Math.min(1, -lp / 4);
    box.append(el("span", { class: "tok", title: `log p = ${lp.toFixed(3)}, p = ${Math.exp(lp).toFixed(3)}`,
                            style: `background: rgba(230, 60, 40, ${alpha.toFixed(3)})` }, piece));
  }
  return box;
}

function logprobLegend() {
  const scale = el("span", { class: "lp-scale" });
  for (const lp of [0, -0.5, -1, -2, -3, -4]) scale.append(el("span", { style: `background: rgba(230, 60, 40, ${Math.min(1, -lp / 4)})` }, lp));
  return el("div", { class: "legend" }, "sampled log-prob: ", scale, "  grey: tokens not sampled by the model");
}

// The markdown `rstar2 eval compare` prints: headings, paragraphs and pipe tables.
function renderMarkdown(text) {
  const box = el("div", { class: "markdown" });
  let table = null;
  for (const line of text.split("\n")) {
    if (line.startsWith("|")) {
      const cells = line.replace(/^\||\|$/g, "").split("|").map(c => c.trim());
      if (cells.every(c => /^-+$/.test(c))) continue;
      if (!table) { table = el("table", { class: "grid" }); box.append(table); table.append(el("tr", {}, cells.map(c => el("th", {}, c)))); }
      else table.append(el("tr", {}, cells.map(c => el("td", {}, c))));
      continue;
    }
    table = null;
    if (line.startsWith("## ")) box.append(el("h4", {}, line.slice(3)));
    else if (line.trim()) box.append(el("p", {}, line));
  }
  return box;
}
