// The memory page: plain JavaScript over the Memory API, nothing loaded from elsewhere.
"use strict";
const $ = (id) => document.getElementById(id);
const state = { key: sessionStorage.getItem("engram-key"), bot: null, before: null, timer: null, asked: 0 };

async function api(method, path, body, raw) {
  const headers = { Authorization: `Bearer ${state.key}` };
  if (body !== undefined && !raw) headers["content-type"] = "application/json";
  const response = await fetch(path, { method, headers, body: raw ? body : body === undefined ? undefined : JSON.stringify(body) });
  if (response.status === 204) return null;
  const type = response.headers.get("content-type") || "";
  // application/json, and application/problem+json for every error (RFC 9457: `detail` says what went wrong)
  const data = /^application\/([\w.-]+\+)?json/.test(type) ? await response.json() : await response.text();
  if (!response.ok) throw new Error((data && (data.detail || (data.error && data.error.message))) || `HTTP ${response.status}`);
  return data;
}

function text(tag, content, cls) {
  const el = document.createElement(tag);
  el.textContent = content;
  if (cls) el.className = cls;
  return el;
}

function when(iso) { return iso ? new Date(iso).toLocaleString() : ""; }

function describe(memory) {
  // A chat message's stored content, readably: author, time, channel, attachments, links.
  const c = memory.content || {};
  const parts = [];
  if (c.displayName || c.author) parts.push(c.displayName || c.author);
  parts.push(when(c.timestamp || memory.createdAt));
  if (c.channelId) parts.push(`#${c.channelId}`);
  if (memory.userId) parts.push(`user ${memory.userId}`);
  if (memory.serverId) parts.push(`server ${memory.serverId}`);
  if (memory.project) parts.push(`project ${memory.project}`);
  const files = (c.attachments || []).map((a) => a.filename || a.url).filter(Boolean);
  if (files.length) parts.push(`attachments: ${files.join(", ")}`);
  const links = (c.links || []).map((l) => l.url || l).filter(Boolean);
  if (links.length) parts.push(`links: ${links.join(", ")}`);
  // the caller's own labels and when it stops being a memory
  const labels = Object.entries(memory.metadata || {}).map(([k, v]) => `${k}=${v}`);
  if (labels.length) parts.push(`metadata: ${labels.join(", ")}`);
  if (memory.expiresAt) parts.push(`expires ${when(memory.expiresAt)}`);
  return parts.filter(Boolean).join(" · ");
}

function row(memory) {
  const li = document.createElement("li");
  li.dataset.id = memory.id;
  const body = text("span", memory.text, "text");
  li.append(body, text("span", describe(memory), "meta"));
  if (memory.score !== undefined) li.append(text("span", `score ${memory.score.toFixed(3)}`, "score"));
  const actions = document.createElement("span");
  actions.className = "actions";
  const edit = text("button", "Edit");
  edit.setAttribute("aria-label", `Edit ${memory.id}`);
  edit.onclick = () => editInPlace(li, memory);
  const remove = text("button", "Remove");
  remove.setAttribute("aria-label", `Remove ${memory.id}`);
  remove.onclick = async () => {
    await api("DELETE", `/v1/bots/${encodeURIComponent(state.bot)}/memories/${memory.id}`);
    li.remove();
    notice(`Removed ${memory.id}.`);
  };
  actions.append(edit, remove);
  li.append(actions);
  return li;
}

function editInPlace(li, memory) {
  const form = document.createElement("form");
  form.className = "row";
  const input = document.createElement("input");
  input.value = memory.text;
  input.setAttribute("aria-label", `New text for ${memory.id}`);
  form.append(input, text("button", "Save"));
  li.querySelector(".text").replaceWith(form);
  input.focus();
  form.onsubmit = async (event) => {
    event.preventDefault();
    try {
      const stands = await api("PATCH", `/v1/bots/${encodeURIComponent(state.bot)}/memories/${memory.id}`, { text: input.value });
      if (stands.id !== memory.id) {
        notice(`That now says what ${stands.id} says: the two merged, and ${stands.id} stands.`);
        li.remove();
        const other = document.querySelector(`#memories li[data-id="${stands.id}"]`);
        if (other) other.replaceWith(row(stands));
        else $("memories").prepend(row(stands));  // not on this page: show the one that stands anyway
      } else {
        li.replaceWith(row(stands));
        notice(`Changed ${stands.id}.`);
      }
    } catch (error) { notice(error.message, true); }
  };
}

function notice(message, bad) {
  $("notice").textContent = message;
  $("notice").className = bad ? "error" : "";
}

function scope() {
  const params = new URLSearchParams({ kind: $("kind").value, limit: "20" });
  for (const [id, name] of [["f-user", "userId"], ["f-server", "serverId"], ["f-project", "project"]]) {
    if ($(id).value.trim()) params.set(name, $(id).value.trim());
  }
  return params;
}

async function showMemories(more) {
  const params = scope();
  const query = $("query").value.trim();
  if (query) params.set("query", query);
  if (more && state.before) params.set("before", state.before);
  // Only the latest listing is shown: an earlier one answering after it (the bot's first listing, then
  // "Show" with another kind) must not replace it
  const asked = ++state.asked;
  try {
    const { memories, meaning } = await api("GET", `/v1/bots/${encodeURIComponent(state.bot)}/memories?${params}`);
    if (asked !== state.asked) return;
    const list = $("memories");
    // a row being edited stays as it is (its editor open, its text typed): a listing that lands after an
    // Edit click (the refresh an Add starts) must not close it
    const editing = new Map([...list.querySelectorAll("li")].filter((li) => li.querySelector("form")).map((li) => [li.dataset.id, li]));
    if (!more) list.replaceChildren();
    memories.forEach((m) => list.append(editing.get(m.id) || row(m)));
    state.before = memories.length ? memories[memories.length - 1].id : null;
    $("older").hidden = Boolean(query) || memories.length < 20;
    if (!more && !memories.length) notice(query ? "Nothing found." : "No memories here yet.");
    else if (query && meaning === false) notice("Found by words only: meaning is off or its model is still loading.");
  } catch (error) { notice(error.message, true); }
}

async function showBots() {
  const { bots } = await api("GET", "/v1/bots");
  const list = $("bots");
  list.replaceChildren();
  for (const bot of bots) {
    const li = document.createElement("li");
    const button = text("button", bot);
    button.onclick = () => choose(bot);
    if (bot === state.bot) button.setAttribute("aria-current", "true");
    li.append(button);
    list.append(li);
  }
}

async function choose(bot) {
  state.bot = bot;
  $("bot-name").textContent = bot;
  notice("");
  await showBots();
  await showMemories(false);
}

async function showSettings() {
  const s = await api("GET", "/v1/settings");
  $("embedder").value = s.embedder;
  $("provider").value = s.embeddingProvider || "";
  $("model").value = s.embeddingModel || "";
}

async function showProgress() {
  try {
    const p = await api("GET", "/v1/settings/embedding");
    const total = p.memories + p.messages;
    const done = p.memoriesWithVectors + p.withVectors;
    $("progress").max = Math.max(total, 1);
    $("progress").value = done;
    $("progress-text").textContent =
      `${p.model || "no model"}: ${p.memoriesWithVectors} of ${p.memories} memories and ${p.withVectors} of ${p.messages} messages have vectors`
      + (p.mixing ? "; mixing each one with the turns around it" : "")
      + (p.error ? `; last error: ${p.error}` : "");
  } catch (error) { $("progress-text").textContent = error.message; }
}

async function start() {
  try {
    await showBots();
  } catch (error) {
    sessionStorage.removeItem("engram-key");
    state.key = null;
    $("signin-error").textContent = error.message;
    return;
  }
  $("signin").hidden = true;
  $("app").hidden = false;
  $("signout").hidden = false;
  try {
    await showSettings();
  } catch (error) {  // the proxy key reads its own bot's memories, nothing else
    $("who").textContent = "proxy key: read only";
    $("settings").hidden = true;
    $("settings-error").textContent = "Embedder settings need the admin key.";
    return;
  }
  $("who").textContent = "admin";
  await showProgress();
  state.timer = setInterval(showProgress, 2000);
}

$("signin").onsubmit = (event) => {
  event.preventDefault();
  state.key = $("key").value.trim();
  sessionStorage.setItem("engram-key", state.key);
  start();
};
$("signout").onclick = () => { sessionStorage.removeItem("engram-key"); location.reload(); };
$("filters").onsubmit = (event) => { event.preventDefault(); if (state.bot) showMemories(false); };
$("older").onclick = () => showMemories(true);
$("add").onsubmit = async (event) => {
  event.preventDefault();
  try {
    const memory = await api("POST", `/v1/bots/${encodeURIComponent(state.bot)}/memories`, { text: $("new-text").value });
    $("new-text").value = "";
    notice(`Added ${memory.id}.`);
    await showMemories(false);
  } catch (error) { notice(error.message, true); }
};
$("forget").onsubmit = async (event) => {
  event.preventDefault();
  const user = $("forget-user").value.trim();
  if (!confirm(`Forget everything about ${user} in ${state.bot}, in every store?`)) return;
  try {
    const { deleted } = await api("DELETE", `/v1/bots/${encodeURIComponent(state.bot)}/users/${encodeURIComponent(user)}/memories`);
    notice(`Forgot ${user}: ${deleted.facts} facts, ${deleted.messages} messages, ${deleted.vectors} vectors deleted.`);
    await showMemories(false);
  } catch (error) { notice(error.message, true); }
};
async function showKeys(user) {
  // A user's keys for the proxy and /mcp (docs/mcp.md): ids and names, never the secrets
  const list = $("keys");
  list.replaceChildren();
  const { keys } = await api("GET", `/v1/bots/${encodeURIComponent(state.bot)}/users/${encodeURIComponent(user)}/keys`);
  for (const key of keys) {
    const item = text("li", `${key.id} ${key.name || ""} (${when(key.createdAt)}) `);
    const revoke = text("button", "Revoke", "danger");
    revoke.onclick = async () => {
      try {
        await api("DELETE", `/v1/bots/${encodeURIComponent(state.bot)}/users/${encodeURIComponent(user)}/keys/${key.id}`);
        notice(`Revoked ${key.id}: it opens nothing from now on.`);
        await showKeys(user);
      } catch (error) { notice(error.message, true); }
    };
    item.append(revoke);
    list.append(item);
  }
  if (!keys.length) list.append(text("li", `${user} has no keys.`));
}
$("keys-form").onsubmit = async (event) => {
  event.preventDefault();
  const user = $("keys-user").value.trim();
  try {
    if (event.submitter && event.submitter.id === "mint-key") {
      const minted = await api("POST", `/v1/bots/${encodeURIComponent(state.bot)}/users/${encodeURIComponent(user)}/keys`,
        { name: $("keys-name").value.trim() || null });
      $("minted").textContent = minted.key;
      notice(`A key for ${user}: copy it now, it is shown this once.`);
    }
    await showKeys(user);
  } catch (error) { notice(error.message, true); }
};
$("settings").onsubmit = async (event) => {
  event.preventDefault();
  const patch = { embedder: $("embedder").value };
  if ($("embedder").value === "remote") {
    patch.embeddingProvider = $("provider").value.trim() || null;
    patch.embeddingModel = $("model").value.trim() || null;
  }
  try {
    await api("PATCH", "/v1/settings", patch);
    $("settings-error").textContent = "";
    await showProgress();
  } catch (error) { $("settings-error").textContent = error.message; }
};
$("export").onclick = async () => {
  const data = await api("GET", `/v1/bots/${encodeURIComponent(state.bot)}/export`);
  const link = document.createElement("a");
  link.href = URL.createObjectURL(new Blob([data], { type: "application/x-ndjson" }));
  link.download = `${state.bot}.ndjson`;
  link.click();
};
$("import").onchange = async (event) => {
  const file = event.target.files[0];
  if (!file) return;
  try {
    const result = await api("POST", `/v1/bots/${encodeURIComponent(state.bot)}/import`, await file.text(), true);
    notice(`Imported: ${result.facts.created} facts and ${result.messages.created} messages new; `
      + `${result.facts.existing + result.messages.existing} already there; ${result.errors.length} bad lines`
      + (result.errors.length ? ` (line ${result.errors[0].line}: ${result.errors[0].error})` : "") + ".");
    await showMemories(false);
  } catch (error) { notice(error.message, true); }
};
if (state.key) start();
