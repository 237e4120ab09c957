// Rendering of one trajectory (the prompt, reasoning, tool calls with highlighted code, the
// sandbox's output, the answer), per-token log-prob shading, and markdown tables: plain DOM, no
// library. Every text goes into the page as a text node or an attribute value, never as HTML.
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

// The chat template's special tokens as a regex alternation: the tokenizer's own list where the
// log recorded it (training rollouts), else tokens of the common <|name|> form (eval samples).
function specialPattern(specials) {
  const names = (specials || []).filter(s => typeof s === "string" && s).sort((a, b) => b.length - a.length);
  return names.length ? names.map(s => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join("|") : "<\\|[^|<>\\s]+\\|>";
}

// Text with its special tokens hidden: a token that opens a turn header (`<|im_start|>user`)
// becomes a labelled boundary naming the turn's role, and the others (end of turn, end of text)
// are dropped. The log keeps the exact text; this is only how the page shows it.
function templateText(text, specials) {
  const sp = specialPattern(specials);
  const mark = new RegExp(`(?:${sp})(\\w+)(?:(?:${sp})\\n*|\\n)|(?:${sp})\\n?`, "g");
  const out = [];
  let last = 0;
  for (const m of text.matchAll(mark)) {
    out.push(text.slice(last, m.index));
    if (m[1] !== undefined) out.push(el("span", { class: "turn", title: m[0] }, m[1]));
    last = m.index + m[0].length;
  }
  out.push(text.slice(last));
  return out.filter(part => part !== "");
}

// The prompt the model saw (chat template, system prompt with the tool description, question),
// folded away until asked for.
function renderPrompt(prompt, specials) {
  if (typeof prompt !== "string") return el("p", { class: "note prompt-missing" }, "prompt: not recorded in this run's log");
  return el("details", { class: "prompt" }, el("summary", {}, `prompt as the model saw it (${prompt.length} characters)`),
            el("div", { class: "prompt-text" }, templateText(prompt, specials)));
}

// The response as the model saw it. `calls` (training rollouts) gives each call's status, so a
// failed call's output is red; without it (eval samples) the output's own text decides.
// `specials`: the tokenizer's special tokens, hidden as `templateText` says.
function renderTranscript(text, calls, specials) {
  const box = el("div", { class: "transcript" });
  const plain = part => templateText(part, specials);
  let last = 0, nCall = 0, nOut = 0;
  for (const m of text.matchAll(SEGMENT)) {
    box.append(...plain(text.slice(last, m.index)));
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
                    el("span", { class: "head" }, `sandbox output ${nOut + 1}` + (call ? ` · ${call.status}` : "")), "\n", ...plain(body)));
      nOut++;
    } else {
      box.append(el("span", { class: "answer-box" }, plain(m[3])));
    }
    last = m.index + m[0].length;
  }
  box.append(...plain(text.slice(last)));
  return box;
}

// Each response token shaded by its sampled log-prob: white at p = 1, red as p falls;
// tokens the model did not sample (tool output, template) are grey. Every token is shown, the
// special ones (end of turn, ...) marked as such: here they are tokens with a log-prob.
function renderTokens(tokens, specials) {
  const special = new RegExp(`^(?:${specialPattern(specials)})$`);
  const box = el("div", { class: "transcript tokens" });
  for (const [piece, lp] of tokens) {
    const marked = special.test(piece) ? " special" : "";
    if (lp === null) { box.append(el("span", { class: "tok forced" + marked, title: "not sampled (tool output or template)" }, piece)); continue; }
    const alpha = Math.min(1, -lp / 4);
    box.append(el("span", { class: "tok" + marked, title: `log p = ${lp.toFixed(3)}, p = ${Math.exp(lp).toFixed(3)}`,
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
