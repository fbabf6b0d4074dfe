// A live line chart in plain SVG: the last `keep` samples of one series.

import {el} from './dom.js';

const SVG = 'http://www.w3.org/2000/svg';

export class LiveChart {
  constructor(title, format, keep = 120) {
    this.format = format;
    this.keep = keep;
    this.points = [];
    this.now = el('span', {class: 'now'}, '–');
    this.max = el('span', {class: 'muted'}, '');
    this.span = el('span', {class: 'muted'}, '');
    this.svg = document.createElementNS(SVG, 'svg');
    this.svg.setAttribute('viewBox', '0 0 300 100');
    this.svg.setAttribute('preserveAspectRatio', 'none');
    this.svg.setAttribute('role', 'img');
    this.svg.setAttribute('aria-label', title);
    this.line = document.createElementNS(SVG, 'polyline');
    this.svg.appendChild(this.line);
    this.node = el('figure', {class: 'chart', 'data-chart': title},
      el('div', {class: 'head'}, el('span', {}, title), this.now), this.svg,
      el('div', {class: 'head'}, this.span, this.max));
  }

  push(value) {
    this.points.push(Number(value) || 0);
    if (this.points.length > this.keep) this.points.shift();
    this.draw();
  }

  draw() {
    const pts = this.points;
    const top = Math.max(...pts, 0) || 1;
    // the samples so far span the width (up to `keep` of them: then the oldest scroll off)
    const step = 300 / Math.max(pts.length - 1, 1);
    this.line.setAttribute('points', pts.map((v, i) =>
      `${(i * step).toFixed(1)},${(98 - (v / top) * 94).toFixed(1)}`).join(' '));
    this.span.textContent = `last ${pts.length} samples`;
    this.node.dataset.samples = String(pts.length);
    this.node.dataset.last = String(pts[pts.length - 1]);
    this.now.textContent = this.format(pts[pts.length - 1]);
    this.max.textContent = `max ${this.format(top === 1 && !Math.max(...pts) ? 0 : top)}`;
  }
}
