// The threads list, live: follows the tenant's socket (/ws/events/, docs/events.md) and
// updates each listed thread's status as it changes; a thread created meanwhile is offered
// as a link that reloads the list (its place depends on the filters and the page).
"use strict";

(function () {
  const config = document.getElementById("threads-live");
  if (!config) return;
  const urls = JSON.parse(config.textContent);
  const state = document.getElementById("threads-live-status");
  const created = document.getElementById("new-threads");

  function showStatus(threadId, status) {
    const row = document.querySelector("tr[data-thread-id='" + CSS.escape(threadId) + "']");
    const badge = row && row.querySelector("[data-status]");
    if (!badge) return;
    badge.textContent = status;
    badge.className = "status status-" + status;
  }

  function receive(frame) {
    const event = Console.frameEvent(frame);
    if (!event) return;
    if (event.type === "thread.status") showStatus(event.thread_id, event.payload.status);
    else if (event.type === "thread.created") created.hidden = false;
  }

  async function connect() {
    const answer = await Console.post(urls.ticket, {});
    if (!answer.ok) {
      state.textContent = "Not live: " + Console.errorText(answer);
      return;
    }
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const socket = new WebSocket(scheme + "//" + location.host + urls.socket +
      "?ticket=" + encodeURIComponent(answer.body.ticket));
    socket.addEventListener("open", () => { state.textContent = "Live"; });
    socket.addEventListener("message", receive);
    socket.addEventListener("close", (close) => {
      if (close.code === 4401) {
        state.textContent = close.reason || "Disconnected.";
        return;
      }
      state.textContent = "Reconnecting…";
      setTimeout(connect, 1000);
    });
  }

  connect();
})();
