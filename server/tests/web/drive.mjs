// Drives Quire's web page in headless Chromium (playwright-core, Debian's chromium) against
// a live `quire serve`: browse, open a document, compare two versions, search, watch a
// change arrive live, publish with a token (and be refused without one), and check that a
// document holding <script> renders inert. Prints "all checks passed" at the end.
//
// node drive.mjs --base http://127.0.0.1:6309 --token quire_... --chromium /usr/bin/chromium \
//     --profile /tmp/profile --screenshots /tmp/shots
import assert from "node:assert/strict";
import path from "node:path";
import { chromium } from "playwright-core";

const args = Object.fromEntries(
  process.argv.slice(2).reduce((pairs, word, at, all) => {
    if (word.startsWith("--")) pairs.push([word.slice(2), all[at + 1]]);
    return pairs;
  }, []),
);
const base = args.base;
// A guard against a hang, never reached when the page behaves.
const WAIT = 20000;

async function put(docPath, body, headers = {}) {
  const answer = await fetch(base + docPath, {
    method: "PUT",
    headers: Object.assign({ Authorization: `Bearer ${args.token}` }, headers),
    body,
  });
  assert.ok(answer.ok, `PUT ${docPath}: ${answer.status} ${await answer.text()}`);
  return Number(answer.headers.get("mark-version"));
}

// The world the page is shown.
await put("/web/hello.md", "# Hello\n\nThe first words.\n\nSee [the other](other.md).\n", {
  "Meta-title": "Hello page",
});
await put("/web/hello.md", "# Hello\n\nThe second words.\n\nSee [the other](other.md).\n", {
  "Meta-title": "Hello page",
});
await put("/web/other.md", "# Other\n\nA quiet fox sleeps here.\n");
await put(
  "/web/evil.md",
  '# Evil\n\n<script>window.__pwned = 1</script>\n\n<img src="https://evil.example/x.png" onerror="window.__pwned = 2">\n\n[click](javascript:window.__pwned=3)\n\n<a href="#" onclick="window.__pwned = 4">also</a>\n',
);

// Markdown and curl clients get what they always got.
{
  const plain = await fetch(base + "/web/hello.md");
  assert.match(plain.headers.get("content-type"), /text\/markdown/);
  assert.match(await plain.text(), /^# Hello/);
}

const context = await chromium.launchPersistentContext(args.profile, {
  executablePath: args.chromium,
  headless: true,
  args: [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
  viewport: { width: 1200, height: 800 },
});
const shot = (page, name) =>
  page.screenshot({ path: path.join(args.screenshots, `${name}.png`), fullPage: true });
let checks = 0;
const check = () => (checks += 1);

try {
  const page = context.pages()[0] || (await context.newPage());
  page.setDefaultTimeout(WAIT);
  const elsewhere = [];
  page.on("request", (request) => {
    if (!request.url().startsWith(base)) elsewhere.push(request.url());
  });
  const q = (name) => page.locator(`[data-q="${name}"]`);

  // Browse: the root, then a directory, by their links.
  await page.goto(base + "/");
  await q("listing").getByRole("link", { name: "web/" }).click();
  await page.waitForURL(base + "/web/");
  assert.equal(await q("crumbs").innerText(), "local / web");
  await q("listing").getByRole("link", { name: "hello.md" }).waitFor();
  await shot(page, "1-listing");
  check();

  // Open a document.
  await q("listing").getByRole("link", { name: "hello.md" }).click();
  await page.waitForURL(base + "/web/hello.md");
  assert.equal(await q("document").locator("h1").innerText(), "Hello");
  assert.equal(await q("document").locator("h1").getAttribute("id"), "hello");
  assert.match(await q("version").innerText(), /Version 2/);
  assert.equal(
    await q("document").getByRole("link", { name: "the other" }).getAttribute("href"),
    "/web/other.md",
  );
  assert.equal(await page.title(), "Hello page · Quire");
  await shot(page, "2-document");
  check();

  // Compare two versions.
  await q("history").click();
  await page.waitForURL(base + "/web/hello.md?versions");
  assert.match(await q("chain").innerText(), /verified/);
  assert.equal(
    await q("versions").getByRole("link", { name: "v1" }).getAttribute("href"),
    "/web/hello.md/v1",
  );
  await q("compare").locator('select[name="from"]').selectOption("1");
  await q("compare").locator('select[name="to"]').selectOption("2");
  await q("compare").getByRole("button", { name: "Compare" }).click();
  await page.waitForURL(/\?diff/);
  assert.equal(await q("diff").locator("tr.del").innerText(), "3\t\tThe first words.");
  assert.equal(await q("diff").locator("tr.ins").innerText(), "\t3\tThe second words.");
  await shot(page, "3-diff");
  check();

  // A pinned version opened from the history.
  await page.goto(base + "/web/hello.md?versions");
  await q("versions").getByRole("link", { name: "v1" }).click();
  await page.waitForURL(base + "/web/hello.md/v1");
  assert.match(await q("document").innerText(), /The first words/);
  assert.match(await q("version").innerText(), /Version 1 of 2/);
  check();

  // Search from the box.
  await page.goto(base + "/web/");
  await q("search").locator('input[name="query"]').fill("fox");
  await q("search").locator('select[name="match"]').selectOption("catalog");
  await q("search").getByRole("button", { name: "Search" }).click();
  await page.waitForURL(/lookup/);
  await page.goto(base + "/web/?lookup&query=hello&match=body");
  assert.match(await q("matches").innerText(), /^[1-9]\d* matches for “hello” in \/web\//);
  const hit = q("results").getByRole("link", { name: /\/web\/hello\.md/ });
  assert.match(await hit.first().getAttribute("href"), /^\/web\/hello\.md/);
  assert.ok((await q("results").locator("mark").count()) >= 1, "terms are marked");
  await shot(page, "4-search");
  check();

  // A change arrives live: the document page follows its change feed.
  await page.goto(base + "/web/hello.md");
  await page.waitForFunction(
    () => document.querySelector('[data-q="live-state"]').textContent === "following changes",
  );
  await put("/web/hello.md", "# Hello\n\nWords written while you watched.\n");
  await q("changes").locator("li").first().waitFor();
  assert.match(await q("changes").innerText(), /publish \/web\/hello\.md v3/);
  await page.waitForFunction(() =>
    document.querySelector('[data-q="document"]').textContent.includes("while you watched"),
  );
  assert.match(await q("version").innerText(), /Version 3/);
  await shot(page, "5-live");
  check();

  // Any EventSource can follow the feed, and resumes after the last event it saw.
  const readyState = await page.evaluate(async () => {
    const source = new EventSource("/web/?watch");
    window.__source = source;
    window.__change = new Promise((resolve) =>
      source.addEventListener(
        "change",
        (e) => resolve({ id: e.lastEventId, data: JSON.parse(e.data) }),
        { once: true },
      ),
    );
    await new Promise((resolve) => source.addEventListener("ready", resolve, { once: true }));
    return source.readyState;
  });
  assert.equal(readyState, 1);
  await put("/web/other.md", "# Other\n\nThe fox woke up.\n");
  const event = await page.evaluate(() => window.__change);
  assert.equal(event.data.path, "/web/other.md");
  assert.equal(event.data.op, "publish");
  assert.match(event.id, /^[A-Za-z0-9._-]+:\d+$/);
  await page.evaluate(() => window.__source.close());
  // Resuming with Last-Event-ID delivers the change committed after that event, even though
  // it was committed before the stream opened.
  const later = await put("/web/other.md", "# Other\n\nThe fox ran off.\n");
  const resumed = new AbortController();
  const stream = await fetch(base + "/web/?watch", {
    headers: { Accept: "text/event-stream", "Last-Event-ID": event.id },
    signal: resumed.signal,
  });
  assert.equal(stream.headers.get("content-type"), "text/event-stream");
  const reader = stream.body.pipeThrough(new TextDecoderStream()).getReader();
  let text = "";
  while (!text.includes("event: change")) {
    const { value, done } = await reader.read();
    assert.ok(!done, `the stream ended early: ${text}`);
    text += value;
  }
  resumed.abort();
  assert.match(text, new RegExp(`id: ${event.id}\nevent: ready`));
  assert.match(text, new RegExp(`"path":"/web/other.md","version":${later}`));
  check();

  // Publishing needs a token: refused without one, accepted with one kept in the tab.
  await page.goto(base + "/web/hello.md");
  await q("edit").locator("summary").click();
  await q("publish").locator("textarea").fill("# Hello\n\nPublished from the page.\n");
  await q("publish").getByRole("button", { name: "Publish" }).click();
  await page.waitForFunction(() => document.querySelector('[data-q="message"]').textContent.length > 0);
  assert.match(await q("message").innerText(), /^unauthorized/);
  await shot(page, "6-refused");
  await q("token").fill(args.token);
  await q("token-form").getByRole("button", { name: "Use token" }).click();
  await page.waitForFunction(
    () => document.querySelector('[data-q="message"]').textContent === "token kept in this tab",
  );
  await q("edit").locator("summary").click();
  await q("publish").locator("textarea").fill("# Hello\n\nPublished from the page.\n");
  await q("publish").getByRole("button", { name: "Publish" }).click();
  await page.waitForFunction(() =>
    document.querySelector('[data-q="document"]').textContent.includes("Published from the page"),
  );
  assert.match(await q("message").innerText(), /^created: version 4/);
  assert.ok(!page.url().includes(args.token), "the token never goes in a URL");
  assert.equal(await page.evaluate(() => sessionStorage.getItem("quire-token")), args.token);
  // Append from the page.
  await q("append-box").locator("summary").click();
  await q("append").locator("textarea").fill("An appended line.\n");
  await q("append").getByRole("button", { name: "Append" }).click();
  await page.waitForFunction(() =>
    document.querySelector('[data-q="document"]').textContent.includes("An appended line"),
  );
  await shot(page, "7-published");
  check();

  // A document holding <script> renders inert, and loads nothing from elsewhere.
  const answer = await page.goto(base + "/web/evil.md");
  const policy = answer.headers()["content-security-policy"];
  assert.match(policy, /script-src 'self'/);
  assert.match(policy, /default-src 'none'/);
  await q("document").locator("h1").waitFor();
  assert.equal(await q("document").locator("script, iframe, [onerror], [onclick]").count(), 0);
  const href = await q("document").getByText("click").getAttribute("href");
  assert.ok(href === null || !href.startsWith("javascript:"), href);
  await q("document").getByText("also").click();
  assert.equal(await page.evaluate(() => window.__pwned), undefined);
  assert.deepEqual(elsewhere, []);
  await shot(page, "8-inert");
  check();

  console.log(`${checks} page checks passed`);
} finally {
  await context.close();
}
console.log("all checks passed");
