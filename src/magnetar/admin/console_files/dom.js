// DOM helpers: every name, property and payload goes in as text (textContent or text
// nodes), never as markup.

/** An element: el('a', {href: '/x', class: 'y'}, 'text', child, ...). */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'onclick' || key === 'onsubmit' || key === 'oninput') {
      node.addEventListener(key.slice(2), value);
    } else {
      node.setAttribute(key, value === true ? '' : String(value));
    }
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(node, child);
    else if (child instanceof Node) node.appendChild(child);
    else node.appendChild(document.createTextNode(String(child)));
  }
}

/** Replace a node's children. */
export function fill(node, ...children) {
  node.replaceChildren();
  append(node, children);
  return node;
}

/** A table: columns [{label, num}], rows of cells (text or nodes). */
export function table(columns, rows, empty = 'none') {
  if (!rows.length) return el('p', {class: 'muted'}, empty);
  return el('div', {class: 'table-wrap'}, el('table', {},
    el('thead', {}, el('tr', {}, columns.map(c => el('th', {scope: 'col'}, c.label)))),
    el('tbody', {}, rows.map(r => el('tr', {}, r.map((cell, i) =>
      el('td', {class: columns[i] && columns[i].num ? 'num' : null}, cell)))))));
}

export function card(label, value, id) {
  return el('div', {class: 'card'}, el('div', {class: 'label'}, label),
    el('div', {class: 'value', id}, value));
}

const UNITS = ['B', 'KB', 'MB', 'GB', 'TB'];
export function bytes(n) {
  let v = Number(n) || 0, i = 0;
  while (v >= 1024 && i < UNITS.length - 1) { v /= 1024; i++; }
  return `${v.toFixed(i ? 1 : 0)} ${UNITS[i]}`;
}

export function num(n, digits = 0) {
  const v = Number(n) || 0;
  return v.toLocaleString('en-US', {maximumFractionDigits: digits, minimumFractionDigits: 0});
}

export function rate(n) { return `${num(n, 1)}/s`; }

export function duration(seconds) {
  let s = Math.floor(Number(seconds) || 0);
  const d = Math.floor(s / 86400); s %= 86400;
  const h = Math.floor(s / 3600); s %= 3600;
  const m = Math.floor(s / 60); s %= 60;
  return d ? `${d}d ${h}h` : h ? `${h}h ${m}m` : m ? `${m}m ${s}s` : `${s}s`;
}

/** A path segment for an address. */
export const seg = encodeURIComponent;
