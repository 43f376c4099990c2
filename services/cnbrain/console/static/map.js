// The map in SVG: provinces as labelled points at their capitals (no outlines are shipped),
// links as lines, sites as circles at their coordinates, coloured by load; and a request's
// path segments over them. Longitude and latitude are drawn on a plain equirectangular grid,
// longitude shrunk by cos(35°) so that China keeps its shape.

import { h, s } from "./dom.js";
import { pct } from "./format.js";

/** The load legend (docs/console.md): each bucket holds the shares below `below`. */
export const LOAD_BUCKETS = [
  { below: Number.MIN_VALUE, label: "idle", colour: "#a5d6a7" },
  { below: 0.25, label: "< 25 %", colour: "#2e7d32" },
  { below: 0.5, label: "25-50 %", colour: "#c0ca33" },
  { below: 0.75, label: "50-75 %", colour: "#ffb300" },
  { below: 0.9, label: "75-90 %", colour: "#f4511e" },
  { below: Infinity, label: "≥ 90 %", colour: "#b71c1c" },
];
export const UNKNOWN = { label: "not known here", colour: "#b0b8c1" };
export const SEGMENT_COLOURS = {
  source: "#1565c0",
  backbone: "#7b1fa2",
  destination: "#00838f",
  local: "#1565c0",
};
const REGION_COLOURS = ["#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#e15759", "#76b7b2"];
const SITE_RADIUS = { hub: 7, provincial: 4.5, edge: 3.5, idle: 3.5 };
const COS_35 = Math.cos((35 * Math.PI) / 180);

export const loadColour = (share) =>
  share === null || share === undefined
    ? UNKNOWN.colour
    : LOAD_BUCKETS.find((bucket) => share < bucket.below).colour;

const xy = (lon, lat) => [lon * COS_35, -lat];

/** The box (in map units) around `points` ([lon, lat] pairs), at least `span` degrees wide
 * and high, with a margin of a tenth around, widened or heightened to `aspect` (width over
 * height) so that it fills a frame of that shape. */
export function boxAround(points, span = 1, aspect = 1.6) {
  const xs = points.map(([lon, lat]) => xy(lon, lat)[0]);
  const ys = points.map(([lon, lat]) => xy(lon, lat)[1]);
  const grow = (lo, hi, least) => {
    const extra = Math.max(0, least - (hi - lo)) / 2;
    return [lo - extra, hi + extra];
  };
  let [x0, x1] = grow(Math.min(...xs), Math.max(...xs), span * COS_35);
  let [y0, y1] = grow(Math.min(...ys), Math.max(...ys), span);
  const margin = Math.max(x1 - x0, y1 - y0) / 10;
  [x0, x1] = grow(x0 - margin, x1 + margin, (y1 - y0 + 2 * margin) * aspect);
  [y0, y1] = grow(y0 - margin, y1 + margin, (x1 - x0) / aspect);
  return { x: x0, y: y0, w: x1 - x0, h: y1 - y0 };
}

/** Where each node and site of `view` lies: id -> [lon, lat]. */
export function places(view) {
  const at = new Map();
  for (const node of view.nodes) at.set(node.id, [node.lon, node.lat]);
  for (const site of view.sites) at.set(site.id, [site.lon, site.lat]);
  return at;
}

/** The node ids a path segment passes, in order. */
export const segmentNodes = (segment) =>
  segment.hops.length ? [segment.hops[0].from_node, ...segment.hops.map((hop) => hop.to_node)] : [];

/**
 * The map of `view` as an SVG element.
 * box: the part shown (default: every province); pixels: the width it is drawn at, which sizes
 * marks and labels; path: a decision's path, drawn over the map; onProvince: called with a
 * province's code when its label is clicked.
 */
export function drawMap(view, { box = null, pixels = 1300, path = null, onProvince = null } = {}) {
  const at = places(view);
  box ??= boxAround([...at.values()]);
  const unit = box.w / pixels;
  const zoomed = box.w < 6;
  const regionColour = new Map(
    view.regions.map((region, i) => [region.id, REGION_COLOURS[i % REGION_COLOURS.length]]),
  );
  return s(
    "svg",
    {
      class: "map",
      viewBox: `${box.x} ${box.y} ${box.w} ${box.h}`,
      role: "img",
      "aria-label": `map ${view.name}`,
    },
    s(
      "g",
      { class: "provinces" },
      view.provinces.map((p) => provinceMark(p, unit, regionColour)),
    ),
    s(
      "g",
      { class: "links" },
      view.links.map((link) => linkLine(link, at)),
    ),
    zoomed
      ? s(
          "g",
          { class: "nodes" },
          view.nodes.map((node) => nodeMark(node, unit)),
        )
      : null,
    s(
      "g",
      { class: "sites" },
      view.sites.map((site) => siteMark(site, unit)),
    ),
    path
      ? s(
          "g",
          { class: "path" },
          path.segments.map((segment) => segmentLine(segment, at)),
        )
      : null,
    s(
      "g",
      { class: "labels" },
      view.provinces.map((p) => provinceLabel(p, unit, onProvince)),
      zoomed ? [...view.nodes, ...view.sites].map((part) => partLabel(part, unit)) : null,
    ),
  );
}

function provinceMark(province, unit, regionColour) {
  const [x, y] = xy(province.lon, province.lat);
  const gateway = province.gateway_utilisation;
  return s(
    "circle",
    {
      class: `province${province.owned ? "" : " foreign"}`,
      cx: x,
      cy: y,
      r: 16 * unit,
      fill: regionColour.get(province.region),
      stroke: gateway === null || gateway === undefined ? null : loadColour(gateway),
      "data-province": province.code,
    },
    s("title", {}, provinceTitle(province)),
  );
}

function provinceTitle(province) {
  const gateway = province.gateway_utilisation;
  const load = gateway === null || gateway === undefined ? "" : `; gateway links ${pct(gateway)}`;
  const names = province.name_zh ? `${province.name}, ${province.name_zh}` : province.name;
  return `${names} (${province.code}), region ${province.region}${load}`;
}

function provinceLabel(province, unit, onProvince) {
  const [x, y] = xy(province.lon, province.lat);
  return s(
    "text",
    {
      class: `province-label${onProvince ? " clickable" : ""}`,
      x: x + 9 * unit,
      y: y - 9 * unit,
      "font-size": 12 * unit,
      onclick: onProvince ? () => onProvince(province.code) : null,
    },
    province.code,
    s("title", {}, provinceTitle(province)),
  );
}

function linkLine(link, at) {
  const a = at.get(link.a);
  const b = at.get(link.b);
  if (!a || !b) return null;
  const [x1, y1] = xy(...a);
  const [x2, y2] = xy(...b);
  const load = link.utilisation;
  return s(
    "line",
    {
      class: `link link-${link.layer}${link.owned ? "" : " foreign"}`,
      x1,
      y1,
      x2,
      y2,
      stroke: loadColour(load),
      "data-link": link.id,
      "data-utilisation": load,
    },
    s("title", {}, `${link.id} (${link.layer}, ${link.bandwidth_gbps} Gbps): ${loadText(load)}`),
  );
}

function siteMark(site, unit) {
  const [cx, cy] = xy(site.lon, site.lat);
  const load = site.utilisation;
  return s(
    "circle",
    {
      class: `site site-${site.kind}${site.owned ? "" : " foreign"}`,
      cx,
      cy,
      r: (SITE_RADIUS[site.kind] ?? 4) * unit,
      fill: loadColour(load),
      "data-site": site.id,
      "data-utilisation": load,
    },
    s("title", {}, `${site.id}, ${site.kind} site in ${site.province}: ${loadText(load)}`),
  );
}

function nodeMark(node, unit) {
  const [cx, cy] = xy(node.lon, node.lat);
  return s(
    "circle",
    {
      class: `node node-${node.role}`,
      cx,
      cy,
      r: (node.role === "access" ? 2 : 3) * unit,
      "data-node": node.id,
    },
    s("title", {}, `${node.id}, ${node.role} node in ${node.province}`),
  );
}

function partLabel(part, unit) {
  const [x, y] = xy(part.lon, part.lat);
  const kind = part.kind ? "site-label" : "node-label";
  return s(
    "text",
    { class: kind, x: x + 8 * unit, y: y + 4 * unit, "font-size": 10 * unit },
    part.id,
  );
}

function segmentLine(segment, at) {
  const points = segmentNodes(segment)
    .map((id) => at.get(id))
    .filter(Boolean)
    .map((place) => xy(...place).join(","))
    .join(" ");
  const common = { points, "data-kind": segment.kind, "data-owner": segment.owner };
  return s(
    "g",
    {},
    s("polyline", { ...common, class: "segment-halo" }),
    s(
      "polyline",
      {
        ...common,
        class: `segment segment-${segment.kind}`,
        stroke: SEGMENT_COLOURS[segment.kind],
      },
      s(
        "title",
        {},
        `${segment.kind} segment, owned by ${segment.owner}: ${segment.latency_ms} ms`,
      ),
    ),
  );
}

const loadText = (load) =>
  load === null || load === undefined ? "load not shown" : `${pct(load)} in use`;

/** The legend of a map of `view`, with the segment kinds when a path is drawn. */
export function legend(view, path = null) {
  const swatch = (colour, label, shape = "dot") =>
    h("span", { class: "swatch" }, h("i", { class: shape, "data-colour": colour }), label);
  const items = view.load_visible
    ? [...LOAD_BUCKETS.map((b) => swatch(b.colour, b.label)), swatch(UNKNOWN.colour, UNKNOWN.label)]
    : [swatch(UNKNOWN.colour, "load is shown to operators and admins")];
  const segments = path
    ? path.segments.map((segment) =>
        swatch(SEGMENT_COLOURS[segment.kind], `${segment.kind} segment`, "line"),
      )
    : [];
  const node = h(
    "div",
    { class: "legend" },
    h("span", { class: "legend-title" }, "Sites and links in use:"),
    items,
    segments,
  );
  // Colours are set through the CSS object model: the page's policy allows no inline style.
  for (const mark of node.querySelectorAll("[data-colour]"))
    mark.style.background = mark.dataset.colour;
  return node;
}
