// kargo-latch dashboard: the actions. Every one is a request to this page's
// own server, with the per-process token; the server acts with the user's
// credentials, and the API server's RBAC and admission decide.
'use strict';

// sendTimeout: an action that got no answer in this long is said to have
// failed, rather than leave a person waiting on a button.
const sendTimeout = 20000;

async function send(project, verb, body) {
  let res;
  try {
    res = await fetch(`/api/projects/${encodeURIComponent(project)}/${verb}`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'X-Kargo-Latch-Token': kargoLatch.token },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(sendTimeout),
    });
  } catch (e) {
    throw new Error(e.name === 'TimeoutError' ? `no answer from the dashboard in ${sendTimeout / 1000}s; it may not have happened: check the Stage` : `the dashboard cannot be reached (${e.message}); is it still running?`);
  }
  const text = await res.text();
  let out;
  try { out = JSON.parse(text); } catch { out = { error: text || res.statusText }; }
  if (!res.ok && text.includes('X-Kargo-Latch-Token')) throw new Error('this page is from an earlier run of the dashboard: reload it');
  if (!res.ok) throw new Error(out.error || res.statusText);
  return out.message;
}

kargoLatch.token = document.querySelector('meta[name="kargo-latch-token"]').content;

const pauseDialog = document.getElementById('pause-dialog');
const projectDialog = document.getElementById('project-dialog');
let target = null; // { project, stage, opener }

function dialogError(dialog, text) {
  const el = dialog.querySelector('.dialog-error');
  el.hidden = !text;
  el.textContent = text ? 'Refused: ' + text : '';
}

function openPause(project, stage, opener) {
  target = { project, stage, opener };
  pauseDialog.querySelector('[data-slot="stage"]').textContent = `${stage} (${project})`;
  pauseDialog.querySelector('[name="reason"]').value = 'Manual';
  pauseDialog.querySelector('[name="message"]').value = '';
  dialogError(pauseDialog, '');
  pauseDialog.showModal();
  pauseDialog.querySelector('[name="reason"]').select();
}

function openProjectPause(project, opener) {
  target = { project, stage: '*', opener };
  for (const el of projectDialog.querySelectorAll('[data-slot="project"]')) el.textContent = project;
  projectDialog.querySelector('[name="confirm"]').value = '';
  projectDialog.querySelector('[name="message"]').value = '';
  projectDialog.querySelector('[data-action="confirm-pause-project"]').disabled = true;
  dialogError(projectDialog, '');
  projectDialog.showModal();
  projectDialog.querySelector('[name="confirm"]').focus();
}

// closeDialog gives the focus back to the button that opened the dialog,
// or to the one drawn in its place since (the page redraws what changes).
function closeDialog(dialog) {
  dialog.close();
  const opener = target?.opener;
  if (!opener) return;
  const again = opener.isConnected ? opener : document.querySelector(`[data-focus="${CSS.escape(opener.dataset.focus || '')}"]`);
  (again || document.querySelector(`[data-focus="${CSS.escape('link:' + target.project + '/' + target.stage)}"]`))?.focus();
}

async function resume(project, stage, button) {
  button.disabled = true;
  try {
    kargoLatch.say(await send(project, 'resume', { stage }), 'done');
  } catch (e) {
    kargoLatch.say(`Refused: ${e.message}`, 'refused');
  } finally {
    if (button.isConnected) button.disabled = false;
  }
}

document.addEventListener('click', (e) => {
  const b = e.target.closest('button[data-action]');
  if (!b) return;
  const { project, stage } = b.dataset;
  switch (b.dataset.action) {
    case 'pause': return openPause(project, stage, b);
    case 'pause-project': return openProjectPause(project, b);
    case 'resume': return resume(project, stage, b);
    case 'resume-project': return resume(project, '*', b);
    case 'cancel': return closeDialog(b.closest('dialog'));
  }
});

projectDialog.querySelector('[name="confirm"]').addEventListener('input', (e) => {
  projectDialog.querySelector('[data-action="confirm-pause-project"]').disabled = e.target.value !== target?.project;
});

pauseDialog.querySelector('form').addEventListener('submit', async (e) => {
  e.preventDefault();
  const form = e.target;
  const reason = form.reason.value.trim();
  if (!/^[A-Z][A-Za-z0-9]*$/.test(reason)) {
    return dialogError(pauseDialog, `"${reason}" is not a reason: one CamelCase word, such as Incident; free text goes in the message`);
  }
  try {
    const said = await send(target.project, 'pause', { stage: target.stage, reason, message: form.message.value });
    closeDialog(pauseDialog);
    kargoLatch.say(said, 'done');
  } catch (err) {
    dialogError(pauseDialog, err.message);
  }
});

projectDialog.querySelector('form').addEventListener('submit', async (e) => {
  e.preventDefault();
  const form = e.target;
  if (form.confirm.value !== target.project) return dialogError(projectDialog, "the name typed is not the project's");
  try {
    const said = await send(target.project, 'pause', { stage: '*', reason: 'ProjectPause', message: form.message.value });
    closeDialog(projectDialog);
    kargoLatch.say(said, 'done');
  } catch (err) {
    dialogError(projectDialog, err.message);
  }
});
