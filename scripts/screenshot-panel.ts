// Regenerate docs/panel-overview.png from the real panel: run the demo into PGlite, add one
// poisoned event and one disabled endpoint so the alerts show, serve the panel and screenshot it
// in Debian's Chromium. Run: node --import tsx scripts/screenshot-panel.ts [out.png]
import { mkdirSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { runDemo } from '../src/cli/demo.js';
import { launchBrowser, browserAvailable, CHROMIUM } from '../test/helpers/browser.js';

const out = resolve(process.argv[2] ?? 'docs/panel-overview.png');
if (!browserAvailable) {
  console.error(`screenshot-panel: ${CHROMIUM} not found (apt-get install -y chromium)`);
  process.exit(1);
}
delete process.env.REA_ADMIN_TOKEN; // the demo's loopback panel needs no login

await runDemo({
  orders: 60, ratePerSecond: 300, keepRunning: true, panelPort: 0, quiet: true,
  async whileRunning(bus, url) {
    const s = `"${bus.schema}"`;
    // A real poisoned event: the jobs table rejects the jobs of one order until the trigger goes.
    await bus.driver.execScript(`
      create function ${s}.reject_order_9999() returns trigger language plpgsql as $$
      begin
        if exists (select 1 from ${s}.events where id = new.event_id and payload->>'orderNo' = 'ORD-9999') then
          raise exception 'stock service rejects ORD-9999: warehouse code missing';
        end if;
        return new;
      end $$;
      create trigger reject_order_9999 before insert on ${s}.jobs for each row execute function ${s}.reject_order_9999();`);
    const poisoned = bus.lifecycle.waitFor('relay:event:poisoned');
    await bus.transaction((tx) => bus.record(tx, 'order.paid' as never, { orderNo: 'ORD-9999', amount: 4200 } as never, { subject: 'ORD-9999' }));
    await poisoned;
    const endpoint = await bus.endpoints.create({ url: 'https://hooks.example.com/rea/orders', eventTypes: ['order.paid'], description: 'billing service' });
    await bus.endpoints.disable(endpoint.id, { reason: 'receiver returned 410 Gone' });

    const browser = await launchBrowser({ width: 1280, height: 800 });
    try {
      const page = await browser.context.newPage();
      await page.goto(url);
      await page.waitForSelector('[data-alert="events_poisoned"]');
      mkdirSync(dirname(out), { recursive: true });
      await page.screenshot({ path: out });
      console.log(`screenshot-panel: wrote ${out}`);
    } finally {
      await browser.close();
    }
  },
});
