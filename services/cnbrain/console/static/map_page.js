// The map page: every site at its coordinates coloured by load, links by load; a province's
// close-up at #/map/<code>; the busiest sites and links; on the national brain, its regions.

import { get } from "./api.js";
import { h, table } from "./dom.js";
import { duration, num, pct } from "./format.js";
import { boxAround, drawMap, legend, loadColour } from "./map.js";

export async function render(info, province) {
  const view = await get("api/map");
  const focus = province ? view.provinces.find((p) => p.code === province) : null;
  const box = focus ? provinceBox(view, focus.code) : null;
  const scope = info.region
    ? `region ${info.region}`
    : info.brain === "national"
      ? "the whole country"
      : "the whole map";
  return h(
    "div",
    { class: "page" },
    h("h2", {}, focus ? `${focus.name} (${focus.code})` : `Map ${view.name}: ${scope}`),
    h("p", { class: "note" }, `Load: ${view.load_note}.`),
    focus
      ? h("p", {}, h("a", { href: "#/map" }, "← the whole map"))
      : h("p", { class: "hint" }, "Click a province's code to see it close up."),
    h(
      "div",
      { class: "map-frame" },
      drawMap(view, { box, onProvince: (code) => (location.hash = `#/map/${code}`) }),
    ),
    legend(view),
    view.load_visible ? busiest(view, focus?.code) : null,
    info.brain === "national" ? regions(view) : null,
    h("p", { class: "attribution" }, view.attribution),
  );
}

function provinceBox(view, code) {
  const inside = [...view.nodes, ...view.sites].filter((part) => part.province === code);
  return boxAround(
    inside.map((part) => [part.lon, part.lat]),
    0.6,
  );
}

const bar = (share) => h("span", { class: "bar" }, h("i", { "data-share": share }), pct(share));

function busiest(view, province) {
  const provinceOf = new Map(
    [...view.nodes, ...view.sites].map((part) => [part.id, part.province]),
  );
  const touches = (link) =>
    !province || [link.a, link.b].some((id) => provinceOf.get(id) === province);
  const sites = view.sites
    .filter((site) => site.utilisation > 0 && (!province || site.province === province))
    .sort((a, b) => b.utilisation - a.utilisation || a.id.localeCompare(b.id))
    .slice(0, 12);
  const links = view.links
    .filter((link) => link.utilisation > 0 && touches(link))
    .sort((a, b) => b.utilisation - a.utilisation || a.id.localeCompare(b.id))
    .slice(0, 8);
  const holdsSites = view.sites.some((site) => site.utilisation !== null);
  const node = h(
    "div",
    { class: "columns" },
    holdsSites
      ? h(
          "section",
          {},
          h("h3", {}, "Busiest sites"),
          sites.length
            ? table(
                ["Site", "Kind", "Province", "In use"],
                sites.map((site) => [site.id, site.kind, site.province, bar(site.utilisation)]),
                { class: "busiest-sites" },
              )
            : h("p", {}, "No site of this brain's is in use."),
        )
      : null,
    h(
      "section",
      {},
      h("h3", {}, "Busiest links"),
      links.length
        ? table(
            ["Link", "Layer", "Gbps", "Reserved"],
            links.map((link) => [
              link.id,
              link.layer,
              num(link.bandwidth_gbps, 0),
              bar(link.utilisation),
            ]),
            { class: "busiest-links" },
          )
        : h("p", {}, "No bandwidth is reserved on this brain's links."),
    ),
  );
  for (const fill of node.querySelectorAll("[data-share]")) {
    const share = Number(fill.dataset.share);
    fill.style.width = `${Math.min(share, 1) * 100}%`;
    fill.style.background = loadColour(share);
  }
  return node;
}

function regions(view) {
  return h(
    "section",
    {},
    h("h3", {}, "Regions"),
    table(
      ["Region", "Brain", "Latest summary", "Accelerators in use"],
      view.regions.map((region) => [
        `${region.id} ${region.name}`,
        region.registered ? "registered" : "not registered",
        region.summary_age_s === null ? "–" : `${duration(region.summary_age_s)} ago`,
        (region.accelerators ?? [])
          .map((a) => `${a.model} ${num(a.total - a.free, 0)}/${num(a.total, 0)}`)
          .join(", ") || "–",
      ]),
      { class: "regions" },
    ),
  );
}
