// The console's frame, shared by both parties: sign-in with the tenant's API key, the navigation, and
// a router over the URL's fragment (#/datasets/…) — so the server only ever serves one page, and a
// link to any view can be bookmarked or shared (without the key, which stays in this tab).

import { ApiError, get, session, whenUnauthenticated } from "./api.js";
import { h, replace } from "./dom.js";
import { problem, title } from "./ui.js";

const main = () => document.getElementById("main");
let signingIn = false; // a refused key while signing in is the form's to report

function announce(text) {
  const status = document.getElementById("status");
  status.textContent = "";
  window.setTimeout(() => {
    status.textContent = text;
  }, 50);
}

function signIn(app, reason) {
  document.getElementById("nav").hidden = true;
  replace(document.getElementById("session"));
  const input = h("input", {
    id: "api-key",
    name: "api-key",
    type: "password",
    autocomplete: "off",
    spellcheck: "false",
    required: true,
    "aria-describedby": "api-key-help",
  });
  const message = h("div", { class: "sign-in-message" });
  const form = h(
    "form",
    { class: "sign-in", novalidate: true },
    h("label", { for: "api-key" }, "Tenant API key"),
    input,
    h(
      "p",
      { id: "api-key-help", class: "help" },
      "The key your operator issued for this tenant (labeldp … tenant create). It is kept in this browser tab only, and sent to this party alone.",
    ),
    message,
    h("button", { type: "submit" }, "Sign in"),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const key = input.value.trim();
    if (!key) {
      replace(message, problem({ detail: "enter the API key" }));
      input.focus();
      return;
    }
    session.set(key);
    signingIn = true;
    try {
      await get("/v1/identity");
    } catch (error) {
      session.clear();
      replace(message, problem(error.status === 401 ? { ...error, detail: "this party does not know that key" } : error));
      input.focus();
      return;
    } finally {
      signingIn = false;
    }
    input.value = "";
    if (!window.location.hash) {
      // The hashchange listener shows the home page: showing it here too would render it twice, and
      // the second render's "Loading…" would take the focus off the first one's heading.
      window.location.hash = app.home;
      return;
    }
    await show(app, true);
  });
  replace(
    main(),
    title("Sign in"),
    reason ? problem(reason) : null,
    h("p", {}, `The ${app.title} console shows this tenant's data through the party's public API.`),
    form,
  );
  input.focus();
}

function navigation(app, route) {
  const nav = document.getElementById("nav");
  nav.hidden = false;
  replace(
    nav,
    h(
      "ul",
      {},
      app.nav.map(([href, label]) =>
        h("li", {}, h("a", { href, "aria-current": route.startsWith(href.slice(1)) ? "page" : null }, label)),
      ),
    ),
  );
  const signOut = h("button", { type: "button", class: "quiet" }, "Sign out");
  signOut.addEventListener("click", () => {
    session.clear();
    window.location.hash = "";
    signIn(app);
  });
  replace(document.getElementById("session"), h("span", { class: "who" }, app.who ?? "signed in"), " ", signOut);
}

let current = null; // the page being shown: its AbortController stops its requests and polling

async function show(app, moveFocus) {
  if (!session.key) {
    signIn(app);
    return;
  }
  const [route, queryString] = (window.location.hash.replace(/^#/, "") || app.home.slice(1)).split("?");
  if (!app.who) {
    try {
      const identity = await get("/v1/identity");
      app.who = `party ${identity.party_id}`;
    } catch (error) {
      if (error instanceof ApiError && error.status === 401) return;
    }
  }
  navigation(app, route);
  current?.abort();
  const controller = new AbortController();
  current = controller;
  replace(main(), h("p", { class: "loading", "aria-busy": "true" }, "Loading…"));
  let found = null;
  for (const [pattern, page] of app.routes) {
    const match = pattern.exec(route);
    if (match) {
      found = [page, match.slice(1).map(decodeURIComponent)];
      break;
    }
  }
  let content;
  try {
    content = found
      ? await found[0]({ params: found[1], query: new URLSearchParams(queryString ?? ""), signal: controller.signal, announce })
      : [title("Not found"), h("p", {}, "No such page in this console. "), h("a", { href: app.home }, "Start again")];
  } catch (error) {
    if (error.name === "AbortError" || controller.signal.aborted) return;
    if (error instanceof ApiError && error.status === 401) return;
    content = [title("Something went wrong"), problem(error)];
  }
  if (controller.signal.aborted) return;
  replace(main(), content);
  const heading = main().querySelector("h1");
  document.title = `${heading ? heading.textContent : "labeldp"} — labeldp ${app.title}`;
  if (moveFocus && heading) heading.focus();
  announce(`${heading ? heading.textContent : "Page"} loaded`);
}

/**
 * Start a party's console. app: {title, home: "#/…", nav: [[href, label]], routes: [[RegExp, page]]};
 * a page is async ({params, query, signal, announce}) => Node | Node[] (query: the fragment's ?a=b).
 */
export function start(app) {
  whenUnauthenticated(() => {
    if (signingIn) return;
    session.clear();
    app.who = null;
    signIn(app, { detail: "the party refused the key (it may have been revoked): sign in again", status: 401, code: "unauthenticated" });
  });
  document.getElementById("skip-link").addEventListener("click", (event) => {
    event.preventDefault();
    main().focus();
  });
  window.addEventListener("hashchange", () => show(app, true));
  show(app, false);
}

/** Reload the current view (after an action changed what it shows). */
export function refresh() {
  window.dispatchEvent(new HashChangeEvent("hashchange"));
}
