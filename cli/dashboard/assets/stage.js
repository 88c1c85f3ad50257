// kargo-latch dashboard: a Stage's own page, the card with its Events and
// its record's history as a timeline.
'use strict';

let stagePage = { key: '', source: '', events: null, eventsError: '', fetched: 0 };

// eventsRefresh: a Stage's Events are read again at the next message of
// the feed after this long, and at once when the Stage changes.
const eventsRefresh = 10000;

function renderStagePage(project, stage) {
  const { state, cardHTML, projectHeadHTML, esc, main } = kargoLatch;
  const key = `${project}/${stage}`;
  const s = state.stages.get(key);
  if (!s) {
    main.innerHTML = `<p class="empty">No Stage ${esc(stage)} in project ${esc(project)} that you may read (yet).</p>`;
    stagePage = { key: '', source: '' };
    return;
  }
  const source = JSON.stringify([s, [...state.pauses.values()].filter((p) => p.project === project), state.access[project]]);
  if (stagePage.key !== key) stagePage = { key, source: '', events: null, eventsError: '', fetched: 0 };
  const changed = stagePage.source !== source;
  if (changed || !main.querySelector('.stage-page')) {
    stagePage.source = source;
    const focused = document.activeElement?.dataset?.focus;
    main.innerHTML = `<div class="stage-page">
      ${projectHeadHTML({ name: project })}
      <div class="detail">${cardHTML(key, true)}
        <section aria-labelledby="timeline-title"><h3 id="timeline-title">Timeline</h3><ol class="timeline">${timelineHTML(s)}</ol></section>
        <section aria-labelledby="events-title"><h3 id="events-title">Events</h3><div id="events">${eventsHTML()}</div></section>
      </div></div>`;
    if (focused) main.querySelector(`[data-focus="${CSS.escape(focused)}"]`)?.focus();
  }
  if (changed || Date.now() - stagePage.fetched > eventsRefresh) loadEvents(project, stage);
}

async function loadEvents(project, stage) {
  const key = `${project}/${stage}`;
  stagePage.fetched = Date.now();
  try {
    const res = await fetch(`/api/projects/${encodeURIComponent(project)}/stages/${encodeURIComponent(stage)}/events`);
    const out = await res.json();
    if (stagePage.key !== key) return;
    if (!res.ok) { stagePage.eventsError = out.error || res.statusText; stagePage.events = null; }
    else { stagePage.events = out.events || []; stagePage.eventsError = ''; }
  } catch (e) {
    stagePage.eventsError = e.message;
  }
  const el = document.getElementById('events');
  if (el) el.innerHTML = eventsHTML();
}

function eventsHTML() {
  const { esc, timeHTML } = kargoLatch;
  if (stagePage.eventsError) return `<p class="problem">Cannot read the Stage's Events: ${esc(stagePage.eventsError)}</p>`;
  if (!stagePage.events) return '<p>Loading…</p>';
  if (!stagePage.events.length) return '<p class="empty">No Events (Kubernetes keeps them about an hour).</p>';
  return `<table class="events"><thead><tr><th scope="col">When</th><th scope="col">Type</th><th scope="col">Reason</th><th scope="col">Message</th></tr></thead><tbody>${
    stagePage.events.map((e) => `<tr class="event-${esc(e.type)}"><td>${timeHTML(e.last)}${e.count > 1 ? ` <small>×${e.count}</small>` : ''}</td>
      <td>${e.type === 'Warning' ? '⚠ Warning' : esc(e.type)}</td><td>${esc(e.reason)}</td><td>${esc(e.message)}</td></tr>`).join('')}</tbody></table>`;
}

// timelineHTML: the current cycle's moments, the pauses, and the record's
// history of earlier cycles, newest first.
function timelineHTML(s) {
  const { esc, timeHTML, state } = kargoLatch;
  const r = (s.status && s.status.record) || {};
  const items = [];
  const add = (at, text) => at && items.push({ at, text });
  add(r.promotedAt, `Promoted ${r.freight ? 'Freight ' + r.freight : ''}${r.promotion ? ' by ' + r.promotion : ''}`);
  add(r.adoptedAt, 'kargo-latch started to watch this cycle');
  add(r.latchedAt, `Latched Healthy${r.latchedBy ? ' (' + r.latchedBy + ')' : ''}`);
  add(r.degradedSince, 'Degraded');
  add(r.resumedAt, 'Resumed');
  if (r.failure) add(r.failure.at, `Failed: ${r.failure.reason}${r.failure.message ? ' — ' + r.failure.message : ''}`);
  for (const [app, at] of Object.entries(r.appsHealthy || {})) add(at, `App ${app} seen Healthy`);
  for (const p of state.pauses.values()) {
    if (p.project === s.project && (p.stage === s.name || p.stage === '*')) add(p.since, `Paused: ${p.reason}${p.stage === '*' ? ' (whole project)' : ''}${p.byOperator ? ' by kargo-latch on the failure' : p.claimedBy ? ' by ' + p.claimedBy : ''}`);
  }
  for (const h of r.history || []) add(h.finishTime || h.startTime, `Cycle ${h.id}: ${h.phase}${h.message ? ' — ' + h.message : ''}`);
  items.sort((a, b) => Date.parse(b.at) - Date.parse(a.at));
  if (!items.length) return '<li class="empty">Nothing recorded yet.</li>';
  return items.map((i) => `<li>${timeHTML(i.at)} <span>${esc(i.text)}</span></li>`).join('');
}
