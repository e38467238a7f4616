// The /memories page, part 1 of 3: the one rendering helper and the API client. Every value
// from the store reaches the page through el() and text nodes (textContent), never through
// HTML parsing: stored ids, keys and turns come from end users and are data, whatever markup
// they hold. Loaded first; memories-views.js and memories.js use these names.
"use strict";

const API = "/api/v1/";
const $ = id => document.getElementById(id);

// ------------------------------------------------------------------ rendering: the one helper

// el("td", {className: "x", title: "full"}, child, ...): children are nodes or plain values,
// and plain values become text nodes. Attributes are set as properties or via setAttribute
// for names the page chooses; no event-handler attribute is ever set from data.
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "className" || name === "title" || name === "textContent" || name === "value"
        || name === "type" || name === "tabIndex" || name === "hidden" || name === "checked"
        || name === "disabled" || name === "min" || name === "max" || name === "step") {
      node[name] = value;
    } else if (name.startsWith("data-") || name.startsWith("aria-") || name === "role"
               || name === "scope" || name === "colSpan" || name === "id") {
      node.setAttribute(name, String(value));
    } else if (name === "href") {
      node.setAttribute("href", "#" + String(value)); // only ever a fragment of this page
    } else {
      throw new Error("el: attribute not allowed: " + name);
    }
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null) continue;
    node.append(child instanceof Node ? child : document.createTextNode(show(child)));
  }
  return node;
}

// A value as text: strings as they are, anything else as JSON (never "[object Object]").
function show(value) {
  if (value === undefined || value === null) return "";
  if (typeof value === "string") return value;
  if (typeof value === "number" || typeof value === "boolean") return String(value);
  return JSON.stringify(value);
}

function clear(node) {
  node.replaceChildren();
  return node;
}

// A long id shortened, the full id in its title.
function shortId(id) {
  const text = show(id);
  return el("span", { className: "id", title: text }, text.length > 14 ? text.slice(0, 10) + "…" : text);
}

const RELATIVE = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });
const STEPS = [["year", 31536000], ["month", 2592000], ["day", 86400], ["hour", 3600], ["minute", 60], ["second", 1]];

function when(iso) {
  if (!iso) return "";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return show(iso);
  const seconds = (date.getTime() - Date.now()) / 1000;
  const [unit, size] = STEPS.find(([, s]) => Math.abs(seconds) >= s) || ["second", 1];
  return el("time", { title: date.toLocaleString(), "data-iso": iso }, RELATIVE.format(Math.round(seconds / size), unit));
}

function pill(text, cls) {
  return el("span", { className: "pill " + cls }, text);
}

function meter(used) {
  const value = Math.max(0, Math.min(1, Number(used) || 0));
  return el("meter", { min: 0, max: 1, value, "aria-label": "budget used", title: (value * 100).toFixed(1) + "%" });
}

function percent(x) {
  return Math.round((Number(x) || 0) * 100) + "%";
}

// {"telegram": ["1001"]} as "telegram:1001".
function channels(identifiers) {
  return Object.entries(identifiers || {})
    .flatMap(([channel, ids]) => (Array.isArray(ids) ? ids : [ids]).map(id => channel + ":" + show(id)))
    .join(", ");
}

function userName(name, id) {
  if (!id) return "";
  return name ? el("span", { title: show(id) }, name) : shortId(id);
}

// ------------------------------------------------------------------ talking to the API

async function api(path, options) {
  const response = await fetch(API + path, { credentials: "same-origin", ...options });
  const body = await response.json().catch(() => ({ error: response.statusText }));
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

function sendJSON(method, path, data) {
  return api(path, { method, headers: { "Content-Type": "application/json" }, body: JSON.stringify(data) });
}

function status(message, isError) {
  $("status").textContent = message;
  $("status").className = isError ? "error" : "";
}
