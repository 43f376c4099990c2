// The region's admission queue, by priority class (highest first), each request with how
// long it has waited and when it is planned to start.

import { get } from "./api.js";
import { h, table } from "./dom.js";
import { duration, fromNow, when } from "./format.js";

const PAGE = 500;

export async function render(info) {
  const [classes, queue] = await Promise.all([
    get("/v1/priority-classes"),
    get("/v1/queue", { limit: PAGE }),
  ]);
  const fallback = classes.find((c) => c.default)?.name ?? "default";
  const byClass = new Map(classes.map((c) => [c.name, []]));
  for (const entry of queue.items) {
    const name = entry.priority_class ?? fallback;
    if (!byClass.has(name)) byClass.set(name, []);
    byClass.get(name).push(entry);
  }
  const value = (name) => classes.find((c) => c.name === name)?.value ?? -Infinity;
  const order = [...byClass.keys()].sort((a, b) => value(b) - value(a));
  const whose = info.viewer.staff ? "every tenant's" : `tenant ${info.viewer.tenant}'s`;
  return h(
    "div",
    { class: "page" },
    h("h2", {}, `Admission queue${info.region ? ` of region ${info.region}` : ""}`),
    h(
      "p",
      { class: "note" },
      `${queue.items.length} waiting (${whose} requests), in admission order within each class.`,
      queue.next_after === null ? "" : ` Only the first ${PAGE} are shown.`,
    ),
    order.map((name) => classSection(name, byClass.get(name), classes)),
  );
}

function classSection(name, entries, classes) {
  const known = classes.find((c) => c.name === name);
  const about = known
    ? [
        `value ${known.value}`,
        known.default ? "the default class" : null,
        known.preemptible ? "preemptible" : null,
      ]
        .filter(Boolean)
        .join(", ")
    : "not a class this brain knows";
  return h(
    "section",
    { class: "queue-class", "data-class": name },
    h("h3", {}, `${name} `, h("small", {}, `(${about}): ${entries.length} waiting`)),
    entries.length
      ? table(
          ["#", "Request", "Tenant", "Waiting", "Planned start", "Reason"],
          entries.map((entry) => [
            String(entry.position),
            h("a", { href: `#/requests/${entry.id}`, "data-request": entry.id }, entry.id),
            entry.tenant,
            h("span", { class: "wait" }, duration(-fromNow(entry.submitted_at))),
            plannedStart(entry),
            entry.reason,
          ]),
          { class: "queue" },
        )
      : null,
  );
}

function plannedStart(entry) {
  if (!entry.estimated_start) return "none within its max wait yet";
  const at = when(entry.estimated_start);
  const site = entry.site ? ` on ${entry.site}` : "";
  const left = fromNow(entry.estimated_start);
  return left > 0 ? `in ${duration(left)} (${at})${site}` : `${at}${site}`;
}
