// metastore console: reads this member's JSON API (same origin, GET only)
// and draws each view. The token, when the cluster runs with --auth, lives
// in this tab's sessionStorage and travels only in the Authorization
// header.
'use strict';
(function () {
  const TOKEN_KEY = 'metastore-token';
  const SVGNS = 'http://www.w3.org/2000/svg';
  const main = document.getElementById('main');
  const liveEl = document.getElementById('live');

  // ---- API access ----

  class APIError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  function token() {
    return sessionStorage.getItem(TOKEN_KEY) || '';
  }

  // get answers the decoded body of a GET of path and the Raft index it
  // reflects; an error answer of the API becomes an APIError.
  async function get(path, signal) {
    const headers = { Accept: 'application/json' };
    const t = token();
    if (t) headers.Authorization = 'Bearer ' + t;
    const resp = await fetch(path, { headers, signal, credentials: 'omit', cache: 'no-store', redirect: 'error' });
    let body = null;
    try {
      body = await resp.json();
    } catch (e) {
      body = null;
    }
    if (!resp.ok) {
      const e = (body && body.error) || {};
      throw new APIError(resp.status, e.code || 'http_' + resp.status, e.message || resp.statusText);
    }
    return { body, index: Number(resp.headers.get('X-Metastore-Index') || 0) };
  }

  async function getBody(path, signal) {
    return (await get(path, signal)).body;
  }

  // ---- DOM helpers (text is always set as text, never parsed as HTML) ----

  function setAttrs(el, attrs) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? '' : String(v));
    }
  }

  function append(el, kids) {
    for (const k of kids.flat(Infinity)) {
      if (k === null || k === undefined || k === false) continue;
      el.append(k instanceof Node ? k : String(k));
    }
  }

  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    setAttrs(el, attrs);
    append(el, kids);
    return el;
  }

  function s(tag, attrs, ...kids) {
    const el = document.createElementNS(SVGNS, tag);
    setAttrs(el, attrs);
    append(el, kids);
    return el;
  }

  function jsonLink(path) {
    return h('a', { class: 'json', href: path, 'data-json': path, title: 'the JSON this view shows' }, '{ JSON ' + path + ' }');
  }

  function table(headers, rows, attrs) {
    return h('table', attrs || {},
      h('thead', {}, h('tr', {}, headers.map((c) => (typeof c === 'string' ? h('th', {}, c) : c)))),
      h('tbody', {}, rows));
  }

  function kv(pairs) {
    return h('dl', { class: 'kv' }, pairs.map(([k, v, field]) => [h('dt', {}, k), h('dd', { 'data-field': field || null }, v)]));
  }

  // ---- formatting ----

  const units = { ns: 1e-6, us: 1e-3, 'µs': 1e-3, 'μs': 1e-3, ms: 1, s: 1e3, m: 60e3, h: 3600e3 };

  // goDuration parses a Go duration string ("1m2.5s", "350µs") to ms.
  function goDuration(str) {
    if (!str) return 0;
    let ms = 0;
    const re = /([0-9.]+)(ns|us|µs|μs|ms|s|m|h)/g;
    let m;
    while ((m = re.exec(str)) !== null) ms += parseFloat(m[1]) * units[m[2]];
    return str.startsWith('-') ? -ms : ms;
  }

  function fmtMs(ms) {
    if (ms === null || ms === undefined || Number.isNaN(ms)) return '–';
    if (ms < 1) return (ms * 1000).toFixed(0) + 'µs';
    if (ms < 1000) return ms.toFixed(ms < 10 ? 1 : 0) + 'ms';
    if (ms < 60e3) return (ms / 1000).toFixed(ms < 10e3 ? 2 : 1) + 's';
    if (ms < 3600e3) return Math.floor(ms / 60e3) + 'm' + Math.round((ms % 60e3) / 1000) + 's';
    if (ms < 86400e3) return Math.floor(ms / 3600e3) + 'h' + Math.round((ms % 3600e3) / 60e3) + 'm';
    return Math.floor(ms / 86400e3) + 'd' + Math.round((ms % 86400e3) / 3600e3) + 'h';
  }

  function fmtBytes(n) {
    if (n === null || n === undefined) return '–';
    if (n < 1024) return n + ' B';
    const u = ['KiB', 'MiB', 'GiB', 'TiB'];
    let v = n / 1024;
    let i = 0;
    while (v >= 1024 && i < u.length - 1) {
      v /= 1024;
      i++;
    }
    return v.toFixed(v < 10 ? 1 : 0) + ' ' + u[i];
  }

  function fmtTime(t) {
    if (!t) return '–';
    const d = new Date(t);
    return d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
  }

  function ago(t) {
    if (!t) return '–';
    return fmtMs(Date.now() - new Date(t).getTime()) + ' ago';
  }

  function epochDuration(e) {
    const end = e.completed_at || e.ended_at;
    if (!end) return null;
    return new Date(end).getTime() - new Date(e.began_at).getTime();
  }

  function stateTag(st) {
    return h('span', { class: 'state-' + st, 'data-state': st }, st);
  }

  function stats(values) {
    if (values.length === 0) return { min: null, avg: null, max: null };
    let min = Infinity;
    let max = -Infinity;
    let sum = 0;
    for (const v of values) {
      min = Math.min(min, v);
      max = Math.max(max, v);
      sum += v;
    }
    return { min, avg: sum / values.length, max };
  }

  // lateTasks applies the store's rule (api.LateTasks, the metric
  // metastore_task_late_epochs): an ack is late when its delay is over twice
  // the epoch's (lower) median ack delay and at least 1ms over it.
  function lateRule(delaysMs) {
    const sorted = delaysMs.slice().sort((a, b) => a - b);
    const median = sorted.length ? sorted[Math.floor((sorted.length - 1) / 2)] : 0;
    return { median, isLate: (ms) => sorted.length > 1 && ms > 2 * median && ms - median >= 1 };
  }

  function enc(id) {
    return encodeURIComponent(id);
  }

  // restoredCount shows a job's attempts that resumed from a checkpoint
  // (restored_attempts): exact when every start recorded its source
  // (counted from generation 1), else what the store knows.
  function restoredCount(j) {
    const n = j.restored_attempts || 0;
    const from = j.restores_counted_from || 0;
    if (j.generation === 0 || from === 1) return String(n);
    if (from === 0) return 'unknown';
    return n + ' since generation ' + from;
  }

  // restoredFrom says where an attempt started: the epoch it resumed from,
  // a fresh start, or unknown (started before the store recorded it).
  function restoredFrom(job, a) {
    if (a.restored_from === undefined || a.restored_from === null) return h('span', { class: 'muted' }, 'unknown (not recorded)');
    if (a.restored_from === 0) return 'fresh start';
    return ['restored from epoch ', h('a', { href: '/ui/jobs/' + enc(job) + '/epochs/' + a.restored_from }, a.restored_from)];
  }

  function capTags(caps) {
    return caps.length ? caps.map((c) => h('span', { class: 'tag' }, c)) : h('span', { class: 'muted' }, 'none');
  }

  // The task sets the operator opened on the job page, by job and
  // generation, so a redraw keeps them open.
  const openTaskSets = new Set();

  // taskSet is an attempt's task set, collapsed unless opened before.
  function taskSet(job, a) {
    const key = job + '\0' + a.generation;
    const d = h('details', { class: 'taskset', 'data-generation': a.generation, open: openTaskSets.has(key) },
      h('summary', {}, a.task_list.length + ' tasks'),
      table(['Task', 'Capabilities', 'Acknowledges epochs'], a.task_list.map((t) => h('tr', { 'data-task': t.id, 'data-caps': t.capabilities.join(',') },
        h('td', {}, t.id), h('td', {}, capTags(t.capabilities)),
        h('td', {}, t.capabilities.some((c) => c !== 'incremental') ? 'yes' : h('span', { class: 'muted' }, 'no'))))));
    d.addEventListener('toggle', () => {
      if (d.open) openTaskSets.add(key);
      else openTaskSets.delete(key);
    });
    return d;
  }

  // The attempts shown on the job page, newest first.
  const maxAttemptsShown = 10;

  // ---- views ----
  // A view's load(signal) fetches what it shows and answers
  // { title, content, wait } where wait(signal) resolves when the view
  // should be drawn again (a blocking query returned, or a period passed).

  function sleep(ms, signal) {
    return new Promise((resolve) => {
      const t = setTimeout(resolve, ms);
      if (signal) signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
    });
  }

  function every(ms) {
    return (signal) => sleep(ms, signal);
  }

  async function viewJobs(signal) {
    const path = '/v1/jobs';
    const jobs = (await getBody(path, signal)).jobs || [];
    // One request per job for its epochs: the first 200 jobs only.
    const details = await Promise.all(jobs.slice(0, 200).map(async (j) => {
      const epochs = (await getBody('/v1/jobs/' + enc(j.id) + '/epochs', signal)).epochs || [];
      return { j, epochs };
    }));
    const rows = details.map(({ j, epochs }) => {
      const count = (st) => epochs.filter((e) => e.state === st).length;
      const latest = epochs.find((e) => e.epoch === j.latest_completed);
      const ageMs = latest && latest.completed_at ? Date.now() - new Date(latest.completed_at).getTime() : null;
      const limit = goDuration(j.config && j.config.ack_timeout);
      const old = ageMs !== null && limit > 0 && ageMs > limit;
      return h('tr', { 'data-job': j.id },
        h('td', {}, h('a', { href: '/ui/jobs/' + enc(j.id) }, j.id)),
        h('td', { class: 'num', 'data-field': 'generation' }, j.generation),
        h('td', { class: 'num', 'data-field': 'latest_completed' }, j.latest_completed || '–'),
        h('td', { 'data-field': 'latest_age', class: old ? 'warn' : null },
          ageMs === null ? (j.latest_completed ? '(not remembered)' : 'no checkpoint yet') : fmtMs(ageMs),
          old ? h('span', { class: 'warning-inline', 'data-warning': 'old' }, ' ⚠ older than the ack timeout (' + j.config.ack_timeout + ')') : null),
        h('td', { class: 'num', 'data-field': 'pending' }, (j.pending || []).length),
        h('td', { class: 'num', 'data-field': 'completed' }, count('completed') + count('subsumed')),
        h('td', { class: 'num', 'data-field': 'aborted' }, count('aborted')),
        h('td', { class: 'num', 'data-field': 'restored', title: 'attempts that resumed from a checkpoint' }, restoredCount(j)),
        h('td', { class: 'num', 'data-field': 'retained' }, (j.retained || []).length));
    });
    return {
      title: 'Jobs',
      content: [
        h('h1', {}, 'Jobs', jsonLink(path)),
        jobs.length === 0 ? h('p', { class: 'muted' }, 'No job yet (or none this token may see).') :
          table(['Job', h('th', { class: 'num' }, 'Generation'), h('th', { class: 'num' }, 'Latest completed'), 'Age',
            h('th', { class: 'num' }, 'Pending'), h('th', { class: 'num' }, 'Completed'), h('th', { class: 'num' }, 'Aborted'),
            h('th', { class: 'num' }, 'Restored'), h('th', { class: 'num' }, 'Retained')], rows, { id: 'jobs' }),
        jobs.length > details.length ? h('p', { class: 'warning' }, 'The first ' + details.length + ' of ' + jobs.length + ' jobs.') : null,
        h('p', { class: 'muted' }, 'Completed counts the remembered completed and subsumed epochs (the job keeps ',
          'its history setting\'s number of ended ones); restored counts the attempts that resumed from a checkpoint ',
          '(the others started fresh); the age turns orange past the job\'s ack timeout.'),
      ],
      // A blocking query on the list: it answers once a job is created or
      // changes, or after 30s (the ages are drawn again then).
      wait: async (sig) => {
        const index = Math.max(0, ...jobs.map((j) => j.modify_index));
        await get(path + '?index=' + index + '&wait=30s', sig);
      },
    };
  }

  // historyChart draws one bar per epoch: duration, or inline bytes.
  function historyChart(epochs, job, what) {
    const W = 960;
    const H = 200;
    const L = 56;
    const B = 24;
    const T = 10;
    const value = (e) => (what === 'duration' ? epochDuration(e) : e.payload_bytes);
    const now = Date.now();
    const vals = epochs.map((e) => {
      const v = value(e);
      if (v !== null) return v;
      return what === 'duration' ? now - new Date(e.began_at).getTime() : 0;
    });
    // The scale follows the completed epochs; a far longer aborted or
    // pending one is cut at the top and labelled with its value.
    const doneVals = vals.filter((v, i) => epochs[i].state === 'completed' || epochs[i].state === 'subsumed');
    let max = Math.max(1, ...vals);
    if (doneVals.length > 0 && max > 3 * Math.max(...doneVals)) max = Math.max(1, 1.5 * Math.max(...doneVals));
    const n = Math.max(epochs.length, 1);
    const step = (W - L - 4) / n;
    const bw = Math.max(2, Math.min(24, step * 0.8));
    const y = (v) => T + (H - T - B) * (1 - v / max);
    const label = what === 'duration' ? fmtMs : fmtBytes;
    const kids = [
      s('line', { class: 'axis', x1: L, y1: H - B, x2: W, y2: H - B }),
      s('line', { class: 'axis', x1: L, y1: T, x2: L, y2: H - B }),
      s('text', { x: L - 4, y: T + 8, 'text-anchor': 'end' }, label(max)),
      s('text', { x: L - 4, y: H - B, 'text-anchor': 'end' }, '0'),
    ];
    const labelEvery = Math.max(1, Math.ceil(n / 16));
    epochs.forEach((e, i) => {
      const x = L + 2 + i * step + (step - bw) / 2;
      const v = vals[i];
      const clipped = v > max;
      const top = y(Math.min(v, max));
      const cls = 'bar-' + e.state;
      const desc = 'epoch ' + e.epoch + ' ' + e.state + ': ' + label(v) +
        (what === 'duration' && e.state === 'pending' ? ' so far' : '') + (e.reason ? ' (' + e.reason + ')' : '');
      const bar = s('rect', {
        class: cls, x: x.toFixed(1), y: top.toFixed(1), width: bw.toFixed(1), height: Math.max(1, H - B - top).toFixed(1),
        'data-epoch': e.epoch, 'data-value': v,
      }, s('title', {}, desc));
      const a = s('a', { href: '/ui/jobs/' + enc(job) + '/epochs/' + e.epoch }, bar);
      if (e.state === 'aborted') {
        a.append(s('text', { class: clipped ? 'mark-aborted inside' : 'mark-aborted', x: (x + bw / 2).toFixed(1),
          y: (clipped ? top + 11 : top - 2).toFixed(1), 'text-anchor': 'middle' }, '✕'));
      }
      if (clipped) a.append(s('text', { x: (x + bw + 2).toFixed(1), y: (top + 10).toFixed(1) }, '↑ ' + label(v)));
      kids.push(a);
      if (i % labelEvery === 0) kids.push(s('text', { x: (x + bw / 2).toFixed(1), y: H - B + 14, 'text-anchor': 'middle' }, e.epoch));
    });
    return s('svg', { class: 'chart', viewBox: '0 0 ' + W + ' ' + H, role: 'img', 'data-chart': what, 'aria-label': 'checkpoint ' + what + ' per epoch' }, kids);
  }

  function legend() {
    return h('div', { class: 'legend' },
      [['completed', 'completed'], ['subsumed', 'completed, since subsumed'], ['aborted', 'aborted (✕, reason on hover)'], ['pending', 'pending (so far)']]
        .map(([c, t]) => h('span', {}, h('i', { class: 'swatch sw-' + c }), t)));
  }

  async function viewJob(job, signal) {
    const jobPath = '/v1/jobs/' + enc(job);
    const epochsPath = jobPath + '/epochs';
    const attemptPath = jobPath + '/attempts/current';
    const jr = await get(jobPath, signal);
    const j = jr.body;
    const epochs = (await getBody(epochsPath, signal)).epochs || [];
    let attempt = null;
    if (j.generation > 0) attempt = await getBody(attemptPath, signal);
    // The attempts the store keeps (the current one and those retained
    // epochs belong to), newest first, each with its task set.
    // One read with their task sets: an attempt pruned between two reads
    // is never asked for.
    const attemptsPath = jobPath + '/attempts?tasks=true&limit=' + maxAttemptsShown;
    const keptList = j.generation > 0 ? await getBody(attemptsPath, signal) : { attempts: [], kept: 0 };
    const attempts = keptList.attempts || [];

    const done = epochs.filter((e) => e.state === 'completed' || e.state === 'subsumed');
    const dur = stats(done.map(epochDuration));
    const size = stats(done.map((e) => e.payload_bytes));
    const latest = epochs.find((e) => e.epoch === j.latest_completed);
    const pins = epochs.filter((e) => e.pinned);
    const shown = epochs.slice(-60);
    const aborted = epochs.filter((e) => e.state === 'aborted');

    // The restore preview is asked for in the view's URL (?restore=latest
    // or ?pin=NAME): it costs one request per task.
    const q = new URLSearchParams(location.search);
    const pin = q.get('pin');
    const fromEpoch = /^[1-9][0-9]*$/.test(q.get('epoch') || '') ? q.get('epoch') : null;
    let preview = null;
    if ((q.get('restore') === 'latest' || pin || fromEpoch) && attempt) {
      preview = await restorePreview(job, attempt, pin ? { pin } : (fromEpoch ? { epoch: fromEpoch } : {}), signal);
    }

    // The changelog trade-off: manifests are kept for the retained
    // completed epochs; read the stateful tasks' (at most 50) of each.
    // Each epoch's detail is read once per draw (the late-tasks chart and
    // the changelog table share them).
    const detailOf = new Map();
    const detail = (n) => {
      if (!detailOf.has(n)) detailOf.set(n, getBody(epochsPath + '/' + n, signal));
      return detailOf.get(n);
    };
    const kept = epochs.filter((e) => e.state === 'completed').slice(-5);
    const keptDetails = await Promise.all(kept.map((e) => detail(e.epoch)));
    // A running job can subsume a kept epoch between the listing and these
    // reads: its manifests then answer 409 and the epoch leaves the table.
    const manifests = (await Promise.all(keptDetails.map(async (e) => {
      const withManifest = e.acks.filter((a) => a.lineage).slice(0, 50);
      try {
        const ms = await Promise.all(withManifest.map((a) => getBody(epochsPath + '/' + e.epoch + '/manifests/' + enc(a.task), signal)));
        return { epoch: e.epoch, byTask: new Map(ms.map((m) => [m.task, m])) };
      } catch (err) {
        if (err instanceof APIError && err.status === 409) return null;
        throw err;
      }
    }))).filter((m) => m !== null);

    const recent = done.slice(-10);
    const details = await Promise.all(recent.map((e) => detail(e.epoch)));

    const content = [
      h('h1', {}, 'Job ', h('span', { 'data-field': 'job' }, job), jsonLink(jobPath)),
      h('div', { class: 'card' }, kv([
        ['Generation', j.generation, 'generation'],
        ['Attempt', j.attempt_id || '–', 'attempt_id'],
        ['Latest completed', j.latest_completed ? h('a', { href: '/ui/jobs/' + enc(job) + '/epochs/' + j.latest_completed }, j.latest_completed) : 'none yet', 'latest_completed'],
        ['Its age', latest && latest.completed_at ? ago(latest.completed_at) : '–', 'latest_age'],
        ['Last epoch begun', j.last_epoch, 'last_epoch'],
        ['Pending', (j.pending || []).join(', ') || 'none', 'pending'],
        ['Retained', (j.retained || []).join(', ') || 'none', 'retained'],
        ['Restored attempts', restoredCount(j), 'restored'],
        ['Config', 'retained ' + j.config.retained + ', ack timeout ' + j.config.ack_timeout + ', history ' + j.config.history, 'config'],
      ])),
      h('h2', {}, 'Checkpoint history', jsonLink(epochsPath)),
      h('p', { class: 'muted' }, 'The last ' + shown.length + ' remembered epochs; click a bar for the epoch.'),
      legend(),
      h('h3', {}, 'Duration (begin to completion or abort)'),
      historyChart(shown, job, 'duration'),
      h('h3', {}, 'Inline payload size'),
      historyChart(shown, job, 'size'),
      h('h2', {}, 'Summary of completed checkpoints (' + done.length + ')'),
      table(['', h('th', { class: 'num' }, 'Minimum'), h('th', { class: 'num' }, 'Average'), h('th', { class: 'num' }, 'Maximum')], [
        h('tr', { 'data-summary': 'duration' }, h('td', {}, 'Duration'), h('td', { class: 'num', 'data-field': 'min' }, fmtMs(dur.min)),
          h('td', { class: 'num', 'data-field': 'avg' }, fmtMs(dur.avg)), h('td', { class: 'num', 'data-field': 'max' }, fmtMs(dur.max))),
        h('tr', { 'data-summary': 'size' }, h('td', {}, 'Inline payload'), h('td', { class: 'num', 'data-field': 'min' }, fmtBytes(size.min)),
          h('td', { class: 'num', 'data-field': 'avg' }, size.avg === null ? '–' : fmtBytes(Math.round(size.avg))), h('td', { class: 'num', 'data-field': 'max' }, fmtBytes(size.max))),
      ], { class: 'summary' }),
      h('h2', {}, 'Late tasks over time', jsonLink('/metrics')),
      lateChart(job, details),
      h('h2', {}, 'Changelog trade-off', jsonLink('/metrics')),
      changelogTable(job, manifests),
      h('h2', {}, 'Savepoints (pinned epochs)'),
      pins.length === 0 ? h('p', { class: 'muted', id: 'pins' }, 'None pinned.') :
        table(['Epoch', 'Name', 'Completed', 'Restore'], pins.map((e) => h('tr', { 'data-pin': e.epoch },
          h('td', {}, h('a', { href: '/ui/jobs/' + enc(job) + '/epochs/' + e.epoch }, e.epoch)), h('td', { 'data-field': 'name' }, e.pin_name || ''),
          h('td', {}, fmtTime(e.completed_at)),
          h('td', {}, e.pin_name ? h('a', { href: '/ui/jobs/' + enc(job) + '?pin=' + encodeURIComponent(e.pin_name) + '#restore' }, 'preview') : '–'))), { id: 'pins' }),
      h('h2', { id: 'restore' }, 'Restore preview'),
      preview ? preview : h('p', {}, attempt && j.latest_completed ?
        [h('a', { href: '/ui/jobs/' + enc(job) + '?restore=latest#restore', id: 'restore-latest' }, 'Preview a restore of every task from the latest checkpoint'),
          h('span', { class: 'muted' }, ' (what each task would read, and the object-store requests and bytes it costs), or from a savepoint above.')] :
        h('span', { class: 'muted' }, 'No completed checkpoint to restore from yet.')),
      h('h2', {}, 'Aborted epochs'),
      aborted.length === 0 ? h('p', { class: 'muted' }, 'None remembered.') :
        table(['Epoch', 'Reason', 'Acked', 'Ended'], aborted.slice(-20).map((e) => h('tr', { 'data-aborted': e.epoch },
          h('td', {}, h('a', { href: '/ui/jobs/' + enc(job) + '/epochs/' + e.epoch }, e.epoch)), h('td', { 'data-field': 'reason' }, e.reason || ''),
          h('td', {}, e.acked + ' of ' + e.expected), h('td', {}, fmtTime(e.ended_at))))),
      h('h2', {}, 'Current attempt', attempt ? jsonLink(attemptPath) : null),
      attempt ? [
        h('p', {}, 'Generation ' + attempt.generation + ', attempt ' + attempt.attempt_id + ', started ' + fmtTime(attempt.started_at) +
          ': ' + attempt.tasks + ' tasks, ' + attempt.expected + ' asked to acknowledge each epoch.'),
        h('p', { 'data-field': 'restored_from' }, 'Start: ', restoredFrom(job, attempt)),
        table(['Task', 'Capabilities', 'Acknowledges epochs'], attempt.task_list.map((t) => h('tr', { 'data-task': t.id },
          h('td', {}, t.id),
          h('td', {}, capTags(t.capabilities)),
          h('td', { 'data-field': 'asked' }, t.capabilities.some((c) => c !== 'incremental') ? 'yes' : h('span', { class: 'muted' }, 'no: checkpoints nothing, never asked')))), { id: 'tasks' }),
      ] : h('p', { class: 'muted' }, 'No attempt yet.'),
      h('h2', {}, 'Attempts', j.generation > 0 ? jsonLink(attemptsPath) : null),
      attempts.length === 0 ? h('p', { class: 'muted' }, 'No attempt yet.') : [
        h('p', { class: 'muted' }, 'The attempts the store keeps: the current one and those the retained checkpoints belong to (a restore may still name them); ' +
          'older ones are forgotten with their task sets as retention moves. Restored attempts: ' + restoredCount(j) + '.'),
        table(['Generation', 'Attempt', 'Started', h('th', { class: 'num' }, 'Tasks'), h('th', { class: 'num' }, 'Asked'), 'Started from', 'Task set'],
          attempts.map((a) => h('tr', { 'data-generation': a.generation },
            h('td', { class: 'num' }, h('a', { href: jobPath + '/attempts/' + a.generation }, a.generation)),
            h('td', {}, a.attempt_id), h('td', {}, fmtTime(a.started_at)),
            h('td', { class: 'num', 'data-field': 'tasks' }, a.tasks), h('td', { class: 'num', 'data-field': 'expected' }, a.expected),
            h('td', { 'data-field': 'restored_from', 'data-epoch': a.restored_from === undefined ? null : a.restored_from }, restoredFrom(job, a)),
            h('td', {}, taskSet(job, a)))), { id: 'attempts' }),
        keptList.kept > attempts.length ? h('p', { class: 'warning' }, 'The newest ' + attempts.length + ' of ' + keptList.kept + ' kept attempts.') : null,
      ],
    ];
    return {
      title: 'Job ' + job,
      content,
      // A blocking query on the job: it answers once the job changes (an
      // epoch begins, completes or is aborted; a new attempt).
      wait: async (sig) => {
        await get(jobPath + '?index=' + j.modify_index + '&wait=60s', sig);
      },
    };
  }

  // lateChart draws each task's ack delay across the latest completed
  // epochs, one cell per epoch, darker the closer to the epoch's slowest
  // ack; late acks are orange. The tasks late most often come first.
  function lateChart(job, details) {
    if (details.length === 0) return h('p', { class: 'muted', id: 'late' }, 'No completed epoch yet.');
    const tasks = new Map();
    details.forEach((e, col) => {
      const delays = e.acks.map((a) => goDuration(a.delay));
      const rule = lateRule(delays);
      const slowest = Math.max(1e-9, ...delays);
      e.acks.forEach((a, i) => {
        if (!tasks.has(a.task)) tasks.set(a.task, { task: a.task, late: 0, cells: [] });
        const r = tasks.get(a.task);
        const late = rule.isLate(delays[i]);
        if (late) r.late++;
        r.cells[col] = { ms: delays[i], late, share: delays[i] / slowest, median: rule.median };
      });
    });
    const rows = Array.from(tasks.values()).sort((a, b) => b.late - a.late || (a.task < b.task ? -1 : 1)).slice(0, 30);
    const cw = 46;
    const rh = 18;
    const L = 150;
    const W = L + details.length * cw + 110;
    const H = rows.length * rh + 22;
    const kids = [];
    details.forEach((e, col) => kids.push(s('a', { href: '/ui/jobs/' + enc(job) + '/epochs/' + e.epoch },
      s('text', { x: L + col * cw + cw / 2, y: 12, 'text-anchor': 'middle' }, e.epoch))));
    kids.push(s('text', { x: L + details.length * cw + 8, y: 12 }, 'late in'));
    rows.forEach((r, i) => {
      const y = 18 + i * rh;
      kids.push(s('text', { x: L - 6, y: y + 12, 'text-anchor': 'end' }, r.task));
      details.forEach((e, col) => {
        const c = r.cells[col];
        if (!c) return;
        kids.push(s('rect', {
          class: c.late ? 'cell-late' : 'cell', x: L + col * cw + 1, y, width: cw - 2, height: rh - 3,
          'fill-opacity': c.late ? 1 : (0.15 + 0.85 * c.share).toFixed(2), 'data-task': r.task, 'data-epoch': e.epoch, 'data-late': c.late ? 1 : 0,
        }, s('title', {}, r.task + ', epoch ' + e.epoch + ': ' + fmtMs(c.ms) + (c.late ? ' (late: median ' + fmtMs(c.median) + ')' : ''))));
      });
      kids.push(s('text', { x: L + details.length * cw + 8, y: y + 12, 'data-late-count': r.task }, r.late + ' of ' + details.length));
    });
    return [
      h('p', { class: 'muted' }, 'Each task\'s ack delay in the latest ' + details.length + ' completed epochs: darker is closer to the epoch\'s slowest ack, orange is late ' +
        '(over twice the epoch\'s median and 1ms more). A task late again and again is held up upstream (backpressure) or slow to checkpoint; ' +
        'metastore_task_late_epochs exports the same counts for alerting.'),
      s('svg', { class: 'chart', id: 'late', viewBox: '0 0 ' + W + ' ' + H, width: W, role: 'img', 'data-chart': 'late', 'aria-label': 'late tasks over time' }, kids),
    ];
  }

  // changelogTable shows, per stateful task and retained epoch, the bytes
  // uploaded for the epoch (the ranges its manifest has that the previous
  // retained epoch's has not), the bytes a restore from it reads, and the
  // changelog since the last materialization that the restore replays.
  function changelogTable(job, manifests) {
    const tasks = Array.from(new Set(manifests.flatMap((m) => Array.from(m.byTask.keys())))).sort();
    if (tasks.length === 0) return h('p', { class: 'muted', id: 'changelog' }, 'No task of the retained checkpoints has a manifest (state in blobs).');
    const ref = (r) => r.key + '@' + r.offset;
    const rows = [];
    for (const task of tasks) {
      let prev = null;
      manifests.forEach((m) => {
        const mf = m.byTask.get(task);
        if (!mf) {
          prev = null;
          return;
        }
        const man = mf.manifest || { bases: [], segments: [] };
        const bases = man.bases || [];
        const segs = man.segments || [];
        const baseBytes = bases.reduce((n, b) => n + b.length, 0);
        const segBytes = segs.reduce((n, x) => n + x.length, 0);
        let uploaded = null;
        if (prev) {
          const had = new Set((prev.bases || []).map(ref).concat((prev.segments || []).map(ref)));
          uploaded = bases.concat(segs).filter((r) => !had.has(ref(r))).reduce((n, r) => n + r.length, 0);
        }
        const share = mf.bytes > 0 ? segBytes / mf.bytes : 0;
        rows.push(h('tr', { 'data-task': task, 'data-epoch': m.epoch },
          h('td', {}, task), h('td', {}, h('a', { href: '/ui/jobs/' + enc(job) + '/epochs/' + m.epoch }, m.epoch)),
          h('td', { class: 'num', 'data-field': 'uploaded', 'data-bytes': uploaded === null ? null : uploaded }, uploaded === null ? '–' : fmtBytes(uploaded)),
          h('td', { class: 'num', 'data-field': 'restore_bytes', 'data-bytes': mf.bytes }, fmtBytes(mf.bytes)),
          h('td', { class: 'num' }, bases.length + ' (' + fmtBytes(baseBytes) + ')'),
          h('td', { class: 'num', 'data-field': 'changelog_bytes', 'data-bytes': segBytes }, segs.length + ' (' + fmtBytes(segBytes) + ')',
            segs.length ? h('span', { class: 'muted' }, ' seq ' + segs[0].first_seq + '–' + segs[segs.length - 1].last_seq) : null),
          h('td', { class: share > 0.8 ? 'num warn' : 'num' }, Math.round(share * 100) + '%')));
        prev = man;
      });
    }
    return [
      h('p', { class: 'muted' }, 'Per stateful task and retained checkpoint: what the epoch uploaded against what a restore from it reads. ' +
        'The changelog (segments since the last materialization) grows with each epoch and is replayed on restore; when it is most of the restore, ' +
        'materialize more often. metastore_task_restore_bytes and metastore_task_changelog_bytes export the latest checkpoint\'s figures.'),
      table(['Task', 'Epoch', h('th', { class: 'num' }, 'Uploaded for the epoch'), h('th', { class: 'num' }, 'Restore reads'),
        h('th', { class: 'num' }, 'Bases'), h('th', { class: 'num' }, 'Changelog segments'), h('th', { class: 'num' }, 'Changelog share')], rows, { id: 'changelog' }),
    ];
  }

  // restorePreview asks the restore plan of every task of the attempt (at
  // most 200) from the latest checkpoint, the savepoint from.pin or the
  // retained epoch from.epoch.
  async function restorePreview(job, attempt, from, signal) {
    const tasks = attempt.task_list.slice(0, 200);
    const pin = from.pin;
    const suffix = pin ? '?pin=' + encodeURIComponent(pin) : (from.epoch ? '?epoch=' + from.epoch : '');
    const plans = await Promise.all(tasks.map((t) => getBody('/v1/jobs/' + enc(job) + '/tasks/' + enc(t.id) + '/restore' + suffix, signal)));
    let reads = 0;
    let bytes = 0;
    let inline = 0;
    const rows = plans.map((p) => {
      reads += p.object_store_reads;
      bytes += p.object_store_bytes;
      inline += p.inline_bytes;
      const kinds = Object.entries(p.kinds || {}).filter(([, k]) => k.status !== 'nothing_to_recover')
        .map(([name, k]) => name + ' ' + k.status.replace(/_/g, ' ') + (k.bytes ? ' (' + fmtBytes(k.bytes) + (k.manifest ? ', ' + ((k.manifest.bases || []).length) + ' bases + ' + ((k.manifest.segments || []).length) + ' segments' : '') + ')' : ''));
      return h('tr', { 'data-task': p.task },
        h('td', {}, h('a', { href: '/v1/jobs/' + enc(job) + '/tasks/' + enc(p.task) + '/restore' + suffix }, p.task)),
        h('td', { 'data-field': 'status' }, p.status),
        h('td', {}, kinds.join('; ') || '–'),
        h('td', { class: 'num', 'data-field': 'inline_bytes', 'data-bytes': p.inline_bytes }, fmtBytes(p.inline_bytes)),
        h('td', { class: 'num', 'data-field': 'object_store_reads' }, p.object_store_reads),
        h('td', { class: 'num', 'data-field': 'object_store_bytes', 'data-bytes': p.object_store_bytes }, fmtBytes(p.object_store_bytes)));
    });
    const src = plans.length ? plans[0].source : {};
    return [
      h('p', { id: 'restore-source' }, 'From ' + (pin ? 'savepoint "' + pin + '", ' : (from.epoch ? 'the retained ' : 'the latest checkpoint, ')) + 'epoch ' + (src.epoch || '–') +
        ' (generation ' + (src.generation || '–') + ')' + (attempt.task_list.length > tasks.length ? '; the first ' + tasks.length + ' of ' + attempt.task_list.length + ' tasks' : '') + '. ',
      h('a', { href: '/ui/jobs/' + enc(job) }, 'Hide')),
      table(['Task', 'Restores', 'Per kind', h('th', { class: 'num' }, 'Inline'), h('th', { class: 'num' }, 'Object-store GETs'), h('th', { class: 'num' }, 'Object-store bytes')],
        rows.concat([h('tr', { 'data-total': '' }, h('td', {}, h('strong', {}, 'All tasks')), h('td', {}), h('td', {}),
          h('td', { class: 'num' }, fmtBytes(inline)), h('td', { class: 'num', 'data-field': 'object_store_reads' }, reads),
          h('td', { class: 'num', 'data-field': 'object_store_bytes', 'data-bytes': bytes }, fmtBytes(bytes)))]), { id: 'restore-plan' }),
    ];
  }

  // ackChart draws each expected task's ack delay; tasks not acknowledged
  // yet run to now (pending) or to the end (aborted).
  function ackChart(rows, maxMs) {
    const W = 960;
    const rowH = 20;
    const L = 150;
    const R = 190;
    const H = rows.length * rowH + 24;
    const x = (v) => L + (W - L - R) * (v / Math.max(1, maxMs));
    const kids = [s('line', { class: 'axis', x1: L, y1: 0, x2: L, y2: H - 20 }),
      s('text', { x: L, y: H - 6 }, '0'), s('text', { x: W - R, y: H - 6, 'text-anchor': 'end' }, fmtMs(maxMs))];
    rows.forEach((r, i) => {
      const y0 = i * rowH + 3;
      kids.push(s('text', { x: L - 6, y: y0 + 12, 'text-anchor': 'end' }, r.task));
      const w = Math.max(1, x(r.ms) - L);
      kids.push(s('rect', { class: 'bar-' + r.kind, x: L, y: y0, width: w.toFixed(1), height: rowH - 6, 'data-task': r.task, 'data-kind': r.kind, 'data-delay-ms': r.ms.toFixed(3) },
        s('title', {}, r.task + ': ' + r.label)));
      kids.push(s('text', { x: (L + w + 4).toFixed(1), y: y0 + 12 }, r.label));
    });
    return s('svg', { class: 'chart', viewBox: '0 0 ' + W + ' ' + H, role: 'img', 'data-chart': 'acks', 'aria-label': 'ack delay per task' }, kids);
  }

  async function viewEpoch(job, n, signal) {
    const jobPath = '/v1/jobs/' + enc(job);
    const path = jobPath + '/epochs/' + n;
    const e = await getBody(path, signal);
    const attemptPath = jobPath + '/attempts/' + e.generation;
    // The store keeps the task sets of the current attempt and of the
    // attempts retained epochs belong to: for an epoch of a generation it
    // forgot, the acks stand for it, without capabilities.
    // (The list is asked first: a request answered 404 is a console error;
    // one pruned between the two reads is shown as forgotten.)
    const kept = (await getBody(jobPath + '/attempts', signal)).attempts || [];
    let attempt = null;
    if (kept.some((a) => a.generation === e.generation)) {
      attempt = await getBody(attemptPath, signal).catch((err) => {
        if (err instanceof APIError && err.code === 'not_found') return null;
        throw err;
      });
    }
    const taskList = attempt ? attempt.task_list :
      e.acks.map((a) => a.task).concat(e.stragglers).map((id) => ({ id, capabilities: null }));
    const asked = (t) => t.capabilities === null || t.capabilities.some((c) => c !== 'incremental');
    const acks = new Map(e.acks.map((a) => [a.task, a]));
    const strag = new Set(e.stragglers);
    const manifests = new Map();
    // Manifests are kept for the completed epochs only.
    if (e.state === 'completed') {
      await Promise.all(e.acks.filter((a) => a.lineage).map(async (a) => {
        manifests.set(a.task, await getBody(path + '/manifests/' + enc(a.task), signal));
      }));
    }

    const { median, isLate } = lateRule(e.acks.map((a) => goDuration(a.delay)));
    const endMs = e.completed_at || e.ended_at ? epochDuration(e) : Date.now() - new Date(e.began_at).getTime();
    const expectedTasks = taskList.filter(asked);
    const notAsked = taskList.filter((t) => !asked(t));
    const rows = expectedTasks.map((t) => {
      const a = acks.get(t.id);
      if (a) {
        const ms = goDuration(a.delay);
        return { task: t.id, ms, kind: isLate(ms) ? 'late' : 'ack', label: fmtMs(ms) + (isLate(ms) ? ' late' : '') };
      }
      return { task: t.id, ms: endMs, kind: 'straggler', label: 'not acknowledged (' + fmtMs(endMs) + (e.state === 'pending' ? ' so far)' : ')') };
    });
    const maxMs = Math.max(1, ...rows.map((r) => r.ms));

    const content = [
      h('h1', {}, h('a', { href: '/ui/jobs/' + enc(job) }, job), ' · epoch ', h('span', { 'data-field': 'epoch' }, n), ' ', stateTag(e.state), jsonLink(path)),
      h('div', { class: 'card' }, kv([
        ['State', stateTag(e.state), 'state'],
        ['Generation', e.generation, 'generation'],
        ['Acknowledged', e.acked + ' of ' + e.expected, 'acked'],
        ['Began', fmtTime(e.began_at), 'began_at'],
        [e.completed_at ? 'Completed' : (e.ended_at ? 'Ended' : 'Deadline'), fmtTime(e.completed_at || e.ended_at || e.deadline), 'end'],
        ['Duration', e.duration, 'duration'],
        ['Reason', e.reason || '–', 'reason'],
        ['Inline payload', fmtBytes(e.payload_bytes), 'payload_bytes'],
        ['Pinned', e.pinned ? 'yes: ' + (e.pin_name || '') : 'no', 'pinned'],
        ['Stragglers', e.stragglers.length ? e.stragglers.join(', ') :
          (!attempt && e.acked < e.expected ? (e.expected - e.acked) + ' tasks did not acknowledge (the task set of generation ' + e.generation + ' is no longer kept)' : 'none'), 'stragglers'],
      ])),
      h('h2', {}, 'Ack delay per task (from the epoch\'s begin)'),
      h('div', { class: 'legend' }, h('span', {}, h('i', { class: 'swatch sw-completed' }), 'acknowledged'),
        h('span', {}, h('i', { class: 'swatch sw-late' }), 'late: over twice the median (' + fmtMs(median) + ')'),
        h('span', {}, h('i', { class: 'swatch sw-aborted' }), 'straggler: not acknowledged')),
      ackChart(rows, maxMs),
      h('h2', {}, 'Acknowledgements'),
      table(['Task', 'Capabilities', h('th', { class: 'num' }, 'Ack delay'), 'Inline sizes', h('th', { class: 'num' }, 'In blobs'), 'At'],
        expectedTasks.map((t) => {
          const a = acks.get(t.id);
          const m = manifests.get(t.id);
          return h('tr', { 'data-task': t.id, class: strag.has(t.id) ? 'bad' : null },
            h('td', {}, t.id),
            h('td', {}, t.capabilities === null ? h('span', { class: 'muted' }, 'unknown') : t.capabilities.map((c) => h('span', { class: 'tag' }, c))),
            h('td', { class: 'num', 'data-field': 'delay' }, a ? a.delay : 'straggler'),
            h('td', { 'data-field': 'sizes' }, a ? Object.entries(a.sizes || {}).map(([k, v]) => k + ' ' + fmtBytes(v)).join(', ') || '–' : '–'),
            h('td', { class: 'num', 'data-field': 'blob_bytes', 'data-bytes': m ? m.bytes : null }, m ? h('a', { href: path + '/manifests/' + enc(t.id) }, fmtBytes(m.bytes)) : '–'),
            h('td', {}, a ? fmtTime(a.at) : '–'));
        }), { id: 'acks' }),
      h('h2', {}, 'Tasks not asked'),
      h('p', { class: 'muted' }, 'Tasks with no input, state or output capability checkpoint nothing: no epoch waits for them, and they restore as "nothing to recover".'),
      !attempt ? h('p', { id: 'not-asked', class: 'muted' }, 'Unknown: the task set of generation ' + e.generation + ' is no longer kept.') :
      notAsked.length === 0 ? h('p', { id: 'not-asked' }, 'None: every task of generation ' + e.generation + ' acknowledges.') :
        h('ul', { id: 'not-asked' }, notAsked.map((t) => h('li', { 'data-task': t.id }, t.id, ' ', h('span', { class: 'muted' }, '(capabilities: ' + (t.capabilities.join(', ') || 'none') + ')')))),
      attempt ? h('p', {}, 'Task set: ', jsonLink(attemptPath)) : null,
      e.state === 'completed' && attempt ? h('p', {}, h('a', { href: '/ui/jobs/' + enc(job) + '?epoch=' + n + '#restore', id: 'restore-epoch' },
        'Preview a restore of every task from this checkpoint')) : null,
    ];
    return {
      title: job + ' epoch ' + n,
      content,
      // The epoch's own blocking query: it answers on the next ack, the
      // completion, an abort or the epoch being subsumed.
      wait: async (sig) => {
        await get(path + '?index=' + e.modify_index + '&wait=60s', sig);
      },
    };
  }

  async function viewCluster(signal) {
    const statusPath = '/v1/status';
    const membersPath = '/v1/members';
    const st = await getBody(statusPath, signal);
    const ms = await getBody(membersPath, signal);
    const allPath = '/v1/members/status';
    const all = new Map(((await getBody(allPath, signal)).members || []).map((a) => [a.id, a]));
    let ready = 'unknown';
    try {
      const r = await fetch('/readyz', { signal, credentials: 'omit', cache: 'no-store' });
      ready = r.ok ? 'ready' : 'not ready (' + r.status + ')';
    } catch (e) {
      ready = 'unreachable';
    }
    const d = st.disk || {};
    const lowDisk = d.min_free_bytes > 0 && d.free_bytes < 2 * d.min_free_bytes;
    const scheme = location.protocol;
    return {
      title: 'Cluster',
      content: [
        h('h1', {}, 'Cluster', jsonLink(statusPath), jsonLink(membersPath), jsonLink(allPath)),
        h('h2', {}, 'This member: ', h('span', { 'data-field': 'id' }, st.id)),
        h('div', { class: 'card' }, kv([
          ['Role', st.state, 'state'],
          ['Leader', st.leader_id || 'none known', 'leader_id'],
          ['Term', st.term, 'term'],
          ['Commit index', st.commit_index, 'commit_index'],
          ['Applied index', st.applied_index, 'applied_index'],
          ['Last log index', st.last_log_index, 'last_log_index'],
          ['Last snapshot index', st.last_snapshot_index, 'last_snapshot_index'],
          ['Last contact with the leader', st.last_contact ? ago(st.last_contact) : (st.state === 'leader' ? '– (leads)' : 'none yet'), 'last_contact'],
          ['Health', ready + (st.integrity_problem ? '; integrity problem: ' + st.integrity_problem : ''), 'health'],
          ['Disk free', h('span', { class: d.writes_refused ? 'bad' : (lowDisk ? 'warn' : null) },
            fmtBytes(d.free_bytes) + ' free against --min-free-disk ' + fmtBytes(d.min_free_bytes) +
            (d.writes_refused ? ': writes refused' : '') + (d.error ? ' (' + d.error + ')' : '')), 'disk'],
        ])),
        h('h2', {}, 'Members'),
        table(['Id', 'Suffrage', 'Leader', 'Role', h('th', { class: 'num' }, 'Term'), h('th', { class: 'num' }, 'Commit'), h('th', { class: 'num' }, 'Applied'),
          'Last contact', 'Disk free', 'Answer', 'HTTP address'], (ms.members || []).map((m) => {
          const a = all.get(m.id);
          const o = a && a.status;
          const od = (o && o.disk) || {};
          return h('tr', { 'data-member': m.id, class: a && a.error ? 'bad' : null },
            h('td', {}, m.id), h('td', { 'data-field': 'suffrage' }, m.suffrage), h('td', { 'data-field': 'leader' }, m.leader ? 'leader' : ''),
            h('td', { 'data-field': 'state' }, o ? o.state : '–'), h('td', { class: 'num', 'data-field': 'term' }, o ? o.term : '–'),
            h('td', { class: 'num', 'data-field': 'commit_index' }, o ? o.commit_index : '–'), h('td', { class: 'num', 'data-field': 'applied_index' }, o ? o.applied_index : '–'),
            h('td', { 'data-field': 'last_contact' }, o ? (o.last_contact ? ago(o.last_contact) : (o.state === 'leader' ? '– (leads)' : 'none yet')) : '–'),
            h('td', { class: od.writes_refused ? 'bad' : null }, o ? fmtBytes(od.free_bytes) + (od.writes_refused ? ', writes refused' : '') : '–'),
            h('td', { 'data-field': 'answer' }, a ? (a.error ? 'no answer: ' + a.error : (o.integrity_problem ? 'integrity problem: ' + o.integrity_problem : 'in ' + fmtMs(a.took_ms))) : '–'),
            h('td', {}, m.http_addr ? h('a', { href: scheme + '//' + m.http_addr + '/ui/cluster', title: 'its console' }, m.http_addr) : '–'));
        }), { id: 'members' }),
        h('p', { class: 'muted' }, 'Each member\'s row is its own answer to /v1/status, asked by ' + st.id + ' (GET /v1/members/status); the card above is ' + st.id + '\'s.'),
        h('h2', {}, 'Recent leadership changes (seen by this member)'),
        (st.leader_changes || []).length === 0 ? h('p', { class: 'muted', id: 'leader-changes' }, 'None seen since the member started.') :
          table(['At', 'New leader', h('th', { class: 'num' }, 'Term')], st.leader_changes.slice().reverse().map((c) => h('tr', { 'data-term': c.term },
            h('td', {}, fmtTime(c.at) + ' (' + ago(c.at) + ')'), h('td', { 'data-field': 'leader_id' }, c.leader_id),
            h('td', { class: 'num', 'data-field': 'term' }, c.term))), { id: 'leader-changes' }),
      ],
      wait: every(3000),
    };
  }

  async function viewGC(signal) {
    const gcPath = '/v1/gc';
    const blobsPath = '/v1/blobs';
    const g = await getBody(gcPath, signal);
    const b = await getBody(blobsPath, signal);
    const t = g.totals || {};
    const lr = g.last_run;
    const states = Array.from(new Set(Object.keys(b.blobs.count || {}).concat(Object.keys(b.blobs.bytes || {})))).sort();
    return {
      title: 'Garbage collector',
      content: [
        h('h1', {}, 'Garbage collector and blobs', jsonLink(gcPath), jsonLink(blobsPath)),
        h('div', { class: 'card' }, kv([
          ['Store', g.store, 'store'],
          ['This member collects', g.leading ? 'yes (leader)' : 'no (the leader collects)', 'leading'],
          ['Running now', g.running ? 'yes' : 'no', 'running'],
          ['Candidates waiting', g.pending_candidates, 'pending_candidates'],
          ['Deleting', g.deleting, 'deleting'],
          ['Last orphan sweep', g.last_orphan_sweep ? fmtTime(g.last_orphan_sweep) : 'none yet', 'last_orphan_sweep'],
          ['Status error', g.status_error || 'none', 'status_error'],
        ])),
        h('h2', {}, 'Totals since ' + fmtTime(t.since) + ' (this member)'),
        table(['Cycles', 'Failed', 'Marked', 'Deleted', 'Bytes freed', 'Orphan sweeps', 'Orphans deleted', 'Purged', 'Errors'], [
          h('tr', { id: 'gc-totals' }, h('td', { 'data-field': 'cycles' }, t.cycles), h('td', { 'data-field': 'failed_cycles' }, t.failed_cycles),
            h('td', { 'data-field': 'marked' }, t.marked), h('td', { 'data-field': 'deleted' }, t.deleted),
            h('td', { 'data-field': 'bytes_freed' }, fmtBytes(t.bytes_freed)), h('td', { 'data-field': 'orphan_sweeps' }, t.orphan_sweeps),
            h('td', { 'data-field': 'orphans_deleted' }, t.orphans_deleted), h('td', { 'data-field': 'purged' }, t.purged),
            h('td', { 'data-field': 'errors' }, (t.errors || 0) + (t.delete_errors || 0)))]),
        h('h2', {}, 'Over time (the latest ' + (g.recent_runs || []).length + ' cycles of this member)'),
        gcChart(g.recent_runs || []),
        h('h2', {}, 'Last cycle'),
        lr ? h('div', { class: 'card', id: 'gc-last' }, kv([
          ['Started', fmtTime(lr.started)], ['Duration', lr.duration], ['Expired intents', lr.expired_intents],
          ['Marked', lr.marked + ' of ' + lr.marks_proposed + ' proposed'], ['Deleted', lr.deleted + ' (' + lr.resumed + ' resumed)'],
        ])) : h('p', { class: 'muted', id: 'gc-last' }, 'No cycle on this member yet.'),
        h('h2', {}, 'Blobs by state'),
        table(['State', h('th', { class: 'num' }, 'Count'), h('th', { class: 'num' }, 'Bytes')], states.map((k) => h('tr', { 'data-blob-state': k },
          h('td', {}, k), h('td', { class: 'num', 'data-field': 'count' }, (b.blobs.count || {})[k] || 0),
          h('td', { class: 'num', 'data-field': 'bytes' }, fmtBytes((b.blobs.bytes || {})[k] || 0)))), { id: 'blobs' }),
        h('h2', {}, 'Live bytes by job (the job that uploaded them)'),
        Object.keys(b.blobs.live_by_job || {}).length === 0 ? h('p', { class: 'muted', id: 'live-by-job' }, 'No live blob.') :
          table(['Job', h('th', { class: 'num' }, 'Blobs'), h('th', { class: 'num' }, 'Bytes')], Object.entries(b.blobs.live_by_job).sort().map(([job, v]) =>
            h('tr', { 'data-job': job }, h('td', {}, h('a', { href: '/ui/jobs/' + enc(job) }, job)), h('td', { class: 'num', 'data-field': 'count' }, v.count),
              h('td', { class: 'num', 'data-field': 'bytes', 'data-bytes': v.bytes }, fmtBytes(v.bytes)))), { id: 'live-by-job' }),
      ],
      wait: every(5000),
    };
  }

  // gcChart draws the collector's recent cycles: bytes freed per cycle as
  // bars (orphan sweeps marked), candidates and deleting blobs after each
  // cycle as lines.
  function gcChart(runs) {
    if (runs.length === 0) return h('p', { class: 'muted', id: 'gc-chart' }, 'No cycle on this member yet.');
    const W = 960;
    const H = 150;
    const L = 60;
    const T = 10;
    const B = 22;
    const step = (W - L - 10) / runs.length;
    const bw = Math.max(2, Math.min(20, step * 0.7));
    const maxFreed = Math.max(1, ...runs.map((r) => r.bytes_freed));
    const maxCount = Math.max(1, ...runs.map((r) => Math.max(r.candidates, r.deleting)));
    const yb = (v) => T + (H - T - B) * (1 - v / maxFreed);
    const yc = (v) => T + (H - T - B) * (1 - v / maxCount);
    const xc = (i) => L + i * step + step / 2;
    const kids = [s('line', { class: 'axis', x1: L, y1: H - B, x2: W, y2: H - B }),
      s('text', { x: L - 4, y: T + 8, 'text-anchor': 'end' }, fmtBytes(maxFreed)),
      s('text', { x: W, y: T + 8, 'text-anchor': 'end' }, maxCount + ' blobs'),
      s('text', { x: L, y: H - 6 }, fmtTime(runs[0].finished)),
      s('text', { x: W, y: H - 6, 'text-anchor': 'end' }, fmtTime(runs[runs.length - 1].finished))];
    runs.forEach((r, i) => {
      const top = yb(r.bytes_freed);
      kids.push(s('rect', { class: r.outcome === 'error' ? 'bar-aborted' : 'bar-completed', x: (xc(i) - bw / 2).toFixed(1), y: top.toFixed(1),
        width: bw.toFixed(1), height: Math.max(1, H - B - top).toFixed(1), 'data-run': i, 'data-bytes-freed': r.bytes_freed },
      s('title', {}, fmtTime(r.finished) + ' (' + r.outcome + '): ' + r.deleted + ' deleted, ' + fmtBytes(r.bytes_freed) + ' freed, ' + r.marked + ' marked' +
        (r.orphan_sweep ? ', orphan sweep: ' + r.orphans_deleted + ' deleted' : '') + '; ' + r.candidates + ' candidates, ' + r.deleting + ' deleting left')));
      if (r.orphan_sweep) kids.push(s('text', { x: xc(i).toFixed(1), y: H - B - 3, 'text-anchor': 'middle', class: 'mark-sweep' }, '◆'));
    });
    const line = (field, cls) => s('polyline', { class: cls, fill: 'none',
      points: runs.filter((r) => r[field] >= 0).map((r) => xc(runs.indexOf(r)).toFixed(1) + ',' + yc(r[field]).toFixed(1)).join(' ') });
    kids.push(line('candidates', 'line-candidates'), line('deleting', 'line-deleting'));
    return [
      h('div', { class: 'legend' }, h('span', {}, h('i', { class: 'swatch sw-completed' }), 'bytes freed per cycle'),
        h('span', {}, h('i', { class: 'swatch sw-late' }), 'candidates left'), h('span', {}, h('i', { class: 'swatch sw-aborted' }), 'deleting left'),
        h('span', {}, '◆ orphan sweep')),
      s('svg', { class: 'chart', id: 'gc-chart', viewBox: '0 0 ' + W + ' ' + H, role: 'img', 'data-chart': 'gc', 'aria-label': 'garbage collection over time' }, kids),
    ];
  }

  // ---- routing and the draw loop ----

  function pick() {
    const p = location.pathname;
    let m;
    if (p === '/ui/') return viewJobs;
    if (p === '/ui/cluster') return viewCluster;
    if (p === '/ui/gc') return viewGC;
    if ((m = p.match(/^\/ui\/jobs\/([^/]+)$/))) return (sig) => viewJob(decodeURIComponent(m[1]), sig);
    if ((m = p.match(/^\/ui\/jobs\/([^/]+)\/epochs\/([0-9]+)$/))) return (sig) => viewEpoch(decodeURIComponent(m[1]), Number(m[2]), sig);
    return null;
  }

  let loop = null;

  function showError(err) {
    const kids = [h('strong', {}, err.status ? 'The API answered ' + err.status + ' ' + err.code : 'Request failed'), ': ', err.message];
    if (err.status === 401) kids.push(h('p', {}, 'This cluster needs a token: type it above and press "Use token".'));
    if (err.status === 403) kids.push(h('p', {}, 'The token may not read this (a worker token sees only its own jobs).'));
    main.replaceChildren(h('div', { class: 'error', id: 'error', 'data-status': err.status || 0 }, kids));
  }

  async function run() {
    if (loop) loop.abort();
    const ctl = new AbortController();
    loop = ctl;
    const view = pick();
    if (!view) {
      main.replaceChildren(h('div', { class: 'error', id: 'error' }, 'No such view. ', h('a', { href: '/ui/' }, 'Jobs')));
      return;
    }
    main.replaceChildren(h('p', { class: 'muted' }, 'Loading…'));
    main.removeAttribute('data-draws');
    let draws = 0;
    while (!ctl.signal.aborted) {
      let res = null;
      try {
        res = await view(ctl.signal);
      } catch (err) {
        if (ctl.signal.aborted) return;
        showError(err);
        if (err.status === 401 || err.status === 403 || err.status === 404 || err.status === 400) return;
        liveEl.textContent = 'update failed at ' + new Date().toLocaleTimeString() + '; retrying';
        await sleep(3000, ctl.signal);
        continue;
      }
      if (ctl.signal.aborted) return;
      draws++;
      document.title = res.title + ' · metastore';
      main.replaceChildren(...[res.content].flat(Infinity).filter((k) => k));
      main.setAttribute('data-draws', String(draws));
      liveEl.textContent = 'live: drawn ' + draws + ' time' + (draws === 1 ? '' : 's') + ', last at ' + new Date().toLocaleTimeString();
      const waited = Date.now();
      try {
        await res.wait(ctl.signal);
        // A member that answers a blocking query at once (one that does not
        // know it) is not asked again at once.
        if (Date.now() - waited < 500) await sleep(500, ctl.signal);
      } catch (err) {
        if (ctl.signal.aborted) return;
        await sleep(3000, ctl.signal); // the blocking query failed: draw again after a pause
      }
    }
  }

  // ---- token ----

  const tokenInput = document.getElementById('token');
  const tokenState = document.getElementById('token-state');

  function showTokenState() {
    tokenState.textContent = token() ? 'token set for this tab' : 'no token';
  }

  function useToken() {
    const v = tokenInput.value.trim();
    tokenInput.value = '';
    if (v) sessionStorage.setItem(TOKEN_KEY, v);
    showTokenState();
    run();
  }

  document.getElementById('token-use').addEventListener('click', useToken);
  tokenInput.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter') useToken();
  });
  document.getElementById('token-forget').addEventListener('click', () => {
    sessionStorage.removeItem(TOKEN_KEY);
    showTokenState();
    run();
  });

  showTokenState();
  run();
})();
