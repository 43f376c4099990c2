// The requests the key may read, newest first; and one request: its decision explained and
// its path's segments drawn on the map.

import { get } from "./api.js";
import { h, table } from "./dom.js";
import { duration, fromNow, num, pct, when } from "./format.js";
import { boxAround, drawMap, legend, places, segmentNodes } from "./map.js";

const STATES = [
  "",
  "queued",
  "placed",
  "submitted",
  "running",
  "suspended",
  "completed",
  "failed",
  "cancelled",
  "rejected",
];

export async function render(info, requestId) {
  return requestId ? one(requestId) : list(info);
}

async function list(info) {
  const body = h("div");
  const filter = h(
    "select",
    { id: "state-filter", onchange: () => load(null, true).catch(shown) },
    STATES.map((state) => h("option", { value: state }, state || "any state")),
  );
  const more = h("button", { type: "button", hidden: true }, "More");
  let rows = [];
  async function load(cursor, fresh) {
    const page = await get("/v1/requests", { limit: 50, state: filter.value || null, cursor });
    rows = fresh ? page.items : [...rows, ...page.items];
    body.replaceChildren(
      rows.length
        ? table(
            ["Request", "Tenant", "State", "Site", "Submitted"],
            rows.map((r) => [
              h("a", { href: `#/requests/${r.id}`, "data-request": r.id }, r.id),
              r.tenant,
              h("span", { class: `state state-${r.state}` }, r.state),
              r.site ?? "–",
              when(r.created_at),
            ]),
            { class: "requests" },
          )
        : h("p", {}, "No request."),
    );
    more.hidden = page.next_cursor === null;
    more.onclick = () => load(page.next_cursor, false).catch(shown);
  }
  const shown = (error) => body.replaceChildren(h("p", { class: "error" }, error.message));
  await load(null, true);
  const whose = info.viewer.staff ? "Every tenant's" : `Tenant ${info.viewer.tenant}'s`;
  return h(
    "div",
    { class: "page" },
    h("h2", {}, `${whose} requests`),
    h("p", {}, h("label", {}, "State ", filter)),
    body,
    more,
  );
}

async function one(requestId) {
  const [view, map] = await Promise.all([
    get(`/v1/requests/${encodeURIComponent(requestId)}`),
    get("api/map"),
  ]);
  const decision = view.decision;
  return h(
    "div",
    { class: "page request", "data-request": view.id },
    h(
      "h2",
      {},
      `Request ${view.id} `,
      h("span", { class: `state state-${view.state}` }, view.state),
    ),
    table(
      ["Tenant", "Site", "Submitted", "Updated", "Reason"],
      [
        [
          view.tenant,
          view.site ?? "–",
          when(view.created_at),
          when(view.updated_at),
          view.reason ?? "–",
        ],
      ],
      { class: "facts" },
    ),
    view.queue ? queued(view.queue) : null,
    decision?.path ? pathSection(decision.path, map) : null,
    decision ? decisionSection(decision) : h("p", {}, "Not decided yet."),
  );
}

function queued(queue) {
  const at = queue.estimated_start;
  const site = queue.site ?? "a site to be chosen";
  const start = at
    ? `planned to start in ${duration(fromNow(at))} (${when(at)}) on ${site}`
    : "no start within its max wait yet";
  return h(
    "section",
    { class: "queued" },
    h("h3", {}, `Waiting: place ${queue.position} in the queue`),
    h("p", {}, `${start}. ${queue.reason}`),
    queue.blockers.length
      ? h(
          "ul",
          {},
          queue.blockers.map((b) => h("li", {}, b.text)),
        )
      : null,
  );
}

function pathSection(path, map) {
  const at = places(map);
  const everything = path.segments
    .flatMap(segmentNodes)
    .map((id) => at.get(id))
    .filter(Boolean);
  return h(
    "section",
    { class: "path" },
    h(
      "h3",
      {},
      `Path: ${path.segments.length} segments, ${num(path.latency_ms, 3)} ms, ${num(path.bandwidth_gbps)} Gbps reserved`,
    ),
    h("div", { class: "map-frame" }, drawMap(map, { box: boxAround(everything, 4), path })),
    legend(map, path),
    h(
      "div",
      { class: "segment-maps" },
      path.segments.map((segment) => {
        const nodes = segmentNodes(segment)
          .map((id) => at.get(id))
          .filter(Boolean);
        return h(
          "figure",
          { class: "segment-map", "data-kind": segment.kind },
          drawMap(map, {
            box: boxAround(nodes, 0.25, 1.25),
            pixels: 340,
            path: { segments: [segment] },
          }),
          h(
            "figcaption",
            {},
            `${segment.kind}, by ${segment.owner}: ${num(segment.latency_ms, 3)} ms`,
          ),
        );
      }),
    ),
    table(
      ["Segment", "Owner", "Latency", "Hops"],
      path.segments.map((segment) => [
        segment.kind,
        segment.owner,
        `${num(segment.latency_ms, 3)} ms`,
        segmentNodes(segment).join(" → "),
      ]),
      { class: "segments" },
    ),
  );
}

function decisionSection(decision) {
  const outcome = decision.outcome;
  const why = decision.explanation;
  return h(
    "section",
    { class: "decision" },
    h("h3", {}, "Decision"),
    h(
      "p",
      { class: "verdict" },
      decision.status === "placed"
        ? `Placed on ${decision.site} (${decision.site_kind} site in ${decision.province}) by the ${decision.policy} policy.`
        : `${decision.status} by the ${decision.policy} policy: ${decision.reason ?? ""}`,
    ),
    outcome
      ? table(
          [
            "Cost",
            "Energy",
            "Carbon",
            "Latency",
            "Site in use after",
            "Busiest link after",
            "Objective",
          ],
          [
            [
              `${num(outcome.cost_cny, 2)} CNY`,
              `${num(outcome.energy_kwh)} kWh`,
              `${num(outcome.carbon_kg)} kg CO₂`,
              `${num(outcome.latency_ms, 3)} ms`,
              pct(outcome.site_utilisation),
              pct(outcome.max_link_utilisation),
              num(outcome.objective, 4),
            ],
          ],
          { class: "outcome" },
        )
      : null,
    outcome
      ? table(
          ["Term", "Value", "Weight", "Weighted"],
          Object.entries(outcome.terms).map(([term, value]) => {
            const weight = outcome.weights[term] ?? 0;
            return [term, num(value, 4), num(weight, 3), num(value * weight, 4)];
          }),
          { class: "terms" },
        )
      : null,
    why ? explanation(why, decision.site) : null,
  );
}

function explanation(why, chosen) {
  return h(
    "div",
    { class: "explanation" },
    h("h3", {}, "Why"),
    h(
      "p",
      {},
      `${why.sites_feasible} of ${why.sites_total} sites were feasible. Local first: ${why.local_first}.`,
    ),
    why.rejections.length
      ? table(
          ["Filter", "Sites left out", "Why", "Detail"],
          why.rejections.map((r) => [r.plugin, String(r.sites), r.reason, r.message]),
          { class: "rejections" },
        )
      : null,
    why.candidates.length
      ? table(
          ["Candidate", "Score", "Objective", ""],
          why.candidates.map((c) => [
            c.site,
            num(c.score, 4),
            c.objective === null ? "–" : num(c.objective, 4),
            c.site === chosen ? "chosen" : "",
          ]),
          { class: "candidates" },
        )
      : null,
    h(
      "p",
      { class: "note" },
      `Solver: ${why.solver_status}${why.optimal ? " (optimal)" : ""}. Times: `,
      Object.entries(why.timings_ms)
        .map(([step, ms]) => `${step} ${num(ms, 2)} ms`)
        .join(", "),
      ".",
    ),
    why.notes.length
      ? h(
          "ul",
          { class: "notes" },
          why.notes.map((note) => h("li", {}, note)),
        )
      : null,
  );
}
