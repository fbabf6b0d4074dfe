// The console's pages. The address says which: /console/ (overview),
// /console/tenants/{t}, /console/namespaces/{t}/{ns},
// /console/topics/{persistent|non-persistent}/{t}/{ns}/{topic}.
// Every number comes from the admin API (api.js); every name and payload is shown as text.

import {ApiError, call, get, getOr, request, setToken, token} from './api.js';
import {LiveChart} from './chart.js';
import {decodePayload} from './decode.js';
import {bytes, card, duration, el, fill, num, rate, seg, table} from './dom.js';

const main = document.getElementById('main');
const crumbs = document.getElementById('crumbs');
const notice = document.getElementById('notice');
const POLL_MS = 3000;
const OVERVIEW_POLL_MS = 5000;
const PAGE_SIZE = 50;
let timer = null;

function say(text, bad = false) {
  notice.className = bad ? 'bad' : '';
  notice.textContent = text;
}

function poll(fn, ms) {
  const tick = async () => {
    try { await fn(); } catch (e) { report(e); }
    if (!document.hidden) timer = setTimeout(tick, ms); else timer = null;
  };
  document.addEventListener('visibilitychange', () => {
    if (!document.hidden && timer === null) tick();
  });
  return tick();
}

function report(e) {
  if (e instanceof ApiError) say(e.status === 403 ? `Not allowed: ${e.reason}` : `Error ${e.status}: ${e.reason}`, true);
  else say(`Error: ${e.message || e}`, true);
}

function setCrumbs(items) {
  fill(crumbs, items.map(([text, href]) => href ? el('a', {href}, text) : el('span', {}, text)));
}

const tenantHref = (t) => `/console/tenants/${seg(t)}`;
const nsHref = (t, ns) => `/console/namespaces/${seg(t)}/${seg(ns)}`;
const topicHref = (full) => {
  const m = /^(persistent|non-persistent):\/\/([^/]+)\/([^/]+)\/(.+)$/.exec(full);
  return m ? `/console/topics/${m[1]}/${seg(m[2])}/${seg(m[3])}/${seg(m[4])}` : '/console/';
};
const topicLink = (full) => el('a', {href: topicHref(full)}, full);

/** A confirmation dialog: resolves true when the user confirms. */
function confirmAction(text) {
  const dialog = document.getElementById('confirm');
  document.getElementById('confirm-text').textContent = text;
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'yes'), {once: true});
    dialog.returnValue = '';
    dialog.showModal();
    document.getElementById('confirm-no').focus();
  });
}

/** Run an action after confirmation; say what happened; then `after`. */
async function act(question, method, path, body, done, after) {
  if (!await confirmAction(question)) return;
  try {
    await call(method, path, body);
    say(done);
    if (after) await after();
  } catch (e) { report(e); }
}

// ------------------------------------------------------------------ sign-in

function signIn(reason) {
  clearTimeout(timer);
  timer = null;
  setCrumbs([['Sign in']]);
  const input = el('input', {id: 'token-input', type: 'password', autocomplete: 'off',
    'aria-label': 'Token'});
  const form = el('form', {class: 'signin', onsubmit: (ev) => {
    ev.preventDefault();
    setToken(input.value.trim());
    location.reload();
  }},
  el('h1', {}, 'This cluster needs a token'),
  el('p', {class: 'muted'}, reason),
  el('label', {for: 'token-input'}, 'Token (kept for this tab only, in its session storage)'),
  input,
  el('div', {class: 'toolbar'}, el('button', {id: 'token-save', type: 'submit'}, 'Use this token')));
  fill(main, form);
  input.focus();
}

document.addEventListener('magnetar:auth', (ev) => {
  if (!document.getElementById('token-input')) signIn(ev.detail.reason);
});
document.getElementById('token-button').addEventListener('click', () => {
  if (token() && !document.getElementById('token-input')) { setToken(''); say('Token forgotten.'); }
  signIn('Give a token for this cluster.');
});

// ------------------------------------------------------------------ overview

async function overviewPage() {
  setCrumbs([['Overview']]);
  const totals = el('div', {class: 'cards', id: 'totals'});
  const brokers = el('div', {id: 'brokers'});
  const attention = el('div', {id: 'attention'});
  const tenants = el('div', {id: 'tenants'});
  const title = el('h1', {}, 'Cluster');
  fill(main, title,
    el('section', {}, el('h2', {}, 'Totals'), totals),
    el('section', {}, el('h2', {}, 'Brokers'), brokers),
    el('section', {}, el('h2', {}, 'Needs attention'), attention),
    el('section', {}, el('h2', {}, 'Tenants'), tenants));
  getOr('/admin/v2/tenants', null, [403]).then((list) => {
    if (list === null) fill(tenants, el('p', {class: 'muted'}, 'Listing tenants needs a superuser.'));
    else fill(tenants, list.length ? el('ul', {}, list.map(t => el('li', {}, el('a', {href: tenantHref(t)}, t))))
      : el('p', {class: 'muted'}, 'no tenants'));
  }).catch(report);
  await poll(async () => {
    const data = await get('/admin/v2/console/overview');
    title.textContent = `Cluster ${data.cluster}`;
    const sum = {topics: 0, msgRateIn: 0, msgRateOut: 0, msgBacklog: 0, storageSize: 0, producers: 0, consumers: 0};
    const largest = [], unconsumed = [], repl = [];
    for (const b of data.brokers) {
      const t = b.totals || {};
      for (const k of Object.keys(sum)) sum[k] += Number(t[k] || 0);
      largest.push(...(b.largestBacklogs || []));
      unconsumed.push(...(b.unconsumedBacklogs || []));
      repl.push(...(b.replicationDisconnected || []));
    }
    fill(totals, card('Brokers', num(data.brokers.length)), card('Topics', num(sum.topics), 'total-topics'),
      card('Rate in', rate(sum.msgRateIn), 'total-rate-in'), card('Rate out', rate(sum.msgRateOut)),
      card('Backlog', num(sum.msgBacklog), 'total-backlog'), card('Storage', bytes(sum.storageSize)),
      card('Producers', num(sum.producers)), card('Consumers', num(sum.consumers)));
    fill(brokers, table(
      [{label: 'Broker'}, {label: 'Version'}, {label: 'Uptime', num: true}, {label: 'CPU', num: true},
        {label: 'Bundles', num: true}, {label: 'Topics', num: true}, {label: 'Disk'}, {label: 'Metadata store'}],
      data.brokers.map(b => b.error ? [b.brokerId, el('span', {class: 'bad'}, b.error), '', '', '', '', '', ''] : [
        b.brokerId, b.version, duration(b.uptimeSeconds), `${num(b.cpuPercent, 1)} %`,
        b.bundles === null || b.bundles === undefined ? '–' : num(b.bundles), num(b.totals.topics),
        b.readOnly ? el('span', {class: 'bad'}, `read-only: ${b.readOnly}`) : el('span', {class: 'good'}, 'writable'),
        b.metadataStore ? el('span', {class: 'bad'}, b.metadataStore) : el('span', {class: 'good'}, 'connected'),
      ])));
    largest.sort((a, b) => b.msgBacklog - a.msgBacklog);
    // growing (messages coming in) first, then by backlog
    unconsumed.sort((a, b) => (b.msgRateIn > 0) - (a.msgRateIn > 0) || b.msgBacklog - a.msgBacklog);
    const cols = [{label: 'Topic'}, {label: 'Backlog', num: true}, {label: 'Rate in', num: true}, {label: 'Consumers', num: true}];
    const rows = (list) => list.slice(0, 10).map(r => [topicLink(r.topic), num(r.msgBacklog), rate(r.msgRateIn), num(r.consumers)]);
    fill(attention,
      el('h3', {}, 'Largest backlogs'), table(cols, rows(largest), 'no backlog'),
      el('h3', {}, 'Backlog and no consumer (growing first)'),
      table(cols, rows(unconsumed), 'none'),
      el('h3', {}, 'Replication disconnected'),
      table([{label: 'Topic'}, {label: 'Remote cluster'}, {label: 'Replication backlog', num: true}],
        repl.map(r => [topicLink(r.topic), r.remote, num(r.replicationBacklog)]), 'none'));
  }, OVERVIEW_POLL_MS);
}

// ------------------------------------------------------------------ tenant

async function tenantPage(tenant) {
  setCrumbs([['Overview', '/console/'], [tenant]]);
  const info = await getOr(`/admin/v2/tenants/${seg(tenant)}`, null, [403]);
  const namespaces = await get(`/admin/v2/namespaces/${seg(tenant)}`);
  fill(main, el('h1', {}, `Tenant ${tenant}`),
    el('section', {}, el('h2', {}, 'Tenant'), info === null ? el('p', {class: 'muted'}, 'not allowed to read') : table(
      [{label: 'Admin roles'}, {label: 'Allowed clusters'}],
      [[(info.adminRoles || []).join(', ') || '–', (info.allowedClusters || []).join(', ') || '–']])),
    el('section', {}, el('h2', {}, `Namespaces (${namespaces.length})`),
      table([{label: 'Namespace'}], namespaces.map(n => {
        const short = n.split('/').pop();
        return [el('a', {href: nsHref(tenant, short)}, n)];
      }), 'no namespaces')));
}

// ------------------------------------------------------------------ namespace

const POLICY_KEYS = [
  ['retention_policies', 'Retention'], ['message_ttl_in_seconds', 'Message TTL (s)'],
  ['backlog_quota_map', 'Backlog quotas'], ['replication_clusters', 'Replication clusters'],
  ['publishMaxMessageRate', 'Publish rate'], ['dispatchRate', 'Dispatch rate'],
  ['subscriptionDispatchRate', 'Subscription dispatch rate'], ['deduplicationEnabled', 'Deduplication'],
];

function policyText(v) {
  if (v === undefined || v === null) return '–';
  return typeof v === 'object' ? JSON.stringify(v) : String(v);
}

async function namespacePage(tenant, namespace) {
  const ns = `${tenant}/${namespace}`;
  setCrumbs([['Overview', '/console/'], [tenant, tenantHref(tenant)], [namespace]]);
  const base = `/admin/v2/namespaces/${seg(tenant)}/${seg(namespace)}`;
  const started = performance.now();
  const [topics, partP, partN, policies, bundles, owners] = await Promise.all([
    get(`${base}/topics?mode=ALL`),
    getOr(`/admin/v2/persistent/${seg(tenant)}/${seg(namespace)}/partitioned`, []),
    getOr(`/admin/v2/non-persistent/${seg(tenant)}/${seg(namespace)}/partitioned`, []),
    getOr(base, null, [403]),
    getOr(`${base}/bundles`, null, [403]),
    getOr(`/admin/v2/console/bundles/${seg(tenant)}/${seg(namespace)}`, null, [403]),
  ]);
  const ownerOf = new Map((owners || []).map(o => [o.bundle, o.owner]));
  const partitioned = new Set([...partP, ...partN]);
  const entries = [...partitioned].map(name => ({name, partitioned: true}));
  for (const name of topics) {
    const m = /^(.*)-partition-\d+$/.exec(name);
    if (!(m && partitioned.has(m[1]))) entries.push({name, partitioned: false});
  }
  entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  let offset = 0, shown = entries;
  const search = el('input', {id: 'topic-search', type: 'search', placeholder: 'filter topics',
    'aria-label': 'Filter topics'});
  const list = el('div', {id: 'topic-list'});
  const count = el('span', {id: 'topic-count', class: 'muted'});
  const prev = el('button', {id: 'page-prev', type: 'button'}, 'Previous');
  const next = el('button', {id: 'page-next', type: 'button'}, 'Next');
  const draw = () => {
    const page = shown.slice(offset, offset + PAGE_SIZE);
    count.textContent = shown.length ? `${offset + 1}-${offset + page.length} of ${num(shown.length)}` : '0 topics';
    prev.disabled = offset === 0;
    next.disabled = offset + PAGE_SIZE >= shown.length;
    fill(list, table([{label: 'Topic'}, {label: 'Kind'}],
      page.map(e => [topicLink(e.name), e.partitioned ? 'partitioned' : (e.name.startsWith('non-persistent') ? 'non-persistent' : 'persistent')]),
      'no topics'));
  };
  search.addEventListener('input', () => {
    const q = search.value.trim().toLowerCase();
    shown = q ? entries.filter(e => e.name.toLowerCase().includes(q)) : entries;
    offset = 0;
    draw();
  });
  prev.addEventListener('click', () => { offset = Math.max(0, offset - PAGE_SIZE); draw(); });
  next.addEventListener('click', () => { offset += PAGE_SIZE; draw(); });
  const bundleRows = bundles ? bundles.boundaries.slice(0, -1).map((lo, i) => {
    const range = `${lo}_${bundles.boundaries[i + 1]}`;
    const owner = owners === null ? 'not allowed to read' : (ownerOf.get(range) || 'not owned now');
    return [range, owner, el('button', {type: 'button', class: 'danger', 'data-bundle': range, onclick: () => act(
      `Unload bundle ${range} of ${ns}? Its topics move (their clients reconnect).`, 'PUT',
      `${base}/${range}/unload`, undefined, `Bundle ${range} unloaded.`)}, 'Unload')];
  }) : [];
  fill(main, el('h1', {}, `Namespace ${ns}`),
    el('section', {}, el('h2', {}, 'Topics'),
      el('div', {class: 'toolbar'}, search, prev, next, count), list),
    el('section', {}, el('h2', {}, 'Policies'), policies === null ? el('p', {class: 'muted'}, 'not allowed to read') :
      [table([{label: 'Policy'}, {label: 'Value'}], POLICY_KEYS.map(([k, label]) => [label, policyText(policies[k])])),
        el('details', {}, el('summary', {}, 'All policies'), el('pre', {}, JSON.stringify(policies, null, 2)))]),
    el('section', {}, el('h2', {}, 'Bundles'), bundles === null ? el('p', {class: 'muted'}, 'not allowed to read') :
      table([{label: 'Bundle'}, {label: 'Owner'}, {label: 'Action'}], bundleRows)));
  draw();
  main.dataset.loadMs = String(Math.round(performance.now() - started));
}

// ------------------------------------------------------------------ topic

function subscriptionActions(topicBase, name, refresh) {
  const sub = `${topicBase}/subscription/${seg(name)}`;
  const n = el('input', {type: 'number', min: '1', value: '1', 'aria-label': `Messages to skip on ${name}`});
  const when = el('input', {type: 'datetime-local', step: '1', 'aria-label': `Reset ${name} to this time`});
  return el('div', {class: 'row-actions', 'data-subscription': name},
    n, el('button', {type: 'button', 'data-action': 'skip', onclick: () => act(
      `Skip the next ${n.value} messages of subscription ${name}?`, 'POST', `${sub}/skip/${Number(n.value) || 1}`,
      undefined, `Skipped ${n.value} messages of ${name}.`, refresh)}, 'Skip'),
    el('button', {type: 'button', class: 'danger', 'data-action': 'clear', onclick: () => act(
      `Clear the whole backlog of subscription ${name}?`, 'POST', `${sub}/skip_all`, undefined,
      `Backlog of ${name} cleared.`, refresh)}, 'Clear backlog'),
    when, el('button', {type: 'button', 'data-action': 'reset', onclick: () => {
      const t = when.value ? new Date(when.value).getTime() : NaN;
      if (Number.isNaN(t)) { say('Pick a time to reset the cursor to.', true); return; }
      act(`Reset subscription ${name} to ${new Date(t).toISOString()}?`, 'POST', `${sub}/resetcursor/${t}`,
        undefined, `${name} reset to ${new Date(t).toISOString()}.`, refresh);
    }}, 'Reset to time'),
    el('button', {type: 'button', class: 'danger', 'data-action': 'delete', onclick: () => act(
      `Delete subscription ${name}? Its position and backlog are gone.`, 'DELETE', sub, undefined,
      `Subscription ${name} deleted.`, refresh)}, 'Delete'));
}

async function messagesOf(domain, tenant, namespace, topic, schema, into) {
  const base = `/admin/v2/${domain}/${seg(tenant)}/${seg(namespace)}/${seg(topic)}`;
  const out = [];
  for (let i = 1; i <= 5; i++) {
    let resp;
    try {
      resp = await request('GET', `${base}/examinemessage?initialPosition=latest&messagePosition=${i}`);
    } catch (e) {
      if (e instanceof ApiError && (e.status === 404 || e.status === 405)) break;
      throw e;
    }
    const data = new Uint8Array(await resp.arrayBuffer());
    const decoded = decodePayload(data, schema);
    const props = [];
    resp.headers.forEach((v, k) => { if (k.startsWith('x-pulsar-property-')) props.push(`${k.slice(18)}=${v}`); });
    const published = Number(resp.headers.get('x-pulsar-publish-time'));
    out.push(el('div', {class: 'message'},
      el('div', {class: 'meta'}, `id ${resp.headers.get('x-pulsar-message-id')} · published ${published ? new Date(published).toISOString() : '?'} · producer ${resp.headers.get('x-pulsar-producer-name') || '?'} · ${decoded.kind}`,
        props.length ? ` · properties ${props.join(', ')}` : ''),
      el('pre', {class: 'payload'}, decoded.text),
      decoded.alt !== undefined && decoded.alt !== null ? el('pre', {class: 'payload-text'}, decoded.alt) : null));
  }
  fill(into, out.length ? out : el('p', {class: 'muted'}, 'no messages stored'));
}

async function topicPage(domain, tenant, namespace, topic) {
  const full = `${domain}://${tenant}/${namespace}/${topic}`;
  setCrumbs([['Overview', '/console/'], [tenant, tenantHref(tenant)], [namespace, nsHref(tenant, namespace)], [topic]]);
  const base = `/admin/v2/${domain}/${seg(tenant)}/${seg(namespace)}/${seg(topic)}`;
  const meta = await getOr(`${base}/partitions`, {partitions: 0});
  const partitions = Number(meta && meta.partitions) || 0;
  const charts = {
    in: new LiveChart('Rate in (msg/s)', (v) => rate(v)),
    out: new LiveChart('Rate out (msg/s)', (v) => rate(v)),
    backlog: new LiveChart('Backlog (messages)', (v) => num(v)),
  };
  const cards = el('div', {class: 'cards', id: 'topic-cards'});
  const producers = el('div', {id: 'producers'});
  const subs = el('div', {id: 'subscriptions'});
  const replication = el('div', {id: 'replication'});
  const schemaBox = el('div', {id: 'schema'});
  const messages = el('div', {id: 'messages'});
  const parts = el('div', {id: 'partitions'});
  const newSub = el('input', {id: 'new-subscription', type: 'text', placeholder: 'subscription name',
    'aria-label': 'New subscription name'});
  const refresh = async () => { await update(); };
  const createSub = el('button', {id: 'create-subscription', type: 'button', onclick: () => {
    const name = newSub.value.trim();
    if (!name) { say('Name the subscription to create.', true); return; }
    act(`Create subscription ${name} on ${full} (from the latest message)?`, 'PUT',
      `${base}/subscription/${seg(name)}`, undefined, `Subscription ${name} created.`, refresh);
  }}, 'Create subscription');
  const unload = el('button', {id: 'unload-topic', type: 'button', class: 'danger', onclick: () => act(
    `Unload ${full}? Its clients reconnect.`, 'PUT', `${base}/unload`, undefined, `${full} unloaded.`, refresh)},
  'Unload topic');
  fill(main, el('h1', {}, full),
    el('section', {}, el('h2', {}, 'Now'), cards),
    el('section', {}, el('h2', {}, 'Live'), el('div', {class: 'charts'}, charts.in.node, charts.out.node, charts.backlog.node)),
    partitions ? el('section', {}, el('h2', {}, 'Partitions'), parts) : null,
    el('section', {}, el('h2', {}, 'Subscriptions'),
      el('div', {class: 'toolbar'}, newSub, createSub), subs),
    el('section', {}, el('h2', {}, 'Producers'), producers),
    el('section', {}, el('h2', {}, 'Replication'), replication),
    el('section', {}, el('h2', {}, 'Schema'), schemaBox),
    partitions ? null : el('section', {}, el('h2', {}, 'Last messages'),
      el('div', {class: 'toolbar'}, el('button', {id: 'refresh-messages', type: 'button', onclick: () =>
        messagesOf(domain, tenant, namespace, topic, schema, messages).catch(report)}, 'Refresh')), messages),
    el('section', {}, el('h2', {}, 'Actions'), el('div', {class: 'toolbar'}, unload)));
  if (partitions) {
    fill(parts, table([{label: 'Partition'}], Array.from({length: partitions}, (_, i) => [topicLink(`${full}-partition-${i}`)])));
  }
  const schema = await getOr(`/admin/v2/schemas/${seg(tenant)}/${seg(namespace)}/${seg(topic.replace(/-partition-\d+$/, ''))}/schema`, null, [404, 403]);
  fill(schemaBox, schema ? [table([{label: 'Type'}, {label: 'Version', num: true}], [[schema.type, num(schema.version)]]),
    schema.data ? el('pre', {}, schema.data) : null] : el('p', {class: 'muted'}, 'no schema (bytes)'));
  let subNames = null;
  const subCells = new Map();
  async function update() {
    const stats = partitions ? await get(`${base}/partitioned-stats`) : await get(`${base}/stats`);
    const consumers = Object.values(stats.subscriptions || {}).reduce((n, s) => n + (s.consumers || []).length, 0);
    fill(cards, card('Kind', partitions ? `partitioned (${partitions})` : domain), card('Rate in', rate(stats.msgRateIn), 'rate-in'), card('Rate out', rate(stats.msgRateOut), 'rate-out'),
      card('Throughput in', `${bytes(stats.msgThroughputIn)}/s`), card('Backlog', num(stats.msgBacklog), 'backlog'),
      card('Storage', bytes(stats.storageSize), 'storage'), card('Producers', num((stats.publishers || []).length), 'producer-count'),
      card('Consumers', num(consumers), 'consumer-count'), card('Messages in', num(stats.msgInCounter), 'msg-in'));
    charts.in.push(stats.msgRateIn);
    charts.out.push(stats.msgRateOut);
    charts.backlog.push(stats.msgBacklog);
    fill(producers, table([{label: 'Producer'}, {label: 'Address'}, {label: 'Rate in', num: true}, {label: 'Messages', num: true}],
      (stats.publishers || []).map(p => [p.producerName, p.address || '', rate(p.msgRateIn), num(p.msgInCounter)]), 'no producers'));
    // rows are rebuilt only when the subscriptions change: focus and typed values stay
    const entries = Object.entries(stats.subscriptions || {}).sort();
    const names = JSON.stringify(entries.map(([name]) => name));
    if (names !== subNames) {
      subNames = names;
      subCells.clear();
      fill(subs, table([{label: 'Subscription'}, {label: 'Type'}, {label: 'Backlog', num: true}, {label: 'Consumers', num: true},
        {label: 'Rate out', num: true}, {label: 'Actions'}],
      entries.map(([name]) => {
        const cells = {type: el('span', {}), backlog: el('span', {'data-backlog': name}),
          consumers: el('span', {}), rate: el('span', {})};
        subCells.set(name, cells);
        return [name, cells.type, cells.backlog, cells.consumers, cells.rate, subscriptionActions(base, name, refresh)];
      }), 'no subscriptions'));
    }
    for (const [name, s] of entries) {
      const cells = subCells.get(name);
      cells.type.textContent = s.type || '–';
      cells.backlog.textContent = num(s.msgBacklog);
      cells.consumers.textContent = num((s.consumers || []).length);
      cells.rate.textContent = rate(s.msgRateOut);
    }
    fill(replication, table([{label: 'Remote cluster'}, {label: 'Connected'}, {label: 'Backlog', num: true}, {label: 'Rate out', num: true}],
      Object.entries(stats.replication || {}).map(([remote, r]) => [remote,
        r.connected ? el('span', {class: 'good'}, 'connected') : el('span', {class: 'bad'}, 'disconnected'),
        num(r.replicationBacklog), rate(r.msgRateOut)]), 'not replicated'));
  }
  if (!partitions && domain === 'persistent') messagesOf(domain, tenant, namespace, topic, schema, messages).catch(report);
  else if (!partitions) fill(messages, el('p', {class: 'muted'}, 'non-persistent topics store no messages'));
  await poll(update, POLL_MS);
}

// ------------------------------------------------------------------ routing

async function route() {
  const parts = location.pathname.split('/').filter(Boolean).map(decodeURIComponent);
  if (parts[0] !== 'console') parts.unshift('console');
  const [, page, ...rest] = parts;
  const started = performance.now();
  try {
    if (!page) await overviewPage();
    else if (page === 'tenants' && rest.length === 1) await tenantPage(rest[0]);
    else if (page === 'namespaces' && rest.length === 2) await namespacePage(rest[0], rest[1]);
    else if (page === 'topics' && rest.length >= 4 && ['persistent', 'non-persistent'].includes(rest[0])) {
      await topicPage(rest[0], rest[1], rest[2], rest.slice(3).join('/'));
    } else {
      setCrumbs([['Overview', '/console/'], ['Not found']]);
      fill(main, el('h1', {}, 'No such page'), el('p', {}, el('a', {href: '/console/'}, 'Back to the overview')));
    }
    document.body.dataset.readyAt = String(Math.round(performance.now()));  // since navigation
    document.body.dataset.ready = 'true';
    document.body.dataset.renderMs = String(Math.round(performance.now() - started));
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) return;  // the sign-in form shows
    report(e);
    document.body.dataset.ready = 'error';
  }
}

route();
