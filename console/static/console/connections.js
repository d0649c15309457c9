// A remote connection's form: show only the chosen authentication type's fields. Without
// the script every type's fields are shown, and only the chosen type's are used.
"use strict";

(function () {
  const chooser = document.getElementById("id_auth_type");
  if (!chooser) return;
  const groups = document.querySelectorAll("fieldset[data-auth-type]");
  function show() {
    for (const group of groups) group.hidden = group.dataset.authType !== chooser.value;
  }
  chooser.addEventListener("change", show);
  show();
})();
