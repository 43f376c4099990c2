// The console's shell: the API key (from the form, or once from the URL as #key=...), the
// menu of the pages this brain has, and routing by the URL's fragment (#/map, #/queue,
// #/requests, #/requests/<id>, #/tenants).

import { ApiError, forgetKey, get, key, setKey } from "./api.js";
import { h } from "./dom.js";
import * as mapPage from "./map_page.js";
import * as queuePage from "./queue_page.js";
import * as requestsPage from "./requests_page.js";
import * as tenantsPage from "./tenants_page.js";

const PAGES = {
  map: { title: "Map", render: mapPage.render },
  queue: { title: "Queue", render: queuePage.render },
  requests: { title: "Requests", render: requestsPage.render },
  tenants: { title: "Tenants", render: tenantsPage.render },
};

const view = document.getElementById("view");
let info = null;
let shown = 0; // the latest render asked for; an older one that ends later is dropped

function takeKeyFromFragment() {
  const match = location.hash.match(/^#key=([^&]+)/);
  if (!match) return;
  setKey(decodeURIComponent(match[1]));
  history.replaceState(null, "", `${location.pathname}#/map`);
}

function askKey(problem = "") {
  info = null;
  document.getElementById("who").textContent = "";
  document.getElementById("nav").replaceChildren();
  const input = h("input", {
    id: "key",
    type: "password",
    autocomplete: "off",
    required: true,
    size: 50,
  });
  const form = h(
    "form",
    { id: "key-form" },
    h("label", {}, "API key ", input),
    h("button", { type: "submit" }, "Open"),
    h("p", { class: "note" }, "Kept in this tab only (sessionStorage), sent to this brain alone."),
    problem ? h("p", { class: "error", id: "key-error" }, problem) : null,
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    setKey(input.value.trim());
    start();
  });
  view.replaceChildren(form);
  view.dataset.page = "key";
  input.focus();
}

async function start() {
  takeKeyFromFragment();
  if (!key()) return askKey();
  try {
    info = await get("api/info");
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) {
      forgetKey();
      return askKey("That key is not valid on this brain.");
    }
    return failed(error);
  }
  const viewer = info.viewer;
  document.getElementById("brain").textContent =
    `${info.brain} brain${info.region ? ` ${info.region}` : ""} · map ${info.map}`;
  document.getElementById("who").textContent =
    `${viewer.role}${viewer.tenant ? ` of ${viewer.tenant}` : ""} (${viewer.user})`;
  document
    .getElementById("nav")
    .replaceChildren(
      ...info.pages.map((name) =>
        h("a", { href: `#/${name}`, "data-nav": name }, PAGES[name].title),
      ),
      h("button", { type: "button", onclick: () => route() }, "Refresh"),
      h("button", { type: "button", onclick: () => (forgetKey(), askKey()) }, "Forget key"),
    );
  route();
}

async function route() {
  if (!info) return;
  const [name, argument] = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  if (!info.pages.includes(name)) {
    location.hash = `#/${info.pages[0]}`;
    return;
  }
  const ticket = ++shown;
  for (const link of document.querySelectorAll("[data-nav]")) {
    link.classList.toggle("current", link.dataset.nav === name);
  }
  delete view.dataset.page;
  view.replaceChildren(h("p", { class: "loading" }, "Loading…"));
  try {
    const page = await PAGES[name].render(info, argument || null);
    if (ticket !== shown) return;
    view.replaceChildren(page);
    view.dataset.page = argument ? `${name}/${argument}` : name;
  } catch (error) {
    if (ticket === shown) failed(error);
  }
}

function failed(error) {
  if (error instanceof ApiError && error.status === 401) {
    forgetKey();
    return askKey("The key is no longer valid.");
  }
  const text =
    error instanceof ApiError
      ? `The brain answered ${error.status}: ${error.detail}`
      : String(error);
  view.replaceChildren(h("p", { class: "error", role: "alert" }, text));
  view.dataset.page = "error";
}

window.addEventListener("hashchange", () => {
  if (location.hash.startsWith("#key=")) start();
  else route();
});
start();
