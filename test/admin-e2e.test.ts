// The panel end to end in Debian's Chromium: log in, see a real poisoned event raise
// events_poisoned, requeue it by clicking and see the alert clear; re-enable a disabled endpoint;
// retry a dead letter; a stored XSS payload renders as text and runs nothing. Screenshots go to
// test-artifacts/ (git-ignored).
import { mkdirSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createAdminHandler, defineEvents, permanent } from '../src/index.js';
import { serve, TOKEN } from './helpers/admin.js';
import { browserAvailable, CHROMIUM, launchBrowser } from './helpers/browser.js';
import { pgliteTarget, requireServices, testBus } from './helpers/db.js';
import { rejectJobsFor } from './helpers/faults.js';

const events = defineEvents({
  'order.created': z.object({ orderNo: z.string(), note: z.string().optional() }),
});
const ARTIFACTS = 'test-artifacts';
const XSS = '<script>window.__xss = 1</script>"><img src=x onerror="window.__xss = 2">';

if (!browserAvailable) {
  if (requireServices) throw new Error(`Chromium is required (REA_REQUIRE_SERVICES=1) but ${CHROMIUM} is missing: apt-get install -y chromium`);
  console.warn(`admin e2e skipped: ${CHROMIUM} not found (apt-get install -y chromium to run it)`);
}

describe.skipIf(!browserAvailable)('admin panel in Chromium', () => {
  it('login, poisoned alert → requeue, re-enable an endpoint, retry a dead letter, XSS as text', async () => {
    const target = pgliteTarget;
    const bus = await testBus(target, events, { webhooks: { allowPrivateNetworks: true }, worker: { maxPollMs: 50 } } as never);
    const s = bus.schema;
    let deadFailures = 0;
    bus.on('order.created', 'mailer', (e) => {
      // Order DEAD fails for good once: a dead letter that works on retry.
      if (e.payload.orderNo === 'DEAD' && deadFailures++ === 0) throw permanent(new Error('mail server rejected <b>DEAD</b>'));
    });
    const receiver = await serve((_req, res) => {
      res.statusCode = 204;
      res.end();
    });
    await bus.start();

    // A real poisoned event: the jobs table rejects the jobs of order BOOM.
    const undo = await rejectJobsFor(target, s);
    const poisoned = bus.lifecycle.waitFor('relay:event:poisoned');
    const discarded = bus.lifecycle.waitFor('job:discarded');
    const [boomId, deadId, xssId] = await bus.transaction(async (tx) => [
      await bus.record(tx, 'order.created', { orderNo: 'BOOM' }),
      await bus.record(tx, 'order.created', { orderNo: 'DEAD' }),
      await bus.record(tx, 'order.created', { orderNo: 'X1', note: XSS }, { subject: XSS }),
    ]);
    await poisoned;
    await discarded;
    await undo(); // the cause is fixed; requeue will work
    const endpoint = await bus.endpoints.create({ url: `${receiver.url}/hook`, eventTypes: ['order.*'], description: 'warehouse' });
    await bus.endpoints.disable(endpoint.id, { reason: 'receiver returned 410 Gone' });

    const handler = createAdminHandler(bus, { auth: { token: TOKEN } });
    const app = await serve(handler);
    mkdirSync(ARTIFACTS, { recursive: true });
    const browser = await launchBrowser();
    try {
      const page = await browser.context.newPage();
      const dialogs: string[] = [];
      page.on('dialog', (d) => {
        dialogs.push(d.message());
        void d.accept();
      });
      const cspErrors: string[] = [];
      page.on('console', (m) => {
        if (/Content Security Policy/i.test(m.text())) cspErrors.push(m.text());
      });

      // Log in.
      await page.goto(app.url);
      expect(new URL(page.url()).pathname).toBe('/login');
      await page.fill('input[name=token]', 'wrong-token-wrong-token');
      await page.click('button[type=submit]');
      await expect(page.locator('[role=alert]').textContent()).resolves.toContain('Wrong credentials');
      await page.fill('input[name=token]', TOKEN);
      await page.click('button[type=submit]');
      await page.waitForSelector('h1:text("Overview")');
      const cookies = await browser.context.cookies();
      expect(cookies.find((c) => c.name === 'rea_admin_session')).toMatchObject({ httpOnly: true, sameSite: 'Strict' });
      expect(JSON.stringify(cookies)).not.toContain(TOKEN);

      // The alert, caused by the real poisoned row.
      const alert = page.locator('[data-alert="events_poisoned"]');
      await expect(alert.count()).resolves.toBe(1);
      expect(await alert.textContent()).toContain('1 poisoned');
      await page.screenshot({ path: `${ARTIFACTS}/overview.png` });
      await page.setViewportSize({ width: 390, height: 844 });
      await page.screenshot({ path: `${ARTIFACTS}/overview-narrow.png`, fullPage: true });
      await page.setViewportSize({ width: 1280, height: 800 });

      // Requeue by clicking; the confirm dialog comes from the nonce'd script.
      const fanned = bus.lifecycle.waitFor('relay:batch:fanned', (b) => b.eventIds.includes(boomId!));
      await Promise.all([page.waitForURL(/notice=Requeued/), alert.locator('button').click()]);
      expect(dialogs[0]).toContain('Requeue every poisoned event');
      await expect(page.locator('[data-alert="events_poisoned"]').count()).resolves.toBe(0);
      await fanned;
      expect((await target.query(`select poisoned_at, fanned_out_at from "${s}".events where id = $1`, [boomId]))[0].fanned_out_at).not.toBeNull();

      // Re-enable the disabled endpoint.
      await page.click('nav a:text("Endpoints")');
      const row = page.locator('tr', { hasText: `${receiver.url}/hook` });
      expect(await row.locator('.badge').textContent()).toBe('disabled');
      expect(await row.textContent()).toContain('receiver returned 410 Gone');
      await Promise.all([page.waitForURL(/notice=Enabled/), row.locator('button:text("Re-enable")').click()]);
      expect(await page.locator('tr', { hasText: `${receiver.url}/hook` }).locator('.badge').textContent()).toBe('enabled');
      expect((await target.query(`select state from "${s}".endpoints where id = $1`, [endpoint.id]))[0].state).toBe('enabled');
      expect(await page.content()).not.toContain('whsec_');

      // Edit a second endpoint on its own page, then delete it there: confirmed, then back on the list without it.
      const spare = await bus.endpoints.create({ url: `${receiver.url}/spare`, eventTypes: ['order.*'] });
      await page.goto(`${app.url}/endpoints/${spare.id}`);
      expect(await page.inputValue('input[name="eventTypes"]')).toBe('order.*');
      await page.fill('input[name="eventTypes"]', 'order.created, order.*');
      await page.fill('input[name="description"]', 'spare <b>receiver</b>');
      await Promise.all([page.waitForURL(/notice=Updated/), page.click('button:text("Save")')]);
      expect(await bus.endpoints.get(spare.id)).toMatchObject({ url: `${receiver.url}/spare`, eventTypes: ['order.created', 'order.*'], description: 'spare <b>receiver</b>' });
      expect(await page.inputValue('input[name="description"]')).toBe('spare <b>receiver</b>');
      expect(await page.locator('b', { hasText: 'receiver' }).count()).toBe(0);
      await Promise.all([page.waitForURL(/\/endpoints\?notice=Deleted/), page.locator('button:text("Delete")').click()]);
      expect(dialogs.at(-1)).toContain(`Delete ${receiver.url}/spare, its secrets and its waiting deliveries? There is no undo`);
      expect(await page.locator('tr', { hasText: `${receiver.url}/spare` }).count()).toBe(0);
      expect(await page.locator('tr', { hasText: `${receiver.url}/hook` }).count()).toBe(1);
      expect(await target.query(`select id from "${s}".endpoints where id = $1`, [spare.id])).toEqual([]);

      // Retry the dead letter from the jobs page.
      await page.click('nav a:text("Jobs")');
      await page.click('.tabs a:text("Dead letters")');
      const dead = page.locator('tr', { hasText: 'mail server rejected' });
      expect(await dead.textContent()).toContain('mail server rejected <b>DEAD</b>'); // escaped, shown as text
      const completed = bus.lifecycle.waitFor('job:completed', (e) => e.eventId === deadId);
      await Promise.all([page.waitForURL(/notice=Retrying/), dead.locator('button:text("Retry")').click()]);
      await completed;
      expect((await target.query(`select state from "${s}".jobs where event_id = $1`, [deadId]))[0].state).toBe('completed');

      // Stored XSS: shown as text on the events list and the event page, and nothing ran.
      await page.click('nav a:text("Events")');
      await page.waitForSelector('h1:text("Events")');
      expect(await page.locator('td', { hasText: '<script>window.__xss' }).first().textContent()).toContain('<script>window.__xss = 1</script>');
      await page.screenshot({ path: `${ARTIFACTS}/events.png` });
      await page.goto(`${app.url}/events/${xssId}`);
      expect(await page.locator('#payload').textContent()).toContain(XSS.replace(/"/g, '\\"'));
      expect(await page.evaluate(() => (globalThis as { __xss?: number }).__xss)).toBeUndefined();
      expect(await page.locator('img').count()).toBe(0);
      await page.screenshot({ path: `${ARTIFACTS}/event.png`, fullPage: true });
      expect(cspErrors).toEqual([]);
    } finally {
      await browser.close();
      handler.close();
    }
  }, 60_000);
});
