// The viewer's page: tabs for curves, rollouts, eval drill-down and the step timeline.
// Data comes from the JSON API (see rstar2/view/server.py) or, in an exported file, from
// window.RSTAR2_DATA, which holds the same answers keyed by the same URLs.
"use strict";
const EMBEDDED = window.RSTAR2_DATA || null;
const POLL_MS = 2000;
const PAGE_ROWS = 200;  // table rows drawn at once; "show more" draws the next ones
const DEFAULT_METRICS = ["reward/accuracy", "reward/mean", "tools/error_ratio", "tools/error_ratio_in_positives"];
const PHASES = [["generate", "#4c78a8"], ["tools", "#f58518"], ["reward", "#54a24b"], ["update", "#e45756"], ["sync", "#b279a2"], ["other", "#bab0ac"]];
const S = { runs: [], metrics: {}, shownRuns: new Set(), shownMetrics: null, step: {}, steps: null,
            group: null, matches: null, rollout: null, shade: false, evalDoc: null, limit: {} };
const $ = id => document.getElementById(id);

async function api(url) {
  if (EMBEDDED) return url in EMBEDDED ? EMBEDDED[url] : { error: { message: `${url}: not in this exported file` } };
  try {
    const response = await fetch(url);
    return await response.json();
  } catch (err) {
    return { error: { message: `${url}: ${err.message} (is the viewer still running?)` } };
  }
}

// One line per problem on top of the page. Messages start with what they are about (a file,
// a folder); a newer message about the same thing replaces the older one.
function say(text, kind = "warn") {
  const box = $("messages");
  const about = text.split(": ")[0];
  const old = [...box.children].find(c => c.dataset.about === about);
  const line = el("div", { class: `msg ${kind}`, "data-about": about }, text);
  if (old) old.replaceWith(line); else box.append(line);
}
function check(answer) {
  if (answer && answer.error) { say(answer.error.message, "error"); return null; }  // the services' error shape
  for (const w of (answer && answer.warnings) || []) say(w);
  return answer;
}

function showTab(name) {
  document.querySelectorAll("nav button").forEach(b => b.classList.toggle("active", b.dataset.tab === name));
  document.querySelectorAll(".tab").forEach(t => t.classList.toggle("hidden", t.id !== `tab-${name}`));
}

// The first rows of a long table, and a button that draws more of them.
function paged(key, rows, draw, redraw, columns) {
  const limit = S.limit[key] || PAGE_ROWS;
  const shown = rows.slice(0, limit).map(draw);
  if (rows.length > limit) {
    shown.push(el("tr", {}, el("td", { colspan: columns }, el("button", { class: "more",
      onclick: () => { S.limit[key] = limit + PAGE_ROWS; redraw(); } }, `show ${Math.min(PAGE_ROWS, rows.length - limit)} more of ${rows.length - limit}`))));
  }
  return shown;
}

function fillSelect(select, options, keep = true) {
  const old = select.value;
  select.replaceChildren(...options.map(([value, label]) => el("option", { value }, label)));
  if (keep && options.some(([v]) => String(v) === old)) select.value = old;
}

// ------------------------------------------------------------------ curves
async function loadMetrics() {
  for (const run of S.runs.filter(r => r.training)) {
    const answer = check(await api(`/api/runs/${run.id}/metrics`));
    if (answer) S.metrics[run.id] = answer.rows;
  }
}

function metricNames() {
  const names = new Set();
  for (const id of S.shownRuns) for (const row of S.metrics[id] || []) Object.keys(row).forEach(k => k !== "step" && names.add(k));
  return [...names].sort();
}

function renderMetricList() {
  const names = metricNames();
  if (S.shownMetrics === null) S.shownMetrics = new Set(DEFAULT_METRICS.filter(n => names.includes(n)));
  $("metric-list").replaceChildren(...names.map(name => el("label", {},
    el("input", { type: "checkbox", value: name, ...(S.shownMetrics.has(name) ? { checked: "" } : {}),
                  onchange: e => { e.target.checked ? S.shownMetrics.add(name) : S.shownMetrics.delete(name); renderCharts(); } }),
    " ", name)));
}

function renderCharts() {
  const runs = S.runs.filter(r => S.shownRuns.has(r.id));
  const charts = [...S.shownMetrics].map(name => lineChart(name, runs.map(run => ({
    label: run.label, color: COLORS[run.id % COLORS.length],
    points: (S.metrics[run.id] || []).filter(r => typeof r[name] === "number").map(r => [r.step, r[name]]) }))
    .filter(s => s.points.length)));
  $("charts").replaceChildren(...charts.filter(Boolean));
  $("time-charts").replaceChildren(...runs.map(run => {
    const rows = S.metrics[run.id] || [];
    return stackedBars(`${run.label}: seconds per step`, rows.map(r => r.step), phaseLayers(rows));
  }).filter(Boolean));
}

// A step's wall time split into phases that do not overlap: tool calls run inside the rollout
// phase, so "generate" is the rollout time with no call in flight.
function phaseLayers(rows) {
  const t = (r, k) => r[`time/${k}`] || 0;
  const parts = rows.map(r => {
    const p = { generate: Math.max(0, t(r, "rollout") - t(r, "tools")), tools: t(r, "tools"), reward: t(r, "reward"),
                update: t(r, "update"), sync: t(r, "sync") };
    p.other = Math.max(0, t(r, "step") - Object.values(p).reduce((a, b) => a + b, 0));
    return p;
  });
  return PHASES.map(([label, color]) => ({ label, color, values: parts.map(p => p[label]) }));
}

function renderRunToggles() {
  $("run-toggles").replaceChildren(...S.runs.filter(r => r.training).map(run => el("label", { style: `color:${COLORS[run.id % COLORS.length]}` },
    el("input", { type: "checkbox", ...(S.shownRuns.has(run.id) ? { checked: "" } : {}),
                  onchange: e => { e.target.checked ? S.shownRuns.add(run.id) : S.shownRuns.delete(run.id); renderMetricList(); renderCharts(); } }),
    ` ${run.label} `)));
}

// ------------------------------------------------------------------ rollouts
function roRun() { return S.runs.find(r => String(r.id) === $("ro-run").value); }

function renderStepSelect() {
  const run = roRun();
  const steps = run ? run.steps : [];
  const follow = $("ro-follow").checked;
  fillSelect($("ro-step"), steps.map(s => [s, `step ${s}`]), !follow);
  if (follow && steps.length) $("ro-step").value = steps[steps.length - 1];
}

async function loadStep() {
  const run = roRun(), step = $("ro-step").value;
  if (!run || step === "") { $("groups").replaceChildren(); $("rollouts").replaceChildren(); return; }
  const answer = check(await api(`/api/runs/${run.id}/steps/${step}`));
  S.steps = answer;
  S.matches = null;
  S.limit = {};
  renderGroups();
  renderRollouts();
}

function verdict(g) {
  return g.dropped ? `dropped: ${g.dropped.replace(/_/g, " ")}` : `used: kept ${g.kept} of ${g.rollouts}`;
}

function renderGroups() {
  const groups = S.steps ? S.steps.groups : [];
  $("groups").replaceChildren(el("tr", {}, ["group", "problem", "gold", "correct", "tool errors", "RoC verdict"].map(h => el("th", {}, h))),
    ...paged("groups", groups, g => el("tr", { class: "clickable group-row" + (S.group === g.group ? " selected" : ""), "data-group": g.group,
                                  onclick: () => { S.group = S.group === g.group ? null : g.group; renderGroups(); renderRollouts(); } },
      el("td", {}, g.group), el("td", {}, g.problem_id), el("td", {}, g.gold), el("td", {}, `${g.correct}/${g.rollouts}`),
      el("td", {}, g.tool_errors), el("td", { class: g.dropped ? "bad" : "ok" }, verdict(g))), renderGroups, 6));
  $("group-chip").replaceChildren(S.group === null ? "" : el("span", { class: "chip", onclick: () => { S.group = null; renderGroups(); renderRollouts(); } }, `group ${S.group} ×`));
}

function filteredRollouts() {
  const f = { correct: $("f-correct").value, kept: $("f-kept").value, err: $("f-toolerr").checked, trunc: $("f-trunc").checked };
  let rows = (S.steps ? S.steps.rollouts : []).filter(r =>
    (S.group === null || r.group === S.group) && (f.correct === "all" || (r.reward === 1) === (f.correct === "correct")) &&
    (f.kept === "all" || r.kept === (f.kept === "kept")) && (!f.err || r.tool_errors > 0) && (!f.trunc || r.truncated) &&
    (S.matches === null || S.matches.has(r.index)));
  const sort = $("f-sort").value;
  if (sort === "length") rows = [...rows].sort((a, b) => b.response_tokens - a.response_tokens);
  if (sort === "penalty") rows = [...rows].sort((a, b) => b.penalty - a.penalty);
  return rows;
}

function renderRollouts() {
  const rows = filteredRollouts();
  $("rollouts").replaceChildren(el("tr", {}, ["group", "rollout", "reward", "answer", "penalty", "RoC", "tool calls (failed)", "tokens", "stop"].map(h => el("th", {}, h))),
    ...paged("rollouts", rows, r => el("tr", { class: "clickable rollout-row" + (S.rollout === r.index ? " selected" : ""), "data-index": r.index,
                                "data-tool-errors": r.tool_errors, onclick: () => openRollout(r.index) },
      el("td", {}, r.group), el("td", {}, r.rollout), el("td", { class: r.reward === 1 ? "ok" : "bad" }, r.reward === 1 ? "✓ 1" : "✗ 0"),
      el("td", {}, r.answer ?? "—"), el("td", {}, r.penalty.toFixed(2)), el("td", {}, r.kept ? "kept" : (r.group_dropped ? "group dropped" : "not kept")),
      el("td", { class: r.tool_errors ? "bad" : "" }, `${r.tool_calls} (${r.tool_errors})`), el("td", {}, r.response_tokens), el("td", {}, r.stop_reason)),
      renderRollouts, 9));
  if (!rows.length) $("rollouts").append(el("tr", {}, el("td", { colspan: 9, class: "note" }, "no rollout matches the filters")));
}

async function search() {
  const q = $("f-search").value.trim();
  if (!q) { S.matches = null; renderRollouts(); return; }
  const run = roRun(), step = $("ro-step").value;
  const answer = EMBEDDED ? { lines: embeddedSearch(run.id, step, q) } : check(await api(`/api/runs/${run.id}/steps/${step}/search?q=${encodeURIComponent(q)}`));
  if (answer) { S.matches = new Set(answer.lines); renderRollouts(); }
}

function embeddedSearch(runId, step, q) {
  const needle = q.toLowerCase();
  return S.steps.rollouts.map(r => r.index).filter(i => {
    const row = EMBEDDED[`/api/runs/${runId}/steps/${step}/rollouts/${i}`];
    return row && JSON.stringify([row.response, row.answer, row.tool_calls]).toLowerCase().includes(needle);
  });
}

async function openRollout(index) {
  const run = roRun(), step = $("ro-step").value;
  const row = check(await api(`/api/runs/${run.id}/steps/${step}/rollouts/${index}`));
  S.rollout = index;
  renderRollouts();
  if (!row) return;
  const correct = row.reward === 1;
  const shading = row.token_logprobs ? el("label", {}, el("input", { type: "checkbox", id: "shade", ...(S.shade ? { checked: "" } : {}),
    onchange: e => { S.shade = e.target.checked; openRollout(index); } }), " shade tokens by sampled log-prob") : el("span", { class: "note" }, "this run did not log log-probs");
  $("trajectory").replaceChildren(
    el("h3", {}, `step ${row.step} · group ${row.group} · rollout ${row.rollout} · problem ${row.problem_id}`),
    el("div", { class: "bar" }, el("span", { class: correct ? "ok" : "bad" }, `answer ${row.answer ?? "(none)"} vs gold ${row.gold}: ${correct ? "correct" : "wrong"}`),
      el("span", {}, `penalty ${row.penalty.toFixed(2)}`), el("span", {}, row.kept ? "kept by RoC" : (row.group_dropped ? `group dropped (${row.group_dropped})` : "not kept by RoC")),
      el("span", {}, `stop: ${row.stop_reason}`), shading),
    renderPrompt(row.prompt, row.special_tokens),
    ...(S.shade && row.token_logprobs ? [logprobLegend(), renderTokens(row.token_logprobs, row.special_tokens)]
                                      : [renderTranscript(row.response, row.tool_calls, row.special_tokens)]));
}

// ------------------------------------------------------------------ eval
function evalOptions() {
  return S.runs.flatMap(run => run.evals.map(name => [`${run.id}|${name}`, name === "." ? run.label : `${run.label} / ${name}`]));
}

async function loadEval() {
  const [id, name] = ($("ev-run").value || "|").split("|");
  if (!name) return;
  const doc = check(await api(`/api/runs/${id}/eval?name=${encodeURIComponent(name)}`));
  S.evalDoc = doc;
  if (!doc) return;
  const entries = Object.values(doc.benchmarks);
  const ks = [...new Set(entries.flatMap(e => Object.keys(e.pass_at)))].sort((a, b) => a - b);
  const pct = v => (100 * v).toFixed(1);
  $("ev-bench").replaceChildren(el("tr", {}, ["benchmark", "problems", "n", "avg@n", ...ks.map(k => `pass@${k}`), "maj@n", "tool err %", "truncated %"].map(h => el("th", {}, h))),
    ...entries.map(e => el("tr", {}, [e.name, e.problems, e.n, pct(e.avg), ...ks.map(k => k in e.pass_at ? pct(e.pass_at[k]) : "–"), pct(e.maj),
      pct(e.tool_error_ratio), pct(e.truncated_share)].map(c => el("td", {}, c)))));
  fillSelect($("ev-bench-pick"), Object.keys(doc.problems).map(b => [b, b]));
  renderProblems();
}

function renderProblems() {
  const bench = $("ev-bench-pick").value;
  const problems = (S.evalDoc && S.evalDoc.problems[bench]) || [];
  $("ev-problems").replaceChildren(el("tr", {}, ["problem", "correct", "accuracy", "maj", "mean tokens", "tool calls (failed)", "no answer", "truncated"].map(h => el("th", {}, h))),
    ...paged("problems", problems, p => el("tr", { class: "clickable problem-row", onclick: () => openProblem(bench, p.problem_id) },
      el("td", {}, p.problem_id), el("td", {}, `${p.correct}/${p.samples}`),
      el("td", { class: p.accuracy > 0 ? "ok" : "bad" }, (100 * p.accuracy).toFixed(0) + "%"), el("td", {}, p.maj),
      el("td", {}, p.mean_response_tokens.toFixed(0)), el("td", {}, `${p.tool_calls} (${p.tool_errors})`), el("td", {}, p.no_answer), el("td", {}, p.truncated)),
      renderProblems, 8));
}

async function openProblem(bench, problem) {
  const [id, name] = $("ev-run").value.split("|");
  const answer = check(await api(`/api/runs/${id}/eval/samples?name=${encodeURIComponent(name)}&bench=${encodeURIComponent(bench)}&problem=${encodeURIComponent(problem)}`));
  if (!answer) return;
  $("ev-samples").replaceChildren(el("h3", {}, `${bench} · ${problem}: ${answer.samples.length} samples`),
    ...answer.samples.map(s => el("div", { class: "sample" },
      el("div", { class: "bar" }, el("b", {}, `sample ${s.sample}`), el("span", { class: s.correct ? "ok" : "bad" }, `answer ${s.pred ?? "(none)"} vs gold ${s.gold}`),
        el("span", {}, `${s.response_tokens} tokens, ${s.tool_calls} calls (${s.tool_errors} failed), stop: ${s.stop_reason}`)),
      renderTranscript(s.response, null))));
}

async function compare() {
  const [a, aName] = $("cmp-a").value.split("|"), [b, bName] = $("cmp-b").value.split("|");
  const answer = check(await api(`/api/compare?a=${a}&a_name=${encodeURIComponent(aName)}&b=${b}&b_name=${encodeURIComponent(bName)}`));
  if (answer) $("compare").replaceChildren(renderMarkdown(answer.markdown));
}

// ------------------------------------------------------------------ timeline
async function renderTimeline() {
  $("timeline-note").textContent = "Per-engine spans need the rollout fleet, which does not record them yet. Shown instead: " +
    "what the trainer records: each step's wall time by phase (tools: the time at least one call was in flight during the " +
    "rollout phase) and, for the logged rollouts of the step chosen in Rollouts, when each one started, ended and was graded.";
  const run = S.runs.find(r => String(r.id) === $("tl-run").value);
  if (!run) return;
  const rows = S.metrics[run.id] || [];
  const rollouts = S.steps && String(roRun()?.id) === String(run.id) ? [...S.steps.rollouts] : [];
  const timed = rollouts.filter(r => r.span_s).sort((a, b) => a.span_s[1] - b.span_s[1]);
  const lanes = laneChart(`step ${S.steps?.step}: logged rollouts, sorted by when they ended`, timed.map(r => ({
    label: `g${r.group} r${r.rollout}`,
    spans: [[r.span_s[0], r.span_s[1], "#4c78a8", "generating and tool calls"], [r.span_s[1], r.span_s[2], "#54a24b", "grading"]] })),
    [["generating and tool calls", "#4c78a8"], ["grading", "#54a24b"]]);
  $("timeline").replaceChildren(...[stackedBars(`${run.label}: step wall time by phase (s)`, rows.map(r => r.step), phaseLayers(rows)),
    lanes || (rollouts.length ? el("p", { class: "note" }, "This run's rollout log has no start/end times (written before they were logged).") : null)].filter(Boolean));
  const longest = Math.max(1, ...rollouts.map(r => r.response_tokens));
  rollouts.sort((a, b) => b.response_tokens - a.response_tokens);
  $("tl-rollouts").replaceChildren(el("table", { class: "grid" }, el("tr", {}, ["group", "rollout", "tokens", "", "tool calls", "tool seconds"].map(h => el("th", {}, h))),
    ...paged("timeline", rollouts, r => el("tr", {}, el("td", {}, r.group), el("td", {}, r.rollout), el("td", {}, r.response_tokens),
      el("td", {}, el("div", { style: `width:${Math.round(300 * r.response_tokens / longest)}px;height:8px;background:#4c78a8` })),
      el("td", {}, r.tool_calls), el("td", {}, r.tool_seconds.toFixed(2))), renderTimeline, 6)));
}

// ------------------------------------------------------------------ start and live refresh
async function refresh() {
  const runs = check(await api("/api/runs"));
  if (!runs) return;
  const stepsBefore = JSON.stringify(S.runs.map(r => r.steps));
  S.runs = runs;
  runs.forEach(r => { r.problems.forEach(p => say(p, "error")); r.warnings.forEach(w => say(w)); });
  const countsBefore = JSON.stringify(Object.values(S.metrics).map(rows => rows.length));
  await loadMetrics();
  if (JSON.stringify(Object.values(S.metrics).map(rows => rows.length)) !== countsBefore) { renderMetricList(); renderCharts(); }
  if (JSON.stringify(runs.map(r => r.steps)) !== stepsBefore) {
    const before = $("ro-step").value;
    renderStepSelect();
    if ($("ro-step").value !== before) await loadStep();
  }
  if (!$("tab-eval").classList.contains("hidden")) await loadEval();  // an eval still writing its samples
  if (!$("tab-timeline").classList.contains("hidden")) renderTimeline();
  $("live").textContent = EMBEDDED ? "exported snapshot" : `live · updated ${new Date().toLocaleTimeString()}`;
}

async function start() {
  document.querySelectorAll("nav button").forEach(b => b.addEventListener("click", () => { showTab(b.dataset.tab); if (b.dataset.tab === "timeline") renderTimeline(); }));
  const runs = check(await api("/api/runs")) || [];
  S.runs = runs;
  runs.forEach(r => { r.problems.forEach(p => say(p, "error")); r.warnings.forEach(w => say(w)); if (r.training) S.shownRuns.add(r.id); });
  renderRunToggles();
  await loadMetrics();
  renderMetricList();
  renderCharts();
  const training = runs.filter(r => r.training).map(r => [r.id, r.label]);
  for (const id of ["ro-run", "tl-run"]) fillSelect($(id), training);
  renderStepSelect();
  if (EMBEDDED && EMBEDDED.step) $("ro-step").value = EMBEDDED.step;
  $("ro-run").onchange = () => { renderStepSelect(); S.group = null; loadStep(); };
  $("ro-step").onchange = () => { $("ro-follow").checked = false; S.group = null; loadStep(); };
  for (const id of ["f-correct", "f-kept", "f-toolerr", "f-trunc", "f-sort"]) $(id).onchange = renderRollouts;
  $("f-go").onclick = search;
  $("f-search").onkeydown = e => { if (e.key === "Enter") search(); };
  $("tl-run").onchange = renderTimeline;
  await loadStep();
  const evals = evalOptions();
  for (const id of ["ev-run", "cmp-a", "cmp-b"]) fillSelect($(id), evals);
  if (evals.length > 1) $("cmp-b").value = evals[1][0];
  $("ev-run").onchange = loadEval;
  $("ev-bench-pick").onchange = renderProblems;
  $("cmp-go").onclick = compare;
  await loadEval();
  document.body.dataset.ready = "1";
  if (!EMBEDDED) setInterval(refresh, POLL_MS);
}

start();
