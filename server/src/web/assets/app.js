// Quire's web page: the token kept in this tab, writes through the HTTP gateway, and the
// change feed followed live. Elements are found by their data-q names only, so nothing a
// document renders (headings carry ids) can stand in for them.
"use strict";
(() => {
  const TOKEN_KEY = "quire-token";
  const q = (name, root = document) => root.querySelector(`[data-q="${name}"]`);
  const token = () => sessionStorage.getItem(TOKEN_KEY);

  function withAuth(extra) {
    const headers = Object.assign({}, extra || {});
    const secret = token();
    if (secret) headers["Authorization"] = "Bearer " + secret;
    return headers;
  }

  function say(text, failed) {
    const message = q("message");
    message.textContent = text;
    message.classList.toggle("failed", Boolean(failed));
  }

  // Reloads the page's content with the token, without leaving the page.
  async function refresh() {
    const answer = await fetch(location.href, { headers: withAuth({ Accept: "text/html" }) });
    const page = new DOMParser().parseFromString(await answer.text(), "text/html");
    const fresh = q("main", page);
    if (!fresh) return;
    q("main").replaceWith(document.adoptNode(fresh));
    document.body.dataset.status = page.body.dataset.status || "";
    document.body.dataset.markStatus = page.body.dataset.markStatus || "";
    const watch = page.body.dataset.watch;
    if (watch && watch !== document.body.dataset.watch) {
      document.body.dataset.watch = watch;
      follow();
    }
    bindWrites();
  }

  async function write(method, url, body, headers) {
    const answer = await fetch(url, {
      method,
      headers: withAuth(Object.assign({ "Content-Type": "text/markdown" }, headers)),
      body,
    });
    const status = answer.headers.get("Mark-Status") || String(answer.status);
    const text = (await answer.text()).trim();
    if (answer.ok) {
      const version = answer.headers.get("Mark-Version");
      say(`${status}: version ${version}`);
      await refresh();
      return true;
    }
    say(`${status}: ${text.replace(/^#\s*[^\n]*\n+/, "")}`, true);
    return false;
  }

  function bindWrites() {
    const publish = q("publish");
    if (publish && !publish.dataset.bound) {
      publish.dataset.bound = "1";
      publish.addEventListener("submit", (event) => {
        event.preventDefault();
        write("PUT", publish.dataset.url, publish.elements.body.value, {
          "Expected-Version": publish.dataset.version,
        });
      });
    }
    const append = q("append");
    if (append && !append.dataset.bound) {
      append.dataset.bound = "1";
      append.addEventListener("submit", (event) => {
        event.preventDefault();
        write("POST", append.dataset.url + "?append", append.elements.body.value, {
          "Expected-Version": append.dataset.version,
        });
      });
    }
    const create = q("create-form");
    if (create && !create.dataset.bound) {
      create.dataset.bound = "1";
      create.addEventListener("submit", async (event) => {
        event.preventDefault();
        const name = create.elements.name.value.trim();
        const url = create.dataset.dir + name.split("/").map(encodeURIComponent).join("/");
        const made = await write("PUT", url, create.elements.body.value, { "If-None-Match": "*" });
        if (made) location.assign(url);
      });
    }
  }

  // The change feed as Server-Sent Events, read with fetch so the token can go in a header;
  // a dropped stream is opened again after the last event seen (Last-Event-ID).
  let following = null;
  let lastEventId = null;
  async function follow() {
    const scope = document.body.dataset.watch;
    if (following) following.abort();
    if (!scope) return;
    const controller = new AbortController();
    following = controller;
    const state = q("live-state");
    try {
      const headers = withAuth({ Accept: "text/event-stream" });
      if (lastEventId) headers["Last-Event-ID"] = lastEventId;
      const answer = await fetch(scope + "?watch", { headers, signal: controller.signal });
      if (!answer.ok) {
        state.textContent = `live updates unavailable (${answer.status})`;
        return;
      }
      const reader = answer.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          onFrame(buffer.slice(0, end));
          buffer = buffer.slice(end + 2);
        }
      }
    } catch (error) {
      if (controller.signal.aborted) return;
    }
    if (following === controller) {
      state.textContent = "reconnecting";
      setTimeout(follow, 1000);
    }
  }

  function onFrame(frame) {
    let id = null;
    let event = "message";
    let data = "";
    for (const line of frame.split("\n")) {
      if (line.startsWith("id:")) id = line.slice(3).trim();
      else if (line.startsWith("event:")) event = line.slice(6).trim();
      else if (line.startsWith("data:")) data += line.slice(5).trim();
    }
    if (id) lastEventId = id;
    const state = q("live-state");
    if (event === "ready") state.textContent = "following changes";
    if (event === "change") {
      const change = JSON.parse(data);
      const item = document.createElement("li");
      item.dataset.q = "change";
      const by = change.agent ? ` by ${change.agent}` : "";
      item.textContent = `${change.op} ${change.path} v${change.version}${by}`;
      q("changes").prepend(item);
      refresh();
    }
  }

  function bindToken() {
    const form = q("token-form");
    const field = q("token");
    if (token()) field.placeholder = "token set for this tab";
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const secret = field.value.trim();
      if (!secret) return;
      sessionStorage.setItem(TOKEN_KEY, secret);
      field.value = "";
      field.placeholder = "token set for this tab";
      say("token kept in this tab");
      await refresh();
      follow();
    });
    q("forget").addEventListener("click", async () => {
      sessionStorage.removeItem(TOKEN_KEY);
      field.placeholder = "token (kept in this tab)";
      say("token forgotten");
      await refresh();
      follow();
    });
  }

  document.addEventListener("DOMContentLoaded", async () => {
    bindToken();
    bindWrites();
    const status = document.body.dataset.status;
    if (token() && (status === "401" || status === "403")) await refresh();
    follow();
  });
})();
