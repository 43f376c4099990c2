// Building elements without parsing HTML: every text given is set as text, never as markup.

const SVG_NS = "http://www.w3.org/2000/svg";

/** An HTML element with attributes (`onclick` and the like add listeners) and children. */
export function h(tag, attrs = {}, ...children) {
  return fill(document.createElement(tag), attrs, children);
}

/** An SVG element, as `h`. */
export function s(tag, attrs = {}, ...children) {
  return fill(document.createElementNS(SVG_NS, tag), attrs, children);
}

/** A table: `head` the column titles, `rows` arrays of cells (text or nodes). */
export function table(head, rows, attrs = {}) {
  return h(
    "table",
    attrs,
    h(
      "thead",
      {},
      h(
        "tr",
        {},
        head.map((title) => h("th", {}, title)),
      ),
    ),
    h(
      "tbody",
      {},
      rows.map((cells) =>
        h(
          "tr",
          {},
          cells.map((cell) => h("td", {}, cell)),
        ),
      ),
    ),
  );
}

function fill(element, attrs, children) {
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else element.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}
