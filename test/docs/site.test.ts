/**
 * The documentation site, as a reader's browser sees it (Debian's chromium, headless, through
 * playwright-core): every page of the built site (`npm run docs:build`, docs/.vitepress/dist) loads
 * without a console error and without a request leaving the machine (the site works offline), every
 * internal link leads to a page that exists (and to an element with the id its `#fragment` names),
 * and the local search finds a page. Screenshots of the home page and a guide page are saved under
 * test-artifacts/.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { extname, join, relative, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { type Browser, chromium, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const root = fileURLToPath(new URL("../..", import.meta.url));
const site = join(root, "docs", ".vitepress", "dist");
const artifacts = join(root, "test-artifacts");
const CHROMIUM = process.env.ONCELY_CHROMIUM ?? "/usr/bin/chromium";

const TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".json": "application/json",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".woff2": "font/woff2",
  ".ico": "image/x-icon",
  ".txt": "text/plain; charset=utf-8",
};

function htmlPages(dir: string): string[] {
  const pages: string[] = [];
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) pages.push(...htmlPages(path));
    else if (name.endsWith(".html") && name !== "404.html")
      pages.push(`/${relative(site, path).split(sep).join("/")}`);
  }
  return pages;
}

/** The file a site path is served from, as a static host serves VitePress output. */
function fileFor(pathname: string): string | undefined {
  let path = decodeURIComponent(pathname);
  if (path.endsWith("/")) path += "index.html";
  const file = join(site, path);
  if (!file.startsWith(site)) return undefined;
  return existsSync(file) && statSync(file).isFile() ? file : undefined;
}

function pagePath(pathname: string): string {
  return pathname.endsWith("/") ? `${pathname}index.html` : pathname;
}

let server: Server;
let base: string;
let browser: Browser;

beforeAll(async () => {
  if (!existsSync(join(site, "index.html"))) {
    throw new Error(`no built site in ${relative(root, site)}: run npm run docs:build first`);
  }
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: apt-get install -y chromium`);
  mkdirSync(artifacts, { recursive: true });
  server = createServer((request, response) => {
    const file = fileFor(new URL(request.url ?? "/", "http://x").pathname);
    if (file === undefined) {
      response.writeHead(404, { "content-type": "text/plain" }).end("not found");
      return;
    }
    response.writeHead(200, { "content-type": TYPES[extname(file)] ?? "application/octet-stream" });
    response.end(readFileSync(file));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--headless"] });
});

afterAll(async () => {
  await browser?.close();
  await new Promise((resolve) => server?.close(resolve));
});

/** A page that records console errors, page errors, failed requests and any request off this host. */
async function watchedPage(problems: string[], at: { path: string }): Promise<Page> {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const path = () => at.path;
  page.on("console", (message) => {
    if (message.type() === "error") problems.push(`${path()}: console error: ${message.text()}`);
  });
  page.on("pageerror", (error) => problems.push(`${path()}: page error: ${error.message}`));
  page.on("requestfailed", (request) => {
    // Leaving a page cancels its prefetches of the pages it links to; anything else is a failure.
    if (request.failure()?.errorText !== "net::ERR_ABORTED")
      problems.push(`${path()}: request failed: ${request.url()}`);
  });
  page.on("response", (response) => {
    if (response.status() >= 400) problems.push(`${path()}: ${response.status()} for ${response.url()}`);
  });
  await page.route("**/*", (route) => {
    if (route.request().url().startsWith(base)) return route.continue();
    problems.push(`${path()}: a request left the machine: ${route.request().url()}`);
    return route.abort();
  });
  return page;
}

/** Loads a path and waits until the app has hydrated (a hydration mismatch is a console error). */
async function visit(page: Page, path: string): Promise<void> {
  await page.goto(`${base}${path}`, { waitUntil: "load" });
  await page.waitForFunction('"__vue_app__" in (document.querySelector("#app") ?? {})');
}

async function open(path: string, problems: string[]): Promise<Page> {
  const page = await watchedPage(problems, { path });
  await visit(page, path);
  return page;
}

describe("the documentation site in a browser", () => {
  it("loads every page without a console error or a request off this host, and every internal link resolves", async () => {
    const pages = htmlPages(site);
    expect(pages.length).toBeGreaterThan(20);
    const problems: string[] = [];
    const ids = new Map<string, Set<string>>();
    const links: { from: string; href: string }[] = [];
    const at = { path: "" };
    const page = await watchedPage(problems, at);
    const started = Date.now();
    for (const path of pages) {
      at.path = path;
      await visit(page, path);
      // (a string: this project's TypeScript has no DOM types)
      const found = (await page.evaluate(`({
        ids: [...document.querySelectorAll("[id]")].map((element) => element.id),
        hrefs: [...document.querySelectorAll("a[href]")].map((a) => a.href),
        title: document.title,
      })`)) as { ids: string[]; hrefs: string[]; title: string };
      expect(found.title, path).not.toBe("");
      ids.set(path, new Set(found.ids));
      for (const href of found.hrefs) if (href.startsWith(base)) links.push({ from: path, href });
    }
    await page.close();
    console.log(`${pages.length} pages loaded in ${Date.now() - started} ms`);
    for (const { from, href } of links) {
      const url = new URL(href);
      const target = pagePath(url.pathname);
      if (fileFor(url.pathname) === undefined) {
        problems.push(`${from}: link to ${url.pathname} leads nowhere`);
        continue;
      }
      const fragment = decodeURIComponent(url.hash.slice(1));
      if (fragment !== "" && target.endsWith(".html") && !ids.get(target)?.has(fragment)) {
        problems.push(`${from}: link to ${url.pathname}#${fragment}: no element with that id`);
      }
    }
    expect(links.length).toBeGreaterThan(pages.length);
    expect(problems).toEqual([]);
  }, 180_000);

  it("finds a page with the local search, and saves screenshots of the home page and a guide page", async () => {
    const problems: string[] = [];
    const home = await open("/", problems);
    await home.screenshot({ path: join(artifacts, "site-home.png"), fullPage: false });
    await home.locator(".VPNavBarSearch button").first().click();
    const input = home.locator(".VPLocalSearchBox input");
    await input.fill("dead-letter sizing");
    const results = home.locator(".VPLocalSearchBox .results .result");
    await results.first().waitFor({ timeout: 10_000 });
    expect(await results.count()).toBeGreaterThan(0);
    await results.first().click();
    await home.waitForURL((url) => url.pathname !== "/", { timeout: 10_000 });
    expect(await home.locator("main h1").first().textContent()).not.toBe("");
    await home.close();

    const guide = await open("/getting-started.html", problems);
    expect(await guide.locator("main h1").first().textContent()).toContain("Getting started");
    await guide.screenshot({ path: join(artifacts, "site-guide.png"), fullPage: false });
    await guide.close();
    expect(problems).toEqual([]);
  }, 60_000);
});
