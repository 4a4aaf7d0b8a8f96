// Formatting helpers. The server sends 64-bit integers as strings and
// absent telemetry as -1.

export function num(v) {
  if (v === undefined || v === null || v === '') return 0;
  return typeof v === 'number' ? v : Number(v);
}

// A Date from "...UnixNanos" (a string); null for 0 or missing.
export function dateFromNanos(v) {
  const n = num(v);
  return n > 0 ? new Date(n / 1e6) : null;
}

export function msFromNanos(v) {
  return num(v) / 1e6;
}

const pad = (n) => String(n).padStart(2, '0');

export function clock(date) {
  if (!date) return '–';
  return `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`;
}

// "12:03:04" today, "03-14 12:03" on another day.
export function when(date) {
  if (!date) return '–';
  const now = new Date();
  if (date.toDateString() === now.toDateString()) return clock(date);
  return `${pad(date.getMonth() + 1)}-${pad(date.getDate())} ${pad(date.getHours())}:${pad(date.getMinutes())}`;
}

// "45s", "12m", "3h 5m", "2d 4h".
export function duration(ms) {
  if (!(ms >= 0)) return '–';
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m`;
  const h = Math.floor(m / 60);
  if (h < 24) return `${h}h ${m % 60}m`;
  return `${Math.floor(h / 24)}d ${h % 24}h`;
}

export function bytes(v) {
  const n = num(v);
  if (n < 0) return 'n/a';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let x = n;
  let i = 0;
  while (x >= 1024 && i < units.length - 1) {
    x /= 1024;
    i++;
  }
  return `${x >= 100 || i === 0 ? x.toFixed(0) : x.toFixed(1)} ${units[i]}`;
}

export function fixed(v, digits = 0, unit = '') {
  const n = num(v);
  if (n < 0 || !Number.isFinite(n)) return 'n/a';
  return `${n.toFixed(digits)}${unit}`;
}

// Thousandths of a GPU as GPUs: 1500 -> "1.5", 2000 -> "2".
export function milliGpus(v) {
  const n = num(v) / 1000;
  return Number.isInteger(n) ? String(n) : n.toFixed(n < 10 ? 2 : 1).replace(/0+$/, '');
}

// JOB_STATE_PENDING -> Pending; NODE_STATE_NOT_READY -> Not ready.
export function enumLabel(v, prefix) {
  if (!v) return 'Unknown';
  const s = String(v).startsWith(prefix) ? String(v).slice(prefix.length) : String(v);
  const words = s.toLowerCase().replace(/_/g, ' ');
  return words.charAt(0).toUpperCase() + words.slice(1);
}

// Builds an element: el('td', {class: 'num', 'data-testid': 'x'}, 'text', child).
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') node.className = v;
    else if (k === 'text') node.textContent = v;
    else node.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children) {
    if (c === undefined || c === null) continue;
    node.append(c instanceof Node ? c : String(c));
  }
  return node;
}

// Sets textContent / an attribute only when it changes (DOM writes are the
// expensive part of a refresh).
export function setText(node, text) {
  if (node.textContent !== text) node.textContent = text;
}

export function setAttr(node, name, value) {
  if (node.getAttribute(name) !== value) node.setAttribute(name, value);
}
