// The status page's logic (seed 003 §8, §13.1): a user's tasks, live through Centrifugo's official JavaScript
// client. Its merge rules are the Python client's (reference/statussync/client.py: ClientStore,
// DetailSubscriptions), so the page and the harness's clients judge the same way:
// - the summary and the detail of a task each have a version gate (§8.2): only a higher version is applied, so a
//   duplicate, a late relay's republication or an older snapshot never brings an older state back (§8.1);
// - subscribe, then load the snapshot, with what arrives meanwhile buffered and replayed through the gates (§8.3);
// - after a reconnect, a subscription the server recovered needs nothing more; one it could not recover loads the
//   snapshot again, the page showing STALE until it has (§8.4, §13.1); the list is never cleared meanwhile;
// - notices are shown once by their id, a gate apart from the state's; a snapshot never shows one again (§8.5);
// - at most 20 detail subscriptions, least recently used closed first (§6.5);
// - every 30-60 s (jittered; the address's batchGetMs sets the base), the summaries of the unfinished tasks it shows
//   are checked by status:batchGet, the fallback for a publication silently lost or a relay stalled (§13.2); what
//   comes back goes through the same summary gate.
// TaskStore and DetailSubscriptions are pure (no DOM, no network); startPage is the shell around them.
"use strict";

const MAX_DETAIL_SUBSCRIPTIONS = 20;  // §6.5, as reference/statussync/client.py
const LIVE = "LIVE", RECOVERING = "RECOVERING", STALE = "STALE";
const SNAPSHOT_RETRY_CAP_MS = 2000;
const BATCH_GET_MS = 30000;  // §13.2: every 30-60 s while the page is open (the base, then up to as much again)
const BATCH_GET_MAX_TASKS = 200;  // the API's limit per request
const TERMINAL = new Set(["SUCCEEDED", "FAILED", "CANCELLED"]);

class TaskStore {
  constructor() {
    this.views = {summary: new Map(), detail: new Map()};  // task id -> the projection's body
    this.gates = {summary: new Map(), detail: new Map()};  // task id -> BigInt version (decimal strings, §8.1)
    this.noticesSeen = new Set();
    this.snapshotsLoading = 0;
    this.buffer = [];
    this.state = RECOVERING;
  }

  /** A publication: {applied: task id or null, notice: one to show or null}; buffered while a snapshot loads. */
  receive(kind, message) {
    if (this.snapshotsLoading > 0) {
      this.buffer.push([kind, message]);
      return {applied: null, notice: null};
    }
    return this.apply(kind, message);
  }

  apply(kind, message) {
    const body = kind === "summary" ? message.task : message;
    const id = String(kind === "summary" ? body.id : body.taskId);
    const version = BigInt(body.version);
    const gate = this.gates[kind];
    let applied = null;
    if (!gate.has(id) || version > gate.get(id)) {
      gate.set(id, version);
      this.views[kind].set(id, body);
      applied = id;
    }
    const notice = message.notice;
    if (notice && !this.noticesSeen.has(notice.id)) {
      this.noticesSeen.add(notice.id);
      return {applied, notice};
    }
    return {applied, notice: null};
  }

  beginSnapshot() {
    this.snapshotsLoading += 1;
  }

  /** The snapshot's items ([kind, message]) through the gates, then (once no snapshot loads) what was buffered:
   * the notices of buffered publications to show. A snapshot's own notices are not shown again (§8.5). */
  endSnapshot(items) {
    for (const [kind, message] of items) {
      const {notice: _, ...withoutNotice} = message;
      this.apply(kind, withoutNotice);
    }
    this.snapshotsLoading -= 1;
    const notices = [];
    if (this.snapshotsLoading === 0) {
      const buffered = this.buffer;
      this.buffer = [];
      for (const [kind, message] of buffered) {
        const {notice} = this.apply(kind, message);
        if (notice) notices.push(notice);
      }
      this.state = LIVE;
    }
    return notices;
  }

  /** After a reconnect: true when the snapshot must be loaded (the server could not prove continuity). */
  resubscribed(recovered) {
    if (recovered) {
      if (this.snapshotsLoading === 0) this.state = LIVE;
      return false;
    }
    this.state = STALE;
    return true;
  }
}

/** status:batchGet's body: the unfinished tasks shown, with the summary version shown of each (§13.2). */
function batchGetRequest(store) {
  const knownVersions = {};
  for (const [id, task] of store.views.summary) {
    if (!TERMINAL.has(task.lifecycleStatus) && Object.keys(knownVersions).length < BATCH_GET_MAX_TASKS) {
      knownVersions[id] = store.gates.summary.get(id).toString();
    }
  }
  const taskIds = Object.keys(knownVersions);
  return taskIds.length ? {taskIds, knownVersions} : null;
}

class DetailSubscriptions {
  constructor(limit = MAX_DETAIL_SUBSCRIPTIONS) {
    this.limit = limit;
    this.open = new Map();  // insertion order: least recently used first
  }

  /** Open taskId's detail: the task ids whose subscriptions to close first to stay within the limit. */
  want(taskId) {
    if (this.open.has(taskId)) {
      this.open.delete(taskId);
      this.open.set(taskId, null);
      return [];
    }
    const evicted = [];
    while (this.open.size >= this.limit) {
      const oldest = this.open.keys().next().value;
      this.open.delete(oldest);
      evicted.push(oldest);
    }
    this.open.set(taskId, null);
    return evicted;
  }
}

/** The DOM: a row per task, the summary and the detail each in a cell carrying the version it shows. Text only
 * (textContent): nothing the server sends is parsed as HTML. */
class TaskView {
  constructor(doc) {
    this.doc = doc;
    this.rows = doc.getElementById("tasks");
  }

  connection(state, problem) {
    const el = this.doc.getElementById("connection");
    el.dataset.state = state;
    el.textContent = state;
    this.doc.getElementById("problem").textContent = problem || "";
  }

  notice(notice) {
    const item = this.doc.createElement("li");
    item.dataset.notice = notice.id;
    item.dataset.level = notice.level;
    item.textContent = `${notice.level}: task ${notice.id.split(":")[0]} ${notice.type}` +
      (notice.message ? ` (${notice.message})` : "");
    this.doc.getElementById("notices").append(item);
  }

  render(store, taskId) {
    const summary = store.views.summary.get(taskId);
    const detail = store.views.detail.get(taskId);
    let row = this.rows.querySelector(`tr[data-task="${CSS.escape(taskId)}"]`);
    if (!row) {
      row = this.doc.createElement("tr");
      row.dataset.task = taskId;
      for (const gate of ["title", "summary", "detail"]) {
        const cell = this.doc.createElement("td");
        cell.className = gate;
        if (gate !== "title") {
          cell.dataset.gate = gate;
          cell.dataset.task = taskId;
        }
        row.append(cell);
      }
      this.rows.append(row);
    }
    if (summary) {
      row.querySelector(".title").textContent = summary.title;
      const cell = row.querySelector(".summary");
      cell.dataset.version = summary.version;
      cell.dataset.status = summary.lifecycleStatus;
      cell.textContent = `${summary.lifecycleStatus} · ${summary.businessStatus}` +
        (summary.health === "STALE" ? " · status to be confirmed" : "") + ` (v${summary.version})`;
    }
    if (detail) {
      const cell = row.querySelector(".detail");
      cell.dataset.version = detail.version;
      cell.dataset.status = detail.lifecycleStatus;
      cell.textContent = detail.steps.map(s => `${s.id} ${s.lifecycleStatus}/${s.businessStatus}` +
        (s.error ? ` [${s.error.code}]` : "")).join("; ") + ` (v${detail.version})`;
    }
  }
}

function startPage(params, doc) {
  const store = new TaskStore();
  const details = new DetailSubscriptions(Math.min(Number(params.get("details") || MAX_DETAIL_SUBSCRIPTIONS),
                                                   MAX_DETAIL_SUBSCRIPTIONS));
  const view = new TaskView(doc);
  const bearer = params.get("token");
  const subscribedOnce = new Set();
  const opening = new Set();
  const subscriptions = new Map();  // task id -> its detail subscription
  const events = [];  // what the page did, in order (subscriptions and their recovery, snapshots): for debugging
  let summaryChannel = null;
  let problem = "";
  const batchGetMs = Number(params.get("batchGetMs")) || BATCH_GET_MS;

  const show = () => view.connection(store.state, problem);
  const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

  async function api(path, body) {
    const init = {headers: {Authorization: `Bearer ${bearer}`}};
    if (body !== undefined) {
      init.method = "POST";
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const resp = await fetch(path, init);
    const answer = await resp.json().catch(() => ({}));
    if (!resp.ok) {
      const error = new Error(`${path}: ${resp.status} ${answer.code || ""}`);
      error.retryable = resp.status >= 500;
      throw error;
    }
    return answer;
  }

  const client = new Centrifuge(params.get("ws"), {
    getToken: async () => {
      const session = await api("/api/realtime/session");
      summaryChannel = session.channels[0];
      return session.token;
    },
    minReconnectDelay: 200,
    maxReconnectDelay: 2000,
  });

  /** §8.3: the subscription is up; load the snapshot (retried while the API is away: the page keeps showing what
   * it had, STALE), with what arrives meanwhile buffered, then replayed. */
  async function loadSnapshot(gate, taskId) {
    store.beginSnapshot();
    let items = [];
    for (let attempt = 0; ; attempt += 1) {
      try {
        if (gate === "summary") {
          items = (await api("/api/tasks")).tasks.map(t => ["summary", t]);
        } else {
          items = [["detail", (await api(`/api/tasks/${encodeURIComponent(taskId)}`)).detail]];
        }
        problem = "";
        break;
      } catch (err) {
        problem = `snapshot failed: ${err.message}`;
        show();
        if (err.retryable === false) break;  // a refusal (the task is gone): nothing to load
        await sleep(Math.min(SNAPSHOT_RETRY_CAP_MS, 200 * 2 ** attempt));
      }
    }
    events.push({event: "snapshot", gate, task: taskId || null, items: items.length});
    const notices = store.endSnapshot(items);
    notices.forEach(n => view.notice(n));
    for (const id of new Set([...store.views.summary.keys(), ...store.views.detail.keys()])) view.render(store, id);
    show();
    if (gate === "summary") items.forEach(([, message]) => openDetail(String(message.task.id)));
  }

  async function subscribed(gate, channel, recovered, taskId) {
    const first = !subscribedOnce.has(channel);
    subscribedOnce.add(channel);
    events.push({event: "subscribed", channel, recovered, first});
    if (!first && !store.resubscribed(recovered)) {
      show();
      return;
    }
    show();
    await loadSnapshot(gate, taskId);
  }

  /** §13.2: the newer summaries of the unfinished tasks shown, through the gate; then the next check, jittered so
   * that pages do not ask together. A failed check waits for the next period. */
  async function batchGet() {
    const body = batchGetRequest(store);
    if (body !== null) {
      try {
        const newer = (await api("/api/tasks/status:batchGet", body)).tasks;
        events.push({event: "batchGet", tasks: body.taskIds.length, newer: newer.length});
        for (const message of newer) {
          const {applied} = store.receive("summary", message);
          if (applied) view.render(store, applied);
        }
      } catch (err) {
        events.push({event: "batchGet-failed", error: err.message});
      }
    }
    setTimeout(batchGet, batchGetMs * (1 + Math.random()));
  }

  function publication(data) {
    if (!data || (data.kind !== "task.summary" && data.kind !== "task.detail")) return;
    const kind = data.kind === "task.summary" ? "summary" : "detail";
    const {applied, notice} = store.receive(kind, data);
    if (notice) view.notice(notice);
    if (applied) view.render(store, applied);
    if (kind === "summary") openDetail(String(data.task.id));
  }

  async function openDetail(taskId) {
    if (details.open.has(taskId) || opening.has(taskId)) return;
    if (details.open.size + opening.size >= details.limit) return;
    opening.add(taskId);
    try {
      const grant = await api("/api/realtime/subscription-token", {taskId});
      for (const old of details.want(taskId)) {
        const sub = subscriptions.get(old);
        subscriptions.delete(old);
        sub.unsubscribe();
        client.removeSubscription(sub);
      }
      const sub = client.newSubscription(grant.channel, {
        token: grant.token,
        getToken: async () => (await api("/api/realtime/subscription-token", {taskId})).token,
      });
      sub.on("subscribed", ctx => subscribed("detail", ctx.channel, ctx.recovered, taskId));
      sub.on("publication", ctx => publication(ctx.data));
      subscriptions.set(taskId, sub);
      sub.subscribe();
    } catch (err) {
      events.push({event: "detail-refused", task: taskId, error: err.message});
    } finally {
      opening.delete(taskId);
    }
  }

  client.on("state", ctx => {
    if (ctx.newState !== "connected") {
      store.state = store.state === STALE ? STALE : RECOVERING;
      show();
    }
  });
  client.on("subscribed", ctx => {  // the summary channel: a server-side subscription (the token's channels)
    if (ctx.channel === summaryChannel) subscribed("summary", ctx.channel, ctx.recovered, null);
  });
  client.on("publication", ctx => {
    if (ctx.channel === summaryChannel) publication(ctx.data);
  });
  show();
  client.connect();
  setTimeout(batchGet, batchGetMs * (1 + Math.random()));
  return {store, details, client, events};
}

if (typeof document !== "undefined" && document.getElementById("tasks")) {
  window.sortiePage = startPage(new URLSearchParams(location.hash.slice(1)), document);
}
