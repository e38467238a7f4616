// The /memories page. Every value from the store reaches the page through el() and text
// nodes (textContent), never through HTML parsing: stored ids, keys and turns come from end
// users and are data, whatever markup they hold.
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

// ------------------------------------------------------------------ the tabs

// Each column: [label, sort field (server-side) or null, cell(row), export(row)].
const raw = field => row => row[field];
const TABS = {
  facts: {
    list: "facts/", del: "facts/batch-delete/", edit: "fact", sort: "updated_at",
    filters: [["scope", "scope", ["", "global", "session", "user", "agent"]], ["scope_id", "scope id"], ["type", "type"], ["since", "since", "date"], ["until", "until", "date"]],
    cols: [
      ["key", "key", r => r.key, raw("key")],
      ["value", null, r => show(r.value), raw("value")],
      ["scope", "scope", r => [r.scope, r.scope_id ? [": ", userName(r.scope_name, r.scope_id)] : ""], r => r.scope + (r.scope_id ? ":" + r.scope_id : "")],
      ["type", "fact_type", r => r.fact_type, raw("fact_type")],
      ["confidence", "confidence", r => Number(r.confidence).toFixed(2), raw("confidence")],
      ["updated", "updated_at", r => when(r.updated_at), raw("updated_at")],
    ],
  },
  episodes: {
    list: "episodes/", del: "episodes/batch-delete/", sort: "ended_at",
    filters: [["agent_id", "agent"], ["user_id", "user id"], ["success", "outcome", ["", "true", "false"]], ["since", "since", "date"], ["until", "until", "date"]],
    cols: [
      ["agent", "agent_id", r => r.agent_id, raw("agent_id")],
      ["user", "user_id", r => userName(r.user_name, r.user_id), raw("user_id")],
      ["trigger", "trigger", r => r.trigger, raw("trigger")],
      ["input", null, r => show(r.input), raw("input")],
      ["output", null, r => show(r.output), raw("output")],
      ["outcome", "success", r => pill(r.success ? "success" : "failure", r.success ? "ok" : "fail"), raw("success")],
      ["ended", "ended_at", r => when(r.ended_at), raw("ended_at")],
    ],
  },
  conversations: {
    list: "conversations/", del: "conversations/batch-delete/", sort: "last_activity",
    filters: [["since", "since", "date"], ["until", "until", "date"]],
    cols: [
      ["conversation", "id", r => shortId(r.id), raw("id")],
      ["turns", "turns", r => r.turns, raw("turns")],
      ["history tokens", "history_tokens", r => r.history_tokens, raw("history_tokens")],
      ["budget", "budget_used", r => [meter(r.budget_used), " ", percent(r.budget_used), " of ", r.budget], raw("budget")],
      ["last activity", "last_activity", r => when(r.last_activity), raw("last_activity")],
    ],
  },
  procedures: {
    list: "procedures/", del: "procedures/batch-delete/", sort: "name",
    filters: [["type", "type"], ["since", "since", "date"], ["until", "until", "date"]],
    cols: [
      ["name", "name", r => r.name, raw("name")],
      ["type", "procedure_type", r => r.procedure_type, raw("procedure_type")],
      ["when", null, r => show(r.trigger_conditions), raw("trigger_conditions")],
      ["uses", "times_used", r => r.times_used, raw("times_used")],
      ["success rate", "success_rate", r => percent(r.success_rate), raw("success_rate")],
      ["content", null, r => show(r.content), raw("content")],
    ],
  },
  users: {
    list: "memory-users/", del: "memory-users/batch-delete/", edit: "user", sort: "created_at",
    filters: [["since", "since", "date"], ["until", "until", "date"]],
    cols: [
      ["name", "display_name", r => r.display_name, raw("display_name")],
      ["id", "id", r => shortId(r.id), raw("id")],
      ["channels", null, r => channels(r.identifiers), r => channels(r.identifiers)],
      ["messages", "message_count", r => r.message_count, raw("message_count")],
      ["conversations", "conversation_count", r => r.conversation_count, raw("conversation_count")],
      ["merged into", null, r => r.merged_into_id ? shortId(r.merged_into_id) : "", raw("merged_into_id")],
      ["first seen", "created_at", r => when(r.created_at), raw("created_at")],
    ],
  },
  working: {
    edit: "working", filters: [],
    cols: [
      ["key", "key", r => r.key, raw("key")],
      ["value", "value", r => show(r.value), raw("value")],
      ["importance", "importance", r => Number(r.importance).toFixed(2), raw("importance")],
      ["expires", "expires_at", r => when(r.expires_at), raw("expires_at")],
    ],
  },
  search: {
    filters: [],
    cols: [
      ["kind", null, r => r.type, raw("type")],
      ["record", null, r => el("a", { href: KIND_OF[r.type] + "/" + encodeURIComponent(r.id), title: show(r.id) }, summary(r)), raw("id")],
    ],
  },
};
const KIND_OF = { fact: "facts", episode: "episodes", procedure: "procedures" };

function summary(hit) {
  const r = hit.record || {};
  if (hit.type === "fact") return show(r.key) + " = " + show(r.value) + " (" + show(r.scope) + (r.scope_id ? ":" + show(r.scope_id) : "") + ")";
  if (hit.type === "episode") return show(r.agent_id) + ": " + show(r.input);
  return show(r.name);
}

const state = { tab: "facts", items: [], total: 0, offset: 0, sort: null, descending: false, filters: {}, query: "" };

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

// ------------------------------------------------------------------ listing

function listParams() {
  const params = new URLSearchParams({ limit: $("per-page").value, offset: String(state.offset) });
  if ($("search").value.trim()) params.set("q", $("search").value.trim());
  if (state.sort) params.set("sort", state.sort);
  if (state.descending) params.set("descending", "true");
  for (const [name, value] of Object.entries(state.filters)) if (value) params.set(name, value);
  return params;
}

// Only the newest load renders: an answer to an older one (another tab, the previous filter)
// that arrives late is dropped.
let ticket = 0;

async function load() {
  const spec = TABS[state.tab];
  const mine = ++ticket;
  $("chat").hidden = true;
  try {
    let items, total;
    if (state.tab === "working") {
      [items, total] = await loadWorking();
    } else if (state.tab === "search") {
      items = state.query ? (await api("search/?" + new URLSearchParams({ q: state.query, limit: "100" }))).items : [];
      total = items.length;
    } else {
      const page = await api(spec.list + "?" + listParams());
      [items, total] = [page.items, page.total];
    }
    if (mine !== ticket) return;
    [state.items, state.total] = [items, total];
    render();
    status("");
  } catch (error) {
    if (mine !== ticket) return;
    [state.items, state.total] = [[], 0];
    render();
    status(error.message, true);
  }
}

async function loadWorking() {
  const scopes = (await api("working/")).items;
  const select = $("scope");
  const keep = select.value;
  select.replaceChildren(...scopes.map(s => el("option", { value: s.scope }, s.scope + " (" + s.entries + ")")));
  if (scopes.some(s => s.scope === keep)) select.value = keep;
  let items = select.value ? (await api("working/" + encodeURIComponent(select.value) + "/")).items : [];
  const q = $("search").value.trim().toLowerCase();
  if (q) items = items.filter(i => JSON.stringify(i).toLowerCase().includes(q));
  if (state.sort) {
    const sign = state.descending ? -1 : 1;
    items.sort((a, b) => (show(a[state.sort]) > show(b[state.sort]) ? sign : show(a[state.sort]) < show(b[state.sort]) ? -sign : 0));
  }
  return [items.slice(state.offset, state.offset + Number($("per-page").value)), items.length];
}

function header(spec) {
  const cells = spec.cols.map(([label, field]) => {
    if (!field) return el("th", { scope: "col" }, label);
    const active = state.sort === field;
    const arrow = active ? (state.descending ? " ▼" : " ▲") : "";
    const button = el("button", { type: "button", className: "sort", "data-sort": field }, label + arrow);
    return el("th", { scope: "col", "aria-sort": active ? (state.descending ? "descending" : "ascending") : "none" }, button);
  });
  const selectable = spec.del || state.tab === "working";
  return el("tr", {}, selectable ? el("th", {}, "") : null, ...cells, el("th", {}, ""));
}

function row(spec, item) {
  const selectable = spec.del || state.tab === "working";
  const tr = el("tr", { "data-id": item.id, tabIndex: 0, className: "record" },
    selectable ? el("td", {}, el("input", { type: "checkbox", className: "select", "data-id": item.id, "aria-label": "select " + show(item.id) })) : null,
    ...spec.cols.map(([label, , cell]) => el("td", { className: "value", "data-label": label }, cell(item))),
    el("td", { className: "row-actions" },
      state.tab === "search" ? null : el("a", { href: state.tab + "/" + encodeURIComponent(item.id), className: "link", title: "link to this record", "aria-label": "link to " + show(item.id) }, "#"),
      spec.edit ? el("button", { type: "button", className: "edit", "data-id": item.id }, "Edit") : null,
      state.tab === "users" ? el("button", { type: "button", className: "forget", "data-id": item.id }, "Forget…") : null));
  return tr;
}

function render() {
  const spec = TABS[state.tab];
  clear($("head")).append(header(spec));
  const rows = clear($("rows"));
  rows.dataset.tab = state.tab;
  if (!state.items.length) {
    rows.append(el("tr", {}, el("td", { className: "empty", colSpan: spec.cols.length + 2 }, "Nothing here.")));
  } else {
    rows.append(...state.items.map(item => row(spec, item)));
  }
  const end = state.offset + state.items.length;
  $("range").textContent = state.total ? (state.offset + 1) + "–" + end + " of " + state.total : "0 records";
  $("prev").disabled = state.offset === 0;
  $("next").disabled = end >= state.total;
  $("delete").hidden = !(spec.del || state.tab === "working");
  $("select-all").hidden = $("delete").hidden;
  refreshButtons();
}

function renderFilters() {
  const spec = TABS[state.tab];
  const box = clear($("filters"));
  for (const [name, label, kind] of spec.filters) {
    let input;
    if (Array.isArray(kind)) {
      input = el("select", { "data-filter": name, "aria-label": label }, ...kind.map(v => el("option", { value: v }, v || "any " + label)));
    } else {
      input = el("input", { type: kind === "date" ? "date" : "text", "data-filter": name, "aria-label": label });
      if (kind !== "date") input.placeholder = label;
    }
    input.value = state.filters[name] || "";
    box.append(kind === "date" ? el("label", { className: "date" }, label + " ", input) : input);
  }
}

function selected() {
  return [...document.querySelectorAll("input.select:checked")].map(box => box.dataset.id);
}

function refreshButtons() {
  $("delete").disabled = selected().length === 0;
}

// ------------------------------------------------------------------ one record, a conversation

function detail(title, ...content) {
  const box = clear($("detail"));
  box.append(el("h2", {}, title), ...content, el("button", { type: "button", className: "close" }, "Close"));
  box.hidden = false;
  box.scrollIntoView({ block: "nearest" });
}

async function openRecord(kind, id) {
  try {
    if (kind === "conversations") return showConversation(id);
    let record;
    if (kind === "episodes") {
      record = await api("episodes/" + encodeURIComponent(id));
    } else if (kind === "working") {
      record = state.items.find(i => i.id === id);
    } else {
      record = state.items.find(i => i.id === id)
        || (await api(TABS[kind].list + "?" + new URLSearchParams({ q: id, limit: "500" }))).items.find(i => i.id === id);
    }
    if (!record) throw new Error("no " + kind.replace(/s$/, "") + " " + JSON.stringify(id));
    detail(kind.replace(/s$/, "") + " " + id, el("pre", { className: "json" }, JSON.stringify(record, null, 2)));
  } catch (error) {
    status(error.message, true);
  }
}

function turnView(t) {
  const notes = ["turn " + t.turn_id, t.tokens + " tokens"];
  const classes = ["turn"];
  if (t.summarised) {
    classes.push("summarised");
    notes.push("summarised: no longer sent");
  } else {
    notes.push(t.sent ? "sent now" : "kept, not sent: over the budget until summarised");
  }
  return el("div", { className: classes.join(" "), "data-turn": t.turn_id },
    el("div", { className: "msg user" }, t.user),
    el("div", { className: "msg assistant" }, t.assistant),
    el("div", { className: "tokens" }, notes.join(" · "), " · ", when(t.timestamp)));
}

async function showConversation(id) {
  try {
    const c = await api("conversations/" + encodeURIComponent(id));
    const turns = c.transcript || c.messages;
    const threshold = c.summarize_threshold ? ", summarised past " + c.summarize_threshold : "";
    const chat = clear($("chat"));
    chat.append(...[
      el("h2", {}, "Conversation ", el("span", { className: "id" }, c.id)),
      el("p", { id: "budget" }, meter(c.budget_used), " history " + c.history_tokens + " / " + c.budget + " tokens ("
        + (c.budget_used * 100).toFixed(1) + "%" + threshold + "), " + c.turns + " turns kept, " + c.sent_turns + " sent"),
      c.summary ? el("div", { className: "summary" }, el("strong", {}, "Summary"), " (" + c.summary_tokens + " tokens)", el("p", {}, c.summary)) : null,
      ...(turns.length ? turns.map(turnView) : [el("p", { className: "empty" }, "No turns.")]),
      el("button", { type: "button", className: "close" }, "Close")].filter(Boolean));
    chat.hidden = false;
    chat.scrollIntoView({ block: "nearest" });
  } catch (error) {
    status(error.message, true);
  }
}

// ------------------------------------------------------------------ editing and deleting

function editor(tr, item) {
  document.querySelectorAll("tr.editor").forEach(r => r.remove());
  const kind = TABS[state.tab].edit;
  const fields = [];
  if (kind === "user") {
    fields.push(["display_name", el("input", { type: "text", value: item.display_name || "", "aria-label": "display name" })]);
  } else {
    const isText = typeof item.value === "string";
    fields.push(["value", el("textarea", { value: isText ? item.value : JSON.stringify(item.value, null, 1), "aria-label": "value" + (isText ? "" : " (JSON)") }), isText]);
    const number = kind === "fact" ? "confidence" : "importance";
    fields.push([number, el("input", { type: "number", min: 0, max: 1, step: 0.05, value: String(item[number]), "aria-label": number })]);
  }
  const save = el("button", { type: "submit" }, "Save");
  const cancel = el("button", { type: "button", className: "cancel" }, "Cancel");
  const form = el("form", { className: "edit-form" },
    ...fields.map(([name, input]) => el("label", {}, name + " ", input)), save, cancel);
  cancel.addEventListener("click", () => editRow.remove());
  form.addEventListener("submit", async event => {
    event.preventDefault();
    const body = {};
    try {
      for (const [name, input, isText] of fields) {
        if (name === "value") body.value = isText ? input.value : JSON.parse(input.value);
        else if (name === "display_name") body.display_name = input.value || null;
        else body[name] = Number(input.value);
      }
      const path = kind === "fact" ? "facts/" + encodeURIComponent(item.id)
        : kind === "user" ? "memory-users/" + encodeURIComponent(item.id)
        : "working/" + encodeURIComponent($("scope").value) + "/" + encodeURIComponent(item.key);
      await sendJSON("PATCH", path, body);
      await load();
      status("saved " + show(item.id));
    } catch (error) {
      status(error.message, true);
    }
  });
  const editRow = el("tr", { className: "editor" }, el("td", { colSpan: TABS[state.tab].cols.length + 2 }, form));
  tr.after(editRow);
  fields[0][1].focus();
}

async function forget(id) {
  try {
    const plan = await api("memory-users/" + encodeURIComponent(id) + "?dry_run=true", { method: "DELETE" });
    const list = (label, ids) => el("li", {}, ids.length + " " + label + (ids.length ? ": " : ""), ids.join(", "));
    const go = el("button", { type: "button", className: "danger" }, "Forget everything listed");
    go.addEventListener("click", async () => {
      try {
        const done = await api("memory-users/" + encodeURIComponent(id) + "?cascade=true", { method: "DELETE" });
        $("detail").hidden = true;
        await load();
        status("forgot " + done.user_ids.length + " user record(s), " + done.facts.length + " facts, " + done.episodes.length + " episodes, " + done.conversations.length + " conversations");
      } catch (error) {
        status(error.message, true);
      }
    });
    detail("Forget user " + id,
      el("ul", {}, list("user records", plan.user_ids), list("facts", plan.facts), list("episodes", plan.episodes),
        list("channel ids", plan.identifiers), list("conversations", plan.conversations)), go);
  } catch (error) {
    status(error.message, true);
  }
}

async function deleteSelected() {
  const ids = selected();
  if (!ids.length || !confirm("Delete " + ids.length + " " + state.tab + "?\n\n" + ids.join("\n") + "\n\nThis cannot be undone.")) return;
  const path = state.tab === "working" ? "working/" + encodeURIComponent($("scope").value) + "/batch-delete/" : TABS[state.tab].del;
  try {
    const done = await sendJSON("POST", path, { ids });
    await load();
    status("deleted " + done.deleted.length + (done.not_found.length ? ", " + done.not_found.length + " already gone" : ""));
  } catch (error) {
    status(error.message, true);
  }
}

// ------------------------------------------------------------------ export

function download(name, type, text) {
  const link = document.createElement("a");
  link.href = URL.createObjectURL(new Blob([text], { type }));
  link.download = name;
  link.click();
  setTimeout(() => URL.revokeObjectURL(link.href), 1000);
}

function csvCell(value) {
  const text = show(value);
  return /[",\n\r]/.test(text) ? '"' + text.replace(/"/g, '""') + '"' : text;
}

function exportShown(format) {
  const spec = TABS[state.tab];
  const name = "memlane-" + state.tab + "." + format;
  if (format === "json") return download(name, "application/json", JSON.stringify(state.items, null, 1));
  const lines = [["id", ...spec.cols.map(c => c[0])].map(csvCell).join(",")];
  for (const item of state.items) lines.push([item.id, ...spec.cols.map(c => c[3](item))].map(csvCell).join(","));
  download(name, "text/csv", lines.join("\r\n") + "\r\n");
}

// ------------------------------------------------------------------ navigation

function select(name, keepFilters) {
  state.tab = name;
  for (const button of document.querySelectorAll("nav button")) button.setAttribute("aria-selected", String(button.dataset.tab === name));
  $("scope").hidden = name !== "working";
  if (!keepFilters) {
    $("search").value = "";
    state.filters = {};
    state.sort = null;
    state.descending = false;
  }
  $("search").hidden = name === "search";
  state.offset = 0;
  $("detail").hidden = true;
  renderFilters();
  return load();
}

// #facts, #facts/<id>, #conversations/<id>: a tab, and a record opened in it.
async function route() {
  let hash;
  try {
    hash = decodeURIComponent(location.hash.slice(1));
  } catch (error) {
    hash = "";
  }
  const slash = hash.indexOf("/");
  const name = slash < 0 ? hash : hash.slice(0, slash);
  const tab = TABS[name] && name !== "search" ? name : "facts";
  if (tab !== state.tab || !state.loaded) {
    state.loaded = true;
    await select(tab);
  }
  if (slash >= 0 && hash.length > slash + 1) await openRecord(tab, hash.slice(slash + 1));
}

async function totals() {
  try {
    const t = await api("totals/");
    $("totals").textContent = ["facts", "episodes", "procedures", "users", "conversations", "turns"].map(k => t[k] + " " + k).join(" · ");
  } catch (error) {
    // Totals are a courtesy; the tabs still work without them.
  }
}

function wire() {
  let typing;
  $("search").addEventListener("input", () => { clearTimeout(typing); typing = setTimeout(() => { state.offset = 0; load(); }, 200); });
  $("scope").addEventListener("change", () => { state.offset = 0; load(); });
  $("filters").addEventListener("change", event => {
    const name = event.target.dataset.filter;
    if (!name) return;
    state.filters[name] = event.target.value.trim();
    state.offset = 0;
    load();
  });
  $("delete").addEventListener("click", deleteSelected);
  $("export-csv").addEventListener("click", () => exportShown("csv"));
  $("export-json").addEventListener("click", () => exportShown("json"));
  $("prev").addEventListener("click", () => { state.offset = Math.max(0, state.offset - Number($("per-page").value)); load(); });
  $("next").addEventListener("click", () => { state.offset += Number($("per-page").value); load(); });
  $("per-page").addEventListener("change", () => { state.offset = 0; load(); });
  $("select-all").addEventListener("click", () => {
    const boxes = [...document.querySelectorAll("input.select")];
    const all = boxes.every(b => b.checked);
    boxes.forEach(b => { b.checked = !all; });
    refreshButtons();
  });
  $("head").addEventListener("click", event => {
    const button = event.target.closest("button.sort");
    if (!button) return;
    const field = button.dataset.sort;
    state.descending = state.sort === field ? !state.descending : false;
    state.sort = field;
    state.offset = 0;
    load();
  });
  $("rows").addEventListener("change", refreshButtons);
  $("rows").addEventListener("click", event => {
    const tr = event.target.closest("tr.record");
    if (!tr) return;
    const item = state.items.find(i => i.id === tr.dataset.id);
    if (event.target.closest("button.edit")) return editor(tr, item);
    if (event.target.closest("button.forget")) return forget(tr.dataset.id);
    if (event.target.closest("input, a, button")) return;
    activate(tr);
  });
  $("rows").addEventListener("keydown", event => {
    if (event.key !== "Enter" || !event.target.matches("tr.record")) return;
    event.preventDefault();
    activate(event.target);
  });
  for (const section of ["detail", "chat"]) {
    $(section).addEventListener("click", event => {
      if (event.target.matches("button.close")) $(section).hidden = true;
    });
  }
  $("everywhere").addEventListener("submit", event => {
    event.preventDefault();
    state.query = $("everywhere-q").value.trim();
    if (!state.query) return;
    document.querySelector('nav button[data-tab="search"]').hidden = false;
    select("search");
  });
  for (const button of document.querySelectorAll("nav button")) {
    button.addEventListener("click", () => {
      if (button.dataset.tab === "search") return select("search", true);
      history.replaceState(null, "", "#" + button.dataset.tab);
      select(button.dataset.tab);
    });
  }
  window.addEventListener("hashchange", route);
}

function activate(tr) {
  if (state.tab === "search") {
    const link = tr.querySelector("a");
    if (link) location.hash = link.getAttribute("href");
    return;
  }
  history.replaceState(null, "", "#" + state.tab + "/" + encodeURIComponent(tr.dataset.id));
  openRecord(state.tab, tr.dataset.id);
}

wire();
if (!location.hash) history.replaceState(null, "", "#facts");
route();
totals();
