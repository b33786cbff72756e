// The party's public REST API, called with the tenant's key: the same routes, bodies and errors an
// integrator gets (the console has no other way in). The key lives in sessionStorage only — this tab,
// until it closes or the person signs out — and travels in the Authorization header, never in a
// cookie; fetches send no credentials, follow no redirects and are never cached.

const KEY = "labeldp.console.apiKey";

export class ApiError extends Error {
  constructor(status, code, detail, body = {}) {
    super(`${detail} (${status} ${code})`);
    this.status = status;
    this.code = code;
    this.detail = detail;
    this.body = body;
  }
}

export const session = {
  get key() {
    return sessionStorage.getItem(KEY);
  },
  set(key) {
    sessionStorage.setItem(KEY, key);
  },
  clear() {
    sessionStorage.removeItem(KEY);
  },
};

let onUnauthenticated = () => {};

/** What to do when a key is refused (401): the app signs the person out. */
export function whenUnauthenticated(handler) {
  onUnauthenticated = handler;
}

/** ``/v1/a/b`` from parts, each one escaped: an ID can never change the path. */
export function path(...parts) {
  return `/v1/${parts.map((p) => encodeURIComponent(String(p))).join("/")}`;
}

/** One request; the answer's JSON, or the Response itself with ``raw``. Errors are ApiErrors. */
export async function call(method, url, { query, body, headers = {}, raw = false, signal } = {}) {
  const target = new URL(url, window.location.origin);
  for (const [name, value] of Object.entries(query ?? {})) {
    if (value !== undefined && value !== null && value !== "") target.searchParams.set(name, String(value));
  }
  const init = {
    method,
    headers: { Accept: "application/json", Authorization: `Bearer ${session.key ?? ""}`, ...headers },
    credentials: "omit",
    cache: "no-store",
    redirect: "error",
    signal,
  };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  let response;
  try {
    response = await fetch(target, init);
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new ApiError(0, "unreachable", "the service did not answer");
  }
  if (!response.ok) {
    let problem = {};
    try {
      problem = await response.json();
    } catch {
      problem = {};
    }
    const error = new ApiError(
      response.status,
      typeof problem.type === "string" ? problem.type : "http-error",
      typeof problem.detail === "string" ? problem.detail : response.statusText,
      problem,
    );
    if (response.status === 401) onUnauthenticated(error);
    throw error;
  }
  if (raw) return response;
  if (response.status === 204) return null;
  return response.json();
}

export const get = (url, query, signal) => call("GET", url, { query, signal });

/** Every item of a paged list, following its ``next`` links (at most ``most`` items). */
export async function all(url, query = {}, { most = 10_000, signal } = {}) {
  const items = [];
  let page = await get(url, { limit: 1000, ...query }, signal);
  for (;;) {
    items.push(...page.items);
    if (!page.next || items.length >= most) return items.slice(0, most);
    page = await get(page.next, undefined, signal);
  }
}

/** Save a file the API answers (an artifact, a release's output) under the name it suggests. */
export async function download(url, fallbackName) {
  const response = await call("GET", url, { raw: true, headers: { Accept: "*/*" } });
  const disposition = response.headers.get("Content-Disposition") ?? "";
  const named = /filename="?([^";]+)"?/.exec(disposition);
  const blob = await response.blob();
  const link = document.createElement("a");
  link.href = URL.createObjectURL(blob);
  link.download = named ? named[1] : fallbackName;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 60_000);
  return blob.size;
}

/** A fresh Idempotency-Key (crypto.getRandomValues also works on plain-HTTP origins). */
export function idempotencyKey(prefix = "console") {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return `${prefix}-${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

let described = null; // the party's OpenAPI document, fetched once per page load

function numeric(schema) {
  const options = schema?.anyOf ?? [schema];
  return options.find((o) => o && (o.type === "number" || o.type === "integer")) ?? {};
}

// An exclusive bound becomes the input's inclusive one (the nearest an input can say; the API refuses
// the bound itself, and the form shows its reason at the field).
function asAttributes(schema) {
  const s = numeric(schema);
  const out = {};
  const min = s.minimum ?? s.exclusiveMinimum;
  const max = s.maximum ?? s.exclusiveMaximum;
  if (typeof min === "number") out.min = String(min);
  if (typeof max === "number") out.max = String(max);
  return out;
}

/**
 * The bounds the API declares for a number it takes, as an input's ``min``/``max``: a body field
 * (``{schema: "ReleaseIn", property: "epsilon"}``) or an operation's query parameter (``{operation:
 * "get_budget", parameter: "epsilon"}``), read from the party's /openapi.json — the service's own
 * limits, never a copy here.
 */
export async function declaredBounds({ schema, property, operation, parameter }) {
  described ??= get("/openapi.json").catch((error) => {
    described = null;
    throw error;
  });
  const document = await described;
  if (schema) return asAttributes(document.components?.schemas?.[schema]?.properties?.[property]);
  const operations = Object.values(document.paths ?? {}).flatMap((methods) => Object.values(methods));
  const op = operations.find((o) => o.operationId === operation);
  return asAttributes((op?.parameters ?? []).find((p) => p.in === "query" && p.name === parameter)?.schema);
}
