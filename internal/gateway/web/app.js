// The gateway's web page. It speaks only the gateway's public routes, with
// the bearer token its user gives, and writes every text it shows through
// textContent: a message, a tool's output or a question is never markup.
'use strict';

const tokenKey = 'stepwise.token';
const $ = (id) => document.getElementById(id);

// el builds an element; text children are text nodes, never markup.
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') node.className = v;
    else if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function token() {
  return sessionStorage.getItem(tokenKey) || '';
}

class ApiError extends Error {
  constructor(status, body) {
    super((body && body.message) || `the gateway answered ${status}`);
    this.status = status;
    this.reason = body && body.reason;
  }
}

// api calls a gateway route and returns its JSON answer; a 202 is a
// request no worker ran yet, which the caller reports.
async function api(method, path, body) {
  const headers = { Accept: 'application/json' };
  if (token()) headers.Authorization = 'Bearer ' + token();
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const resp = await fetch(path, {
    method, headers, cache: 'no-store',
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  let data = {};
  try { data = await resp.json(); } catch { /* an empty or non-JSON body */ }
  if (!resp.ok) {
    if (resp.status === 401) showError('The gateway does not know this token: paste another one above.');
    throw new ApiError(resp.status, data);
  }
  data.httpStatus = resp.status;
  return data;
}

function showError(text) {
  const e = $('error');
  e.textContent = text;
  e.hidden = !text;
}

// requestID names one click's request, so the gateway's retry of it is
// safe. crypto.randomUUID needs a secure context, which a gateway reached
// over plain http inside a cluster is not; getRandomValues does not.
function requestID() {
  const b = crypto.getRandomValues(new Uint8Array(16));
  return 'page-' + Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function sessionBase(ref) {
  return `/api/v1/namespaces/${encodeURIComponent(ref.namespace)}/agents/${encodeURIComponent(ref.agent)}/sessions/${encodeURIComponent(ref.session)}`;
}

// act runs a session request from a button: the button stays disabled
// until the gateway answers, so a second click sends nothing, and the
// request ID makes the gateway's retry of it safe.
async function act(button, fn) {
  if (button) button.disabled = true;
  showError('');
  try {
    const answer = await fn();
    if (answer.pending) showError(answer.message);
    else if (answer.accepted === false) showError('The session refused the request: it no longer applies, or the Agent does not allow it.');
    return answer;
  } catch (e) {
    showError(e.message);
    if (button) button.disabled = false;
    throw e;
  } finally {
    if (current) current.refreshSoon();
  }
}

// readEvents reads a Server-Sent Events body and calls onFrame with each
// event's ID and data; comments keep the connection alive and carry nothing.
async function readEvents(body, onFrame) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    let end;
    while ((end = buf.search(/\r?\n\r?\n/)) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end).replace(/^\r?\n\r?\n/, '');
      let id = '';
      let data = '';
      for (const line of block.split(/\r?\n/)) {
        if (line.startsWith('id:')) id = line.slice(3).trim();
        else if (line.startsWith('data:')) data += line.slice(5).trim();
      }
      if (data) onFrame(id, JSON.parse(data));
    }
  }
}

function setConnection(state, text) {
  const c = $('connection');
  c.dataset.state = state;
  c.textContent = text;
}

// Live text of the running turn, by Step execution. A Step that is retried
// streams again from its start under a higher attempt: only the highest
// attempt's text counts, and an older attempt's late text is dropped.
class LiveText {
  constructor() { this.steps = new Map(); }
  clear() { this.steps.clear(); }
  apply(ev, field, text) {
    const key = ev.stepExecutionId || ev.turnId || '';
    const attempt = ev.attempt || 0;
    let s = this.steps.get(key);
    if (!s || attempt > s.attempt) {
      s = { attempt, turnId: ev.turnId, text: '', reasoning: '' };
      this.steps.set(key, s);
    } else if (attempt < s.attempt) {
      return;
    }
    s[field] += text;
  }
}

// SessionView shows one session: the snapshot, then its events.
class SessionView {
  constructor(ref) {
    this.ref = ref;
    this.base = sessionBase(ref);
    this.live = new LiveText();
    this.abort = new AbortController();
    this.snapshot = null;
    this.graph = null;
    this.reconnects = 0;
    this.refreshTimer = 0;
  }

  async open() {
    $('session-title').textContent = `${this.ref.namespace}/${this.ref.agent} · ${this.ref.session}`;
    this.loadGraph();
    try {
      const snap = await this.loadSnapshot();
      this.stream(snap.resumeToken);
    } catch (e) {
      showError(e.message);
    }
  }

  close() {
    this.abort.abort();
    clearTimeout(this.refreshTimer);
  }

  async loadGraph() {
    try {
      const path = `/api/v1/namespaces/${encodeURIComponent(this.ref.namespace)}/agents/${encodeURIComponent(this.ref.agent)}/graph`;
      this.graph = await api('GET', path);
      this.renderGraph();
    } catch (e) {
      $('graph').replaceChildren(el('p', { class: 'muted' }, `No Flow graph: ${e.message}`));
    }
  }

  // loadSnapshot reads the session as it stands; pending approvals and
  // questions come from it, never from the events alone.
  async loadSnapshot() {
    const snap = await api('GET', this.base + '/snapshot');
    if (this.abort.signal.aborted) return snap;
    this.snapshot = snap;
    const state = snap.snapshot.state;
    if (!state || !state.activeTurnId) this.live.clear();
    this.render();
    return snap;
  }

  // refreshSoon reloads the snapshot once after a burst of events.
  refreshSoon() {
    clearTimeout(this.refreshTimer);
    this.refreshTimer = setTimeout(() => {
      this.loadSnapshot().catch((e) => showError(e.message));
    }, 150);
  }

  // stream follows the session's events from a resume token. A dropped
  // connection resumes from the last event it delivered, so no text is
  // lost or repeated; a token the gateway refuses (the hub no longer holds
  // its place) reloads the snapshot, whose token replays the running turn.
  async stream(resumeToken) {
    this.lastEventId = resumeToken || '';
    if (!this.lastEventId) {
      setConnection('off', 'No event stream: the gateway has no event hub');
      return;
    }
    let backoff = 250;
    while (!this.abort.signal.aborted) {
      try {
        const resp = await fetch(this.base + '/events', {
          headers: { Authorization: 'Bearer ' + token(), Accept: 'text/event-stream', 'Last-Event-ID': this.lastEventId },
          cache: 'no-store', signal: this.abort.signal,
        });
        if (resp.status === 400) {
          // The hub no longer holds this place: start again from the
          // snapshot, after a pause, so a gateway that keeps refusing is
          // not asked in a tight loop.
          this.live.clear();
          await sleep(backoff);
          backoff = Math.min(backoff * 2, 8000);
          const snap = await this.loadSnapshot();
          this.lastEventId = snap.resumeToken;
          continue;
        }
        if (!resp.ok) {
          let body = {};
          try { body = await resp.json(); } catch { /* not JSON */ }
          throw new ApiError(resp.status, body);
        }
        setConnection('live', this.reconnects ? `Live (reconnected ${this.reconnects}×)` : 'Live');
        backoff = 250;
        await readEvents(resp.body, (id, ev) => {
          this.onEvent(ev);
          if (id) this.lastEventId = id;
        });
      } catch (e) {
        if (this.abort.signal.aborted) return;
        if (e instanceof ApiError && (e.status === 401 || e.status === 403 || e.status === 404)) {
          setConnection('off', 'Stream refused');
          showError(e.message);
          return;
        }
      }
      if (this.abort.signal.aborted) return;
      this.reconnects++;
      document.body.dataset.reconnects = String(this.reconnects);
      setConnection('reconnecting', 'Reconnecting…');
      await sleep(backoff);
      backoff = Math.min(backoff * 2, 8000);
    }
  }

  onEvent(ev) {
    let payload = {};
    try { payload = JSON.parse(ev.payload || '{}'); } catch { /* a payload the page does not read */ }
    switch (ev.type) {
      case 'text_delta':
        this.live.apply(ev, 'text', payload.text || '');
        this.renderLive();
        return;
      case 'reasoning_delta':
        this.live.apply(ev, 'reasoning', payload.text || '');
        this.renderLive();
        return;
      case 'usage_recorded':
        return;
      default:
        // Tool calls, interrupts, plans and turn ends change what the
        // snapshot holds: read it again rather than rebuild it here.
        this.refreshSoon();
    }
  }

  render() {
    const snap = this.snapshot.snapshot;
    const state = snap.state;
    const active = !!(state && state.activeTurnId);
    $('session-status').replaceChildren(
      el('span', { class: 'status', 'data-status': state ? state.status : 'starting' }, statusText(state)),
      state && state.lastTurnError ? el('span', { class: 'turn-error' }, ' · ' + state.lastTurnError) : '',
      el('span', { class: 'muted' }, ` · ${snap.usage.modelCalls} model calls, ${snap.usage.inputTokens + snap.usage.outputTokens} tokens`),
    );
    document.body.dataset.activeTurn = active ? state.activeTurnId : '';
    $('stop').disabled = !active;
    $('steer').disabled = !active;
    this.renderMessages(snap.messages);
    this.renderLive();
    this.renderInterrupts(snap.pendingInterrupts);
    this.renderToolCalls(snap.toolCalls);
    this.renderPlan(snap.plan, snap.pendingPlanExecution);
    this.renderQueued(snap.queuedMessages, snap.steeredMessages);
    this.renderGraph();
  }

  renderMessages(messages) {
    $('messages').replaceChildren(...messages.map((m) => {
      const li = el('li', { class: 'message ' + m.role, 'data-sequence': m.sequence, 'data-role': m.role });
      if (m.role === 'tool') {
        li.append(el('details', {}, el('summary', {}, `${m.toolName} result`), el('pre', {}, m.text || '')));
      } else {
        if (m.reasoning) li.append(el('p', { class: 'reasoning' }, m.reasoning));
        if (m.text) li.append(el('p', { class: 'text' }, m.text));
        for (const c of m.toolCalls || []) li.append(el('p', { class: 'call' }, `→ ${c.name}(${c.arguments})`));
        for (const i of m.images || []) li.append(el('p', { class: 'muted' }, `[image ${i.mimeType}, ${i.sizeBytes} bytes]`));
      }
      return li;
    }));
  }

  renderLive() {
    const snap = this.snapshot && this.snapshot.snapshot;
    // A model call's stored message replaces its live text.
    const stored = new Set((snap ? snap.messages : []).filter((m) => m.role === 'assistant').map((m) => (m.text || '').trim()));
    const parts = [];
    for (const [key, s] of this.live.steps) {
      if (!s.text && !s.reasoning) continue;
      if (s.text && stored.has(s.text.trim())) continue;
      parts.push(el('div', { class: 'message assistant streaming', 'data-step-execution': key, 'data-attempt': s.attempt },
        s.reasoning ? el('p', { class: 'reasoning' }, s.reasoning) : '',
        el('p', { class: 'text' }, s.text)));
    }
    $('live').replaceChildren(...parts);
  }

  renderInterrupts(interrupts) {
    $('interrupts').replaceChildren(...interrupts.map((i) => (i.kind === 'question' ? this.questionCard(i) : this.approvalCard(i))));
  }

  approvalCard(i) {
    const reason = el('input', { placeholder: 'Why not (the model reads this)', class: 'reject-message' });
    const card = el('div', { class: 'interrupt approval', 'data-interrupt': i.id, 'data-tool': i.toolName },
      el('h3', {}, `Approve ${i.toolName}?`),
      el('pre', { class: 'arguments' }, prettyJSON(i.arguments)),
      i.deadline ? el('p', { class: 'muted' }, `Expires ${new Date(i.deadline).toLocaleString()}`) : '',
    );
    const approve = el('button', { class: 'approve' }, 'Approve');
    const reject = el('button', { class: 'reject danger' }, 'Reject');
    const id = requestID();
    approve.addEventListener('click', () => act(approve, () => {
      reject.disabled = true;
      return api('POST', `${this.base}/interrupts/${encodeURIComponent(i.id)}/approve`, { requestId: id });
    }).catch(() => { reject.disabled = false; }));
    reject.addEventListener('click', () => act(reject, () => {
      approve.disabled = true;
      return api('POST', `${this.base}/interrupts/${encodeURIComponent(i.id)}/reject`, { message: reason.value, requestId: id });
    }).catch(() => { approve.disabled = false; }));
    card.append(el('div', { class: 'actions' }, approve, reason, reject));
    return card;
  }

  questionCard(i) {
    const q = i.question || { text: '', choices: [], allowsFreeText: true };
    const id = requestID();
    // Who asks matters: a tool's question is its server's words, not the
    // agent's, and the reader should weigh it so.
    const asker = i.askedBy === 'agent' ? 'The agent asks'
      : i.askedBy === 'task' ? `Tool ${i.toolName} asks, from its running task`
        : `Tool ${i.toolName} asks`;
    const card = el('div', { class: 'interrupt question', 'data-interrupt': i.id, 'data-asked-by': i.askedBy || '' },
      el('p', { class: 'asker muted' }, asker), el('h3', {}, q.text));
    const buttons = [];
    const answer = (button, text) => act(button, () => {
      for (const b of buttons) b.disabled = true;
      return api('POST', `${this.base}/interrupts/${encodeURIComponent(i.id)}/answer`, { answer: text, requestId: id });
    }).catch(() => { for (const b of buttons) b.disabled = false; });
    const row = el('div', { class: 'actions' });
    for (const choice of q.choices || []) {
      const b = el('button', { class: 'choice', 'data-choice': choice }, choice);
      b.addEventListener('click', () => answer(b, choice));
      buttons.push(b);
      row.append(b);
    }
    if (q.allowsFreeText || !(q.choices || []).length) {
      const input = el('input', { class: 'free-text', placeholder: 'Your answer' });
      const b = el('button', { class: 'answer' }, 'Answer');
      b.addEventListener('click', () => { if (input.value.trim()) answer(b, input.value); });
      buttons.push(b);
      row.append(input, b);
    }
    card.append(row);
    return card;
  }

  renderToolCalls(calls) {
    if (!calls.length) {
      $('tool-calls').replaceChildren(el('li', { class: 'muted' }, 'None in this turn.'));
      return;
    }
    $('tool-calls').replaceChildren(...calls.map((c) => el('li', { class: 'tool-call', 'data-tool': c.name, 'data-status': c.status, 'data-effect': c.effect },
      el('span', { class: 'name' }, c.name),
      el('span', { class: 'badge effect' }, c.effect.replaceAll('_', ' ')),
      el('span', { class: 'badge status' }, c.status.replaceAll('_', ' ')),
      c.output ? el('pre', {}, c.output) : '',
      c.error ? el('pre', { class: 'error' }, c.error) : '',
      c.rejectionMessage ? el('p', { class: 'muted' }, 'Rejected: ' + c.rejectionMessage) : '',
      c.cancellationReason ? el('p', { class: 'muted' }, 'Cancelled: ' + c.cancellationReason) : '',
      c.waitUntil ? el('p', { class: 'muted' }, `Waits until ${new Date(c.waitUntil).toLocaleString()}${c.waitReason ? ': ' + c.waitReason : ''}`) : '',
    )));
  }

  renderPlan(plan, pendingExecution) {
    if (!plan) {
      $('plan').replaceChildren(el('p', { class: 'muted' }, 'No plan.'));
      return;
    }
    const list = el('ol', {}, plan.todos.map((t) => el('li', { 'data-status': t.status }, el('span', { class: 'badge' }, t.status.replaceAll('_', ' ')), ' ', t.content)));
    const parts = [el('p', { id: 'plan-status', 'data-status': plan.status }, `Revision ${plan.revision}, ${plan.status}`), list];
    if (plan.status === 'draft' && pendingExecution !== plan.revision) {
      const b = el('button', { id: 'execute-plan' }, `Execute revision ${plan.revision}`);
      const id = requestID();
      b.addEventListener('click', () => act(b, () => api('POST', this.base + '/plan/execute', { revision: plan.revision, requestId: id })).catch(() => {}));
      parts.push(b);
    }
    $('plan').replaceChildren(...parts);
  }

  renderQueued(queued, steered) {
    const items = queued.map((q) => {
      const steer = el('button', {}, 'Steer with it');
      const del = el('button', { class: 'danger' }, 'Delete');
      steer.addEventListener('click', () => act(steer, () => api('POST', this.base + '/steer', { queuedMessageId: q.id, requestId: requestID() })).catch(() => {}));
      del.addEventListener('click', () => act(del, () => api('DELETE', `${this.base}/queued/${encodeURIComponent(q.id)}`, { requestId: requestID() })).catch(() => {}));
      return el('li', { class: 'queued', 'data-queued': q.id }, el('span', {}, q.text), steer, del);
    });
    for (const s of steered) items.push(el('li', { class: 'queued steered' }, el('span', {}, s.text), el('span', { class: 'badge' }, 'steered, starts the next turn')));
    $('queued').replaceChildren(...(items.length ? items : [el('li', { class: 'muted' }, 'None.')]));
  }

  // renderGraph draws the Flow graph in layers from its start Step, with
  // the Steps the session is in marked.
  renderGraph() {
    if (!this.graph) return;
    const active = new Set((this.snapshot && this.snapshot.activeSteps) || []);
    const steps = this.graph.steps || [];
    const depth = new Map([[this.graph.start, 0]]);
    const queue = [this.graph.start];
    while (queue.length) {
      const from = queue.shift();
      for (const t of this.graph.transitions || []) {
        if (t.from === from && !depth.has(t.to)) {
          depth.set(t.to, depth.get(from) + 1);
          queue.push(t.to);
        }
      }
    }
    const layers = [];
    for (const s of steps) {
      const d = depth.has(s.name) ? depth.get(s.name) : layers.length;
      (layers[d] = layers[d] || []).push(s);
    }
    $('graph').replaceChildren(el('p', { class: 'muted' }, `${this.graph.flowType}, engine ${this.graph.engineVersion}`),
      ...layers.filter(Boolean).map((layer) => el('div', { class: 'layer' }, layer.map((s) => el('div', {
        class: 'step' + (active.has(s.name) ? ' active' : ''),
        'data-step': s.name, 'data-kind': s.kind, 'data-active': active.has(s.name) ? 'true' : 'false',
        title: s.summary,
      }, s.name)))));
  }
}

function statusText(state) {
  if (!state) return 'Starting';
  const words = { waiting_for_user_message: 'Waiting for a message', running_model: 'Running the model', running_tools: 'Running tools', compacting_context: 'Compacting the context' };
  return (words[state.status] || state.status) + (state.activeTurnId ? ` (${state.activeTurnId}, ${state.mode})` : '');
}

function prettyJSON(text) {
  try { return JSON.stringify(JSON.parse(text), null, 2); } catch { return text || ''; }
}

// The waiting list.
let waitingTimer = 0;
async function loadWaiting() {
  clearTimeout(waitingTimer);
  try {
    const answer = await api('GET', '/api/v1/waiting');
    $('waiting').tBodies[0].replaceChildren(...answer.sessions.map((s) => el('tr', { 'data-session': s.sessionId },
      el('td', {}, `${s.namespace}/${s.agent}`),
      el('td', {}, el('a', { href: sessionHash({ namespace: s.namespace, agent: s.agent, session: s.sessionId }) }, s.sessionId)),
      el('td', {}, s.steps.join(', ')),
      el('td', {}, new Date(s.startTime).toLocaleString()))));
    const notes = [];
    if (!answer.sessions.length) notes.push('No session waits for a person.');
    if (answer.truncated) notes.push('More sessions wait than the list shows.');
    for (const u of answer.unavailable || []) notes.push(`${u.namespace}/${u.agent} could not be searched: ${u.message}`);
    $('waiting-note').textContent = notes.join(' ');
  } catch (e) {
    $('waiting-note').textContent = e.message;
  }
  if (!$('waiting-view').hidden) waitingTimer = setTimeout(loadWaiting, 5000);
}

function sessionHash(ref) {
  return `#/sessions/${encodeURIComponent(ref.namespace)}/${encodeURIComponent(ref.agent)}/${encodeURIComponent(ref.session)}`;
}

let current = null;

function route() {
  if (current) current.close();
  current = null;
  clearTimeout(waitingTimer);
  showError('');
  const m = location.hash.match(/^#\/sessions\/([^/]+)\/([^/]+)\/([^/]+)$/);
  $('waiting-view').hidden = !!m;
  $('session-view').hidden = !m;
  if (!m) {
    setConnection('idle', '');
    loadWaiting();
    return;
  }
  let namespace, agent, session;
  try {
    [namespace, agent, session] = m.slice(1).map(decodeURIComponent);
  } catch {
    showError('The address names no session: it is not valid percent-encoding.');
    return;
  }
  current = new SessionView({ namespace, agent, session });
  setConnection('connecting', 'Connecting…');
  current.open();
}

document.addEventListener('DOMContentLoaded', () => {
  $('token').value = token();
  $('token-form').addEventListener('submit', (e) => {
    e.preventDefault();
    sessionStorage.setItem(tokenKey, $('token').value.trim());
    route();
  });
  $('open-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    const f = e.target;
    const ref = { namespace: f.namespace.value.trim(), agent: f.agent.value.trim(), session: f.session.value.trim() };
    if (e.submitter && e.submitter.name === 'start') {
      try {
        await act(e.submitter, () => api('POST', sessionBase(ref), { message: f.message.value, requestId: requestID() }));
        e.submitter.disabled = false;
      } catch { return; }
    }
    location.hash = sessionHash(ref);
  });
  $('composer').addEventListener('submit', (e) => {
    e.preventDefault();
    const text = $('message').value;
    if (!text.trim() || !current) return;
    act($('send'), () => api('POST', current.base + '/messages', { text, planMode: $('plan-mode').checked, requestId: requestID() }))
      .then(() => { $('message').value = ''; $('send').disabled = false; }, () => {});
  });
  $('steer').addEventListener('click', () => {
    const text = $('message').value;
    if (!text.trim() || !current) return;
    act($('steer'), () => api('POST', current.base + '/steer', { text, requestId: requestID() }))
      .then(() => { $('message').value = ''; }, () => {});
  });
  $('stop').addEventListener('click', () => {
    const turn = current && current.snapshot && current.snapshot.snapshot.state && current.snapshot.snapshot.state.activeTurnId;
    if (!turn) return;
    act($('stop'), () => api('POST', `${current.base}/turns/${encodeURIComponent(turn)}/cancel`, { requestId: requestID() })).catch(() => {});
  });
  window.addEventListener('hashchange', route);
  route();
});
