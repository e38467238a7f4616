// The /memories page, part 3 of 3: the tabs, listing, paging, sorting, filters and
// navigation; loaded last, it wires the page and opens the tab or record the URL names.
"use strict";

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
