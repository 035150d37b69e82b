// corral's web console: the live lists. The inbox refreshes its list in place (new actions
// appear without a reload) and marks expired actions; an agent session's page adds the
// session's new events at the end of its list until the session fails or is gone. Both poll
// the server every 3 s, same-origin only; no other script runs.
"use strict";
(function () {
  var every = 3000;

  // Fetches `url()` every `every` ms and hands each answer to `take(response, text)`, until
  // `take` returns false. A 401 (the session ended) goes to the sign-in; a network error
  // tries again next round.
  function poll(url, take) {
    function round() {
      fetch(url(), { credentials: "same-origin", cache: "no-store", redirect: "error" })
        .then(function (r) {
          if (r.status === 401) { window.location.assign("/ui/login"); return false; }
          return r.text().then(function (text) { return take(r, text); });
        })
        .catch(function () { return true; })
        .then(function (again) { if (again !== false) { window.setTimeout(round, every); } });
    }
    window.setTimeout(round, every);
  }

  function inbox(list) {
    var src = list.getAttribute("data-src");
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

    markExpired();
    poll(function () { return src; }, function (r, html) {
      if (!r.ok || html === list.innerHTML) { return true; }
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
      return true;
    });
  }

  // An agent session's events: asks for those after the last one shown and appends them
  // (nothing already shown moves, so focus and reading position stay). Stops when the
  // session failed (`X-Corral-Session-Status`) or is gone (404).
  function session(list) {
    var src = list.getAttribute("data-src");
    var after = list.getAttribute("data-after") || "0";
    var status = document.getElementById("session-status");
    var live = document.getElementById("session-live");
    poll(function () { return src + "?after=" + encodeURIComponent(after); }, function (r, html) {
      if (r.status === 404) {
        if (live) { live.textContent = "This session is gone: no new event will come."; }
        return false;
      }
      if (!r.ok) { return true; }
      var state = r.headers.get("x-corral-session-status");
      if (status && state) { status.textContent = state; }
      if (html) {
        var n = list.children.length;
        list.insertAdjacentHTML("beforeend", html);
        var added = list.children.length - n;
        var last = list.lastElementChild;
        if (last && last.getAttribute("value")) { after = last.getAttribute("value"); }
        if (live && added > 0) { live.textContent = added + " new event(s)."; }
      }
      if (state === "failed") {
        if (live) { live.textContent = "The session failed: no new event will come."; }
        return false;
      }
      return true;
    });
  }

  var inboxList = document.getElementById("inbox-items");
  if (inboxList) { inbox(inboxList); }
  var events = document.getElementById("session-events");
  if (events && events.getAttribute("data-src")) { session(events); }
})();
