// nlhf label: keyboard shortcuts and small conveniences. The pages work without it.
(function () {
  "use strict";

  // Admin page: answer-bar segments are as wide as their counts.
  document.querySelectorAll(".seg[data-n]").forEach(function (seg) {
    seg.style.flexGrow = seg.dataset.n;
  });
  document.querySelectorAll("form.confirm").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      var name = form.querySelector("input[name=name]").value;
      if (!window.confirm("Revoke " + name + "? Their token and sessions stop working.")) {
        event.preventDefault();
      }
    });
  });

  var form = document.getElementById("label-form");
  if (!form) return;
  var comment = document.getElementById("comment");
  var button = document.getElementById("submit");
  var keys = { "1": "left", a: "left", "2": "right", b: "right", "3": "tie", t: "tie",
               "0": "skip", s: "skip" };
  // Clip tasks also answer with the arrows (text tasks leave them to scrolling).
  var arrows = form.dataset.clips ? { ArrowLeft: "left", ArrowRight: "right", ArrowUp: "tie",
                                      ArrowDown: "unclear" } : {};

  function select(value) {
    var input = document.getElementById("choice-" + value);
    if (input) input.checked = true;
  }

  function submit() {
    if (!form.querySelector("input[name=choice]:checked")) {
      form.querySelector("fieldset.choices").classList.add("missing");
      return;
    }
    form.requestSubmit();
  }

  // One submission per page: a second Enter or click does nothing.
  form.addEventListener("submit", function (event) {
    if (form.dataset.sent) { event.preventDefault(); return; }
    form.dataset.sent = "1";
    button.disabled = true;
  });

  // Clicking a response selects it (unless the click ends a text selection).
  document.querySelectorAll(".response[data-choice]").forEach(function (card) {
    card.addEventListener("click", function () {
      if (String(window.getSelection() || "")) return;
      select(card.dataset.choice);
    });
  });

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey || event.isComposing) return;
    if (event.target.closest && event.target.closest("nav, a")) return;
    var typing = event.target === comment;
    if (event.key === "Enter") {
      if (typing && event.shiftKey) return;
      event.preventDefault();
      submit();
      return;
    }
    if (typing) {
      if (event.key === "Escape") comment.blur();
      return;
    }
    if (event.key === "c" || event.key === "C") {
      event.preventDefault();
      comment.focus();
      return;
    }
    var choice = arrows[event.key] || keys[event.key.toLowerCase()];
    if (choice) {
      event.preventDefault();
      select(choice);
    }
  });
})();
