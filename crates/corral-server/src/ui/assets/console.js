// corral's web console: the inbox refreshes its list in place (new actions appear without a
// reload) and marks expired actions. Same-origin requests only; no other script runs.
"use strict";
(function () {
  var list = document.getElementById("inbox-items");
  if (!list) { return; }
  var src = list.getAttribute("data-src");
  var every = 3000;
  // When the list last changed under the reader. A pointer click within `settle` of that may
  // have been aimed at what was there before (a new action, newest first, moves the rest down
  // under the pointer), so it decides nothing. The keyboard keeps its control (see below).
  var changedAt = 0;
  var settle = 1500;

  list.addEventListener("click", function (e) {
    var b = e.target && e.target.closest ? e.target.closest("button") : null;
    if (b && list.contains(b) && e.detail > 0 && Date.now() - changedAt < settle) {
      e.preventDefault();
    }
  }, true);

  function markExpired() {
    var now = Date.now();
    var items = list.querySelectorAll("article.action[data-expires]");
    for (var i = 0; i < items.length; i++) {
      var a = items[i];
      if (Number(a.getAttribute("data-expires")) <= now && !a.classList.contains("expired")) {
        a.classList.add("expired");
        var buttons = a.querySelectorAll("button.approve");
        for (var j = 0; j < buttons.length; j++) { buttons[j].disabled = true; }
      }
    }
  }

  function refresh() {
    fetch(src, { credentials: "same-origin", cache: "no-store", redirect: "error" })
      .then(function (r) {
        if (r.status === 401) { window.location.assign("/ui/login"); return null; }
        return r.ok ? r.text() : null;
      })
      .then(function (html) {
        if (html === null || html === list.innerHTML) { return; }
        // Keep the keyboard where it was: the same control of the same action, if still there.
        var focused = document.activeElement;
        var key = null;
        if (focused && list.contains(focused)) {
          var form = focused.closest("form");
          key = form ? form.getAttribute("action") + " " + (focused.className || "") : null;
        }
        list.innerHTML = html;
        changedAt = Date.now();
        if (key) {
          var forms = list.querySelectorAll("form");
          for (var i = 0; i < forms.length; i++) {
            var b = forms[i].querySelector("button");
            if (b && forms[i].getAttribute("action") + " " + (b.className || "") === key) { b.focus(); break; }
          }
        }
        markExpired();
      })
      .catch(function () { /* the next round tries again */ })
      .then(function () { window.setTimeout(refresh, every); });
  }

  markExpired();
  window.setTimeout(refresh, every);
})();
