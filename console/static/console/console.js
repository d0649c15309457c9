// The console's shared helpers: posting a form's fields the way the pages' forms would,
// asking for JSON so the page can update in place, and reading the events socket's frames.
"use strict";

window.Console = (function () {
  function csrfToken() {
    const field = document.querySelector("input[name=csrfmiddlewaretoken]");
    return field ? field.value : "";
  }

  // POST `fields` (an object or FormData) to `url`; resolves to {ok, status, body}.
  async function post(url, fields) {
    const body = fields instanceof FormData ? fields : new FormData();
    if (!(fields instanceof FormData)) {
      for (const [name, value] of Object.entries(fields || {})) body.append(name, value);
    }
    const response = await fetch(url, {
      method: "POST",
      body: body,
      credentials: "same-origin",
      headers: { "X-CSRFToken": csrfToken(), Accept: "application/json" },
    });
    let parsed = null;
    try {
      parsed = await response.json();
    } catch (error) {
      parsed = { error: { code: "http_" + response.status, message: response.statusText } };
    }
    return { ok: response.ok, status: response.status, body: parsed };
  }

  function errorText(result) {
    const error = result.body && result.body.error;
    return error ? error.message : "Request failed (" + result.status + ")";
  }

  // The event a socket frame carries (docs/events.md), or null when it is not JSON.
  function frameEvent(frame) {
    try {
      return JSON.parse(frame.data);
    } catch (error) {
      return null;
    }
  }

  return { post: post, csrfToken: csrfToken, errorText: errorText, frameEvent: frameEvent };
})();
