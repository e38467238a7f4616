// The /memories page, part 2 of 3: one record, a conversation, editing, forgetting a user,
// deleting and exporting. Renders only through el() (memories-base.js).
"use strict";

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
