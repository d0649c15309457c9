// The definition form: "Add a tool" appends a prompt's tools row (the form works without it:
// there is always one empty row, and saving adds another).
(function () {
  const button = document.getElementById("add-tool");
  const body = document.querySelector("#tool-rows tbody");
  if (!button || !body) return;
  button.hidden = false;
  button.addEventListener("click", () => {
    const last = body.lastElementChild;
    const from = `tools-${last.dataset.row}`;
    const index = body.children.length;
    const to = `tools-${index}`;
    const row = last.cloneNode(true);
    row.dataset.row = String(index);
    row.classList.remove("invalid");
    row.querySelectorAll(".field-errors").forEach((list) => list.remove());
    row.querySelectorAll("[name], [id], [for], [aria-describedby], [data-field]").forEach((el) => {
      for (const attribute of ["name", "id", "for", "aria-describedby", "data-field"]) {
        const value = el.getAttribute(attribute);
        if (value) el.setAttribute(attribute, value.split(from).join(to));
      }
      el.removeAttribute("aria-invalid");
      if (el.tagName === "INPUT") el.value = "";
      if (el.tagName === "SELECT") el.selectedIndex = 0;
    });
    row.querySelectorAll("label").forEach((label) => {
      label.textContent = label.textContent.replace(/\d+$/, String(index + 1));
    });
    body.appendChild(row);
    row.querySelector("input").focus();
  });
})();
