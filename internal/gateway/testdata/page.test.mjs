// Drives the gateway's web page in headless Chromium as a person would:
// a session streams, its connection is cut and resumed, an approval is
// clicked, a question answered, a plan executed, a turn steered and a turn
// stopped. It exits non-zero at the first expectation that fails, after a
// screenshot of the page as it then was.
import assert from 'node:assert/strict';

import { env, open } from './browser.mjs';

const gateway = env('STEPWISE_PAGE_GATEWAY');
const control = env('STEPWISE_PAGE_CONTROL');
const operatorToken = env('STEPWISE_PAGE_TOKEN');
const readerToken = env('STEPWISE_PAGE_READER_TOKEN');

const words = (n) => Array.from({ length: n }, (_, i) => `w${i + 1} `).join('');

const { browser, page, screenshot, step, useToken, assistantSays } = await open();

// Every text the live area shows, as it changes: streamed text must only
// ever grow by what the model sent, whatever the connection does.
await page.addInitScript(() => {
  window.liveTexts = [];
  document.addEventListener('DOMContentLoaded', () => {
    new MutationObserver(() => {
      const text = [...document.querySelectorAll('#live .text')].map((e) => e.textContent).join('|');
      if (text) window.liveTexts.push(text);
    }).observe(document.getElementById('live'), { childList: true, subtree: true, characterData: true });
  });
});

const lastAssistant = () => page.locator('#messages li[data-role="assistant"]').last();
async function send(text, { planMode = false } = {}) {
  await page.fill('#message', text);
  await page.setChecked('#plan-mode', planMode);
  await page.click('#send');
}
async function turnEnds() {
  await page.waitForFunction(() => document.body.dataset.activeTurn === '' &&
    document.querySelector('#session-status .status')?.dataset.status === 'waiting_for_user_message');
}

try {
  await step('the page opens on the waiting list', async () => {
    const resp = await page.goto(gateway + '/');
    assert.equal(resp.status(), 200);
    assert.match(resp.headers()['content-security-policy'], /script-src 'self'/);
    await useToken(operatorToken);
    await page.waitForSelector('#waiting-view:not([hidden])');
    await page.waitForFunction(() => document.getElementById('waiting-note').textContent.includes('No session waits'));
    await screenshot('waiting-list-empty');
  });

  await step('a session starts and its text streams', async () => {
    await page.fill('#open-form [name=namespace]', 'team-a');
    await page.fill('#open-form [name=agent]', 'support');
    await page.fill('#open-form [name=session]', 's-page');
    await page.fill('#open-form [name=message]', 'stream: 60');
    await page.click('#open-form [name=start]');
    await page.waitForSelector('#session-view:not([hidden])');
    await page.waitForFunction(() => (document.querySelector('#live .text')?.textContent || '').includes('w12 '));
    await screenshot('streaming');
  });

  await step('the connection is cut mid-turn and resumes without missing or repeated text', async () => {
    const cut = await (await fetch(control + '/cut')).json();
    assert.ok(cut.cut >= 1, `no event stream was open to cut: ${JSON.stringify(cut)}`);
    await page.waitForFunction(() => Number(document.body.dataset.reconnects || 0) >= 1);
    await page.waitForSelector('#connection[data-state="live"]');
    await assistantSays('w60');
    const seen = await page.evaluate(() => window.liveTexts);
    const want = words(60);
    for (const text of seen) {
      assert.ok(want.startsWith(text), `the live text was once ${JSON.stringify(text)}, which is not the start of the answer`);
    }
    assert.equal(seen.reduce((a, b) => (b.length > a.length ? b : a), ''), want, 'the live text never held the whole answer');
    assert.equal((await lastAssistant().textContent()).trim(), want.trim());
    await turnEnds();
    await screenshot('streamed-after-a-cut');
  });

  await step('an approval shows the call, its effect, and the Step the session is in', async () => {
    await send('tools: write_approved');
    const card = page.locator('.interrupt.approval[data-tool="write_approved"]');
    await card.waitFor();
    assert.match(await card.locator('.arguments').textContent(), /"note": "n1"/);
    const call = page.locator('.tool-call[data-tool="write_approved"]');
    assert.equal(await call.getAttribute('data-effect'), 'non_idempotent_write');
    assert.equal(await call.getAttribute('data-status'), 'awaiting_approval');
    // The search attribute follows the session a moment later.
    const active = '#graph .step[data-step="AwaitToolApproval"][data-active="true"]';
    for (let i = 0; ; i++) {
      try {
        await page.waitForSelector(active, { timeout: 3000 });
        break;
      } catch (e) {
        if (i === 10) throw e;
        await page.reload();
      }
    }
    await screenshot('approval');
  });

  await step('a reload rebuilds the pending approval from the snapshot', async () => {
    await page.reload();
    await page.locator('.interrupt.approval[data-tool="write_approved"]').waitFor();
  });

  await step('the waiting list shows the session', async () => {
    await page.goto(gateway + '/ui/#/');
    await page.locator('#waiting tr[data-session="s-page"]').waitFor({ timeout: 60_000 });
    assert.match(await page.locator('#waiting tr[data-session="s-page"]').textContent(), /AwaitToolApproval/);
    await screenshot('waiting-list');
    await page.click('#waiting tr[data-session="s-page"] a');
    await page.locator('.interrupt.approval[data-tool="write_approved"]').waitFor();
  });

  await step('a reader may watch but not approve', async () => {
    await useToken(readerToken);
    await page.locator('.interrupt.approval .approve').click();
    await page.waitForFunction(() => document.getElementById('error').textContent.includes('may not approve'));
    await screenshot('reader-refused');
    await useToken(operatorToken);
  });

  await step('a double click approves once and the tool runs', async () => {
    await page.locator('.interrupt.approval .approve').dblclick();
    await assistantSays('results: write_approved=');
    await turnEnds();
    assert.equal(await page.locator('.interrupt').count(), 0);
    await screenshot('approved');
  });

  await step('a question is answered with a choice', async () => {
    await send('ask: which color?');
    const card = page.locator('.interrupt.question');
    await card.waitFor();
    assert.equal((await card.locator('h3').textContent()).trim(), 'which color?');
    assert.equal((await card.locator('.asker').textContent()).trim(), 'The agent asks');
    await screenshot('question');
    await card.locator('[data-choice="blue"]').click();
    await assistantSays('blue');
    await turnEnds();
  });

  await step('a plan is drafted, then executed', async () => {
    await send('plan: draft the notes; send them', { planMode: true });
    await page.waitForSelector('#plan-status[data-status="draft"]');
    await page.locator('#execute-plan').waitFor();
    await screenshot('plan-draft');
    await page.click('#execute-plan');
    await page.waitForSelector('#plan-status[data-status="completed"]');
    await turnEnds();
  });

  await step('a turn is steered with new text', async () => {
    await send('stream: 100');
    await page.waitForFunction(() => (document.querySelector('#live .text')?.textContent || '').includes('w5 '));
    await page.fill('#message', 'a new direction');
    await page.click('#steer');
    await assistantSays('echo: a new direction');
    await turnEnds();
    await screenshot('steered');
  });

  await step('Stop cancels a turn that waits', async () => {
    await send('wait: 3600');
    await page.waitForSelector('.tool-call[data-status="waiting_for_timer"]');
    await page.click('#stop');
    await turnEnds();
    await screenshot('stopped');
  });
} finally {
  await browser.close();
}
console.log('ok');
