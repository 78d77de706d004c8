// Drives the chart's gateway's web page against worker pods: a reader
// watches a session wait for approval and is refused the approval, then an
// operator approves it with a click and the reply comes.
import { env, open } from '../../../internal/gateway/testdata/browser.mjs';

const gateway = env('STEPWISE_PAGE_GATEWAY');
const session = env('STEPWISE_PAGE_SESSION');
const operatorToken = env('STEPWISE_PAGE_TOKEN');
const readerToken = env('STEPWISE_PAGE_READER_TOKEN');

const { browser, page, screenshot, step, useToken, assistantSays } = await open();
try {
  await step('a reader opens the session waiting for approval', async () => {
    await page.goto(gateway + '/');
    await useToken(readerToken);
    await page.goto(`${gateway}/ui/#/sessions/default/support/${session}`);
    await page.locator('.interrupt.approval').waitFor();
    await page.waitForSelector('#connection[data-state="live"]');
    await page.waitForSelector('#graph .step[data-step="AwaitToolApproval"][data-active="true"]');
    await screenshot('cluster-approval');
  });

  await step('the reader, without the approve verb, is refused', async () => {
    await page.locator('.interrupt.approval .approve').click();
    await page.waitForFunction(() => document.getElementById('error').textContent.includes('may not approve'));
    await screenshot('cluster-reader-refused');
  });

  await step('an operator approves and the reply comes', async () => {
    await useToken(operatorToken);
    await page.locator('.interrupt.approval .approve').click();
    await assistantSays('refund rf-');
    await screenshot('cluster-approved');
  });
} finally {
  await browser.close();
}
console.log('ok');
