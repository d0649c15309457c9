// The run-code playground: Ctrl+Enter (or Cmd+Enter) in the code box runs it.
"use strict";

(function () {
  const form = document.getElementById("run-code");
  if (!form) return;
  const code = form.querySelector("textarea");
  code.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      form.requestSubmit();
    }
  });
  form.addEventListener("submit", function () {
    document.getElementById("run").disabled = true;
    document.getElementById("run").textContent = "Running…";
  });
})();
