// The console's only script: it follows a call's timeline over
// server-sent events and refreshes the execution log's first page and
// the dashboard. The server renders (and escapes) every fragment it
// inserts.
"use strict";

function followCall(timeline) {
  const state = document.getElementById("state");
  const bar = document.getElementById("progress");
  const text = document.getElementById("progress-text");
  const events = new EventSource(timeline.dataset.events);
  events.addEventListener("ev", (e) => {
    timeline.insertAdjacentHTML("beforeend", e.data);
    const line = timeline.lastElementChild;
    if (line.dataset.state && state) {
      state.textContent = line.dataset.state;
    }
    if (line.dataset.progress !== undefined && bar) {
      const total = parseFloat(line.dataset.total);
      const done = parseFloat(line.dataset.progress);
      if (total > 0) {
        bar.value = Math.min(1, Math.max(0, done / total));
      } else if (!bar.hasAttribute("value") || bar.value === 0) {
        bar.removeAttribute("value"); // under way, of unknown extent
      }
      text.textContent = done + (total > 0 ? " of " + total : "") + (line.dataset.message ? ": " + line.dataset.message : "");
    }
    const now = line.dataset.state;
    if (bar && now === "completed") {
      // A completed call is done, whatever its tool last reported.
      bar.value = 1;
      text.textContent = "complete";
    } else if (bar && now === "running" && line.dataset.progress === undefined && bar.value === 0 && text.textContent === "") {
      bar.removeAttribute("value"); // under way, of unknown extent
    } else if (bar && now && now !== "running" && !bar.hasAttribute("value")) {
      bar.value = 0; // no longer under way
    }
  });
  events.addEventListener("result", (e) => {
    document.getElementById("result").innerHTML = e.data;
  });
  events.addEventListener("end", () => {
    events.close();
    const cancel = document.getElementById("cancel-form");
    if (cancel) {
      cancel.remove();
    }
  });
  events.addEventListener("failure", (e) => {
    events.close();
    const p = document.createElement("p");
    p.className = "error";
    p.textContent = e.data;
    timeline.after(p);
  });
}

// refresh replaces the content of an element with the fragment its
// data-refresh names, every period milliseconds.
function refresh(body, period) {
  setInterval(async () => {
    try {
      const reply = await fetch(body.dataset.refresh, { credentials: "same-origin" });
      if (reply.redirected) {
        // The session ended: the page reload shows the login page.
        location.reload();
        return;
      }
      if (reply.ok) {
        body.innerHTML = await reply.text();
      }
    } catch (err) {
      // The next refresh tries again.
    }
  }, period);
}

document.addEventListener("DOMContentLoaded", () => {
  const timeline = document.getElementById("timeline");
  if (timeline && timeline.dataset.events) {
    followCall(timeline);
  }
  const rows = document.getElementById("calls-body");
  if (rows && rows.dataset.refresh) {
    refresh(rows, 2000);
  }
  const dashboard = document.getElementById("dashboard");
  if (dashboard && dashboard.dataset.refresh) {
    refresh(dashboard, 15000);
  }
});
