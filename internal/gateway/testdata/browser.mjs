// What the browser scripts of the web page share: the system's Chromium,
// driven by playwright-core, a page that logs its errors, and a screenshot
// of each stage, and of the page as it was when a stage failed.
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

export function env(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
}

// open launches Chromium and returns its page and the helpers bound to it.
export async function open() {
  const require = createRequire(path.join(env('STEPWISE_BROWSER_DRIVER'), 'playwright-core', 'package.json'));
  const { chromium } = require('playwright-core');
  const artifacts = env('STEPWISE_PAGE_ARTIFACTS');
  fs.mkdirSync(artifacts, { recursive: true });
  const browser = await chromium.launch({
    executablePath: env('STEPWISE_CHROMIUM'),
    // The tests run as root in a container, where Chromium's sandbox cannot.
    args: ['--no-sandbox', '--disable-dev-shm-usage'],
  });
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  page.setDefaultTimeout(30_000);
  page.on('console', (m) => { if (m.type() === 'error') console.log(`page console: ${m.text()}`); });
  page.on('pageerror', (e) => console.log(`page error: ${e.message}`));

  let shot = 0;
  const screenshot = async (name) => {
    shot++;
    const file = path.join(artifacts, `${String(shot).padStart(2, '0')}-${name}.png`);
    await page.screenshot({ path: file, fullPage: true });
    console.log(`screenshot ${file}`);
  };
  const step = async (name, fn) => {
    console.log(`- ${name}`);
    try {
      await fn();
    } catch (e) {
      await screenshot('failed-' + name.replaceAll(/[^a-z0-9]+/gi, '-')).catch(() => {});
      throw e;
    }
  };
  const useToken = async (token) => {
    await page.fill('#token', token);
    await page.click('#token-form button');
  };
  // assistantSays waits for an assistant message that holds text.
  const assistantSays = (text) => page.waitForFunction((t) => [...document.querySelectorAll('#messages li[data-role="assistant"]')]
    .some((m) => m.textContent.includes(t)), text);
  return { browser, page, screenshot, step, useToken, assistantSays };
}
