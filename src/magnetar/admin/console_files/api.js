// Calls to the admin API, through the console's /console/api forwarder (same origin).
// The token lives in sessionStorage only; it goes out as "Authorization: Bearer" on every
// call, with the X-Magnetar-Console header that state-changing calls need.

const TOKEN_KEY = 'magnetar.console.token';

export class ApiError extends Error {
  constructor(status, reason) {
    super(`${status}: ${reason}`);
    this.status = status;
    this.reason = reason;
  }
}

export function token() { return sessionStorage.getItem(TOKEN_KEY) || ''; }
export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

function headers(json) {
  const h = {'X-Magnetar-Console': '1'};
  const t = token();
  if (t) h['Authorization'] = `Bearer ${t}`;
  if (json) h['Content-Type'] = 'application/json';
  return h;
}

async function reasonOf(resp) {
  const text = await resp.text();
  try { return JSON.parse(text).reason || text; } catch { return text || resp.statusText; }
}

/** The raw response of an admin call (throws ApiError on an error status). */
export async function request(method, path, body) {
  const resp = await fetch(`/console/api${path}`, {
    method, headers: headers(body !== undefined), cache: 'no-store', credentials: 'omit',
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!resp.ok) {
    const err = new ApiError(resp.status, await reasonOf(resp));
    if (resp.status === 401) document.dispatchEvent(new CustomEvent('magnetar:auth', {detail: err}));
    throw err;
  }
  return resp;
}

/** An admin call's JSON answer (null for 204). */
export async function call(method, path, body) {
  const resp = await request(method, path, body);
  if (resp.status === 204) return null;
  const type = resp.headers.get('Content-Type') || '';
  return type.includes('json') ? resp.json() : resp.text();
}

export const get = (path) => call('GET', path);

/** GET, or `fallback` on 404 (or on the statuses listed). */
export async function getOr(path, fallback, statuses = [404]) {
  try { return await get(path); } catch (e) {
    if (e instanceof ApiError && statuses.includes(e.status)) return fallback;
    throw e;
  }
}
