// The thread page: follows the thread's socket (/ws/threads/{id}/, see docs/events.md) and
// renders its chat, tool calls, turns and pending actions from the events, replaying the log
// on connect and streaming `model.delta` text as it arrives. Writes go through the console's
// own endpoints (the same services as the API).
"use strict";

(function () {
  const root = document.getElementById("thread");
  if (!root) return;
  const urls = JSON.parse(document.getElementById("thread-urls").textContent);
  // The agent's label of each side ("a", "b"): a dual_ai agent's sides are both models, so
  // a side's messages are named by its label, not by the role they are stored with.
  const sides = JSON.parse(document.getElementById("thread-sides").textContent);
  const canWrite = root.dataset.canWrite === "true";
  const ZERO = "00000000-0000-0000-0000-000000000000";
  const ACTIVE = new Set(["queued", "running", "retrying", "streaming", "waiting_permission",
    "waiting_input", "waiting_resource", "lost", "stale"]);

  const messagesList = document.getElementById("messages");
  const turnsList = document.getElementById("turns-list");
  const actionsList = document.getElementById("pending-actions");
  const noActions = document.getElementById("no-actions");
  const statusBadge = document.getElementById("thread-status");
  const connection = document.getElementById("connection");
  const actionError = document.getElementById("action-error");

  let lastSequence = 0;
  let socket = null;
  let closedForGood = false;
  const turns = new Map(); // turn id -> turn as the API shows it (partial)

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "text") node.textContent = value;
      else if (name.startsWith("data-") || name.startsWith("aria-") || name === "role" || name === "type") node.setAttribute(name, value);
      else node[name] = value;
    }
    for (const child of children) if (child) node.append(child);
    return node;
  }

  function pretty(value) {
    if (typeof value === "string") {
      try {
        return JSON.stringify(JSON.parse(value), null, 2);
      } catch (error) {
        return value;
      }
    }
    return JSON.stringify(value, null, 2);
  }

  const stopButton = document.getElementById("stop-button");

  // The stop button is offered while a turn runs, waits for a worker or for a permission
  // (`waiting_input` is also an ai_human thread at rest, the person's turn).
  function setStatus(status) {
    statusBadge.textContent = status;
    statusBadge.className = "status status-" + status;
    if (stopButton) stopButton.disabled = !ACTIVE.has(status) || status === "waiting_input";
  }

  // Messages -----------------------------------------------------------------------------

  function messageItem(id, role, side) {
    let item = document.getElementById("message-" + id);
    if (!item) {
      item = el("li", { id: "message-" + id, className: "message role-" + role, "data-role": role,
        "data-side": side || null },
        el("p", { className: "who", text: (side && sides[side]) || role }),
        el("div", { className: "content" }),
        el("div", { className: "tools" }));
      messagesList.append(item);
    }
    return item;
  }

  // A stored answer cut short: a stop interrupted it (its text is what was streamed), or
  // its model call failed after streaming part of it.
  function showEnding(item, message) {
    let note = item.querySelector(".note");
    const metadata = message.metadata || {};
    const text = message.status !== "failed" ? ""
      : metadata.interrupted ? "Interrupted: the answer was stopped here."
      : "Failed" + (metadata.error ? ": " + metadata.error : ".");
    item.dataset.interrupted = metadata.interrupted && message.status === "failed" ? "true" : "false";
    if (!text) {
      if (note) note.remove();
      return;
    }
    if (!note) {
      note = el("p", { className: "note" });
      item.querySelector(".content").after(note);
    }
    note.textContent = text;
  }

  function showMessage(message) {
    if (message.depth > 0) return; // a subprompt's inner messages: a later panel shows them
    if (message.role === "tool") {
      const call = toolCall(message.tool_call_id, message.name);
      call.querySelector(".result").textContent = pretty(message.content || "");
      return;
    }
    const item = messageItem(message.id, message.role, message.side);
    item.dataset.status = message.status || "";
    item.setAttribute("aria-busy", message.status === "pending" ? "true" : "false");
    const content = item.querySelector(".content");
    if (message.content || message.status !== "pending") content.textContent = message.content || "";
    showEnding(item, message);
    for (const call of toolCalls(message.tool_calls)) {
      const fn = call.function || call;
      const details = toolCall(call.id, fn.name, item);
      details.querySelector(".arguments").textContent = pretty(fn.arguments || {});
    }
  }

  // A message's tool calls: `[{id, name, arguments}]`; events stored before that shape carry
  // the JSON string of `[{id, type, function: {name, arguments}}]`.
  function toolCalls(value) {
    if (Array.isArray(value)) return value;
    if (typeof value !== "string") return [];
    try {
      const parsed = JSON.parse(value);
      return Array.isArray(parsed) ? parsed : [];
    } catch (error) {
      return [];
    }
  }

  function appendDelta(payload) {
    if (payload.depth > 0) return;
    const item = messageItem(payload.message_id, "assistant");
    item.dataset.status = "streaming";
    item.setAttribute("aria-busy", "true"); // read out once whole, not piece by piece
    item.querySelector(".content").append(document.createTextNode(payload.delta));
  }

  // Tool calls: one <details> per call, folded, with its arguments and result.
  function toolCall(id, name, owner) {
    let details = document.getElementById("tool-" + id);
    if (!details) {
      const host = owner || messagesList.lastElementChild || messageItem("tools-" + id, "assistant");
      details = el("details", { id: "tool-" + id, className: "tool-call", "data-tool": name || "" },
        el("summary", {},
          el("span", { className: "tool-name", text: name || "tool" }), " ",
          el("span", { className: "tool-status", text: "called" })),
        el("p", { className: "label", text: "Arguments" }),
        el("pre", { className: "arguments" }),
        el("p", { className: "label", text: "Result" }),
        el("pre", { className: "result" }));
      host.querySelector(".tools").append(details);
    }
    return details;
  }

  function toolStatus(payload, status) {
    const details = toolCall(payload.tool_call_id, payload.name);
    details.dataset.status = status;
    details.querySelector(".tool-status").textContent = status;
    if (payload.arguments !== undefined) details.querySelector(".arguments").textContent = pretty(payload.arguments);
    if (payload.error) details.querySelector(".result").textContent = String(payload.error);
  }

  // Turns --------------------------------------------------------------------------------

  function updateTurn(turn) {
    const known = Object.assign(turns.get(turn.id) || {}, turn);
    turns.set(turn.id, known);
    let item = document.getElementById("turn-" + turn.id);
    if (!item) {
      const label = "Turn " + (turnsList.children.length + 1);
      item = el("li", { id: "turn-" + turn.id, className: "turn", "data-turn-id": turn.id, title: turn.id },
        el("span", { className: "turn-label", text: label }), " ",
        el("span", { className: "status" }), " ",
        el("span", { className: "outcome" }));
      if (canWrite) {
        const cancel = el("button", { type: "button", className: "cancel", text: "Cancel",
          "aria-label": "Cancel " + label.toLowerCase() });
        cancel.addEventListener("click", () => act(urls.cancel.replace(ZERO, turn.id), {}));
        item.append(" ", cancel);
      }
      turnsList.append(item);
    }
    const status = known.status || "queued";
    item.dataset.status = status;
    item.querySelector(".status").textContent = status;
    item.querySelector(".status").className = "status status-" + status;
    item.querySelector(".outcome").textContent = known.outcome ? "(" + known.outcome + ")" : "";
    const cancel = item.querySelector("button.cancel");
    if (cancel) cancel.hidden = !ACTIVE.has(status);
  }

  function queueChanged(payload) {
    const items = payload.items || (payload.item ? [payload.item] : []);
    for (const item of items) updateTurn(item);
  }

  function turnEnded(payload) {
    updateTurn({ id: payload.turn_id, status: payload.status, outcome: payload.reason });
    variablesChanged();
  }

  // Actions ------------------------------------------------------------------------------

  function actionRequired(payload) {
    const action = payload.action || {};
    const id = payload.action_id;
    if (document.getElementById("action-" + id)) return;
    const item = el("li", { id: "action-" + id, className: "action", "data-action-id": id },
      el("p", {}, el("strong", { text: payload.name || action.name || payload.kind }),
        " asks for " + (payload.kind === "input" ? "input" : "approval")),
      el("pre", { className: "arguments", text: pretty(action.arguments || {}) }));
    if (canWrite && payload.kind === "input") {
      const field = "answer-" + id;
      const answer = el("textarea", { id: field, rows: 3, className: "answer" });
      const send = el("button", { type: "button", className: "approve", text: "Answer" });
      const deny = el("button", { type: "button", className: "deny", text: "Deny",
        "aria-label": "Deny " + (payload.name || "the request") });
      const url = urls.action.replace(ZERO, id);
      send.addEventListener("click", () => act(url, { decision: "answer", data: answer.value }));
      deny.addEventListener("click", () => act(url, { decision: "deny", reason: "Denied in the console" }));
      item.append(el("p", {}, el("label", { htmlFor: field, text: "Answer (JSON)" }), answer),
        el("p", { className: "buttons" }, send, " ", deny));
    } else if (canWrite) {
      const approve = el("button", { type: "button", className: "approve", text: "Approve",
        "aria-label": "Approve " + (payload.name || "the call") });
      const deny = el("button", { type: "button", className: "deny", text: "Deny",
        "aria-label": "Deny " + (payload.name || "the call") });
      const url = urls.action.replace(ZERO, id);
      approve.addEventListener("click", () => act(url, { decision: "approve" }));
      deny.addEventListener("click", () => act(url, { decision: "deny", reason: "Denied in the console" }));
      item.append(el("p", { className: "buttons" }, approve, " ", deny));
      if ((action.decisions || []).includes("edit")) item.append(editor(id, payload.name, action, url));
    }
    updateTurn({ id: payload.turn_id,
      status: payload.kind === "input" ? "waiting_input" : "waiting_permission" });
    actionsList.append(item);
    noActions.hidden = true;
  }

  // An approval's arguments, edited as JSON: the call runs with them (decision `edit`).
  function editor(id, name, action, url) {
    const field = "arguments-" + id;
    const text = el("textarea", { id: field, rows: 4, className: "answer", spellcheck: false });
    text.value = JSON.stringify(action.arguments || {}, null, 2);
    const run = el("button", { type: "button", className: "approve", text: "Run with these arguments",
      "aria-label": "Run " + (name || "the call") + " with these arguments" });
    run.addEventListener("click", () => act(url, { decision: "edit", arguments: text.value }));
    return el("details", { className: "edit" }, el("summary", { text: "Edit the arguments" }),
      el("p", {}, el("label", { htmlFor: field, text: "Arguments (JSON)" }), text), el("p", {}, run));
  }

  function actionResolved(payload) {
    const item = document.getElementById("action-" + payload.action_id);
    if (item) item.remove();
    noActions.hidden = actionsList.children.length > 0;
  }

  // Variable-bootstrap requests: server-rendered forms (refetched when a tool fails or a turn
  // ends, which is when a deferred subagent's request appears); submitting one starts the
  // subagent, and its item then links to the child's page.

  const variablesList = document.getElementById("variable-requests");
  const noVariables = document.getElementById("no-variable-requests");
  let variablesTimer = null;

  function variablesShown() {
    noVariables.hidden = variablesList.children.length > 0;
  }

  function variablesError(form, result) {
    const error = (result.body && result.body.error) || {};
    const shown = form.querySelector(".error");
    shown.hidden = false;
    shown.textContent = Console.errorText(result);
    for (const input of form.querySelectorAll("input[aria-invalid]")) input.removeAttribute("aria-invalid");
    const field = (error.field || "").startsWith("env.") ? "env_" + error.field.slice(4) : "";
    const input = field ? form.querySelector("input[name='" + CSS.escape(field) + "']") : null;
    if (input) {
      input.setAttribute("aria-invalid", "true");
      document.getElementById(input.getAttribute("aria-describedby")).textContent = Console.errorText(result);
      input.focus();
    }
  }

  function bindVariables(form) {
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const result = await Console.post(form.action, new FormData(form));
      if (!result.ok) {
        variablesError(form, result);
        return;
      }
      const item = form.closest("li");
      item.dataset.started = "true";
      form.replaceWith(el("p", { className: "started", role: "status" }, "Started: ",
        el("a", { href: result.body.child_url, text: "the subagent's thread" })));
    });
  }

  async function refreshVariables() {
    const response = await fetch(urls.variables, { credentials: "same-origin" });
    if (!response.ok) return;
    const holder = document.createElement("ul");
    holder.innerHTML = await response.text(); // the console's own template, escaped
    const open = new Set();
    for (const item of [...holder.children]) {
      open.add(item.id);
      if (document.getElementById(item.id)) continue; // keep a form being filled in
      variablesList.append(item);
      const form = item.querySelector("form");
      if (form) bindVariables(form);
    }
    for (const item of [...variablesList.children]) {
      if (!open.has(item.id) && !item.dataset.started) item.remove();
    }
    variablesShown();
  }

  function variablesChanged() {
    clearTimeout(variablesTimer);
    variablesTimer = setTimeout(refreshVariables, 200);
  }

  for (const form of variablesList.querySelectorAll("form")) bindVariables(form);

  // Events -------------------------------------------------------------------------------

  const handlers = {
    "message.created": (e) => showMessage(e.payload),
    "message.updated": (e) => showMessage(e.payload),
    "message.deleted": (e) => {
      const item = document.getElementById("message-" + e.payload.id);
      if (item) item.remove();
    },
    "model.delta": (e) => appendDelta(e.payload),
    "tool.started": (e) => toolStatus(e.payload, "running"),
    "tool.result": (e) => toolStatus(e.payload, "succeeded"),
    "tool.failed": (e) => {
      toolStatus(e.payload, "failed");
      variablesChanged();
    },
    "thread.status": (e) => setStatus(e.payload.status),
    "thread.updated": (e) => {
      if (e.payload.agent) document.getElementById("thread-agent").textContent = e.payload.agent;
    },
    "queue.changed": (e) => queueChanged(e.payload),
    "turn.started": (e) => updateTurn({ id: e.payload.turn_id, status: "running" }),
    "turn.completed": (e) => turnEnded(e.payload),
    "turn.failed": (e) => turnEnded(e.payload),
    "turn.cancelled": (e) => turnEnded(e.payload),
    "action.required": (e) => actionRequired(e.payload),
    "action.resolved": (e) => actionResolved(e.payload),
  };

  function receive(frame) {
    const event = Console.frameEvent(frame);
    if (!event) return;
    if (event.type === "pong") return;
    if (event.sequence !== null && event.sequence !== undefined) {
      if (event.sequence <= lastSequence) return;
      lastSequence = event.sequence;
    }
    const handle = handlers[event.type];
    if (handle) handle(event);
  }

  async function connect() {
    connection.textContent = "Connecting…";
    const answer = await Console.post(urls.ticket, {});
    if (!answer.ok) {
      connection.textContent = "Cannot follow the thread: " + Console.errorText(answer);
      return;
    }
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const query = "?ticket=" + encodeURIComponent(answer.body.ticket) + "&after=" + lastSequence;
    socket = new WebSocket(scheme + "//" + location.host + urls.socket + query);
    socket.addEventListener("open", () => {
      connection.textContent = "Live";
      root.dataset.live = "true";
    });
    socket.addEventListener("message", receive);
    socket.addEventListener("close", (close) => {
      root.dataset.live = "false";
      if (close.code === 4410) {
        closedForGood = true;
        connection.textContent = "The thread is terminated.";
        for (const id of ["compose", "stop"]) {
          const form = document.getElementById(id);
          if (form) form.hidden = true; // a terminated thread takes no more turns
        }
        return;
      }
      if (close.code === 4404 || close.code === 4401) {
        closedForGood = true;
        connection.textContent = close.reason || "Disconnected.";
        return;
      }
      connection.textContent = "Reconnecting…";
      if (!closedForGood) setTimeout(connect, 1000);
    });
  }

  // Writes -------------------------------------------------------------------------------

  async function act(url, fields) {
    const result = await Console.post(url, fields);
    actionError.hidden = result.ok;
    actionError.textContent = result.ok ? "" : Console.errorText(result);
    return result;
  }

  const compose = document.getElementById("compose");
  if (compose) {
    const input = compose.querySelector("textarea");
    const composeError = document.getElementById("compose-error");
    compose.addEventListener("submit", async (event) => {
      event.preventDefault();
      if (!input.value.trim()) return;
      const sending = new FormData(compose);
      const result = await Console.post(compose.action, sending);
      composeError.hidden = result.ok;
      composeError.textContent = result.ok ? "" : Console.errorText(result);
      if (result.ok) input.value = "";
      input.focus();
    });
    input.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        compose.requestSubmit();
      }
    });
  }

  const stop = document.getElementById("stop");
  if (stop) {
    stop.addEventListener("submit", async (event) => {
      event.preventDefault();
      await act(stop.action, {});
    });
  }

  setStatus(statusBadge.textContent.trim());
  connect();
})();
