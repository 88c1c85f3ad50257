// kargo-latch dashboard: renders what the server's live feed says, and
// sends pauses and resumes. The judgement of each Stage is the CLI's
// (`kargo-latch status -o json`); this file only shows it.
'use strict';

const token = document.querySelector('meta[name="kargo-latch-token"]').content;
const state = { stages: new Map(), pauses: new Map(), access: {}, problems: {}, skew: 0, live: false };
const main = document.getElementById('main');
// rendered: what each card on screen was drawn from, so that a change
// redraws only the cards it touches (and keeps the keyboard's focus).
let rendered = new Map();
let layoutKey = '';

// ---- the live feed --------------------------------------------------------
//
// One live feed per browser, shared by every tab of this page: Chrome opens
// at most six HTTP/1.1 connections to one host, and a feed holds one for as
// long as it lives, so six tabs with a feed each would leave none for a
// pause. The tab holding the lock "kargo-latch-feed" reads the feed and
// passes every message on over a BroadcastChannel; a new tab asks it for
// everything; when that tab closes, the lock passes to another, which opens
// the feed anew.

const channel = 'BroadcastChannel' in window && navigator.locks ? new BroadcastChannel('kargo-latch-feed') : null;
const tabID = Math.random().toString(36).slice(2);
let leading = false;
let haveFull = false; // a tab shows nothing as live before a full state

function connect() {
  if (!channel) return openFeed();
  channel.onmessage = (e) => {
    const m = e.data || {};
    if (m.kind === 'hello' && leading && haveFull) channel.postMessage({ kind: 'state', to: m.from, body: everything(), live: state.live });
    else if (m.kind === 'state' && !leading && (!m.to || m.to === tabID) && (haveFull || m.body.full)) {
      haveFull = true;
      apply(m.body);
      setConn(m.live);
    } else if (m.kind === 'conn' && !leading && haveFull) setConn(m.live);
  };
  channel.postMessage({ kind: 'hello', from: tabID });
  // Held for as long as this tab lives: the promise never settles. The
  // tabs are told the feed is being reopened, until its full state comes.
  navigator.locks.request('kargo-latch-feed', () => new Promise(() => {
    leading = true;
    setConn(false);
    openFeed();
  }));
}

// openFeed reads the live feed; a feed the server ended for good (an
// answer that is not a stream) is opened again after a pause.
function openFeed() {
  const feed = new EventSource('/api/live');
  feed.onopen = () => setConn(true);
  feed.onerror = () => {
    setConn(false);
    if (feed.readyState === EventSource.CLOSED) setTimeout(openFeed, 5000);
  };
  feed.onmessage = (e) => {
    const m = JSON.parse(e.data);
    if (m.full) haveFull = true;
    apply(m);
    if (channel) channel.postMessage({ kind: 'state', body: m, live: true });
  };
}

// everything is the state as one full message, for a tab that just opened.
function everything() {
  return { full: true, stages: Object.fromEntries(state.stages), pauses: Object.fromEntries(state.pauses),
    access: state.access, problems: state.problems, now: new Date(Date.now() + state.skew).toISOString() };
}

function setConn(live) {
  if (leading && channel) channel.postMessage({ kind: 'conn', live });
  state.live = live;
  const el = document.getElementById('conn');
  el.dataset.state = live ? 'live' : 'lost';
  el.textContent = live ? 'Live' : 'Reconnecting… (what you see may be old)';
  if (live) renderNotice();
}

// dirty names what the messages since the last drawing changed: Stages by
// key, and projects whose pauses or rights changed (all their cards).
const dirty = { all: true, stages: new Set(), projects: new Set() };

function apply(m) {
  if (m.full) { state.stages.clear(); state.pauses.clear(); dirty.all = true; }
  const projectOf = (k) => k.slice(0, k.indexOf('/'));
  for (const [k, v] of Object.entries(m.stages || {})) {
    v === null ? state.stages.delete(k) : state.stages.set(k, v);
    dirty.stages.add(k);
  }
  for (const [k, v] of Object.entries(m.pauses || {})) {
    v === null ? state.pauses.delete(k) : state.pauses.set(k, v);
    dirty.projects.add(projectOf(k));
  }
  const access = m.access || {};
  for (const p of new Set([...Object.keys(access), ...Object.keys(state.access)])) {
    if (JSON.stringify(access[p]) !== JSON.stringify(state.access[p])) dirty.projects.add(p);
  }
  state.access = access;
  state.problems = m.problems || {};
  state.failing = Boolean(m.failing);
  state.skew = Date.parse(m.now) - Date.now();
  render();
}

// ---- routes ---------------------------------------------------------------

function route() {
  let parts;
  try {
    parts = location.pathname.split('/').filter(Boolean).map(decodeURIComponent);
  } catch {
    return {}; // a malformed address: show everything
  }
  if (parts[0] === 'projects' && parts[2] === 'stages' && parts[3]) return { project: parts[1], stage: parts[3] };
  if (parts[0] === 'projects' && parts[1]) return { project: parts[1] };
  return {};
}

// ---- rendering ------------------------------------------------------------

const esc = (s) => String(s ?? '').replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
const url = (...parts) => '/' + parts.map(encodeURIComponent).join('/');

function render() {
  const r = route();
  renderCrumbs(r);
  renderNotice();
  const projects = projectsOf(r.project);
  if (r.stage) {
    dirty.all = true; // the overview is drawn anew when it is shown again
    return renderStagePage(r.project, r.stage);
  }
  const key = JSON.stringify(projects.map((p) => [p.name, p.layout]));
  if (key !== layoutKey) {
    layoutKey = key;
    rendered = new Map();
    main.innerHTML = projects.length ? projects.map(projectHTML).join('') : '<p class="empty">No Stages you may read.</p>';
    for (const p of projects) {
      rendered.set('head:' + p.name, projectHeadHTML(p));
      for (const s of p.stages) rendered.set(s.key, cardSource(s.key));
    }
  } else {
    for (const p of projects) {
      const head = projectHeadHTML(p);
      if (rendered.get('head:' + p.name) !== head) {
        rendered.set('head:' + p.name, head);
        replace(`[data-project-head="${cssEsc(p.name)}"]`, head);
      }
      const whole = dirty.all || dirty.projects.has(p.name);
      for (const s of p.stages) {
        if (!whole && !dirty.stages.has(s.key)) continue;
        const src = cardSource(s.key);
        if (rendered.get(s.key) !== src) {
          rendered.set(s.key, src);
          replace(`[data-stage="${cssEsc(s.key)}"]`, cardHTML(s.key));
        }
      }
    }
  }
  dirty.all = false;
  dirty.stages.clear();
  dirty.projects.clear();
  refreshTimes();
}

const cssEsc = (s) => (window.CSS && CSS.escape ? CSS.escape(s) : s);

// replace swaps an element for new HTML, keeping the focus on the control
// that had it.
function replace(selector, html) {
  const old = main.querySelector(selector);
  if (!old) return;
  const focused = old.contains(document.activeElement) ? document.activeElement.dataset.focus : null;
  const tpl = document.createElement('template');
  tpl.innerHTML = html;
  const el = tpl.content.firstElementChild;
  old.replaceWith(el);
  // The control may be gone (Pause became Resume): the card's action
  // then takes the focus, so a keyboard user stays where they were.
  if (focused) (el.querySelector(`[data-focus="${cssEsc(focused)}"]`) || el.querySelector('.actions button:not(:disabled)') || el.querySelector('a[href]'))?.focus();
}

// projectsOf groups the Stages by project and lays each project out as its
// pipeline: a column per depth, upstream to downstream.
function projectsOf(only) {
  const byProject = new Map();
  const add = (p) => byProject.has(p) || byProject.set(p, { name: p, stages: [] });
  for (const [key, s] of state.stages) if (!only || s.project === only) { add(s.project); byProject.get(s.project).stages.push({ key, s }); }
  for (const p of state.pauses.values()) if (!only || p.project === only) add(p.project);
  if (only) add(only);
  const out = [...byProject.values()].sort((a, b) => a.name.localeCompare(b.name));
  for (const p of out) {
    const depth = depths(p.stages);
    p.stages.sort((a, b) => depth.get(a.s.name) - depth.get(b.s.name) || a.s.name.localeCompare(b.s.name));
    p.depth = depth;
    p.layout = p.stages.map((x) => x.s.name + ':' + depth.get(x.s.name));
  }
  return out;
}

// depths: a Stage's column is one past its deepest upstream Stage in the
// project; a cycle (which Kargo refuses) is cut after as many rounds as
// there are Stages.
function depths(stages) {
  const d = new Map(stages.map((x) => [x.s.name, 0]));
  for (let round = 0; round < stages.length; round++) {
    let moved = false;
    for (const { s } of stages) {
      for (const u of s.upstream || []) {
        if (d.has(u) && d.get(u) + 1 > d.get(s.name)) { d.set(s.name, d.get(u) + 1); moved = true; }
      }
    }
    if (!moved) break;
  }
  return d;
}

function projectHTML(p) {
  const cols = [];
  for (const x of p.stages) {
    const c = p.depth.get(x.s.name);
    (cols[c] = cols[c] || []).push(x);
  }
  const columns = cols.map((col, i) => `<div class="column" role="list" aria-label="${i === 0 ? 'First Stages' : 'Stage depth ' + (i + 1)}">${
    col.map((x) => `<div role="listitem">${cardHTML(x.key)}</div>`).join('')}</div>`).join('');
  return `<section class="project" data-project="${esc(p.name)}" aria-labelledby="project-${esc(p.name)}">
    ${projectHeadHTML(p)}
    <div class="pipeline">${columns || '<p class="empty">No Stages you may read in this project.</p>'}</div></section>`;
}

function projectPauses(project) {
  return [...state.pauses.values()].filter((p) => p.project === project && p.stage === '*' && !p.resuming);
}

function projectHeadHTML(p) {
  const a = state.access[p.name] || {};
  const wide = projectPauses(p.name);
  const banner = wide.length ? `<div class="banner paused" data-project-pause="${esc(p.name)}" role="status">
      <strong>Project paused</strong>: every Stage's auto-promotion is refused. ${wide.map(pauseHTML).join('')}</div>` : '';
  const action = wide.length
    ? button('resume-project', 'Resume the project', a.resume, a.resumeWhy, { project: p.name })
    : button('pause-project', 'Pause the project', a.pause, a.pauseWhy, { project: p.name }, 'danger big');
  return `<div class="project-head" data-project-head="${esc(p.name)}">
    <h2 id="project-${esc(p.name)}"><a href="${url('projects', p.name)}/">${esc(p.name)}</a></h2>
    ${problemHTML(p.name)}${banner}<div class="actions">${action}</div></div>`;
}

function problemHTML(project) {
  const lines = [state.problems[project], ...((state.access[project] || {}).readWhy || [])].filter(Boolean);
  return lines.map((why) => `<p class="problem" role="alert">⚠ ${esc(why)}</p>`).join('');
}

// button draws an action; one the API server says the user may not do is
// disabled, with the reason beside it in words.
function button(action, label, allowed, why, data, cls = '') {
  const attrs = Object.entries(data).map(([k, v]) => ` data-${k}="${esc(v)}"`).join('');
  const focus = `${action}:${Object.values(data).join('/')}`;
  if (allowed === false) {
    return `<span class="action"><button type="button" class="${cls}" data-action="${action}" data-focus="${esc(focus)}"${attrs} disabled aria-disabled="true">${esc(label)}</button>
      <span class="why" data-why="${action}">Not allowed: ${esc(why || 'the API server says no')}</span></span>`;
  }
  return `<span class="action"><button type="button" class="${cls}" data-action="${action}" data-focus="${esc(focus)}"${attrs}>${esc(label)}</button></span>`;
}

function cardSource(key) {
  const s = state.stages.get(key);
  const mine = [...state.pauses.values()].filter((p) => p.project === s.project && (p.stage === s.name || p.stage === '*'));
  return JSON.stringify([s, mine, state.access[s.project]]);
}

// cardHTML draws a Stage's card; full, on the Stage's own page, lists
// every App.
function cardHTML(key, full = false) {
  const s = state.stages.get(key);
  const st = s.status || {};
  const a = state.access[s.project] || {};
  const covering = [...state.pauses.values()].filter((p) => p.project === s.project && (p.stage === s.name || p.stage === '*'));
  const own = covering.filter((p) => p.stage === s.name && !p.resuming);
  const paused = s.pausesUnknown ? s.labelPaused : st.paused;
  const actions = [];
  if (own.length) actions.push(button('resume', 'Resume', a.resume, a.resumeWhy, { project: s.project, stage: s.name }));
  else actions.push(button('pause', 'Pause', a.pause, a.pauseWhy, { project: s.project, stage: s.name }, 'danger'));
  return `<article class="stage ${paused ? 'is-paused' : ''} phase-${esc(st.phase)}" data-stage="${esc(key)}" aria-label="Stage ${esc(s.name)}">
    <h3><a href="${url('projects', s.project, 'stages', s.name)}" data-focus="link:${esc(key)}">${esc(s.name)}</a></h3>
    <p class="badge ${paused ? 'paused' : 'running'}" data-field="paused">${badgeText(s, st, paused)}</p>
    ${upstreamHTML(s)}
    <dl>
      <dt>Latch</dt><dd data-field="phase">${esc(st.phase)}${timeHTML(phaseSince(st))}</dd>
      <dt>Kargo's health</dt><dd data-field="health">${esc(st.health || 'unknown')}</dd>
      <dt>Freight</dt><dd data-field="freight">${freightHTML(s)}</dd>
      ${appsHTML(st, full)}
      <dt>Analysis</dt><dd data-field="analysis">${analysisHTML(st.analysis)}</dd>
      <dt>Verified</dt><dd data-field="verified">${st.markedVerified ? '✔ marked verified in this Stage' : 'not yet'}</dd>
    </dl>
    ${covering.filter((p) => !p.resuming).length ? `<div class="pauses" data-field="pauses"><h4>Pauses</h4>${covering.filter((p) => !p.resuming).map(pauseHTML).join('')}</div>` : ''}
    ${holdsHTML(st)}
    ${warningsHTML(s)}
    <div class="actions">${actions.join('')}</div>
  </article>`;
}

// badgeText says whether the Stage is paused, in words. Where its pauses
// cannot be read, its own label (kept by the operator) says so, and the
// badge says it cannot know more: never a plain "Not paused".
function badgeText(s, st, paused) {
  if (s.pausesUnknown) return paused ? 'Paused (its pauses cannot be read)' : 'Pause state unknown (its pauses cannot be read)';
  return paused ? 'Paused' + (st.reason ? ' — ' + esc(st.reason) : '') : 'Not paused';
}

function upstreamHTML(s) {
  const from = [...(s.upstream || [])];
  if (s.direct) from.unshift('a Warehouse');
  return from.length ? `<p class="from">from ${from.map(esc).join(', ')}</p>` : '';
}

function freightHTML(s) {
  const names = (s.status && s.status.freight) || [];
  if (!names.length) return 'none';
  const short = (n) => `<abbr title="${esc(n)}">${esc(n.length > 16 ? n.slice(0, 12) + '…' : n)}</abbr>`;
  return names.map((n) => (s.aliases && s.aliases[n] ? `${esc(s.aliases[n])} <small>(${short(n)})</small>` : short(n))).join(', ');
}

// appsHTML: a card sums the Apps up (a thousand cards of forty Apps each
// are too much for a browser to draw); a Stage's own page lists them all.
function appsHTML(st, full) {
  if (!st.apps || !st.apps.length) return '';
  const byStage = st.record && st.record.latchedBy === 'Stage';
  const latched = (a) => (a.seenHealthyAt ? `latched Healthy${timeHTML(a.seenHealthyAt)}` : byStage ? 'latched with the Stage' : 'not yet seen Healthy');
  if (full) {
    const items = st.apps.map((a) => `<li>${esc(a.name)}: Kargo says <strong>${esc(a.health || '?')}</strong>; ${latched(a)}</li>`).join('');
    return `<dt>Apps</dt><dd data-field="apps"><ul>${items}</ul></dd>`;
  }
  const count = {};
  for (const a of st.apps) count[a.health || 'Unknown'] = (count[a.health || 'Unknown'] || 0) + 1;
  const health = Object.entries(count).sort().map(([h, n]) => `${n} ${esc(h)}`).join(', ');
  const seen = st.apps.filter((a) => a.seenHealthyAt).length;
  const latch = byStage ? 'latched with the Stage' : `${seen} of ${st.apps.length} latched Healthy`;
  return `<dt>Apps</dt><dd data-field="apps">${st.apps.length}: Kargo says ${health}; ${latch}</dd>`;
}

// phaseSince is when the latch entered its phase (the status table's
// SINCE is the pause's time while paused; the card says the pause's apart).
function phaseSince(st) {
  const r = st.record || {};
  switch (st.phase) {
    case 'Latched': return r.latchedAt;
    case 'Failed': return r.failure && r.failure.at;
    case 'Degraded': return r.degradedSince;
    case 'Promoted': return r.promotedAt;
  }
  return null;
}

function analysisHTML(a) {
  if (!a) return 'none configured';
  const who = a.by === 'kargo-latch' ? 'kargo-latch (verify on latch)' : a.by === 'kargo' ? 'Kargo' : 'not started';
  return `${esc(a.phase || 'pending')} — by ${esc(who)}${a.analysisRun ? ` <small>${esc(a.analysisRun)}</small>` : ''}${a.message ? `<br><small>${esc(a.message)}</small>` : ''}`;
}

function pauseHTML(p) {
  const by = madeBy(p);
  return `<div class="pause" data-pause="${esc(p.project + '/' + p.name)}">
    <strong>${esc(p.reason)}</strong> ${p.stage === '*' ? '(whole project)' : ''} ${by}${timeHTML(p.since)}
    ${p.message ? `<blockquote>${esc(p.message)}</blockquote>` : ''}
    ${p.drained && p.drained.length ? `<small>drained: ${p.drained.map(esc).join(', ')}</small>` : ''}
    <small class="name">${esc(p.name)}</small></div>`;
}

// madeBy: the operator's pauses are known (the Stage's record names them);
// a person's name is what the pausing client said.
function madeBy(p) {
  if (p.byOperator) return 'made by kargo-latch on the failure';
  if (p.claimedBy) return `by ${esc(p.claimedBy)} <small>(as the pausing client said)</small>`;
  return 'by someone (not said)';
}

function holdsHTML(st) {
  const holds = st.kargoHolds || [];
  if (!holds.length) return '';
  return `<div class="holds" data-field="holds"><h4>Kargo's own holds</h4>
    <p>Kargo holds auto-promotion from these origins until someone promotes their newest Freight or resumes auto-promotion in Kargo's UI; resuming here does not end them.</p>
    <ul>${holds.map((h) => `<li>${esc(h.origin)}: ${esc(h.freight)}${h.actor ? ` promoted by ${esc(h.actor)}` : ''}${timeHTML(h.since)}</li>`).join('')}</ul></div>`;
}

function warningsHTML(s) {
  if (!s.warnings || !s.warnings.length) return '';
  return `<div class="warnings" data-field="warnings"><h4>Recent warnings</h4><ul>${s.warnings.map((e) =>
    `<li><strong>${esc(e.reason)}</strong>${e.count > 1 ? ` ×${e.count}` : ''}${timeHTML(e.last)}<br><small>${esc(e.message)}</small></li>`).join('')}</ul></div>`;
}

// Times read both ways: "3m ago (14:02:11, 7 Dec)"; refreshTimes keeps the
// relative part true.
function timeHTML(t) {
  return t ? ` <time datetime="${esc(t)}">${esc(timeText(t))}</time>` : '';
}

function timeText(t) {
  const at = new Date(t);
  const secs = Math.max(0, Math.round((Date.now() + state.skew - at.getTime()) / 1000));
  const rel = secs < 60 ? `${secs}s` : secs < 3600 ? `${Math.floor(secs / 60)}m` : secs < 86400 ? `${Math.floor(secs / 3600)}h` : `${Math.floor(secs / 86400)}d`;
  const today = new Date(Date.now() + state.skew).toDateString() === at.toDateString();
  const abs = today ? at.toLocaleTimeString() : at.toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'medium' });
  return `${rel} ago (${abs})`;
}

// refreshTimes keeps the relative times true; it writes only what changed,
// so that a thousand cards are not laid out again every few seconds.
function refreshTimes() {
  for (const el of document.querySelectorAll('time[datetime]')) {
    const text = timeText(el.getAttribute('datetime'));
    if (el.textContent !== text) el.textContent = text;
  }
}

function renderCrumbs(r) {
  const parts = ['<a href="/">All projects</a>'];
  if (r.project) parts.push(`<a href="${url('projects', r.project)}/">${esc(r.project)}</a>`);
  if (r.stage) parts.push(esc(r.stage));
  document.getElementById('crumbs').innerHTML = parts.join(' › ');
}

// renderNotice shows what keeps the whole page from reading, apart from
// #notice, which says what an action did; and tells #conn, so that "Live"
// never claims every read succeeds.
function renderNotice() {
  const global = state.problems[''];
  const el = document.getElementById('problems');
  el.hidden = !global;
  el.textContent = global ? '⚠ ' + global : '';
  const failing = state.failing || Object.values(state.access).some((a) => a && a.readWhy && a.readWhy.length);
  const conn = document.getElementById('conn');
  if (state.live) conn.textContent = failing ? 'Live — some reads fail (see the warnings)' : 'Live';
}

function say(text, kind) {
  const el = document.getElementById('notice');
  el.hidden = false;
  el.dataset.kind = kind;
  el.textContent = text;
}

// A page restored from the back/forward cache may be old and hold the
// feed's lock: it starts over.
addEventListener('pageshow', (e) => e.persisted && location.reload());

window.kargoLatch = { state, render, say, timeText, esc, url, cardHTML, button, projectHeadHTML, timeHTML, pauseHTML, madeBy, main };
// The feed starts once every script has run (stage.js draws Stage pages).
document.addEventListener('DOMContentLoaded', connect, { once: true });
setInterval(refreshTimes, 5000);
